"""Content-addressed cache of compiled objects.

An entry is named by the sha256 of everything that determines the object (C source,
compiler identity, flags; see :func:`cache_key`) and stored as one file::

    RPOBJ1\\n <sha256 of the payload, 64 hex chars> \\n <payload>

Writes go to a temporary file in the same directory and are published with
``os.replace``, which is atomic: two processes compiling the same kernel each publish a
complete entry and the last one wins, never a torn file. Reads verify the digest, so a
corrupted or truncated entry is detected, removed and reported (``corrupted`` counter and
a warning); the caller then rebuilds it.

Counters are per process (a Ray worker has its own): :func:`compile_stats`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
from pathlib import Path

_MAGIC = b"RPOBJ1\n"
_DIGEST_LEN = 64
_LOG = logging.getLogger(__name__)

_STATS_LOCK = threading.Lock()
_STATS: dict[str, int] = {}
STAT_NAMES = ("hits", "misses", "corrupted", "rebuilds", "compiles", "writes", "host_compiles",
              "build_hits", "build_misses", "build_corrupted", "build_writes")


def reset_compile_stats() -> None:
    """Set every counter of :func:`compile_stats` to zero."""
    with _STATS_LOCK:
        _STATS.clear()
        _STATS.update(dict.fromkeys(STAT_NAMES, 0))


reset_compile_stats()


def count(name: str, amount: int = 1) -> None:
    with _STATS_LOCK:
        _STATS[name] = _STATS.get(name, 0) + amount


def compile_stats() -> dict[str, int]:
    """This process's counters: cache ``hits``, ``misses``, ``corrupted`` entries found,
    ``rebuilds`` (a corrupted entry compiled again), ``compiles`` (compiler runs) and
    ``writes`` (entries stored); ``host_compiles`` (of the compiles, the host entry's);
    and the whole-build cache's ``build_hits``, ``build_misses``, ``build_corrupted``,
    ``build_writes`` (:mod:`passinfra.codegen.build_cache`)."""
    with _STATS_LOCK:
        return dict(_STATS)


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/raypass/objects``, or ``~/.cache/raypass/objects``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "raypass", "objects")


def cache_key(source: str, compiler_identity: str, flags: str) -> str:
    """The sha256 hex digest naming the object compiled from these inputs."""
    digest = hashlib.sha256()
    # length-prefix each part so that moving text between parts changes the key
    for part in (source, compiler_identity, flags):
        data = part.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


class ObjectCache:
    """The cache directory: ``get(key)`` verified bytes or None, ``put(key, data)``.

    ``suffix`` names the entries' kind on disk and ``stat_prefix`` the counters they
    update, so whole-build entries (``.build``, ``build_hits``...) live in the same
    directory without blurring the object counters.
    """

    def __init__(self, directory: str | os.PathLike[str], suffix: str = ".o", stat_prefix: str = "") -> None:
        self.directory = Path(directory)
        self.suffix = suffix
        self.stat_prefix = stat_prefix

    def path_of(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}{self.suffix}"

    def get(self, key: str) -> bytes | None:
        """The stored object, or None when absent or corrupted (a corrupted entry is
        removed, counted and logged)."""
        return self.lookup(key)[0]

    def lookup(self, key: str) -> tuple[bytes | None, bool]:
        """``(object or None, whether a corrupted entry was found and removed)``."""
        view, corrupted = self.lookup_view(key)
        return (None if view is None else bytes(view)), corrupted

    def lookup_view(self, key: str) -> tuple[memoryview | None, bool]:
        """:meth:`lookup` without copying the payload out of the file's bytes: a
        whole-build entry holds every weight of the model (100 MB for ResNet-50)."""
        path = self.path_of(key)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            count(self.stat_prefix + "misses")
            return None, False
        payload = _verified_payload(blob)
        if payload is None:
            count(self.stat_prefix + "corrupted")
            count(self.stat_prefix + "misses")
            _LOG.warning("raypass compile cache: corrupted entry %s removed; it will be rebuilt", path)
            try:
                path.unlink()
            except FileNotFoundError:
                pass  # another process removed or replaced it already
            return None, True
        count(self.stat_prefix + "hits")
        return payload, False

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` atomically (temp file + os.replace)."""
        path = self.path_of(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        blob = _MAGIC + hashlib.sha256(data).hexdigest().encode("ascii") + b"\n" + data
        fd, tmp_name = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as tmp:
                # no fsync: os.replace makes the entry appear whole to other processes,
                # and an entry torn by a power loss fails verification on read and is rebuilt
                tmp.write(blob)
            os.replace(tmp_name, path)
        except BaseException:
            try:
                os.unlink(tmp_name)
            except FileNotFoundError:
                pass
            raise
        count(self.stat_prefix + "writes")


def _verified_payload(blob: bytes) -> memoryview | None:
    """The payload of an entry (a view into ``blob``) if its digest matches, else None."""
    header_len = len(_MAGIC) + _DIGEST_LEN + 1
    if len(blob) < header_len or not blob.startswith(_MAGIC) or blob[header_len - 1:header_len] != b"\n":
        return None
    expected = blob[len(_MAGIC):len(_MAGIC) + _DIGEST_LEN].decode("ascii", errors="replace")
    payload = memoryview(blob)[header_len:]
    return payload if hashlib.sha256(payload).hexdigest() == expected else None


__all__ = ["ObjectCache", "cache_key", "compile_stats", "reset_compile_stats", "default_cache_dir"]

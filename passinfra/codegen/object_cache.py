"""Content-addressed cache of compiled objects.

An entry is named by the sha256 of everything that determines the object (C source,
compiler identity, flags; see :func:`cache_key`) and stored as one file::

    RPOBJ1\\n <sha256 of the payload, 64 hex chars> \\n <payload>

Writes go to a temporary file in the same directory and are published with
``os.replace``, which is atomic: two processes compiling the same kernel each publish a
complete entry and the last one wins, never a torn file. Reads verify the digest, so a
corrupted or truncated entry is detected, removed and reported (``corrupted`` counter and
a warning); the caller then rebuilds it.

Several processes share one directory (parallel CI jobs compiling into one
``--cache-dir``), so: temporary names are unique per process and attempt; entries get the
mode a plain ``open`` would give (0o666 less the umask, not ``mkstemp``'s owner-only
0o600), so every job sharing the directory can read them; and a corrupted entry is removed
only if it is still the file that was read, never a good entry another process published
meanwhile.

Counters are per process (a Ray worker has its own): :func:`compile_stats`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path
from typing import Protocol

from passinfra.atomic_io import atomic_write

_MAGIC = b"RPOBJ1\n"
_DIGEST_LEN = 64
_LOG = logging.getLogger(__name__)

_STATS_LOCK = threading.Lock()
_STATS: dict[str, int] = {}
STAT_NAMES = ("hits", "misses", "corrupted", "rebuilds", "compiles", "writes", "host_compiles", "shared_hits",
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
    ``shared_hits`` (objects another node compiled, from the :class:`SharedTier`);
    and the whole-build cache's ``build_hits``, ``build_misses``, ``build_corrupted``,
    ``build_writes`` (:mod:`passinfra.codegen.build_cache`)."""
    with _STATS_LOCK:
        return dict(_STATS)


class SharedTier(Protocol):
    """A store of compiled objects that more than this machine sees (a cluster's): what
    one node compiled, another finds there instead of compiling it again. Keys are
    :func:`cache_key`'s; a tier may forget entries (it is a cache)."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, data: bytes) -> None: ...


_SHARED_TIER: SharedTier | None = None


def set_shared_tier(tier: SharedTier | None) -> None:
    """Install (or remove) this process's shared tier. passinfra knows none itself: a
    Ray worker on a cluster of several nodes installs the cluster's
    (``workers.kernel_store``)."""
    global _SHARED_TIER
    _SHARED_TIER = tier


def shared_tier() -> SharedTier | None:
    return _SHARED_TIER


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
            blob, identity = _read_with_identity(path)
        except FileNotFoundError:
            count(self.stat_prefix + "misses")
            return None, False
        payload = _verified_payload(blob)
        if payload is None:
            count(self.stat_prefix + "corrupted")
            count(self.stat_prefix + "misses")
            _LOG.warning("raypass compile cache: corrupted entry %s removed; it will be rebuilt", path)
            _remove_if_unchanged(path, identity)
            return None, True
        count(self.stat_prefix + "hits")
        return payload, False

    def put(self, key: str, *chunks: bytes | memoryview) -> None:
        """Store the concatenation of ``chunks`` under ``key`` atomically (temp file +
        os.replace); the pieces are hashed and written one after another, never joined."""
        path = self.path_of(key)
        path.parent.mkdir(parents=True, exist_ok=True)  # exist_ok: another process may win the race
        digest = hashlib.sha256()
        for chunk in chunks:
            digest.update(chunk)
        header = _MAGIC + digest.hexdigest().encode("ascii") + b"\n"
        # no fsync: os.replace makes the entry appear whole to other processes, and an
        # entry torn by a power loss fails verification on read and is rebuilt
        atomic_write(path, header, *chunks, prefix=f".{key[:16]}.")
        count(self.stat_prefix + "writes")


def _read_with_identity(path: Path) -> tuple[bytes, tuple[int, int]]:
    """The file's bytes and ``(device, inode)`` of the very file they came from."""
    with open(path, "rb") as handle:
        info = os.fstat(handle.fileno())
        return handle.read(), (info.st_dev, info.st_ino)


def _remove_if_unchanged(path: Path, identity: tuple[int, int]) -> None:
    """Remove the corrupted entry at ``path`` unless another process has replaced it
    since it was read (that one is a fresh, whole entry: removing it would only force
    every job to compile again). The check and the unlink are not one atomic step, but
    the window left is the microseconds between them, not the read and the hashing."""
    try:
        info = os.stat(path)
        if (info.st_dev, info.st_ino) == identity:
            os.unlink(path)
    except FileNotFoundError:
        pass  # another process removed it already


def _verified_payload(blob: bytes) -> memoryview | None:
    """The payload of an entry (a view into ``blob``) if its digest matches, else None."""
    header_len = len(_MAGIC) + _DIGEST_LEN + 1
    if len(blob) < header_len or not blob.startswith(_MAGIC) or blob[header_len - 1:header_len] != b"\n":
        return None
    expected = blob[len(_MAGIC):len(_MAGIC) + _DIGEST_LEN].decode("ascii", errors="replace")
    payload = memoryview(blob)[header_len:]
    return payload if hashlib.sha256(payload).hexdigest() == expected else None


__all__ = ["ObjectCache", "cache_key", "compile_stats", "reset_compile_stats", "default_cache_dir"]

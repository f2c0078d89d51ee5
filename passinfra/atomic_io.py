"""Writing a file that other processes may read at any moment.

Used by the compile cache and by ``export_library``: parallel CI jobs compile into one
cache directory and may write the same output paths, so a reader must only ever see an
old file or a whole new one, and files must get ordinary permissions so every job sharing
the directory can read them.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path


def atomic_write(path: str | os.PathLike[str], *chunks: bytes | memoryview,
                 prefix: str = ".raypass-") -> None:
    """Write ``chunks``, one after another, to ``path`` so that other processes see either
    the old file or the whole new one: a temporary file in the same directory, published
    by ``os.replace``; the temporary file never outlives a failure."""
    path = Path(path)
    fd, tmp_name = _create_temp(path.parent, prefix)
    try:
        with os.fdopen(fd, "wb") as tmp:
            for chunk in chunks:
                tmp.write(chunk)
        _publish(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise


def atomic_copy(
    source: str | os.PathLike[str], path: str | os.PathLike[str], prefix: str = ".raypass-"
) -> None:
    """Publish a copy of the file ``source`` at ``path``, as :func:`atomic_write` does.
    On the same file system the copy is a hard link (no bytes move: ``source`` must not
    be modified afterwards, which holds for a module's private weights file); elsewhere a
    kernel-side copy (``shutil.copyfile``: sendfile/copy_file_range, no user-space
    buffer)."""
    path = Path(path)
    while True:
        tmp_name = os.path.join(path.parent, f"{prefix}{os.getpid()}.{secrets.token_hex(8)}.tmp")
        try:
            os.link(source, tmp_name)
            break
        except FileExistsError:  # a 64-bit collision within one pid: draw again
            continue
        except OSError:  # another file system, or one without hard links
            fd, tmp_name = _create_temp(path.parent, prefix)
            os.close(fd)
            try:
                shutil.copyfile(source, tmp_name)
            except BaseException:
                _unlink_quietly(tmp_name)
                raise
            break
    try:
        _publish(tmp_name, path)
    except BaseException:
        _unlink_quietly(tmp_name)
        raise


# an old file this large is freed by a process of its own, not by the one publishing over it
DETACHED_FREE_BYTES = 64 << 20


def _publish(tmp_name: str, path: Path) -> None:
    """``os.replace(tmp_name, path)``. Replacing a large file frees its blocks inside the
    call (0.2 s for a 300 MB weights file on ext4): a compile that writes over its previous
    library would wait for that. So the old file first gets a second name, the replace
    then only drops one of its links, and a detached ``rm`` frees it meanwhile."""
    old = None
    try:
        if os.stat(path).st_size >= DETACHED_FREE_BYTES:
            old = os.path.join(path.parent, f".raypass-old-{os.getpid()}.{secrets.token_hex(8)}")
            os.link(path, old)
    except OSError:  # none there, or no hard links here: the plain replace
        old = None
    try:
        os.replace(tmp_name, path)
    finally:
        if old is not None:
            _unlink_detached(old)


def _unlink_detached(name: str) -> None:
    """Remove ``name`` in the background: a shell starts ``rm`` and returns at once, so
    the ``rm`` is nobody's child to wait for (no zombie in a long-lived caller)."""
    import subprocess

    try:
        subprocess.run(["sh", "-c", 'rm -f -- "$1" &', "sh", name], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, timeout=10)
    except (OSError, subprocess.SubprocessError):  # no shell to run: free it here
        _unlink_quietly(name)


def _unlink_quietly(name: str) -> None:
    try:
        os.unlink(name)
    except FileNotFoundError:
        pass


def _create_temp(directory: Path, prefix: str) -> tuple[int, str]:
    """A new file in ``directory`` named so that no other process or thread picks it,
    opened for writing with mode 0o666 less the umask (what a plain ``open`` gives; the
    kernel applies the umask, which a thread-safe program cannot read)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        name = os.path.join(directory, f"{prefix}{os.getpid()}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(name, flags, 0o666), name
        except FileExistsError:  # a 64-bit collision within one pid: draw again
            continue


__all__ = ["atomic_copy", "atomic_write"]

"""The weights blob: one 64-byte-aligned block of bytes the library reads its weights from.

One place decides how the blob is held, because a deep model's weights are most of its
bytes and every copy of them costs time and peak memory: the link step packs the
weights straight into an aligned NumPy buffer (:func:`aligned_empty`, which NumPy backs
with transparent huge pages where the kernel offers them), ``runtime.Module`` keeps that
buffer as it is (:func:`as_blob`), ``export_library`` writes it without a copy, and
``load_module`` maps the weights file instead of reading it (:func:`map_file`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from passinfra.file_pages import release_file_pages

ALIGNMENT = 64  # every weight starts on a cache line; the blob itself too


def aligned_empty(nbytes: int) -> np.ndarray:
    """A writeable uint8 array of ``nbytes`` whose data starts on a 64-byte boundary."""
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT
    return raw[start:start + nbytes]


def is_aligned_blob(data: Any) -> bool:
    """Whether ``data`` can serve as the blob as it is: a C-contiguous uint8 array
    starting on a 64-byte boundary."""
    return (
        isinstance(data, np.ndarray)
        and data.dtype == np.uint8
        and data.ndim == 1
        and data.flags.c_contiguous
        and data.ctypes.data % ALIGNMENT == 0
    )


def as_blob(data: bytes | memoryview | np.ndarray) -> np.ndarray:
    """``data`` as an aligned uint8 array: the array itself when it already is one (no
    copy), else one copy into aligned memory (bytes read from a cache entry, a view of
    a larger buffer)."""
    if is_aligned_blob(data):
        return data  # type: ignore[return-value]
    source = np.frombuffer(data, dtype=np.uint8)
    blob = aligned_empty(source.size)
    blob[:] = source
    return blob


def _align(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


@dataclass(frozen=True, eq=False)
class PackedWeights:
    """The weights blob, described rather than copied: ``arrays`` (C-contiguous, in
    blob order) each at its ``offsets`` entry (64-byte aligned), zeros between; the blob
    is ``nbytes`` long and ends where its last array ends."""

    arrays: tuple[np.ndarray, ...]
    offsets: tuple[int, ...]
    nbytes: int

    @staticmethod
    def pack(weights: list[np.ndarray]) -> PackedWeights:
        """Lay ``weights`` out one after another, each on a 64-byte boundary (a weight
        that is not C-contiguous is copied into C order; the others are not copied)."""
        # (np.ascontiguousarray would also turn a 0-d array into a new 1-d one)
        arrays = tuple(
            a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in map(np.asarray, weights)
        )
        offsets: list[int] = []
        size = 0
        for array in arrays:
            offsets.append(_align(size))
            size = offsets[-1] + array.nbytes
        return PackedWeights(arrays, tuple(offsets), size)

    def _pieces(self) -> Iterator[tuple[bytes | memoryview, np.ndarray | None]]:
        """The blob's bytes in order, each with the array it views (None: padding)."""
        position = 0
        for array, offset in zip(self.arrays, self.offsets):
            if offset > position:
                yield bytes(offset - position), None
            data = array.reshape(-1).view(np.uint8)
            if data.size:
                yield memoryview(data), array
            position = offset + data.size

    def chunks(self) -> Iterator[bytes | memoryview]:
        """The blob's bytes in order: views of the arrays and the zero padding."""
        return (chunk for chunk, _ in self._pieces())

    def write(self, handle: Any) -> None:
        """Write the blob to the open binary file ``handle``. A weight read from a map of
        the model's file is dropped from this process's resident set once written: the
        write reads every page of it, and they would otherwise stay counted in RSS (the
        whole model's bytes, for a model whose weights are written as they are)."""
        for chunk, array in self._pieces():
            handle.write(chunk)
            if array is not None:
                release_file_pages(array)

    def tobytes(self) -> bytes:
        return b"".join(self.chunks())

    def __len__(self) -> int:
        return self.nbytes


@dataclass(frozen=True, eq=False)
class WrittenWeights:
    """A layout whose bytes a background writer is putting into the file ``path`` (the
    build starts it while the kernels compile: :mod:`passinfra.codegen.weights_stream`);
    ``wait()`` returns once the file is whole and raises the writer's error if it failed."""

    packed: PackedWeights
    path: str
    done: Any  # a concurrent.futures.Future of the write

    @property
    def nbytes(self) -> int:
        return self.packed.nbytes

    def chunks(self) -> Iterator[bytes | memoryview]:
        return self.packed.chunks()

    def tobytes(self) -> bytes:
        return self.packed.tobytes()

    def wait(self) -> str:
        self.done.result()
        return self.path

    def __len__(self) -> int:
        return self.packed.nbytes


def blob_view(weights: bytes | memoryview | np.ndarray | PackedWeights | WrittenWeights) -> memoryview:
    """The blob's bytes as one flat view (a layout is joined: for tests and small
    blobs, not for the build's path)."""
    if isinstance(weights, (PackedWeights, WrittenWeights)):
        return memoryview(weights.tobytes())
    return memoryview(weights).cast("B")


def map_file(path: str | os.PathLike[str]) -> np.ndarray:
    """The weights file at ``path`` as a read-only memory map (page-aligned, so aligned
    enough). Pages are read when the library first touches them, and several processes
    running the same library share them. A file replaced later (``export_library``
    publishes by rename) does not change a map already made: it keeps the old file."""
    if os.path.getsize(path) == 0:  # mmap cannot map an empty file
        return aligned_empty(0)
    return np.memmap(path, dtype=np.uint8, mode="r")


__all__ = [
    "ALIGNMENT", "PackedWeights", "WrittenWeights", "aligned_empty", "as_blob", "blob_view",
    "is_aligned_blob", "map_file",
]

"""Dropping a weight's file-backed pages from this process's resident set once it has
been read.

The importer keeps a model's weights in read-only maps of its files (external data,
or the raw_data of an inline model: :mod:`passinfra.frontend.onnx_weights`). Reading
such an array all the way through (folding it, converting it into panels or 16 bits,
DeduplicateFilters's look at every filter, writing it into the library's weights file)
makes every page of it resident in this process, and
those pages stay counted in its RSS for as long as the map lives, which is as long as
the input IR: a compile that converts or writes all its weights then holds the model's
bytes *and* whatever it made of them, 2x the weights as the operating system reports
it (``ru_maxrss``, ``/usr/bin/time``). The data itself is not ours to free (the page
cache keeps it), but the process does not need it mapped in any more: ``madvise(
MADV_DONTNEED)`` on a shared read-only file map drops the process's references, and a
later read faults the same bytes back from the page cache (no copy, no I/O while the
cache keeps them). Nothing else is safe to drop this way: on anonymous or private
(copy-on-write) memory, MADV_DONTNEED discards the data, so only arrays whose buffer is
a read-only :class:`mmap.mmap` (``ACCESS_READ``, which maps ``MAP_SHARED``) qualify.
"""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["release_file_pages"]


def _read_only_map(array: np.ndarray) -> mmap.mmap | None:
    """The read-only file map ``array``'s memory lies in, or None: the ``base`` chain of
    a view of an ``np.memmap(mode="r")`` ends in its mmap, and that of ``np.frombuffer``
    over a memoryview of a map goes through the memoryview's ``obj``."""
    owner: object = array
    for _ in range(64):  # views of views: a short chain; a cycle cannot happen, but bound it
        if isinstance(owner, mmap.mmap):
            try:
                # the buffer is read-only exactly when the map was made with ACCESS_READ
                return owner if memoryview(owner).readonly else None
            except ValueError:  # closed
                return None
        if isinstance(owner, memoryview):
            owner = owner.obj
        elif isinstance(owner, np.ndarray):
            owner = owner.base
        else:
            return None
    return None


def release_file_pages(array: np.ndarray) -> bool:
    """Drop the pages of ``array`` (C-contiguous, viewing a read-only file map) from this
    process's resident set, and say whether it did; any other array is left alone. The
    array stays valid: its next read faults the pages back in from the page cache. Whole
    pages are dropped, so a neighbour's first or last page may go too, which costs that
    neighbour a fault, nothing more."""
    if not (hasattr(mmap, "MADV_DONTNEED") and isinstance(array, np.ndarray)):
        return False
    if array.nbytes == 0 or not array.flags.c_contiguous:
        return False
    mapping = _read_only_map(array)
    if mapping is None:
        return False
    try:
        start_address = np.frombuffer(mapping, dtype=np.uint8).ctypes.data
    except (ValueError, TypeError):  # closed, or empty
        return False
    start = array.ctypes.data - start_address
    end = start + array.nbytes
    if start < 0 or end > len(mapping):  # not inside this map after all: leave it
        return False
    page = mmap.PAGESIZE
    first = start - start % page
    last = min(len(mapping), -(-end // page) * page)
    try:
        mapping.madvise(mmap.MADV_DONTNEED, first, last - first)
    except (OSError, ValueError):
        return False
    return True

"""The thread count of a loaded library: its thread pool's entries, seen from Python.

Every library links the pool of :mod:`passinfra.codegen.thread_pool`, which holds one
thread count for the library (all Python threads calling it share it). A library loads
with config ``codegen.num_threads`` as its count, or, when that is 0 (the default), with
every CPU the process may use (:func:`passinfra.runtime.cpus.available_cpus`).
"""

from __future__ import annotations

import ctypes
import numbers

from passinfra.errors import RaypassError
from passinfra.runtime.cpus import available_cpus

# the pool's counters, in the order raypass_thread_stats writes them: loops run on the
# pool; loops run serially (too little work, or one thread); loops run serially because
# the pool ran another one; chunks run by worker threads; chunks the calling thread took
# from the workers' ranges (a worker late, asleep or slowed); times a worker blocked after
# its spin (each costs a wake-up later). A library built before a counter existed reports
# 0 for it.
STATS_FIELDS = ("parallel_loops", "serial_loops", "busy_loops", "worker_chunks", "stolen_chunks",
                "worker_sleeps")
MAX_THREADS = 256


class ThreadCountError(RaypassError, ValueError):
    """A thread count that is not an integer between 1 and :data:`MAX_THREADS`."""


def checked_thread_count(value: object, what: str = "the thread count") -> int:
    """``value`` as a thread count, or :class:`ThreadCountError` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 1 <= value <= MAX_THREADS:
        raise ThreadCountError(f"{what} must be an integer from 1 to {MAX_THREADS}, got {value!r}")
    return int(value)


class LibraryThreads:
    """The thread pool entries of one loaded library (``cdll``); a library built before
    libraries had a pool runs on one thread and accepts no other count."""

    def __init__(self, cdll: ctypes.CDLL) -> None:
        try:
            self._set = cdll.raypass_set_num_threads
            self._get = cdll.raypass_get_num_threads
            self._default = cdll.raypass_default_num_threads
            self._stats = cdll.raypass_thread_stats
        except AttributeError:
            self._set = None
            return
        self._set.argtypes, self._set.restype = [ctypes.c_int], None
        self._get.argtypes, self._get.restype = [], ctypes.c_int
        self._default.argtypes, self._default.restype = [], ctypes.c_int
        self._stats.argtypes, self._stats.restype = [ctypes.c_void_p], None
        self.set(self.default())

    @property
    def has_pool(self) -> bool:
        return self._set is not None

    def default(self) -> int:
        """The count the library was built for (config ``codegen.num_threads``), or
        every CPU the process may use when that is 0."""
        built = int(self._default()) if self._set is not None else 1
        return built if built > 0 else available_cpus()

    def get(self) -> int:
        return int(self._get()) if self._set is not None else 1

    def set(self, count: object) -> None:
        threads = checked_thread_count(count)
        if self._set is None:
            if threads != 1:
                raise ThreadCountError("this library was built without a thread pool and runs on one thread; "
                                       "rebuild it to use more")
            return
        self._set(threads)

    def stats(self) -> dict[str, int]:
        """The pool's counters since the library was loaded (:data:`STATS_FIELDS`)."""
        if self._set is None:
            return dict.fromkeys(STATS_FIELDS, 0)
        values = (ctypes.c_int64 * len(STATS_FIELDS))()
        self._stats(values)
        return dict(zip(STATS_FIELDS, (int(v) for v in values)))


__all__ = ["LibraryThreads", "MAX_THREADS", "STATS_FIELDS", "ThreadCountError", "checked_thread_count"]

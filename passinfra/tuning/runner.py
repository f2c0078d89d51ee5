"""Where tuning candidates are measured: a fixed number of worker slots, each running one
job at a time.

:class:`Runner` holds the queue in the driver and keeps exactly one job in flight per
slot, so a slot whose worker dies has lost exactly the one job it was running: that job
goes back to the front of the queue (given up after :data:`MAX_LOSSES` losses: it most
likely kills its worker itself), the slot gets a fresh worker, and every finished
measurement stays finished. Subclasses say how a slot's job is started and what a lost
worker looks like:

- :class:`ProcessRunner`: worker processes of this machine, one per slot, each pinned to
  its own share of the CPUs (forkserver: fresh processes, which neither inherit the
  driver's threads nor import its ``__main__`` again).
- ``scheduler.tuning.RayRunner``: Ray actors, on this machine or a cluster.

Every job runs through :func:`in_worker`, which notes where and when it ran
(:class:`JobRun`: the tuning trace's slices).
"""

from __future__ import annotations

import concurrent.futures as futures
import multiprocessing
import os
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from passinfra.runtime.cpus import available_cpus

MAX_LOSSES = 2  # a job whose worker died this many times is given up
ABORT_WAIT = 10.0  # seconds ProcessRunner.abort waits for its executors to wind down
DRIVER_POLL = 1.0  # seconds between a ProcessRunner worker's looks at its driver

# what a worker process was configured with (ProcessRunner's initializer, a Ray actor's
# constructor); the tuner's jobs read it
WORKER_SETTINGS: dict[str, Any] = {"threads": 1, "cache_dir": None}


def configure_worker(threads: int, cache_dir: str | None, cpus: set[int] | None = None) -> None:
    """Set up this process as a measuring worker: its libraries' threads, the kernel
    cache, and (where given) the CPUs it may run on, so that workers do not time each other."""
    if cpus:
        try:
            os.sched_setaffinity(0, cpus)
        except (AttributeError, OSError):
            pass
    WORKER_SETTINGS.update(threads=threads, cache_dir=cache_dir)
    import passinfra.build  # noqa: F401  (what every candidate's build needs, loaded up front)


@dataclass(frozen=True)
class JobRun:
    """One job as its worker ran it."""

    index: int  # in the job list of its ``Runner.run``
    slot: int
    pid: int
    start: float  # time.time() in the worker
    seconds: float


def in_worker(fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[int, float, float, Any]:
    """``fn(*args)`` in a worker: (pid, start time, seconds, value)."""
    start, clock = time.time(), time.perf_counter()
    value = fn(*args)
    return os.getpid(), start, time.perf_counter() - clock, value


def _interrupted(error: BaseException) -> bool:
    """Whether a job's error is its compile stopped by a signal (a Ray task's error is a
    subclass of the one it wraps)."""
    from passinfra.codegen.cc_driver import CompileInterrupted

    cause = getattr(error, "cause", None)
    return isinstance(error, CompileInterrupted) or isinstance(cause, CompileInterrupted)


class Runner:
    """A fixed number of slots, one job in flight on each (module docstring)."""

    slots: int
    threads: int  # each worker's library threads

    def __init__(self) -> None:
        self.lost_workers = 0  # workers that died under a job (and were replaced)
        self.runs: list[JobRun] = []  # every job that finished, in the order it finished

    def _submit(self, slot: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> futures.Future:
        raise NotImplementedError

    def _is_lost_worker(self, error: BaseException) -> bool:
        raise NotImplementedError

    def _replace(self, slot: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        """Close at once, jobs in flight stopped (after Ctrl-C): :meth:`close` unless a
        subclass has a faster way."""
        self.close()

    def pids(self) -> list[int]:
        """Each slot's worker process id (asked of the worker itself)."""
        return [self._submit(slot, os.getpid, ()).result()[0] for slot in range(self.slots)]

    def target(self) -> dict[str, Any]:
        """The tuning target the workers measure: their instruction set and threads."""
        from passinfra.tuning.database import current_target

        return current_target(self.threads)

    def run(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]],
            done: Callable[[int, Any, JobRun], None],
            deadline: float | None = None) -> tuple[list[int], list[int]]:
        """Run ``fn(*job)`` for every job, calling ``done(index, value, run)`` in this
        thread as each finishes; no job starts after ``deadline`` (``time.monotonic()``).
        Returns the indices of the jobs given up and of those never started."""
        queue = deque(range(len(jobs)))
        free = list(range(self.slots))[::-1]
        running: dict[futures.Future, tuple[int, int]] = {}
        losses: Counter[int] = Counter()
        given_up: list[int] = []
        not_started: list[int] = []
        try:
            while queue or running:
                if deadline is not None and queue and time.monotonic() >= deadline:
                    not_started += sorted(queue)
                    queue.clear()
                    if not running:
                        break
                while queue and free:
                    slot, index = free.pop(), queue.popleft()
                    running[self._submit_to_live(slot, fn, jobs[index])] = (slot, index)
                finished, _ = futures.wait(running, return_when=futures.FIRST_COMPLETED)
                for future in finished:
                    slot, index = running.pop(future)
                    try:
                        pid, start, seconds, value = future.result()
                    except BaseException as error:
                        if _interrupted(error):
                            # the user's Ctrl-C stopped the worker's compiler before this
                            # process took it: the same interruption, not a failed job
                            raise KeyboardInterrupt from error
                        if not self._is_lost_worker(error):
                            raise
                        self.lost_workers += 1
                        self._replace(slot)
                        losses[index] += 1
                        if losses[index] >= MAX_LOSSES:
                            given_up.append(index)
                        else:  # next on the slot that comes free first
                            queue.appendleft(index)
                    else:
                        record = JobRun(index, slot, pid, start, seconds)
                        self.runs.append(record)
                        done(index, value, record)
                    free.append(slot)
        finally:
            for future in running:
                future.cancel()
        return given_up, not_started

    def _submit_to_live(self, slot: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> futures.Future:
        """Submit, replacing first a worker that died while its slot was idle (no job lost)."""
        try:
            return self._submit(slot, fn, args)
        except Exception as error:
            if not self._is_lost_worker(error):
                raise
            self.lost_workers += 1
            self._replace(slot)
            return self._submit(slot, fn, args)

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def core_groups(workers: int, cpus_per_worker: int | None = None) -> list[set[int]]:
    """This process's CPUs split into ``workers`` equal groups (a CPU shared where there
    are more workers than CPUs), or into groups of ``cpus_per_worker`` (the rest unused:
    one worker measures as each of many would)."""
    if hasattr(os, "sched_getaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
    else:
        cpus = list(range(os.cpu_count() or 1))
    per = max(1, len(cpus) // workers) if cpus_per_worker is None else cpus_per_worker
    return [set(cpus[i * per:(i + 1) * per]) or {cpus[i % len(cpus)]} for i in range(workers)]


def _ignore_interrupt(*_: object) -> None:
    """A worker's SIGINT handler: nothing (module docstring of ProcessRunner)."""


def _process_gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie not yet reaped has too)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except FileNotFoundError:
        return True
    except OSError:  # no /proc: whether the pid still exists
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        return False


def _exit_with_driver(driver: int) -> None:
    """End this worker once its driver is gone. A driver that is killed (SIGKILL, an
    unhandled SIGTERM, a crash) runs none of its shutdown: its workers, waiting on a queue
    nobody writes to any more, and their forkserver would otherwise live on (seen: a
    worker and the forkserver 36 minutes after their ``raypass tune`` was killed)."""
    while not _process_gone(driver):
        time.sleep(DRIVER_POLL)
    os._exit(0)


def _start_process_worker(threads: int, cache_dir: str | None, cpus: set[int], driver: int) -> None:
    # Ctrl-C in a terminal reaches the whole process group: a worker waiting for its next
    # job would die of the KeyboardInterrupt inside the executor's queue read, which can
    # leave the executor's shutdown waiting for ever (CPython issue 125886). The driver
    # alone decides: it stops its workers (ProcessRunner.abort). A handler rather than
    # SIG_IGN, which the compiler processes a worker starts would inherit: they still
    # stop at Ctrl-C. A driver started with SIGINT ignored (a background job, nohup) ignores
    # it throughout, and so do its workers and their compilers: a handler here would have
    # let the compilers die of a SIGINT the user's command was started to ignore.
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _ignore_interrupt)
    watch = threading.Thread(target=_exit_with_driver, args=(driver,), name="driver-watch", daemon=True)
    watch.start()
    configure_worker(threads, cache_dir, cpus)


class ProcessRunner(Runner):
    """One worker process per slot on this machine, each on its own CPUs (a one-process
    executor per slot: a worker that dies breaks only its own slot). The workers ignore
    SIGINT; after Ctrl-C the driver terminates them (:meth:`abort`); a worker whose driver
    died without doing so ends itself within :data:`DRIVER_POLL` seconds."""

    def __init__(self, workers: int, cache_dir: str | None = None,
                 cpus_per_worker: int | None = None) -> None:
        super().__init__()
        self.slots = max(1, workers)
        self._groups = core_groups(self.slots, cpus_per_worker)
        self.threads = max(1, min(available_cpus(), len(self._groups[0])))
        self._cache_dir = cache_dir
        self._context = multiprocessing.get_context("forkserver")
        self._executors = [self._start(slot) for slot in range(self.slots)]
        for executor in self._executors:  # start the workers now: they load raypass while the caller prepares
            executor.submit(os.getpid)

    def _start(self, slot: int) -> futures.ProcessPoolExecutor:
        return futures.ProcessPoolExecutor(1, mp_context=self._context, initializer=_start_process_worker,
                                           initargs=(self.threads, self._cache_dir, self._groups[slot],
                                                     os.getpid()))

    def _submit(self, slot: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> futures.Future:
        return self._executors[slot].submit(in_worker, fn, args)

    def _is_lost_worker(self, error: BaseException) -> bool:
        return isinstance(error, BrokenProcessPool)

    def _replace(self, slot: int) -> None:
        self._executors[slot].shutdown(wait=False, cancel_futures=True)
        self._executors[slot] = self._start(slot)

    def close(self) -> None:
        for executor in self._executors:
            executor.shutdown(wait=True, cancel_futures=True)

    def abort(self) -> None:
        """Terminate the workers (a job in flight is lost: the caller keeps what finished),
        then shut the executors down, waiting at most :data:`ABORT_WAIT` seconds in all for
        their manager threads to see the workers gone (after Ctrl-C, a shutdown that
        hangs must not hold the command)."""
        for executor in self._executors:
            terminate = getattr(executor, "terminate_workers", None)  # Python 3.14
            if terminate is not None:
                terminate()
                continue
            for process in list((getattr(executor, "_processes", None) or {}).values()):
                if process.is_alive():
                    process.terminate()
        # (taken before shutdown, which drops its reference)
        managers = [getattr(executor, "_executor_manager_thread", None) for executor in self._executors]
        for executor in self._executors:
            executor.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + ABORT_WAIT
        for manager in managers:
            if manager is not None:
                manager.join(max(0.0, deadline - time.monotonic()))


__all__ = ["ABORT_WAIT", "DRIVER_POLL", "MAX_LOSSES", "WORKER_SETTINGS", "JobRun", "ProcessRunner", "Runner",
           "configure_worker", "core_groups", "in_worker"]

"""Ctrl-C where threads wait: held back over the few steps that must not be cut.

Python raises KeyboardInterrupt in the main thread between two bytecodes, wherever the
interpreter notices the signal, and one of those places is right after a C call
returned: after a lock's ``acquire`` inside ``threading.Condition.__enter__``, before the
``with`` block that would release it has begun. The lock then stays held for good. In
``concurrent.futures`` the main thread takes such locks in ``submit`` (the executor's
idle-thread semaphore) and while it waits for a result (the future's condition), and the
pool's threads take the same locks when a task ends: one Ctrl-C at that moment left them
blocked forever and the interpreter's exit waiting for them (an interrupted ``raypass
compile`` that never ended, its PanelWeights conversions stopped inside ``submit``).

So the main thread runs those steps with SIGINT held back (:func:`interrupts_deferred`)
and raises KeyboardInterrupt right after them: :class:`ThreadPool` for ``submit``,
:func:`wait_for` and :func:`outcome_of` for a result (``map`` waits for its results
itself: submit and wait instead). A wait then lasts until its task
ends, which the tasks passed here do by themselves (a compiler process, a copy of a
weight; a terminal's Ctrl-C stops the compilers too, being sent to the whole process
group).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


class _Deferring:
    """The SIGINT handler of :func:`interrupts_deferred`: notes the signal."""

    def __init__(self) -> None:
        self.received = False

    def __call__(self, signum: int, frame: Any) -> None:
        self.received = True


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl-C (SIGINT) held back until the block ends, then raised as KeyboardInterrupt;
    the previous handler is back either way. Off the main thread (where no handler can be
    set, and no KeyboardInterrupt arrives) and inside another such block, the block runs
    as it is."""
    if threading.current_thread() is not threading.main_thread() or isinstance(
            signal.getsignal(signal.SIGINT), _Deferring):
        yield
        return
    deferring = _Deferring()
    previous = signal.signal(signal.SIGINT, deferring)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if deferring.received:
            raise KeyboardInterrupt


class ThreadPool(ThreadPoolExecutor):
    """A ``ThreadPoolExecutor`` whose ``submit`` runs with Ctrl-C held back (module
    docstring); wait for its futures with :func:`wait_for` or :func:`outcome_of`."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        with interrupts_deferred():
            return super().submit(fn, *args, **kwargs)


def wait_for(future: Future[T]) -> T:
    """``future.result()``, waited for with Ctrl-C held back (module docstring)."""
    with interrupts_deferred():
        return future.result()


def outcome_of(future: Future[Any]) -> BaseException | None:
    """``future.exception()``, waited for with Ctrl-C held back (module docstring)."""
    with interrupts_deferred():
        return future.exception()


__all__ = ["ThreadPool", "interrupts_deferred", "outcome_of", "wait_for"]

"""passinfra.interrupts: Ctrl-C held back over the steps of a thread pool that must not be
cut, and raised right after them."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from passinfra.interrupts import ThreadPool, interrupts_deferred, outcome_of, wait_for


def _ctrl_c() -> None:
    """SIGINT to this process, as a terminal's Ctrl-C; its handler runs in the main thread."""
    os.kill(os.getpid(), signal.SIGINT)


def test_a_ctrl_c_inside_the_block_is_raised_after_it():
    # the raypass CLI also holds it back around the first import of the ONNX front end
    # (onnx's extension module, initializing, dies of a KeyboardInterrupt)
    previous = signal.getsignal(signal.SIGINT)
    reached_the_end = False
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            _ctrl_c()
            reached_the_end = True
    assert reached_the_end and signal.getsignal(signal.SIGINT) is previous


def test_a_block_inside_another_leaves_the_interrupt_to_the_outer_one():
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            with interrupts_deferred():
                _ctrl_c()
                steps.append("inner")
            steps.append("outer")
    assert steps == ["inner", "outer"]


class _InterruptedWhileSubmitting(ThreadPool):
    """A Ctrl-C that arrives while ``submit`` starts a thread: where the executor holds
    the lock of its idle-thread semaphore (a KeyboardInterrupt there left it held, and
    every thread of the pool blocked at the end of its task)."""

    def _adjust_thread_count(self) -> None:
        _ctrl_c()
        super()._adjust_thread_count()


def test_a_ctrl_c_during_submit_is_raised_after_it_and_the_pool_still_ends():
    ran = threading.Event()
    pool = _InterruptedWhileSubmitting(2)
    with pytest.raises(KeyboardInterrupt):
        pool.submit(ran.set)
    assert ran.wait(timeout=30)  # submitted whole: its task ran, on a thread it started
    ending = threading.Thread(target=pool.shutdown, daemon=True)
    ending.start()  # the pool's threads end, none blocked on a lock the interrupt kept
    ending.join(timeout=30)
    assert not ending.is_alive()


def test_a_ctrl_c_while_waiting_is_raised_once_the_task_has_ended():
    ended = threading.Event()

    def task(result: int | None) -> int:
        time.sleep(0.5)  # the main thread is waiting by then
        _ctrl_c()
        time.sleep(0.1)  # the Ctrl-C held back meanwhile
        ended.set()
        if result is None:
            raise ZeroDivisionError
        return result

    with ThreadPool(1) as pool:
        with pytest.raises(KeyboardInterrupt):
            wait_for(pool.submit(task, 42))
        assert ended.is_set()
        ended.clear()
        with pytest.raises(KeyboardInterrupt):
            outcome_of(pool.submit(task, None))
        assert ended.is_set()

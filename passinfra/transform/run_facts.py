"""Facts about how and where a function pass ran: for run statistics, never for the IR.

The IR a pass returns must be the same wherever it ran (DESIGN principle 4), so a pass
that knows something about its own run (CompileC: whether the object came from the
cache) does not put it in an attr. It calls :func:`report_fact`; the fact is recorded,
with the pass, the function and this process's pid, by every collector open in this
thread (:func:`collect_facts`), and dropped when none is:

* in-process, whoever runs the passes opens one (``Scheduler(backend="local")`` does,
  into ``last_run.facts``);
* a Ray worker opens one around each batch call and returns what it got with the
  call's timings; the driver adds them to ``last_run`` and to the trace.

``FunctionPass.transform_function`` names the (pass, function) running in this thread,
so a pass reports only the fact itself.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from passinfra.scoped import pushed


@dataclass(frozen=True)
class RunFact:
    """``name = value`` about one run of ``pass_name`` on ``function`` in process ``pid``.
    ``value`` is small and picklable (it travels back from a worker)."""

    pass_name: str
    function: str
    pid: int
    name: str
    value: Any


class _State(threading.local):
    def __init__(self) -> None:
        self.running: tuple[str, str] = ("", "")  # (pass, function) in progress
        self.collectors: list[list[RunFact]] = []


_state = _State()


def begin_run(pass_name: str, function: str) -> tuple[str, str]:
    """Mark ``pass_name`` on ``function`` as running in this thread; returns what was
    running before, for :func:`end_run` (a function pass may call another one)."""
    previous = _state.running
    _state.running = (pass_name, function)
    return previous


def end_run(previous: tuple[str, str]) -> None:
    _state.running = previous


def report_fact(name: str, value: Any, function: str | None = None) -> None:
    """Record ``name = value`` about the (pass, function) running in this thread, or
    about ``function``, which that run did the work of (CompileC compiling a unit of
    kernels reports for each)."""
    if not _state.collectors:
        return  # nobody is asking: the common case costs one check
    pass_name, running = _state.running
    fact = RunFact(pass_name, function or running, os.getpid(), name, value)
    for collector in _state.collectors:
        collector.append(fact)


@contextmanager
def collect_facts() -> Iterator[list[RunFact]]:
    """A list receiving, in order, every fact reported in this thread while the block runs."""
    with pushed(_state.collectors, []) as collected:
        yield collected


__all__ = ["RunFact", "begin_run", "collect_facts", "end_run", "report_fact"]

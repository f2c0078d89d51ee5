"""What the driver sends a worker (:class:`Call`) and what each call leaves behind
(:class:`CallRecord`). No Ray here: the statistics read records without it.

Every piece of work of a run ends in exactly one record, in the order it ended: an
answered batch call, a call lost with its actor (it is re-sent: a retry), a call
re-sent to a restarted actor before its own failure came back (superseded), a call
still in flight when the stage failed (unanswered), a slot restart (its functions
re-sent), the stage's spec (fetched once by every worker), or a stage run in the driver.
``scheduler.stats.RunStats`` derives every counter of ``last_run`` from these records,
and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from passinfra.transform.function_stage import PassRun
from workers.wire import Packed

DRIVER_SLOT = -1  # the "worker" slot of work done in the driver


class CallKind(str, Enum):
    ANSWERED = "answered"  # a batch call that returned its result
    LOST = "lost"  # a batch call whose actor died: re-sent, counted as a retry
    SUPERSEDED = "superseded"  # re-sent to its slot's restarted actor before it failed itself
    UNANSWERED = "unanswered"  # still in flight when the stage stopped on an error
    RESTART = "restart"  # a slot's dead actor replaced; its functions re-sent
    SPEC = "spec"  # the stage's spec in the object store, fetched by every worker
    DRIVER = "driver"  # the stage ran in the driver (too small to ship, or types missing)

    @property
    def is_batch_call(self) -> bool:
        """A ``run_batch`` submission (what ``remote_calls`` counts)."""
        return self in _BATCH_CALLS


_BATCH_CALLS = frozenset({CallKind.ANSWERED, CallKind.LOST, CallKind.SUPERSEDED, CallKind.UNANSWERED})


@dataclass
class Call:
    """A batch call: one worker slot's ``names``, every pass of the stage per function."""

    slot: int
    names: list[str]
    generation: int  # of the slot's actor it is aimed at
    attempt: int = 1
    load: Packed | None = None  # functions of ``names`` the worker does not hold yet
    drop: list[str] | None = None  # functions the worker should forget first


@dataclass(frozen=True)
class CallRecord:
    """One piece of work of a stage and what it cost. ``runs`` are the (pass, function)
    runs it measured, keyed by plan leaf index, each with the facts the pass reported."""

    kind: CallKind
    stage: int
    slot: int
    functions: int = 0  # functions it ran (answered and driver records)
    bytes_sent: int = 0
    bytes_received: int = 0
    busy_seconds: float = 0.0  # the worker's time in the call
    typing_seconds: float = 0.0  # of busy_seconds: types inferred ahead of the type-inference pass
    pid: int | None = None  # of the process that answered (a restart: the new actor)
    runs: tuple[PassRun, ...] = field(default=())


__all__ = ["DRIVER_SLOT", "Call", "CallKind", "CallRecord"]

"""Counters of one scheduler run (``Scheduler.last_run``), derived from per-call records.

Every piece of work of a Ray run ends in one ``workers.calls.CallRecord`` (a batch call
answered or lost, a restart, a stage's spec, a stage run in the driver).
:meth:`RunStats.add_records` takes a stage's records; the counters of the run and of
its stages are computed from all records in one place (:meth:`RunStats._tally`), never
incremented along the way. ``remote_calls``, ``bytes_sent``, ``retries``... equal sums
over ``calls``.

Besides the counters: ``events``, one per (pass, function) run on a worker or in the
driver (what the trace draws), and ``facts``, what the passes reported about their runs
(which process compiled a kernel, whether it was a cache hit:
``passinfra.transform.run_facts``). Facts about where work ran live here and in the
trace, never in the IR. A run built by hand (a simulation) may set the counters itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from passinfra.transform.run_facts import RunFact
from workers.calls import DRIVER_SLOT, CallKind, CallRecord


@dataclass
class StageStats:
    index: int
    kind: str  # "function" or "module"
    passes: list[str]
    functions: int = 0
    remote_calls: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    wall_seconds: float = 0.0
    worker_seconds: float = 0.0
    worker_typing_seconds: float = 0.0  # of worker_seconds: types inferred for the type-inference pass
    start: float = 0.0  # wall clock (time.time()) when the stage began
    ran_in_driver: bool = False  # too few functions to be worth shipping
    functions_moved: int = 0  # by rebalancing before the stage


@dataclass(frozen=True)
class WorkEvent:
    """One (pass, function) run on a worker: what a trace draws as a slice."""

    leaf: int  # the pass invocation's index in the plan
    pass_name: str
    function: str
    worker: int  # worker slot
    start: float  # wall clock (time.time()) on the worker
    seconds: float
    facts: tuple[tuple[str, Any], ...] = ()  # (name, value) the pass reported about this run
    stage: int = -1  # the plan stage it belongs to


@dataclass(frozen=True)
class DriverEvent:
    """A span of driver time: a module pass, or dispatching/merging a stage."""

    name: str
    start: float
    seconds: float


@dataclass
class RunStats:
    backend: str = "local"
    backend_reason: str = ""
    workers: str = ""  # what ran the function stages: "warm pool at ...", "private Ray", ...
    num_workers: int = 0
    # starting Ray and the actors (0 on a warm pool), and what of it the run waited for:
    # the rest ran while the driver did the serial part
    startup_seconds: float = 0.0
    startup_waited_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)  # for the user: e.g. why a warm pool went unused
    remote_calls: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    retries: int = 0
    worker_restarts: int = 0
    functions_moved: int = 0  # by rebalancing
    wall_seconds: float = 0.0
    # of the workers' busy time: inferring types of results ahead of the driver's type inference
    worker_typing_seconds: float = 0.0
    worker_busy_seconds: dict[int, float] = field(default_factory=dict)
    worker_functions: dict[int, int] = field(default_factory=dict)
    worker_pids: dict[int, int] = field(default_factory=dict)
    stages: list[StageStats] = field(default_factory=list)
    events: list[WorkEvent] = field(default_factory=list)
    driver_events: list[DriverEvent] = field(default_factory=list)
    facts: list[RunFact] = field(default_factory=list)  # in the order they were merged
    calls: list[CallRecord] = field(default_factory=list)  # every piece of work, in the order it ended

    def add_records(self, records: Sequence[CallRecord], pass_names: Mapping[int, str]) -> None:
        """Take the records of a stage (in ``stages`` already; ``pass_names``: plan leaf
        index -> pass name): the events and facts of their runs, and every counter recomputed."""
        self.calls.extend(records)
        for record in records:
            for run in record.runs:
                facts = tuple((fact.name, fact.value) for fact in run.facts)
                self.events.append(WorkEvent(run.key, pass_names.get(run.key, "?"), run.function,
                                             record.slot, run.start, run.seconds, facts, record.stage))
                self.facts.extend(run.facts)
        self._tally()

    def _tally(self) -> None:
        """The counters of the run and of its stages, from the records: the one place
        they are computed (a few records per call, so recomputing is cheap)."""
        by_stage = {stage.index: stage for stage in self.stages if stage.kind == "function"}
        for stage in by_stage.values():
            stage.remote_calls = stage.bytes_sent = stage.bytes_received = 0
            stage.worker_seconds = stage.worker_typing_seconds = 0.0
        busy: dict[int, float] = {}
        functions: dict[int, int] = {}
        for record in self.calls:
            stage = by_stage[record.stage]
            stage.remote_calls += int(record.kind.is_batch_call)
            stage.bytes_sent += record.bytes_sent
            stage.bytes_received += record.bytes_received
            if record.kind is CallKind.ANSWERED:
                stage.worker_seconds += record.busy_seconds
                stage.worker_typing_seconds += record.typing_seconds
                busy[record.slot] = busy.get(record.slot, 0.0) + record.busy_seconds
                functions[record.slot] = functions.get(record.slot, 0) + record.functions
            if record.pid is not None and record.slot != DRIVER_SLOT:
                self.worker_pids[record.slot] = record.pid  # the latest process of the slot
        stages = by_stage.values()
        self.remote_calls = sum(stage.remote_calls for stage in stages)
        self.bytes_sent = sum(stage.bytes_sent for stage in stages)
        self.bytes_received = sum(stage.bytes_received for stage in stages)
        self.worker_typing_seconds = sum(stage.worker_typing_seconds for stage in stages)
        self.functions_moved = sum(stage.functions_moved for stage in stages)
        self.retries = sum(record.kind is CallKind.LOST for record in self.calls)
        self.worker_restarts = sum(record.kind is CallKind.RESTART for record in self.calls)
        self.worker_busy_seconds = busy
        self.worker_functions = functions

    @property
    def startup_hidden_seconds(self) -> float:
        return max(0.0, self.startup_seconds - self.startup_waited_seconds)

    def remote_calls_per_stage(self) -> list[int]:
        return [stage.remote_calls for stage in self.stages]

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "backend_reason": self.backend_reason,
            "workers": self.workers,
            "num_workers": self.num_workers,
            "startup_seconds": self.startup_seconds,
            "startup_hidden_seconds": self.startup_hidden_seconds,
            "remote_calls": self.remote_calls,
            "remote_calls_per_stage": self.remote_calls_per_stage(),
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "retries": self.retries,
            "worker_restarts": self.worker_restarts,
            "functions_moved": self.functions_moved,
            "wall_seconds": self.wall_seconds,
            "worker_typing_seconds": self.worker_typing_seconds,
            "worker_busy_seconds": dict(self.worker_busy_seconds),
            "worker_functions": dict(self.worker_functions),
        }

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]

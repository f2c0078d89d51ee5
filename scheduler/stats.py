"""Counters of one scheduler run (``Scheduler.last_run``).

Besides the counters: ``events``, one per (pass, function) run on a worker (what the
trace draws), and ``facts``, what the passes reported about their runs (which process
compiled a kernel, whether it was a cache hit: ``passinfra.transform.run_facts``). Facts
about where work ran live here and in the trace, never in the IR.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from passinfra.transform.run_facts import RunFact


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
    worker_typing_seconds: float = 0.0  # of worker_seconds: types inferred for InferType
    ran_in_driver: bool = False  # too few functions to be worth shipping


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
    num_workers: int = 0
    remote_calls: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    retries: int = 0
    worker_restarts: int = 0
    functions_moved: int = 0  # by rebalancing
    wall_seconds: float = 0.0
    # of the workers' busy time: inferring types of results ahead of the driver's InferType
    worker_typing_seconds: float = 0.0
    worker_busy_seconds: dict[int, float] = field(default_factory=dict)
    worker_functions: dict[int, int] = field(default_factory=dict)
    worker_pids: dict[int, int] = field(default_factory=dict)
    stages: list[StageStats] = field(default_factory=list)
    events: list[WorkEvent] = field(default_factory=list)
    driver_events: list[DriverEvent] = field(default_factory=list)
    facts: list[RunFact] = field(default_factory=list)  # in the order they were merged

    def remote_calls_per_stage(self) -> list[int]:
        return [stage.remote_calls for stage in self.stages]

    def as_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "backend_reason": self.backend_reason,
            "num_workers": self.num_workers,
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

"""A fixed number of worker slots, each a Ray actor running ``FunctionWorker``.

A slot whose actor died is restarted with a fresh actor (its functions are re-sent by
the scheduler, which always holds the latest version of every function). Actors are
spread over the cluster's nodes and may take a fraction of a CPU, so a test can run
more actors than the machine has cores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ray

from passinfra.errors import RaypassError
from workers.actor import FunctionWorker


@dataclass
class Slot:
    index: int
    actor: Any
    generation: int  # bumped on every restart, so late results of a dead actor are known
    info: dict[str, Any]


class WorkerStartError(RaypassError, RuntimeError):
    """The cluster could not place the requested workers."""


# seconds to wait for a new actor; Ray would otherwise wait for CPUs forever
START_TIMEOUT = 120.0


class WorkerPool:
    def __init__(self, num_workers: int, cpus_per_worker: float) -> None:
        self._remote_cls = ray.remote(FunctionWorker)
        self._cpus = cpus_per_worker
        self.restarts = 0
        free = ray.available_resources().get("CPU", 0.0)
        if num_workers * cpus_per_worker > free + 1e-9:
            raise WorkerStartError(
                f"cannot start {num_workers} workers with {cpus_per_worker:g} CPU each: the Ray cluster "
                f"has {free:g} CPUs free (lower num_workers or cpus_per_worker, or stop other schedulers)"
            )
        actors = [self._start(index) for index in range(num_workers)]
        infos = self._describe(actors)
        self.slots = [Slot(i, actor, 0, info) for i, (actor, info) in enumerate(zip(actors, infos))]

    def _describe(self, actors: list[Any]) -> list[dict[str, Any]]:
        try:
            return ray.get([actor.describe.remote() for actor in actors], timeout=START_TIMEOUT)
        except ray.exceptions.GetTimeoutError:
            for actor in actors:
                ray.kill(actor, no_restart=True)
            raise WorkerStartError(
                f"{len(actors)} worker(s) did not start within {START_TIMEOUT:.0f}s; the Ray cluster has "
                f"{ray.available_resources().get('CPU', 0.0):g} CPUs free"
            ) from None

    def _start(self, index: int) -> Any:
        return self._remote_cls.options(
            num_cpus=self._cpus, scheduling_strategy="SPREAD", max_restarts=0, max_task_retries=0
        ).remote(index)

    def __len__(self) -> int:
        return len(self.slots)

    def restart(self, index: int) -> Slot:
        """Replace the actor of slot ``index`` by a new one (the old one is dead or is killed)."""
        old = self.slots[index]
        try:
            ray.kill(old.actor, no_restart=True)
        except Exception:  # already gone
            pass
        actor = self._start(index)
        info = self._describe([actor])[0]
        self.restarts += 1
        self.slots[index] = Slot(index, actor, old.generation + 1, info)
        return self.slots[index]

    def shutdown(self) -> None:
        for slot in self.slots:
            try:
                ray.kill(slot.actor, no_restart=True)
            except Exception:  # already gone
                pass
        self.slots = []

    def pids(self) -> list[int]:
        return [slot.info["pid"] for slot in self.slots]

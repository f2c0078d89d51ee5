"""Tuning on Ray: ``RayRunner`` measures ``passinfra.tune``'s candidates on Ray actors, on
this machine (a private Ray instance, started and stopped here) or on a cluster
(``address``), one job in flight per actor (``passinfra.tuning.runner.Runner``). An actor
that dies is replaced by a fresh one and its job runs again.

Each actor reserves ``cpus_per_worker`` CPUs and its libraries run on that many threads
(at least one), so that workers on one node do not time each other. All actors must
measure the same target (instruction set and threads): records are per target, and a
cluster of mixed CPUs would mix them.
"""

from __future__ import annotations

import concurrent.futures as futures
from collections.abc import Callable
from typing import Any

import ray

from passinfra.errors import RaypassError
from passinfra.tuning.runner import Runner
from scheduler.pool import ray_runtime
from workers.measurer import MeasureWorker

START_TIMEOUT = 300.0  # seconds for the actors to answer their first call


class TuningWorkersError(RaypassError, RuntimeError):
    """The Ray workers for tuning could not start, or measure different targets."""


class RayRunner(Runner):
    """``workers`` Ray actors of ``cpus_per_worker`` CPUs each, on the cluster at
    ``address`` or in a private instance started here (module docstring)."""

    def __init__(self, workers: int, address: str | None = None, cpus_per_worker: float = 1.0,
                 cache_dir: str | None = None) -> None:
        super().__init__()
        if workers < 1 or cpus_per_worker <= 0:
            raise TuningWorkersError(f"tuning needs at least one worker with CPUs, "
                                     f"got {workers} x {cpus_per_worker}")
        self.slots = workers
        self.threads = max(1, int(cpus_per_worker))
        self._cpus = cpus_per_worker
        self._cache_dir = cache_dir
        private_cpus = max(1, round(workers * cpus_per_worker))
        self._ray = ray_runtime.connect(address, None if address else private_cpus)
        try:
            self._remote = ray.remote(MeasureWorker)
            self._actors = [self._start() for _ in range(workers)]
            targets = ray.get([actor.target.remote() for actor in self._actors], timeout=START_TIMEOUT)
        except ray.exceptions.GetTimeoutError as error:
            cpus = ray_runtime.cluster_cpus()  # before close() stops a private instance
            self.close()
            raise TuningWorkersError(f"{workers} tuning worker(s) of {cpus_per_worker:g} CPUs did not start "
                                     f"within {START_TIMEOUT:.0f}s; the Ray cluster has {cpus:g} CPUs"
                                     ) from error
        except BaseException:
            self.close()
            raise
        if any(t != targets[0] for t in targets):
            self.close()
            kinds = sorted(map(str, targets))
            raise TuningWorkersError(f"the tuning workers measure different targets: {kinds}; "
                                     "tune on nodes of one kind of CPU")
        self._target = targets[0]

    def _start(self) -> Any:
        return self._remote.options(num_cpus=self._cpus, scheduling_strategy="SPREAD", max_restarts=0,
                                    max_task_retries=0).remote(self.threads, self._cache_dir)

    def target(self) -> dict[str, Any]:
        return dict(self._target)

    def _submit(self, slot: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> futures.Future:
        return self._actors[slot].call.remote(fn, args).future()

    def _is_lost_worker(self, error: BaseException) -> bool:
        return isinstance(error, ray.exceptions.RayActorError)

    def _replace(self, slot: int) -> None:
        ray.kill(self._actors[slot], no_restart=True)
        self._actors[slot] = self._start()

    def close(self) -> None:
        for actor in getattr(self, "_actors", []):
            ray.kill(actor, no_restart=True)
        self._actors = []
        ray_runtime.disconnect(getattr(self, "_ray", None))
        self._ray = None


__all__ = ["RayRunner", "TuningWorkersError"]

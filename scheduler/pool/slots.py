"""A fixed number of worker slots, each a Ray actor running ``FunctionWorker``.

A slot whose actor died is restarted with a fresh actor (its functions are re-sent by
the scheduler, which always holds the latest version of every function). Actors are
spread over the cluster's nodes and may take a fraction of a CPU, so a test can run
more actors than the machine has cores.

Ray frees the CPUs of a killed actor asynchronously (its process exits, then its node
reports the release, tens of milliseconds later). So ``shutdown`` waits, bounded, until
Ray reports them free again: a pool started next, by this program or another, finds the
cluster as this one found it. A new pool whose CPUs are taken waits, bounded, for them
instead of failing, and the pools of one process take turns placing their actors (each
then waits until Ray counts them), so two schedulers of one program never split the
cluster's CPUs between them and then wait for each other.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
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


# the actor concurrency group of calls that only read a worker's state (``runs``)
CONTROL_GROUP = "control"
# seconds to wait for a new actor; Ray would otherwise wait for CPUs forever
START_TIMEOUT = 120.0
# seconds a new pool waits for the CPUs it needs while others hold them (a pool shutting
# down, another scheduler's); a run of that other scheduler may take this long
CPU_WAIT_TIMEOUT = 120.0
# seconds to wait for Ray to report CPUs taken or freed by a pool (tens of milliseconds
# on an idle machine); past it the pool goes on, as Ray will catch up
SETTLE_TIMEOUT = 10.0
_POLL_SECONDS = 0.02
_EPSILON = 1e-3  # Ray counts resources in 1/10000 units; float sums drift below that

# taken by every pool of this process while it places, restarts or releases actors, so
# each sees the CPUs of the others settled; pools waiting for CPUs sleep on it and a
# shutdown wakes them
_PLACEMENT = threading.Condition()


def free_cpus() -> float:
    """CPUs of the cluster no actor or task holds, as Ray reports them now."""
    return float(ray.available_resources().get("CPU", 0.0))


def total_cpus() -> float:
    return float(ray.cluster_resources().get("CPU", 0.0))


def wait_until(
    condition: Callable[[], bool], timeout: float, wakeup: threading.Condition | None = None
) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout`` seconds pass (False).
    With ``wakeup`` (held by the caller) the wait releases it, so other threads can
    change what is polled, and a notify on it polls again at once."""
    deadline = time.monotonic() + timeout
    while not condition():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if wakeup is not None:
            wakeup.wait(min(5 * _POLL_SECONDS, remaining))
        else:
            time.sleep(min(_POLL_SECONDS, remaining))
    return True


class WorkerPool:
    """``num_workers`` actors. With ``wait`` the constructor returns once every actor
    answers; without it, once they are placed: each slot's ``info["ready"]`` is False
    until ``ready_slots`` sees its actor answer, so a pool can serve
    with the first workers up while the others still start."""

    def __init__(self, num_workers: int, cpus_per_worker: float, wait: bool = True) -> None:
        # a thread of its own for questions about the worker (a pool's status), answered
        # while a batch runs; the batch calls keep the default group's single thread
        self._remote_cls = ray.remote(concurrency_groups={CONTROL_GROUP: 1})(FunctionWorker)
        self._cpus = cpus_per_worker
        self.restarts = 0
        self.slots: list[Slot] = []
        needed = num_workers * cpus_per_worker
        self._starting: dict[Any, int] = {}  # an actor's warm-up call -> its slot, until it answers
        with _PLACEMENT:
            self._wait_for_cpus(num_workers, needed)
            free_before = free_cpus()
            actors = [self._start(index) for index in range(num_workers)]
            if wait:
                infos = [dict(info, ready=True) for info in self._describe(actors)]
            else:
                infos = [{"slot": index, "ready": False} for index in range(num_workers)]
                self._starting = {actor.warm_up.remote(): index for index, actor in enumerate(actors)}
            # until Ray counts these actors, another pool of this process would see
            # their CPUs as free, place actors Ray cannot run, and hold _PLACEMENT
            wait_until(lambda: free_cpus() <= free_before - needed + _EPSILON, SETTLE_TIMEOUT)
        self.slots = [Slot(i, actor, 0, info) for i, (actor, info) in enumerate(zip(actors, infos))]
        self._started = time.monotonic()

    @property
    def starting(self) -> int:
        """Actors not up yet (a pool made with ``wait=False``)."""
        return len(self._starting)

    def ready_slots(self, timeout: float = 0.0) -> list[int]:
        """The slots whose actors answered their warm-up since the last call (waiting up
        to ``timeout`` seconds for the first of them); their ``info`` is complete and
        ``ready``. WorkerStartError when one died starting or all of them took longer
        than ``START_TIMEOUT``."""
        if not self._starting:
            return []
        done, _ = ray.wait(list(self._starting), num_returns=1, timeout=timeout)
        if done:  # and whatever else finished meanwhile
            done, _ = ray.wait(list(self._starting), num_returns=len(self._starting), timeout=0)
        elif time.monotonic() - self._started > START_TIMEOUT:
            raise WorkerStartError(f"{len(self._starting)} worker(s) did not start within "
                                   f"{START_TIMEOUT:.0f}s; the Ray cluster has {free_cpus():g} CPUs free")
        joined = []
        for ref in done:
            index = self._starting.pop(ref)
            try:
                info = ray.get(ref)
            except ray.exceptions.RayError as error:
                raise WorkerStartError(f"worker {index} died while starting: {error}") from error
            self.slots[index].info.update(info, ready=True)
            joined.append(index)
        return sorted(joined)

    def _wait_for_cpus(self, num_workers: int, needed: float) -> None:
        """Return once the cluster has ``needed`` CPUs free (they may still be held by a
        pool that is shutting down, here or in another program); fail at once when the
        cluster has fewer CPUs than that in all."""
        asked = f"cannot start {num_workers} workers with {self._cpus:g} CPU each"
        total = total_cpus()
        if needed > total + _EPSILON:
            raise WorkerStartError(
                f"{asked}: the Ray cluster has {total:g} CPUs in all (lower num_workers or cpus_per_worker)"
            )
        if not wait_until(lambda: free_cpus() >= needed - _EPSILON, CPU_WAIT_TIMEOUT, _PLACEMENT):
            raise WorkerStartError(
                f"{asked}: the Ray cluster still has {free_cpus():g} of its {total:g} CPUs free after "
                f"waiting {CPU_WAIT_TIMEOUT:g}s (lower num_workers or cpus_per_worker, or stop other "
                "schedulers)"
            )

    def _describe(self, actors: list[Any]) -> list[dict[str, Any]]:
        try:
            return ray.get([actor.describe.remote() for actor in actors], timeout=START_TIMEOUT)
        except ray.exceptions.GetTimeoutError:
            for actor in actors:
                _kill(actor)
            raise WorkerStartError(
                f"{len(actors)} worker(s) did not start within {START_TIMEOUT:.0f}s; the Ray cluster has "
                f"{free_cpus():g} CPUs free"
            ) from None
        except ray.exceptions.RayActorError as error:
            # e.g. a worker process that did not register in time on an overloaded node
            for actor in actors:
                _kill(actor)
            raise WorkerStartError(f"a worker died while starting: {error}") from error

    def _start(self, index: int) -> Any:
        return self._remote_cls.options(
            num_cpus=self._cpus, scheduling_strategy="SPREAD", max_restarts=0, max_task_retries=0
        ).remote(index)

    def __len__(self) -> int:
        return len(self.slots)

    def restart(self, index: int) -> Slot:
        """Replace the actor of slot ``index`` by a new one (the old one is dead or is killed)."""
        old = self.slots[index]
        with _PLACEMENT:  # the new actor takes the old one's CPUs: no other pool may grab them
            _kill(old.actor)
            actor = self._start(index)
            info = dict(self._describe([actor])[0], ready=True)
        self.restarts += 1
        self.slots[index] = Slot(index, actor, old.generation + 1, info)
        return self.slots[index]

    def shutdown(self, wait: bool = True) -> float:
        """Kill the actors; with ``wait``, return once Ray reports their CPUs free again
        (bounded by ``SETTLE_TIMEOUT``). Returns the seconds spent waiting. Without
        ``wait`` (Ray itself is about to stop) it returns at once."""
        slots, self.slots = self.slots, []
        if not slots or not ray.is_initialized():
            return 0.0
        # a pool of this process stuck placing actors may be waiting for exactly these
        # CPUs: then kill them without measuring rather than wait for each other
        measured = _PLACEMENT.acquire(timeout=SETTLE_TIMEOUT)
        try:
            target = self._free_after_release(len(slots)) if wait and measured else None
            for slot in slots:
                _kill(slot.actor)
            started = time.monotonic()
            if target is not None:
                # a slot whose actor died unnoticed freed its CPUs already: the target is
                # then too high and the wait ends at its bound (Ray still frees them all)
                wait_until(lambda: _free_at_least(target), SETTLE_TIMEOUT)
            return time.monotonic() - started
        finally:
            if measured:
                _PLACEMENT.notify_all()  # pools waiting for CPUs look again
                _PLACEMENT.release()

    def _free_after_release(self, actors: int) -> float | None:
        """The free CPUs Ray will report once ``actors`` of this pool are gone (None:
        Ray cannot tell, its GCS being unreachable)."""
        try:
            return min(total_cpus(), free_cpus() + actors * self._cpus)
        except Exception:
            return None

    def pids(self) -> list[int]:
        return [slot.info["pid"] for slot in self.slots if "pid" in slot.info]


def _free_at_least(cpus: float) -> bool:
    try:
        return free_cpus() >= cpus - _EPSILON
    except Exception:  # Ray stopped answering (its GCS is gone): nothing left to wait for
        return True


def _kill(actor: Any) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # already gone
        pass

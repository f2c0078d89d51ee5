"""How one run reaches its worker slots: the operations a stage's dispatcher needs.

A :class:`Transport` is bound to one run (its *run id*, under which the workers keep the
run's functions) and offers: put a stage, submit a batch call, wait for the next call to
finish, restart a dead slot, load or drop functions, and end the run. Two exist:

* :class:`RayTransport` (here): actors in this process's Ray (a private instance, the
  caller's own ``ray.init``, or a cluster at an address), futures and all;
* ``scheduler.pool.gateway.GatewayTransport``: a warm pool's actors, reached through the
  pool's gateway socket, so the driver needs no Ray at all (``import ray`` and
  connecting cost more than a small build).

The dispatcher (``scheduler.dispatch``) holds the policy (what to re-send, when to give
up); a transport only moves calls and reports a call lost with its actor as ``None``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from workers.actor import BatchResult, StageSpec
from workers.calls import Call
from workers.wire import Packed


@dataclass(frozen=True)
class SlotView:
    """A worker slot as a run sees it: which actor generation holds it, and where it runs."""

    index: int
    generation: int  # bumped on every restart, so late results of a dead actor are known
    info: dict[str, Any]  # slot, pid, host, node_id


class Transport(ABC):
    run_id: str
    slots: list[SlotView]
    # what the workers are, for reports: "private Ray", "warm pool (127.0.0.1:...)"
    description: str = ""

    def __len__(self) -> int:
        return len(self.slots)

    @abstractmethod
    def put_stage(self, spec: StageSpec) -> Any:
        """Make ``spec`` available to every worker once; returns its handle."""

    @abstractmethod
    def submit(self, call: Call, stage: Any) -> Any:
        """Send ``call`` (of the stage ``stage`` names) to its slot; returns a token."""

    @abstractmethod
    def next_done(self, tokens: list[Any]) -> tuple[Any, BatchResult | None]:
        """The next of ``tokens`` to finish, with its result (None: lost with its actor)."""

    @abstractmethod
    def restart(self, index: int, generation: int) -> SlotView:
        """A live actor for slot ``index``: a new one if the slot is still at
        ``generation`` (its actor died), else the one that replaced it meanwhile."""

    @abstractmethod
    def load(self, index: int, packed: Packed) -> None:
        """Make ``packed`` resident on slot ``index`` (returns once it is)."""

    @abstractmethod
    def drop(self, index: int, names: list[str]) -> None:
        """Make slot ``index`` forget ``names`` (asynchronously)."""

    def refresh(self) -> list[SlotView]:
        """The slots as they are now (a shared pool may have restarted one for another
        run); a transport that alone restarts its slots knows them already."""
        return self.slots

    def is_ready(self, index: int) -> bool:
        """Whether slot ``index``'s worker is up (a private pool serves from its first
        worker on; the others join as they come up)."""
        return bool(self.slots[index].info.get("ready", True))

    def joined(self) -> list[int]:
        """The slots that came up since the last call (their workers can take work now)."""
        return []

    @abstractmethod
    def close(self) -> None:
        """End the run: the workers forget its functions and stages."""


class RayTransport(Transport):
    """The actors of a ``scheduler.pool.slots.WorkerPool`` in this process's Ray."""

    def __init__(self, pool: Any, run_id: str, description: str = "Ray") -> None:
        self.pool = pool
        self.run_id = run_id
        self.description = description

    @property
    def slots(self) -> list[SlotView]:  # type: ignore[override]
        return [SlotView(s.index, s.generation, s.info) for s in self.pool.slots]

    def put_stage(self, spec: StageSpec) -> Any:
        import ray

        return ray.put(spec)

    def submit(self, call: Call, stage: Any) -> Any:
        actor = self.pool.slots[call.slot].actor
        return actor.run_batch.remote(self.run_id, [stage], call.names, call.load, call.drop)

    def next_done(self, tokens: list[Any]) -> tuple[Any, BatchResult | None]:
        import ray
        from ray.exceptions import RayActorError, WorkerCrashedError

        ready, _ = ray.wait(tokens, num_returns=1)
        try:
            return ready[0], ray.get(ready[0])
        except (RayActorError, WorkerCrashedError):
            return ready[0], None

    def restart(self, index: int, generation: int) -> SlotView:
        if self.pool.slots[index].generation == generation:
            self.pool.restart(index)
        return self.slots[index]

    def load(self, index: int, packed: Packed) -> None:
        import ray

        ray.get(self.pool.slots[index].actor.load.remote(self.run_id, packed))

    def drop(self, index: int, names: list[str]) -> None:
        self.pool.slots[index].actor.drop.remote(self.run_id, names)

    def close(self) -> None:
        import ray

        refs = []
        for slot in self.pool.slots:
            try:
                refs.append(slot.actor.end_run.remote(self.run_id))
            except Exception:  # noqa: BLE001  (a dead actor holds nothing to forget)
                pass
        try:  # wait briefly, so the next run finds the workers clean; a dead one is fine
            ray.wait(refs, num_returns=len(refs), timeout=5.0)
        except Exception:  # noqa: BLE001
            pass


__all__ = ["RayTransport", "SlotView", "Transport"]

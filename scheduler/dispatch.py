"""Dispatching a stage's batch calls to the pool's actors, and recovering from dead ones.

One :class:`Dispatcher` per stage owns everything in flight, as Ray's
``util/actor_pool.py`` does for its actors: the map from each future to the
:class:`~workers.calls.Call` it answers, submission, and the results as they complete
(unordered: the driver merges in module order later). When a call fails because its
actor died, the dispatcher restarts that slot (once per death: slots carry a
*generation*, bumped by every restart, so the other failures of the same actor are
known), re-sends the functions the slot held (asking the stage runner for them: it
holds every function's latest version) and re-sends every call that was aimed at the
dead actor. A call lost ``MAX_ATTEMPTS`` times raises :class:`WorkerLostError`.

Every piece of work ends in one :class:`~workers.calls.CallRecord` (``records``):
statistics are derived from them, not counted here. How calls travel (Ray futures, or a
warm pool's gateway) is the :class:`~scheduler.pool.transport.Transport`'s business.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from passinfra.ir.expr import BaseFunc
from scheduler.pool.transport import Transport
from workers.actor import BatchResult, StageSpec
from workers.calls import DRIVER_SLOT, Call, CallKind, CallRecord
from workers.wire import pack_functions, packed_size

MAX_ATTEMPTS = 3  # per batch call; an actor dying this often is a bug, not bad luck

# the functions a slot held when the stage started (the dispatcher re-sends them to the
# slot's restarted actor); the stage runner marks them resident again
Refill = Callable[[int], Mapping[str, BaseFunc]]


class WorkerLostError(RuntimeError):
    """A batch of functions kept killing the workers it was sent to."""


class Dispatcher:
    """The batch calls of stage ``stage`` (described as ``label`` in errors) over ``transport``."""

    def __init__(
        self, transport: Transport, stage: int, spec: StageSpec, refill: Refill, label: str
    ) -> None:
        self.transport = transport
        self.stage = stage
        self.label = label
        self.records: list[CallRecord] = []
        self._refill = refill
        self._pending: dict[Any, Call] = {}  # token -> the call it answers
        self._spec = transport.put_stage(spec)
        # every worker fetches the stage from the object store once (a record of no slot)
        self._record(CallKind.SPEC, DRIVER_SLOT, packed_size(spec.snapshot) * len(transport))

    # ----- sending ----------------------------------------------------------------------
    def submit(self, call: Call) -> None:
        self._pending[self.transport.submit(call, self._spec)] = call

    def drop(self, slot: int, names: list[str]) -> None:
        """Make ``slot`` forget ``names`` (for a slot this stage sends no call to)."""
        self.transport.drop(slot, names)

    def is_current(self, call: Call) -> bool:
        """Whether ``call`` ran on its slot's present actor (not one that died since)."""
        return self.transport.slots[call.slot].generation == call.generation

    # ----- receiving --------------------------------------------------------------------
    def __bool__(self) -> bool:
        return bool(self._pending)

    def next_result(self) -> tuple[Call, BatchResult]:
        """The next call to finish, with its result. Calls lost with their actor are
        re-sent on the way, so only answers come out."""
        while True:
            token, result = self.transport.next_done(list(self._pending))
            call = self._pending.pop(token)
            if result is None:  # lost with its actor
                self._recover(call)
                continue
            self._record(
                CallKind.ANSWERED, call.slot, call_bytes(call), packed_size(result.changed),
                functions=len(call.names), busy_seconds=result.busy_seconds,
                typing_seconds=result.typing_seconds, pid=result.pid, runs=tuple(result.runs),
            )
            return call, result

    def close(self) -> list[CallRecord]:
        """Record the calls still in flight (the stage stopped on an error) and return
        every record of the stage."""
        for call in self._pending.values():
            self._record(CallKind.UNANSWERED, call.slot, call_bytes(call))
        self._pending.clear()
        return self.records

    # ----- recovery ---------------------------------------------------------------------
    def _recover(self, call: Call) -> None:
        """``call``'s actor died: restart its slot (once per death), aim every call still
        pending for the dead actor at the new one, and send ``call`` again."""
        self._record(CallKind.LOST, call.slot, call_bytes(call))
        if call.generation == self.transport.slots[call.slot].generation:  # first failure seen of this actor
            self._restart(call.slot, call.generation)
        for ref, other in list(self._pending.items()):
            if other.slot == call.slot and not self.is_current(other):
                del self._pending[ref]
                self._record(CallKind.SUPERSEDED, other.slot, call_bytes(other))
                self._retarget(other)
                self.submit(other)
        self._retarget(call)
        call.attempt += 1
        if call.attempt > MAX_ATTEMPTS:
            raise WorkerLostError(
                f"functions {call.names} were lost with their worker {MAX_ATTEMPTS} times in {self.label}"
            ) from None
        self.submit(call)

    def _restart(self, index: int, generation: int) -> None:
        """A new actor for slot ``index``, holding the functions the dead one held."""
        slot = self.transport.restart(index, generation)
        functions = self._refill(index)
        size = 0
        if functions:
            packed = pack_functions(functions)
            size = packed_size(packed)
            self.transport.load(index, packed)
        self._record(CallKind.RESTART, index, size, pid=slot.info["pid"])

    def _retarget(self, call: Call) -> None:
        """Aim ``call`` at its slot's restarted actor, which ``_restart`` already gave
        every function of the slot: nothing to load or drop any more."""
        call.generation = self.transport.slots[call.slot].generation
        call.load = None
        call.drop = None

    def _record(self, kind: CallKind, slot: int, bytes_sent: int = 0, bytes_received: int = 0,
                **fields: Any) -> None:
        self.records.append(CallRecord(kind, self.stage, slot, bytes_sent=bytes_sent,
                                       bytes_received=bytes_received, **fields))


def call_bytes(call: Call) -> int:
    """The bytes ``call`` carries to its worker (the functions it loads)."""
    return packed_size(call.load)


__all__ = ["MAX_ATTEMPTS", "Dispatcher", "WorkerLostError"]

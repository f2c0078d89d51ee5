"""Cutting a stage into batch calls, and packing what each call carries.

Two ways, by where the functions are. Functions a slot already holds run there: each
slot's are cut ahead of the stage (``plan_calls``). Functions no slot holds yet (every
function of the first shipped stage, new ones later) could run anywhere: they wait in a
:class:`WorkQueue` and each slot takes the next chunk when it has fewer than
``IN_FLIGHT`` calls outstanding, so the work is balanced by what it really costs, not by
an estimate made before it ran (a kernel's cost is not its node count), and a slot that
comes up late still gets work.

A stage is cut into batch calls: a chunk of one slot's functions, every pass of the
stage per function, several in flight per actor. The driver packs and submits them one
after the other, so a worker starts on its first chunk while the next is being packed.
The first call's packing and the last one's unpacking are not hidden behind worker
time, so calls are small (``CALLS_PER_WORKER`` per slot and stage); but each costs a
round trip (1-2 ms), so a call carries at least ``MIN_CALL_FUNCTIONS`` functions
(packing that many costs about as much as one round trip).
"""

from __future__ import annotations

import itertools
import math

from passinfra.ir.expr import BaseFunc
from scheduler.residency import Placement
from workers.calls import Call
from workers.wire import Packed, pack_functions

CALLS_PER_WORKER = 8
MIN_CALL_FUNCTIONS = 32
# work-queue calls outstanding per slot: one running, one waiting, so a worker never
# waits for the driver to pack its next chunk
IN_FLIGHT = 2
# a queue's chunks shrink as it empties (guided self-scheduling): what is left over this
# many chunks per slot, so the last calls are small and the workers finish together
GUIDED_CHUNKS_PER_SLOT = 4
# ... but a chunk carries at least this much work (measured so far), which amortizes its
# round trip (1-2 ms)
MIN_CALL_SECONDS = 0.01


def plan_calls(placement: Placement, generations: list[int], batch_size: int | None = None) -> list[Call]:
    """Each slot's functions, in module order, cut into ``CALLS_PER_WORKER`` chunks of
    at least ``MIN_CALL_FUNCTIONS`` (or into ``batch_size`` ones), aimed at the slot's
    actor of generation ``generations[slot]``; a slot's first call carries its drops.
    Slots take turns, so every worker gets its first chunk before any gets its second."""
    by_slot: dict[int, list[str]] = {}
    for name, slot in placement.slots.items():
        by_slot.setdefault(slot, []).append(name)
    per_slot: list[list[Call]] = []
    for slot, names in sorted(by_slot.items()):
        size = batch_size or max(MIN_CALL_FUNCTIONS, math.ceil(len(names) / CALLS_PER_WORKER))
        chunks = [Call(slot, names[i : i + size], generations[slot]) for i in range(0, len(names), size)]
        chunks[0].drop = placement.drops.get(slot)
        per_slot.append(chunks)
    return [call for turn in itertools.zip_longest(*per_slot) for call in turn if call is not None]


def pack_load(call: Call, sends: dict[int, dict[str, BaseFunc]]) -> Packed | None:
    """The functions of ``call`` its worker does not hold yet, packed (None: it holds all)."""
    new = sends.get(call.slot, {})
    functions = {name: new[name] for name in call.names if name in new}
    return pack_functions(functions) if functions else None


class WorkQueue:
    """The functions no slot holds, largest first, handed out in chunks as slots ask."""

    def __init__(self, names: list[str], slots: int, batch_size: int | None = None) -> None:
        self._names = list(names)
        self._next = 0
        self._slots = max(1, slots)
        self._batch_size = batch_size
        self._seconds = 0.0  # of the functions measured so far
        self._measured = 0

    def __bool__(self) -> bool:
        return self._next < len(self._names)

    def __len__(self) -> int:
        return len(self._names) - self._next

    def next_chunk(self) -> list[str]:
        """The next functions to send, in queue order (empty: none left)."""
        left = len(self)
        if self._batch_size:
            size = self._batch_size
        else:
            size = max(math.ceil(left / (GUIDED_CHUNKS_PER_SLOT * self._slots)), self._min_chunk())
        chunk = self._names[self._next : self._next + size]
        self._next += len(chunk)
        return chunk

    def learn(self, seconds: float, functions: int) -> None:
        """A call's ``functions`` took ``seconds`` (its passes' time): what sizes the rest."""
        self._seconds += seconds
        self._measured += functions

    def _min_chunk(self) -> int:
        """Functions that make ``MIN_CALL_SECONDS`` of work, by what was measured so far.
        Before anything was, none: no estimate made before a function ran says what it
        costs (a kernel's compile is not its node count), and the first round's guided
        chunks are what measures it."""
        if not self._measured or self._seconds <= 0:
            return 1
        per_function = self._seconds / self._measured
        return max(1, min(MIN_CALL_FUNCTIONS, math.ceil(MIN_CALL_SECONDS / per_function)))


__all__ = ["CALLS_PER_WORKER", "IN_FLIGHT", "MIN_CALL_FUNCTIONS", "WorkQueue", "pack_load", "plan_calls"]

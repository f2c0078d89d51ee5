"""Cutting a stage into batch calls, and packing what each call carries.

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


__all__ = ["CALLS_PER_WORKER", "MIN_CALL_FUNCTIONS", "pack_load", "plan_calls"]

"""Placing functions on workers: LPT by estimated cost, rebalanced from measured times."""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from passinfra.ir.expr import BaseFunc, Function
from passinfra.ir.functor import iter_post_order


def estimated_cost(func: BaseFunc) -> float:
    """Node count of a graph-level function (a proxy for pass work); 1 otherwise."""
    if isinstance(func, Function):
        return float(sum(1 for _ in iter_post_order(func)))
    return 1.0


def lpt(costs: Mapping[str, float], loads: list[float]) -> dict[str, int]:
    """Longest processing time first: each function, largest first, goes to the least
    loaded worker. ``loads`` (one per worker) is the load already there; ties go to the
    lower worker index and equal costs keep the mapping's order, so it is deterministic."""
    heap = [(load, slot) for slot, load in enumerate(loads)]
    heapq.heapify(heap)
    placement: dict[str, int] = {}
    order = sorted(costs, key=lambda name: -costs[name])  # stable: ties keep module order
    for name in order:
        load, slot = heapq.heappop(heap)
        placement[name] = slot
        heapq.heappush(heap, (load + costs[name], slot))
    return placement


def makespan(placement: Mapping[str, int], costs: Mapping[str, float], workers: int) -> float:
    loads = [0.0] * workers
    for name, slot in placement.items():
        loads[slot] += costs.get(name, 0.0)
    return max(loads) if loads else 0.0

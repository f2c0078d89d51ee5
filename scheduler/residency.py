"""Which worker slot holds which function, and where new functions go.

The driver holds the current version of every function (workers send back what they
changed at the end of each stage); workers hold resident copies, tracked by object
identity: a function is up to date on its slot exactly when the driver's object is the
one last sent to or received from that slot. Only new or changed functions are sent.

Placement: a function no slot holds, or whose copy on its slot is out of date (it is
sent again either way), waits in the stage's work queue (``scheduler.chunking.WorkQueue``,
largest first by what an earlier build measured for it in the same stage
(``scheduler.function_costs``), else by the measured seconds of the last stage of this run
that ran it, else by an estimate from its node count) and becomes resident on the slot
that takes it (``place``); with the queue off (config ``scheduler.work_queue``) it goes
ahead of the stage to the least loaded slot, largest first (LPT, ``scheduler.assign``).
Only the functions some pass of the stage works on take part (see ``sync``). When the
measured costs make the current placement clearly worse than LPT's
(``REBALANCE_THRESHOLD``) and moving saves more than sending costs
(``REBALANCE_MIN_GAIN``), functions move; a moved or removed function is dropped by the
slot that held it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from passinfra.ir.expr import BaseFunc
from passinfra.ir.module import IRModule
from scheduler.assign import estimated_cost, lpt, makespan

REBALANCE_THRESHOLD = 1.25  # move functions when the measured makespan is this much over LPT's
# ... and over it by at least this many seconds: re-sending a moved function costs about a
# millisecond of packing and transfer, and the costs of sub-millisecond functions are mostly
# noise (a busy test run moved 7 of 12 functions of 0.1 ms each, for nothing)
REBALANCE_MIN_GAIN = 0.005


@dataclass
class Placement:
    """What a stage must ship: per slot, the functions to load and the names to drop."""

    slots: dict[str, int]  # name -> slot, in module order
    sends: dict[int, dict[str, BaseFunc]] = field(default_factory=dict)
    drops: dict[int, list[str]] = field(default_factory=dict)
    moved: int = 0  # functions rebalancing moved to another slot
    queued: list[str] = field(default_factory=list)  # held by no slot: for the work queue, largest first


class Residency:
    """What each of ``workers`` slots holds, and where each function should run."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        # name -> (slot, the driver object the worker holds; None: it needs a new copy)
        self._resident: dict[str, tuple[int, BaseFunc | None]] = {}
        self._cost: dict[str, float] = {}  # measured seconds per function, last stage it ran
        self._prior: Mapping[str, float] = {}  # the stage's seconds from earlier builds

    def sync(self, mod: IRModule, working: Sequence[str], queue: bool = False,
             ready: Sequence[int] | None = None, prior: Mapping[str, float] | None = None) -> Placement:
        """Place the functions ``working`` (those some pass of the stage works on, in
        module order), rebalance them by measured cost, and say what each slot must
        load (new/changed functions) and drop (removed or moved ones). The functions are
        recorded as resident now; they reach the workers with the stage's calls. With
        ``queue``, the functions no slot holds are not placed but listed in ``queued``,
        largest first, for the slots to take as they ask (``place``). ``ready``: the
        slots whose workers are up (default all); nothing is placed on the others, and
        nothing moves until they are all up. ``prior``: seconds earlier builds measured
        for functions this run has not run yet (``scheduler.function_costs``), trusted
        before the node-count estimate.

        Only ``working`` functions travel: the others stay where they are, or in the
        driver alone. After FuseOps the host ``main`` holds every weight of the model
        and no kernel pass reads it; shipping it cost more than the kernels' work."""
        self._prior = prior or {}
        present = {gv.name_hint for gv in mod.functions}
        drops: dict[int, list[str]] = {}
        for name in list(self._resident):
            if name not in present:
                slot, _ = self._resident.pop(name)
                drops.setdefault(slot, []).append(name)
        # a slot's copy that is out of date (the function changed since it was sent or
        # returned: a module pass rewrote it, or its types come from the driver) is sent
        # again whatever slot runs it, so it is placed afresh, like a new function: with
        # the queue, where a slot takes it when free (the kernel stage's compile units,
        # each re-sent after GroupKernels, were held where the lowering stage had put
        # their first kernel: the transformer's 12 units left one of 2 workers idle for
        # 0.2 s of a 0.67 s stage)
        for name in working:
            resident = self._resident.get(name)
            if resident is not None and resident[1] is not mod[name]:
                del self._resident[name]
                drops.setdefault(resident[0], []).append(name)
        placement = {name: self._resident[name][0] for name in working if name in self._resident}
        moved = 0
        queued: list[str] = []
        up = list(range(self.workers)) if ready is None else sorted(ready)
        all_up = len(up) == self.workers
        if queue:
            newcomers = {name: self._cost_of(name, mod) for name in working if name not in placement}
            queued = sorted(newcomers, key=lambda name: -newcomers[name])  # stable: ties in module order
            if all_up:
                placement, moved = self._rebalance(placement, mod, drops)
        elif len(up) == 1:  # nothing to balance: spare the cost estimates (a walk of every function)
            placement.update({name: up[0] for name in working if name not in placement})
        else:
            newcomers = {name: self._cost_of(name, mod) for name in working if name not in placement}
            if newcomers:
                loads = [0.0] * self.workers
                for name, slot in placement.items():
                    loads[slot] += self._cost_of(name, mod)
                on_up = lpt(newcomers, [loads[slot] for slot in up])
                placement.update({name: up[index] for name, index in on_up.items()})
            if all_up:
                placement, moved = self._rebalance(placement, mod, drops)
        sends: dict[int, dict[str, BaseFunc]] = {}
        for name in working:
            if name not in placement:  # queued
                continue
            func = mod[name]
            slot = placement[name]
            resident = self._resident.get(name)
            if resident is None or resident[0] != slot or resident[1] is not func:
                sends.setdefault(slot, {})[name] = func
                self._resident[name] = (slot, func)
        placed = {name: placement[name] for name in working if name in placement}
        return Placement(placed, sends, drops, moved, queued)

    def place(self, names: Sequence[str], slot: int, mod: IRModule) -> dict[str, BaseFunc]:
        """``names`` (taken from the work queue) go to ``slot``: they are resident there
        from now on. Returns the functions to send it."""
        functions = {name: mod[name] for name in names}
        for name, func in functions.items():
            self._resident[name] = (slot, func)
        return functions

    def _cost_of(self, name: str, mod: IRModule) -> float:
        """What an earlier build measured for the function in this stage, else the
        measured seconds of the last stage of this run that ran it, else an estimate from
        its node count (about a microsecond per node and pass). The same stage's seconds
        first: the stage before is another stage's work (a kernel's lowering says little
        about its compile)."""
        return self._prior.get(name) or self._cost.get(name) or estimated_cost(mod[name]) * 1e-6

    def _rebalance(
        self, placement: dict[str, int], mod: IRModule, drops: dict[int, list[str]]
    ) -> tuple[dict[str, int], int]:
        """Re-place by measured cost when the current placement is clearly worse than
        LPT's; returns the placement and how many functions moved."""
        if self.workers < 2 or len(placement) <= self.workers:
            return placement, 0
        costs = {name: self._cost_of(name, mod) for name in placement}
        better = lpt(costs, [0.0] * self.workers)
        now, best = makespan(placement, costs, self.workers), makespan(better, costs, self.workers)
        if now <= REBALANCE_THRESHOLD * best or now - best < REBALANCE_MIN_GAIN:
            return placement, 0
        moved = 0
        for name, slot in better.items():
            old = placement.get(name)
            if old is not None and old != slot:
                drops.setdefault(old, []).append(name)
                self._resident.pop(name, None)
                moved += 1
        return better, moved

    # ----- after the stage's calls ---------------------------------------------------------
    def refill(self, slot: int, mod: IRModule) -> dict[str, BaseFunc]:
        """The functions of ``slot`` as ``mod`` (the stage's input) has them, for its
        restarted actor; they are resident there again once sent."""
        mine = {name: mod[name] for name, (owner, _) in self._resident.items() if owner == slot}
        for name, func in mine.items():
            self._resident[name] = (slot, func)
        return mine

    def forget_slot(self, slot: int) -> None:
        """``slot``'s actor was replaced: it holds none of its functions any more."""
        for name, (owner, _) in self._resident.items():
            if owner == slot:
                self._resident[name] = (slot, None)

    def received(self, slot: int, changed: Mapping[str, BaseFunc], untyped: Sequence[str]) -> None:
        """``slot`` returned ``changed`` (its copies are these objects now); the functions in
        ``untyped`` get their types only in the driver's type-inference pass, so the slot needs
        them again."""
        for name, func in changed.items():
            self._resident[name] = (slot, func)
        for name in untyped:
            self._resident[name] = (slot, None)

    def learn(self, seconds: Mapping[str, float]) -> None:
        """Measured seconds per function (of the stage that just ran), for placement."""
        self._cost.update(seconds)


__all__ = ["REBALANCE_MIN_GAIN", "REBALANCE_THRESHOLD", "Placement", "Residency"]

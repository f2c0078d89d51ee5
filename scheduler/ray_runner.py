"""Running function stages on Ray workers.

The driver holds the current version of every function (workers send back what they
changed at the end of each stage); workers hold resident copies, tracked by object
identity: a function is up to date on its worker exactly when the driver's object is
the one last sent to or received from that worker. Only new or changed functions are
sent, each with the first batch call that runs it; functions that left the module are
dropped by the slot's first call.

A stage is cut into batch calls (a chunk of one worker's functions, every pass of the
stage per function), several in flight per actor. The driver packs and submits them one
after the other, so a worker starts on its first chunk while the next is being packed,
and unpacks each result as it arrives, while the workers run later chunks. Results are
merged in module order, never completion order. A call that fails because its actor
died is retried on a restarted actor of the same slot, after the slot's functions are
re-sent; nothing is lost because the driver still holds the stage's inputs.

When InferType follows the stage, the workers return their functions typed (see
``workers.actor``); one they could not type is re-sent after the driver typed it, so a
worker's copy always has the types the driver's has.

A stage whose passes need types (they require InferType) that some function lacks runs
in the driver, as a small stage does: inferring them needs the callees' types, which a
worker holding a shard cannot see (``passinfra.transform.module_view.typing_scope``).
That happens only when such a pass runs without its InferType (a bare pass as the
pipeline); in a Sequential InferType runs right before it.

The facts passes report about their runs (``passinfra.transform.run_facts``: which
process compiled a kernel, cache hit or not) come back with each call's timings and go
to ``RunStats.facts`` and to the (pass, function) events the trace draws.
"""

from __future__ import annotations

import itertools
import math
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import RayActorError, WorkerCrashedError

from passinfra.ir.expr import BaseFunc, Function
from passinfra.ir.module import IRModule
from passinfra.transform import PassContext
from passinfra.transform.config import config_type, register_config
from passinfra.transform.run_facts import RunFact, collect_facts
from scheduler.assign import estimated_cost, lpt, makespan
from scheduler.plan import TYPE_INFERENCE_PASS, FunctionStage, reads_module
from scheduler.stats import DriverEvent, RunStats, StageStats, WorkEvent
from workers.actor import BatchError, BatchResult, StageSpec
from workers.pool import WorkerPool
from workers.wire import Packed, pack_functions, pack_module, packed_size, unpack_functions

# a stage over fewer functions than this runs in the driver (config
# scheduler.min_stage_functions): one function cannot be spread over workers
MIN_STAGE_FUNCTIONS = 2
DRIVER_SLOT = -1  # the "worker" id of work done in the driver
MAX_ATTEMPTS = 3  # per batch call; an actor dying this often is a bug, not bad luck
# batch calls per worker and stage: the first call's packing and the last one's unpacking
# are not hidden behind worker time, so calls are small; but each costs a round trip
# (1-2 ms), so a call carries at least MIN_CALL_FUNCTIONS functions (packing that many
# costs about as much as one round trip)
CALLS_PER_WORKER = 8
MIN_CALL_FUNCTIONS = 32
REBALANCE_THRESHOLD = 1.25  # move functions when the measured makespan is this much over LPT's


register_config("scheduler.min_stage_functions", int)


class WorkerLostError(RuntimeError):
    """A batch of functions kept killing the workers it was sent to."""


@dataclass
class StageOutcome:
    module: IRModule
    error: BatchError | None
    error_worker: dict[str, Any] | None
    # leaf index -> slot -> (seconds, functions)
    timings: dict[int, dict[int, tuple[float, int]]] = field(default_factory=dict)


@dataclass
class _Call:
    slot: int
    names: list[str]
    generation: int
    attempt: int = 1
    load: Packed | None = None  # functions of ``names`` the worker does not hold yet
    drop: list[str] | None = None  # functions the worker should forget first


@dataclass
class _Arrival:
    """A finished batch call, its changed functions already unpacked."""

    call: _Call
    result: BatchResult
    changed: dict[str, BaseFunc]


class RayStageRunner:
    def __init__(self, pool: WorkerPool, stats: RunStats, batch_size: int | None = None) -> None:
        self.pool = pool
        self.stats = stats
        self.batch_size = batch_size
        # name -> (slot, the driver object the worker holds; None: it needs a new copy)
        self._resident: dict[str, tuple[int, BaseFunc | None]] = {}
        self._cost: dict[str, float] = {}  # measured seconds per function, last stage it ran
        self._relevant: set[str] = set()  # functions some pass of the current stage accepts
        self._stage_ids = 0

    # ----- residency -------------------------------------------------------------------
    def _sync(
        self, mod: IRModule, passes: list[Any] | None = None
    ) -> tuple[dict[int, dict[str, BaseFunc]], dict[int, list[str]]]:
        """Place new functions, rebalance by measured cost, and say what each slot must
        load (new/changed functions) and drop (removed or moved ones). The functions are
        recorded as resident now; they reach the workers with the stage's calls."""
        workers = len(self.pool)
        names = [gv.name_hint for gv in mod.functions]
        present = set(names)
        drops: dict[int, list[str]] = {}
        for name in list(self._resident):
            if name not in present:
                slot, _ = self._resident.pop(name)
                drops.setdefault(slot, []).append(name)
        placement = {name: slot for name, (slot, _) in self._resident.items()}
        if workers == 1:  # nothing to balance: spare the cost estimates (a walk of every function)
            placement.update({name: 0 for name in names if name not in placement})
        else:
            # a function no pass of this stage works on costs (next to) nothing here: the host
            # `main` after FuseOps is large but untouched by codegen, and must not take a
            # worker for itself while the kernels pile up on the other
            self._relevant = {
                name for name in names if passes is None or any(p.accepts(mod[name]) for p in passes)
            }
            newcomers = {name: self._cost_of(name, mod) for name in names if name not in placement}
            if newcomers:
                loads = [0.0] * workers
                for name, slot in placement.items():
                    loads[slot] += self._cost_of(name, mod)
                placement.update(lpt(newcomers, loads))
            placement = self._rebalance(placement, mod, drops)
        sends: dict[int, dict[str, BaseFunc]] = {}
        for name in names:
            func = mod[name]
            slot = placement[name]
            resident = self._resident.get(name)
            if resident is None or resident[0] != slot or resident[1] is not func:
                sends.setdefault(slot, {})[name] = func
                self._resident[name] = (slot, func)
        return sends, drops

    def _cost_of(self, name: str, mod: IRModule) -> float:
        """Measured seconds of the last stage that ran the function, else an estimate
        from its node count (about a microsecond per node and pass); tiny when no pass
        of the current stage accepts it."""
        if name not in self._relevant:
            return 1e-9
        return self._cost.get(name) or estimated_cost(mod[name]) * 1e-6

    def _rebalance(
        self, placement: dict[str, int], mod: IRModule, drops: dict[int, list[str]]
    ) -> dict[str, int]:
        """Re-place by measured cost when the current placement is clearly worse than LPT's."""
        workers = len(self.pool)
        if workers < 2 or len(placement) <= workers:
            return placement
        costs = {name: self._cost_of(name, mod) for name in placement}
        better = lpt(costs, [0.0] * workers)
        if makespan(placement, costs, workers) <= REBALANCE_THRESHOLD * makespan(better, costs, workers):
            return placement
        for name, slot in better.items():
            old = placement.get(name)
            if old is not None and old != slot:
                drops.setdefault(old, []).append(name)
                self._resident.pop(name, None)
                self.stats.functions_moved += 1
        return better

    # ----- a stage ----------------------------------------------------------------------
    def run_stage(self, stage: FunctionStage, mod: IRModule, ctx: PassContext) -> StageOutcome:
        started = time.perf_counter()
        stats = StageStats(stage.index, "function", [leaf.name for leaf in stage.leaves], len(mod))
        self.stats.stages.append(stats)
        too_small = len(mod) < ctx.get_config("scheduler.min_stage_functions", MIN_STAGE_FUNCTIONS)
        # too_small: nothing to spread, shipping the function out and back would only cost time
        if too_small or _types_missing(stage, mod):
            outcome = self._run_in_driver(stage, mod, ctx)
            stats.ran_in_driver = True
            stats.wall_seconds = time.perf_counter() - started
            return outcome
        send_start, t0 = time.time(), time.perf_counter()
        sends, drops = self._sync(mod, [leaf.pass_ for leaf in stage.leaves])
        self._stage_ids += 1
        snapshot = pack_module(mod) if reads_module(stage.leaves[0].pass_) else None
        spec = StageSpec(
            self._stage_ids,
            [(leaf.leaf_index, leaf.pass_) for leaf in stage.leaves],
            ctx.to_spec(),
            snapshot,
            {key: config_type(key) for key in ctx.config},
            types_wanted=stage.types_wanted,
        )
        spec_ref = ray.put(spec)
        spec_bytes = packed_size(snapshot)
        # every worker receives the stage once (the spec is in the object store)
        stats.bytes_sent += spec_bytes * len(self.pool)
        self.stats.bytes_sent += spec_bytes * len(self.pool)
        pending: dict[Any, _Call] = {}
        for call in self._plan_calls(mod, drops):
            call.load = self._pack_sends(call, sends, stats)
            pending[self._submit(call, spec_ref)] = call
        for slot, names in drops.items():  # a slot left with no call still forgets
            if slot not in {call.slot for call in pending.values()}:
                self.pool.slots[slot].actor.drop.remote(names)
        self.stats.driver_events.append(
            DriverEvent(f"send functions (stage {stage.index})", send_start, time.perf_counter() - t0)
        )
        arrivals: list[_Arrival] = []
        merge_start, merge_seconds = None, 0.0
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            ref = ready[0]
            call = pending.pop(ref)
            try:
                result = ray.get(ref)
            except (RayActorError, WorkerCrashedError):
                self._recover(call, mod, stats)
                for other_ref, other in list(pending.items()):
                    if other.slot == call.slot and other.generation < self.pool.slots[call.slot].generation:
                        del pending[other_ref]
                        self._retarget(other)
                        pending[self._submit(other, spec_ref)] = other
                self._retarget(call)
                call.attempt += 1
                if call.attempt > MAX_ATTEMPTS:
                    raise WorkerLostError(
                        f"functions {call.names} were lost with their worker {MAX_ATTEMPTS} times "
                        f"in stage {stage.index} ({', '.join(stats.passes)})"
                    ) from None
                pending[self._submit(call, spec_ref)] = call
                continue
            # unpack now, while the workers run the calls still pending
            if merge_start is None:
                merge_start = time.time()
            t0 = time.perf_counter()
            changed = unpack_functions(result.changed) if result.changed is not None else {}
            arrivals.append(_Arrival(call, result, changed))
            merge_seconds += time.perf_counter() - t0
        t0 = time.perf_counter()
        outcome = self._merge(arrivals, mod, stage, stats)
        merge_seconds += time.perf_counter() - t0
        self.stats.driver_events.append(
            DriverEvent(f"merge results (stage {stage.index})", merge_start or time.time(), merge_seconds)
        )
        stats.wall_seconds = time.perf_counter() - started
        return outcome

    def _run_in_driver(self, stage: FunctionStage, mod: IRModule, ctx: PassContext) -> StageOutcome:
        """The stage's passes over every function, here, in module order (same pass code
        and module views as a worker; its time shows as worker ``DRIVER_SLOT``)."""
        changed: dict[str, BaseFunc] = {}
        timings: dict[int, dict[int, tuple[float, int]]] = {}
        first_error: BatchError | None = None
        with collect_facts() as facts:
            for gv, func in mod.items():
                name, original = gv.name_hint, func
                for leaf in stage.leaves:
                    if first_error is not None and leaf.leaf_index > first_error.leaf:
                        break  # an earlier error wins anyway
                    if not leaf.pass_.accepts(func):
                        continue
                    wall, t0, reported = time.time(), time.perf_counter(), len(facts)
                    try:
                        func = leaf.pass_.transform_function_in(func, mod, ctx, name)
                    except Exception as error:
                        if first_error is None or leaf.leaf_index < first_error.leaf:
                            first_error = BatchError(leaf.leaf_index, name, error, "")
                        break
                    finally:
                        seconds = time.perf_counter() - t0
                        total, count = timings.setdefault(leaf.leaf_index, {}).get(DRIVER_SLOT, (0.0, 0))
                        timings[leaf.leaf_index][DRIVER_SLOT] = (total + seconds, count + 1)
                        self._record_run(leaf.leaf_index, leaf.name, name, DRIVER_SLOT, wall, seconds,
                                         facts[reported:])
                if func is not original:
                    changed[name] = func
        new_mod = mod.copy()
        for name, func in changed.items():
            new_mod[name] = func
        worker = {"slot": "driver", "pid": os.getpid(), "host": socket.gethostname(), "node_id": None}
        return StageOutcome(new_mod, first_error, worker if first_error else None, timings)

    def _record_run(
        self, leaf: int, pass_name: str, function: str, slot: int, wall: float, seconds: float,
        facts: list[RunFact],
    ) -> None:
        """One (pass, function) run: a trace event carrying the facts the pass reported,
        which also go to ``RunStats.facts``."""
        self.stats.events.append(WorkEvent(leaf, pass_name, function, slot, wall, seconds,
                                           tuple((fact.name, fact.value) for fact in facts)))
        self.stats.facts.extend(facts)

    def _plan_calls(self, mod: IRModule, drops: dict[int, list[str]]) -> list[_Call]:
        """Each slot's functions, in module order, cut into ``CALLS_PER_WORKER`` chunks of
        at least ``MIN_CALL_FUNCTIONS`` (or into ``batch_size`` ones); a slot's first call
        carries its drops. Slots take turns,
        so every worker gets its first chunk before any gets its second."""
        by_slot: dict[int, list[str]] = {}
        for gv in mod.functions:
            slot = self._resident[gv.name_hint][0]
            by_slot.setdefault(slot, []).append(gv.name_hint)
        per_slot: list[list[_Call]] = []
        for slot, names in sorted(by_slot.items()):
            size = self.batch_size or max(MIN_CALL_FUNCTIONS, math.ceil(len(names) / CALLS_PER_WORKER))
            generation = self.pool.slots[slot].generation
            chunks = [_Call(slot, names[i : i + size], generation) for i in range(0, len(names), size)]
            chunks[0].drop = drops.get(slot)
            per_slot.append(chunks)
        return [call for turn in itertools.zip_longest(*per_slot) for call in turn if call is not None]

    def _pack_sends(
        self, call: _Call, sends: dict[int, dict[str, BaseFunc]], stats: StageStats
    ) -> Packed | None:
        """The functions of ``call`` its worker does not hold yet, packed (counted as sent)."""
        new = sends.get(call.slot, {})
        functions = {name: new[name] for name in call.names if name in new}
        if not functions:
            return None
        packed = pack_functions(functions)
        size = packed_size(packed)
        stats.bytes_sent += size
        self.stats.bytes_sent += size
        return packed

    def _submit(self, call: _Call, spec_ref: Any) -> Any:
        self.stats.remote_calls += 1
        self.stats.stages[-1].remote_calls += 1
        actor = self.pool.slots[call.slot].actor
        return actor.run_batch.remote([spec_ref], call.names, call.load, call.drop)

    def _retarget(self, call: _Call) -> None:
        """Aim ``call`` at its slot's restarted actor, which ``_recover`` already gave
        every function of the slot: nothing to load or drop any more."""
        call.generation = self.pool.slots[call.slot].generation
        call.load = None
        call.drop = None

    def _recover(self, call: _Call, mod: IRModule, stats: StageStats) -> None:
        """The actor of ``call.slot`` died: restart the slot (once per death) and re-send
        the functions it held, as they were when the stage started."""
        self.stats.retries += 1
        slot = self.pool.slots[call.slot]
        if call.generation == slot.generation:  # first failure seen for this actor
            slot = self.pool.restart(call.slot)
            self.stats.worker_restarts += 1
            self.stats.worker_pids[slot.index] = slot.info["pid"]
            mine = {name: mod[name] for name, (owner, _) in self._resident.items() if owner == call.slot}
            if mine:
                packed = pack_functions(mine)
                size = packed_size(packed)
                stats.bytes_sent += size
                self.stats.bytes_sent += size
                ray.get(slot.actor.load.remote(packed))
                for name, func in mine.items():
                    self._resident[name] = (call.slot, func)

    def _merge(
        self, arrivals: list[_Arrival], mod: IRModule, stage: FunctionStage, stats: StageStats
    ) -> StageOutcome:
        order = {gv.name_hint: i for i, gv in enumerate(mod.functions)}
        changed: dict[str, BaseFunc] = {}
        timings: dict[int, dict[int, tuple[float, int]]] = {}
        first_error: tuple[tuple[int, int], BatchError, dict[str, Any]] | None = None
        for arrival in arrivals:
            call, result, news = arrival.call, arrival.result, arrival.changed
            size = packed_size(result.changed)
            stats.bytes_received += size
            self.stats.bytes_received += size
            changed.update(news)
            # a late result of an actor that died since: its restarted successor holds the
            # stage's inputs, which the next stage replaces
            if self.pool.slots[call.slot].generation == call.generation:
                for name, func in news.items():
                    self._resident[name] = (call.slot, func)
                for name in result.untyped:
                    # InferType types the driver's copy only: the worker needs it again
                    self._resident[name] = (call.slot, None)
            per_function: dict[str, float] = {}
            leaf_names = {leaf.leaf_index: leaf.name for leaf in stage.leaves}
            facts: dict[tuple[int, str], list[RunFact]] = {}
            for leaf, fact in result.facts:
                facts.setdefault((leaf, fact.function), []).append(fact)
            for leaf, name, wall_start, seconds in result.timings:
                seconds_so_far, count = timings.setdefault(leaf, {}).get(call.slot, (0.0, 0))
                timings[leaf][call.slot] = (seconds_so_far + seconds, count + 1)
                per_function[name] = per_function.get(name, 0.0) + seconds
                self._record_run(leaf, leaf_names.get(leaf, "?"), name, call.slot, wall_start, seconds,
                                 facts.get((leaf, name), []))
            self._cost.update(per_function)
            stats.worker_seconds += result.busy_seconds
            stats.worker_typing_seconds += result.typing_seconds
            self.stats.worker_typing_seconds += result.typing_seconds
            self.stats.worker_busy_seconds[call.slot] = (
                self.stats.worker_busy_seconds.get(call.slot, 0.0) + result.busy_seconds
            )
            done = self.stats.worker_functions.get(call.slot, 0)
            self.stats.worker_functions[call.slot] = done + len(call.names)
            self.stats.worker_pids[call.slot] = result.pid
            if result.error is not None:
                key = (result.error.leaf, order[result.error.function])
                if first_error is None or key < first_error[0]:
                    worker = dict(self.pool.slots[call.slot].info, slot=call.slot, pid=result.pid)
                    first_error = (key, result.error, worker)
        new_mod = mod.copy()
        for gv in mod.functions:  # module order, never completion order
            if gv.name_hint in changed:
                new_mod[gv] = changed[gv.name_hint]
        if first_error is None:
            return StageOutcome(new_mod, None, None, timings)
        return StageOutcome(new_mod, first_error[1], first_error[2], timings)


def _types_missing(stage: FunctionStage, mod: IRModule) -> bool:
    """Whether a pass of ``stage`` that needs types (it requires InferType) would be
    handed an untyped function: typing it needs the whole module (see the module docstring)."""
    typed_passes = [leaf.pass_ for leaf in stage.leaves if TYPE_INFERENCE_PASS in leaf.pass_.info.required]
    if not typed_passes:
        return False
    untyped = (f for f in mod.functions.values() if isinstance(f, Function) and f._checked_type is None)
    return any(p.accepts(func) for func in untyped for p in typed_passes)

"""Running a function stage with Ray workers: the stage loop, and merging the results.

``RayStageRunner.run_stage`` decides where a stage runs and puts the pieces together;
each piece lives in its own module:

* ``scheduler.residency``: which slot holds which function (by object identity), LPT
  placement of new functions, rebalancing by measured cost;
* ``scheduler.chunking``: the stage cut into batch calls per slot, and what each call
  loads;
* ``scheduler.dispatch``: submitting the calls, collecting results as they complete, and
  recovery when an actor dies (its slot restarted and refilled, its calls re-sent);
* ``passinfra.transform.function_stage``: the per-function pass loop, the same on the
  workers, here in the driver and in-process;
* ``scheduler.stats``: the counters, derived from the records every call leaves.

What stays here is the merge: results are unpacked as they arrive, while the workers
run later calls, and applied in module order, never completion order; the error
reported is the one an in-process run raises first (lowest pass, then first function in
module order), with the worker it came from.

Only the functions some pass of the stage works on travel (``accepts``); a stage runs in
the driver instead when it is too small to ship (fewer such functions than config
``scheduler.min_stage_functions``), or when a pass that needs types (it requires a
pass that declares ``infers_types``, such as InferType: ``scheduler.plan.needs_types``)
would be handed an untyped function: inferring them needs the callees' types, which a
worker holding a shard cannot see (``passinfra.transform.module_view.typing_scope``).
That happens only when such a pass runs without its type inference (a bare pass as the
pipeline); in a Sequential the required pass runs right before it.

Where the driver runs a stage itself, a first pass that can start its work ahead on
this process's cores (``ahead``: CompileC, one compiler process per compile) does: while
a private pool starts, the driver compiles on every core, and keeps what it began once
the workers are up.

When a type-inference pass follows the stage (``types_wanted``), the workers return their
functions typed (see ``workers.actor``); one they could not type is re-sent after the
driver typed it, so a worker's copy always has the types the driver's has.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from passinfra.codegen.passes.compile_c import CACHE_HIT_FACT
from passinfra.ir.expr import BaseFunc, Function
from passinfra.ir.module import IRModule
from passinfra.transform import PassContext
from passinfra.transform.config import config_type
from passinfra.transform.function_stage import PassRun, run_stage_over
from scheduler.assign import estimated_cost
from scheduler.chunking import IN_FLIGHT, WorkQueue, pack_load, plan_calls
from scheduler.dispatch import Dispatcher
from scheduler.function_costs import CostMemory
from scheduler.plan import FunctionStage, needs_types, reads_module
from scheduler.pool.gateway import GatewayError
from scheduler.pool.transport import Transport
from scheduler.residency import Residency
from scheduler.stats import DriverEvent, RunStats, StageStats
from workers.actor import BatchError, BatchResult, StageSpec
from workers.calls import DRIVER_SLOT, Call, CallKind, CallRecord
from workers.wire import pack_functions, pack_module, unpack_functions

# a stage over fewer functions than this runs in the driver (config
# scheduler.min_stage_functions): one function cannot be spread over workers
MIN_STAGE_FUNCTIONS = 2

# leaf index -> slot -> (seconds, functions): what the timing instruments are given
Timings = dict[int, dict[int, tuple[float, int]]]


@dataclass
class StageOutcome:
    module: IRModule
    error: BatchError | None
    error_worker: dict[str, Any] | None
    timings: Timings = field(default_factory=dict)


@dataclass
class _Arrival:
    """A finished batch call, its changed functions already unpacked."""

    call: Call
    result: BatchResult
    changed: dict[str, BaseFunc]
    current: bool  # it ran on its slot's present actor (not one that died since)


class RayStageRunner:
    """Runs the function stages of one run. ``open_transport`` reaches the workers
    (waiting for them to start, if they are starting); ``workers_ready`` says, without
    waiting, whether it would return at once (None: always)."""

    def __init__(
        self, open_transport: Callable[[], Transport], stats: RunStats, batch_size: int | None = None,
        workers_ready: Callable[[], bool] | None = None,
    ) -> None:
        self.stats = stats
        self.batch_size = batch_size
        self._open_transport = open_transport
        self._workers_ready = workers_ready
        self._transport: Transport | None = None
        self._workers_lost = False  # the pool went away mid-run: the rest runs here
        self._stage_ids = 0
        self.costs = CostMemory()  # what functions cost in earlier builds, and in this one

    @property
    def transport(self) -> Transport:
        """The run's workers, opened when the first stage ships (until then a Ray
        starting in the background goes on starting while the driver works)."""
        if self._transport is None:
            self._transport = self._open_transport()
            self.residency = Residency(len(self._transport))
            self._generations = [slot.generation for slot in self._transport.slots]
        return self._transport

    def close(self) -> None:
        """End the run on the workers (they forget its functions), if it reached them."""
        if self._transport is not None:
            self._transport.close()

    def run_stage(self, stage: FunctionStage, mod: IRModule, ctx: PassContext) -> StageOutcome:
        started = time.perf_counter()
        stats = StageStats(stage.index, "function", [leaf.name for leaf in stage.leaves], len(mod),
                           start=time.time())
        self.stats.stages.append(stats)
        records: list[CallRecord] = []  # filled even when the stage raises
        try:
            working = _working_functions(stage, mod)
            too_small = len(working) < ctx.get_config("scheduler.min_stage_functions", MIN_STAGE_FUNCTIONS)
            # too_small: nothing to spread, shipping the function out and back would only cost time
            if too_small or self._workers_lost or _types_missing(stage, mod):
                stats.ran_in_driver = True
                return self._run_in_driver(stage, mod, ctx, records)
            try:
                return self._run_on_workers(stage, mod, working, ctx, stats, records)
            except GatewayError as error:
                # the pool (its daemon, its gateway) is gone: the driver holds the stage's
                # input, so it runs the stage, and every later one, itself
                self._workers_lost = True
                self.stats.notes.append(f"{error}; finishing the build in this process")
                stats.ran_in_driver = True
                # what the driver ran while the workers started runs again with the rest
                records[:] = [record for record in records if record.kind is not CallKind.DRIVER]
                return self._run_in_driver(stage, mod, ctx, records)
        finally:
            self.stats.add_records(records, {leaf.leaf_index: leaf.name for leaf in stage.leaves})
            stats.wall_seconds = time.perf_counter() - started

    def _run_in_driver(
        self, stage: FunctionStage, mod: IRModule, ctx: PassContext, records: list[CallRecord]
    ) -> StageOutcome:
        """The stage's passes over every function, here, in module order (the kernel a
        worker runs; its time shows as worker ``DRIVER_SLOT``)."""
        passes = [(leaf.leaf_index, leaf.pass_) for leaf in stage.leaves]
        with _ahead(stage, list(mod.items()), ctx):
            run = run_stage_over(passes, ((gv.name_hint, func) for gv, func in mod.items()), mod, ctx)
        records.append(CallRecord(CallKind.DRIVER, stage.index, DRIVER_SLOT, functions=len(mod),
                                  pid=os.getpid(), runs=tuple(run.runs)))
        new_mod = mod.copy()
        for name, func in run.changed.items():
            new_mod[name] = func
        if run.error is None:
            return StageOutcome(new_mod, None, None, _timings(records))
        error = BatchError(run.error.key, run.error.function, run.error.error, "")
        return StageOutcome(new_mod, error, _driver_worker(), _timings(records))

    def _head_start(
        self, stage: FunctionStage, mod: IRModule, working: list[str], ctx: PassContext,
        records: list[CallRecord],
    ) -> tuple[list[_Arrival], list[str]]:
        """While the workers are still starting (a private pool, before the run's first
        shipped stage), the driver runs the stage's functions itself, the largest first,
        one at a time, until the workers are ready: start-up then holds the build only as
        long as the work it replaces. Returns what the driver ran (as an arrival, merged
        like a worker's) and the functions left for the workers, in module order."""
        if self._transport is not None or self._workers_ready is None or self._workers_ready():
            return [], working
        if not ctx.get_config("scheduler.head_start", True):
            return [], working
        passes = [(leaf.leaf_index, leaf.pass_) for leaf in stage.leaves]
        prior = self.costs.prior([leaf.name for leaf in stage.leaves], {name: mod[name] for name in working})
        # largest first: by what an earlier build measured, else by node count (a node
        # takes about a microsecond of a pass); stable: ties in module order
        by_size = sorted(working, key=lambda name: -(prior.get(name) or estimated_cost(mod[name]) * 1e-6))
        done: set[str] = set()
        changed: dict[str, BaseFunc] = {}
        runs: list[PassRun] = []
        errors: list[BatchError] = []
        with _ahead(stage, [(name, mod[name]) for name in by_size], ctx) as ahead:
            for name in by_size:
                # once the workers are up, the rest is theirs (but what this process began)
                if done and self._workers_ready() and not (ahead is not None and ahead.started(name)):
                    break
                run = run_stage_over(passes, [(name, mod[name])], mod, ctx)
                changed.update(run.changed)
                runs.extend(run.runs)
                if run.error is not None:
                    errors.append(BatchError(run.error.key, name, run.error.error, ""))
                done.add(name)
        order = {name: i for i, name in enumerate(working)}
        first_error = min(errors, key=lambda e: (e.leaf, order[e.function]), default=None)
        records.append(CallRecord(CallKind.DRIVER, stage.index, DRIVER_SLOT, functions=len(done),
                                  pid=os.getpid(), runs=tuple(runs)))
        result = BatchResult(DRIVER_SLOT, os.getpid(), None, runs, first_error)
        arrival = _Arrival(Call(DRIVER_SLOT, sorted(done, key=order.__getitem__), 0), result, changed, False)
        return [arrival], [name for name in working if name not in done]

    def _run_on_workers(
        self, stage: FunctionStage, mod: IRModule, working: list[str], ctx: PassContext,
        stats: StageStats, records: list[CallRecord],
    ) -> StageOutcome:
        arrivals, working = self._head_start(stage, mod, working, ctx, records)
        if not working:  # the driver ran it all before the workers were up
            return self._merge(arrivals, mod, records, stats.passes)
        transport = self.transport  # may wait for the workers to start
        send_start, t0 = time.time(), time.perf_counter()
        self._adopt_restarts()
        transport.joined()  # came up between stages: counted as ready below
        ready = [slot for slot in range(len(transport)) if transport.is_ready(slot)]
        prior = self.costs.prior(stats.passes, {name: mod[name] for name in working})
        placement = self.residency.sync(mod, working, ctx.get_config("scheduler.work_queue", True), ready,
                                        prior)
        stats.functions_moved = placement.moved
        dispatch = Dispatcher(
            transport, stage.index, self._spec(stage, mod, ctx),
            refill=lambda slot: self.residency.refill(slot, mod),
            label=f"stage {stage.index} ({', '.join(stats.passes)})",
        )
        # chunks sized for every slot of the run, so work is left for the workers still starting
        queue = WorkQueue(placement.queued, len(transport), self.batch_size)
        in_flight = [0] * len(transport)

        def take_from_queue(slot: int, up_to: int = IN_FLIGHT) -> None:
            """Top ``slot`` up to ``up_to`` calls from the queue; their functions become resident there."""
            while queue and in_flight[slot] < up_to:
                names = queue.next_chunk()
                call = Call(slot, names, self.transport.slots[slot].generation)
                call.load = pack_functions(self.residency.place(names, slot, mod))
                dispatch.submit(call)
                in_flight[slot] += 1

        try:
            calls = plan_calls(placement, [slot.generation for slot in self.transport.slots], self.batch_size)
            for call in calls:
                call.load = pack_load(call, placement.sends)
                dispatch.submit(call)
                in_flight[call.slot] += 1
            for slot, names in placement.drops.items():  # a slot left with no call still forgets
                if slot not in {call.slot for call in calls}:
                    dispatch.drop(slot, names)
            for turn in range(1, IN_FLIGHT + 1):  # slots take turns: each gets a chunk before any its second
                for slot in ready:
                    take_from_queue(slot, turn)
            self.stats.driver_events.append(
                DriverEvent(f"send functions (stage {stage.index})", send_start, time.perf_counter() - t0)
            )
            merge_start, merge_seconds = None, 0.0
            while dispatch:
                call, result = dispatch.next_result()
                in_flight[call.slot] -= 1
                queue.learn(sum(run.seconds for run in result.runs), len(call.names))
                take_from_queue(call.slot)  # the slot that finished takes the next chunk
                for slot in transport.joined():  # a worker that just came up takes work at once
                    self.stats.notes.append(f"worker {slot} joined during stage {stage.index}")
                    take_from_queue(slot)
                # unpack now, while the workers run the calls still pending
                if merge_start is None:
                    merge_start = time.time()
                t0 = time.perf_counter()
                changed = unpack_functions(result.changed) if result.changed is not None else {}
                arrivals.append(_Arrival(call, result, changed, dispatch.is_current(call)))
                merge_seconds += time.perf_counter() - t0
            t0 = time.perf_counter()
            outcome = self._merge(arrivals, mod, [*records, *dispatch.records], stats.passes)
            merge_seconds += time.perf_counter() - t0
            self.stats.driver_events.append(
                DriverEvent(f"merge results (stage {stage.index})", merge_start or time.time(), merge_seconds)
            )
            return outcome
        finally:
            records.extend(dispatch.close())
            self._generations = [slot.generation for slot in self.transport.slots]

    def _adopt_restarts(self) -> None:
        """A slot restarted since this run's last stage (by another run sharing a warm
        pool) lost this run's functions with its old actor: send them again."""
        for slot in self.transport.refresh():
            if slot.generation != self._generations[slot.index]:
                self.residency.forget_slot(slot.index)
        self._generations = [slot.generation for slot in self.transport.slots]

    def _spec(self, stage: FunctionStage, mod: IRModule, ctx: PassContext) -> StageSpec:
        self._stage_ids += 1
        return StageSpec(
            self._stage_ids,
            [(leaf.leaf_index, leaf.pass_) for leaf in stage.leaves],
            ctx.to_spec(),
            pack_module(mod) if reads_module(stage.leaves[0].pass_) else None,
            {key: config_type(key) for key in ctx.config},
            types_wanted=stage.types_wanted,
        )

    def _merge(self, arrivals: list[_Arrival], mod: IRModule, records: list[CallRecord],
               passes: Sequence[str] = ()) -> StageOutcome:
        """The stage's output (module order), its first error (by pass, then module
        order), and what it measured: for placement in this run, and (``passes``: the
        stage's) for the next build's (``self.costs``)."""
        order = {gv.name_hint: i for i, gv in enumerate(mod.functions)}
        changed: dict[str, BaseFunc] = {}
        first_error: tuple[tuple[int, int], BatchError, dict[str, Any]] | None = None
        for arrival in arrivals:
            call, result = arrival.call, arrival.result
            changed.update(arrival.changed)
            # a late result of an actor that died since: its restarted successor holds the
            # stage's inputs, which the next stage replaces (and what the driver ran
            # itself is on no worker)
            if arrival.current:
                self.residency.received(call.slot, arrival.changed, result.untyped)
            seconds: dict[str, float] = {}
            cached: set[str] = set()
            for run in result.runs:
                seconds[run.function] = seconds.get(run.function, 0.0) + run.seconds
                if any(fact.name == CACHE_HIT_FACT and fact.value for fact in run.facts):
                    cached.add(run.function)
            if self._transport is not None:
                self.residency.learn(seconds)
            if passes:
                self.costs.measured(passes, seconds, cached)
            if result.error is not None:
                key = (result.error.leaf, order[result.error.function])
                if first_error is None or key < first_error[0]:
                    worker = (_driver_worker() if call.slot == DRIVER_SLOT else
                              dict(self.transport.slots[call.slot].info, slot=call.slot, pid=result.pid))
                    first_error = (key, result.error, worker)
        new_mod = mod.copy()
        for gv in mod.functions:  # module order, never completion order
            if gv.name_hint in changed:
                new_mod[gv] = changed[gv.name_hint]
        if first_error is None:
            return StageOutcome(new_mod, None, None, _timings(records))
        return StageOutcome(new_mod, first_error[1], first_error[2], _timings(records))


def _ahead(stage: FunctionStage, functions: list[tuple[str, BaseFunc]], ctx: PassContext
           ) -> contextlib.AbstractContextManager[Any]:
    """Where the driver runs a stage itself: its first pass's work started ahead on this
    process's cores, if the pass can (``ahead``: CompileC's compiles, one compiler process
    each), for ``functions`` in the order given (the pass's own choice of how many at once)."""
    ahead = getattr(stage.leaves[0].pass_, "ahead", None)
    return ahead(functions, ctx) if ahead is not None else contextlib.nullcontext(None)


def _driver_worker() -> dict[str, Any]:
    """Where work run in the driver ran, as errors name a worker."""
    return {"slot": "driver", "pid": os.getpid(), "host": socket.gethostname(), "node_id": None}


def _timings(records: list[CallRecord]) -> Timings:
    """Per pass (leaf) and slot, the seconds of its runs and how many functions it ran."""
    timings: Timings = {}
    for record in records:
        for run in record.runs:
            seconds, count = timings.setdefault(run.key, {}).get(record.slot, (0.0, 0))
            timings[run.key][record.slot] = (seconds + run.seconds, count + 1)
    return timings


def _working_functions(stage: FunctionStage, mod: IRModule) -> list[str]:
    """The functions some pass of ``stage`` works on, in module order: only these are
    shipped (a pass skips the others wherever it runs)."""
    passes = [leaf.pass_ for leaf in stage.leaves]
    return [gv.name_hint for gv, func in mod.items() if any(p.accepts(func) for p in passes)]


def _types_missing(stage: FunctionStage, mod: IRModule) -> bool:
    """Whether a pass of ``stage`` that needs types (``needs_types``) would be handed an
    untyped function: typing it needs the whole module (see the module docstring)."""
    typed_passes = [leaf.pass_ for leaf in stage.leaves if needs_types(leaf.pass_)]
    if not typed_passes:
        return False
    untyped = (f for f in mod.functions.values() if isinstance(f, Function) and f._checked_type is None)
    return any(p.accepts(func) for func in untyped for p in typed_passes)

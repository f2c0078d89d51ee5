"""Walks a plan in the driver, calling instrument hooks exactly as an in-process run.

Every invocation goes through ``passinfra.transform.run_instrumented``, the same wrapper
``Pass.run`` uses, so should_run/before/after hooks (and on_pass_error) are called in
the same order and number. Only the bodies differ: a module pass runs here on the
driver's module; a function pass runs its whole stage on the workers the first time one
of the stage's passes is reached, and the later passes of the stage replay what the
workers measured (timings, the first error). When an instrument needs to see the module
between passes, the plan has one function pass per stage, so the hooks see real modules.

Whoever displays a run (the CLI's progress bars) learns its plan from here: before a run
starts, every instrument of the context that has an ``on_plan`` hook (:class:`PlanListener`)
is handed the plan the run follows, so a display never derives a plan of its own that
could differ from the one run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from passinfra.instrument import PassInstrument
from passinfra.ir.module import IRModule
from passinfra.transform import Pass, PassContext, run_instrumented
from scheduler.plan import FunctionStage, Plan, PlanNode, build_plan

if TYPE_CHECKING:
    from scheduler.ray_runner import StageOutcome

_HOOKS_THAT_SEE_THE_MODULE = ("should_run", "run_before_pass", "run_after_pass")


def instrument_needs_module(instrument: PassInstrument) -> bool:
    """True unless the instrument ignores the module between passes: it says so with
    ``uses_module = False`` and leaves should_run alone, or it overrides none of the
    module hooks."""
    cls = type(instrument)
    overrides_should_run = cls.should_run is not PassInstrument.should_run
    if getattr(instrument, "uses_module", True) is False and not overrides_should_run:
        return False
    return any(getattr(cls, hook) is not getattr(PassInstrument, hook) for hook in _HOOKS_THAT_SEE_THE_MODULE)


def batching_allowed(ctx: PassContext) -> bool:
    return not any(instrument_needs_module(inst) for inst in ctx.instruments)


def plan_for(pipeline: Pass, ctx: PassContext) -> Plan:
    """The plan a run of ``pipeline`` under ``ctx`` follows: one function pass per stage
    when an instrument needs to see the module between passes, batched otherwise."""
    return build_plan(pipeline, ctx, batch=batching_allowed(ctx))


@runtime_checkable
class PlanListener(Protocol):
    """An instrument that wants the plan of each run before the run starts. ``ctx`` is the
    run's context, under which the listener may plan what it knows runs next."""

    def on_plan(self, plan: Plan, ctx: PassContext) -> None: ...


def announce_plan(pipeline: Pass, ctx: PassContext, plan: Plan | None = None) -> None:
    """Hand ``plan`` (by default: the plan of ``pipeline`` under ``ctx``, made only when
    some instrument listens) to every :class:`PlanListener` among ``ctx``'s instruments."""
    listeners = [inst for inst in ctx.instruments if isinstance(inst, PlanListener)]
    if not listeners:
        return
    if plan is None:
        plan = plan_for(pipeline, ctx)
    for listener in listeners:
        listener.on_plan(plan, ctx)


StageRunner = Callable[[FunctionStage, IRModule, PassContext], "StageOutcome"]
# called with the plan, the failed stage, its outcome and its input module
ErrorHook = Callable[[Plan, FunctionStage, "StageOutcome", IRModule], None]


class PlanExecutor:
    """Walks one plan: ``run`` returns the module the pipeline returns. The module flows
    through the calls (each visit takes its input and returns its output), never
    through the executor's state; only the stage outcomes are kept, so the later passes
    of a stage replay what the first one ran."""

    def __init__(
        self,
        run_stage: StageRunner,
        ctx: PassContext,
        on_error: ErrorHook | None = None,
        on_module_pass: Callable[[str, float, float], None] | None = None,
    ) -> None:
        self._run_stage = run_stage
        self._on_module_pass = on_module_pass
        self._ctx = ctx
        self._on_error = on_error
        self._outcomes: dict[int, StageOutcome] = {}
        self.plan: Plan | None = None

    def run(self, pipeline: Pass, mod: IRModule) -> IRModule:
        self.plan = plan_for(pipeline, self._ctx)
        announce_plan(pipeline, self._ctx, self.plan)
        self._outcomes = {}
        return self._visit(self.plan, self.plan.root, mod)

    def _visit(self, plan: Plan, node: PlanNode, mod: IRModule) -> IRModule:
        """``node`` run on ``mod`` between the instruments' hooks; returns its output."""
        ctx = self._ctx

        def body(current: IRModule) -> IRModule:
            if node.kind == "sequential":
                for child in node.children:
                    current = self._visit(plan, child, current)
                return current
            if node.kind == "module":
                wall, t0 = time.time(), time.perf_counter()
                current = node.pass_.transform(current, ctx)
                if self._on_module_pass is not None:
                    self._on_module_pass(node.name, wall, time.perf_counter() - t0)
                return current
            return self._function_pass(plan, node, current)

        return run_instrumented(node.pass_.info, mod, ctx, body)

    def _function_pass(self, plan: Plan, node: PlanNode, mod: IRModule) -> IRModule:
        """The output of function pass ``node``: its whole stage runs (on ``mod``) when
        the stage's first pass is reached; the later passes of the stage return the
        stage's output (their input already), replaying its timings and error."""
        stage = plan.stages[node.stage]
        assert isinstance(stage, FunctionStage)
        outcome = self._outcomes.get(stage.index)
        if outcome is None:
            outcome = self._run_stage(stage, mod, self._ctx)
            self._outcomes[stage.index] = outcome
            if outcome.error is not None and self._on_error is not None:
                self._on_error(plan, stage, outcome, mod)
        self._report_timings(node, outcome)
        error = outcome.error
        if error is not None and error.leaf == node.leaf_index:
            worker = outcome.error_worker or {}
            exc = error.error
            exc.add_note(
                f"on worker {worker.get('slot')} (pid {worker.get('pid')}, host {worker.get('host')}, "
                f"node {worker.get('node_id')})"
            )
            raise exc
        return outcome.module

    def _report_timings(self, node: PlanNode, outcome: StageOutcome) -> None:
        """What the workers measured for ``node``, to every instrument's remote-timings hook."""
        per_worker = outcome.timings.get(node.leaf_index, {})
        if not per_worker:
            return
        for instrument in self._ctx.instruments:
            instrument.on_remote_timings(node.pass_.info, dict(sorted(per_worker.items())))


__all__ = [
    "PlanExecutor",
    "PlanListener",
    "announce_plan",
    "batching_allowed",
    "instrument_needs_module",
    "plan_for",
]

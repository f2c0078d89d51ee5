"""Walks a plan in the driver, calling instrument hooks exactly as an in-process run.

Every invocation goes through ``passinfra.transform.run_instrumented``, the same wrapper
``Pass.run`` uses, so should_run/before/after hooks (and on_pass_error) are called in
the same order and number. Only the bodies differ: a module pass runs here on the
driver's module; a function pass runs its whole stage on the workers the first time one
of the stage's passes is reached, and the later passes of the stage replay what the
workers measured (timings, the first error). When an instrument needs to see the module
between passes, the plan has one function pass per stage, so the hooks see real modules.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from passinfra.instrument import PassInstrument, PassTimingInstrument
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


StageRunner = Callable[[FunctionStage, IRModule, PassContext], "StageOutcome"]
ErrorHook = Callable[[FunctionStage, "StageOutcome", IRModule], None]


class PlanExecutor:
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
        self._mod: IRModule | None = None
        self.plan: Plan | None = None

    def run(self, pipeline: Pass, mod: IRModule) -> IRModule:
        self.plan = build_plan(pipeline, self._ctx, batch=batching_allowed(self._ctx))
        self._mod = mod
        self._visit(self.plan.root)
        return self._mod

    def _visit(self, node: PlanNode) -> None:
        ctx = self._ctx

        def body(current: IRModule) -> IRModule:
            if node.kind == "sequential":
                for child in node.children:
                    self._visit(child)
            elif node.kind == "module":
                wall, t0 = time.time(), time.perf_counter()
                self._mod = node.pass_.transform(self._mod, ctx)
                if self._on_module_pass is not None:
                    self._on_module_pass(node.name, wall, time.perf_counter() - t0)
            else:
                self._function_pass(node)
            return self._mod

        run_instrumented(node.pass_.info, self._mod, ctx, body)

    def _function_pass(self, node: PlanNode) -> None:
        assert self.plan is not None
        stage = self.plan.stages[node.stage]
        assert isinstance(stage, FunctionStage)
        outcome = self._outcomes.get(stage.index)
        if outcome is None:
            stage_input = self._mod
            outcome = self._run_stage(stage, stage_input, self._ctx)
            self._outcomes[stage.index] = outcome
            self._mod = outcome.module
            if outcome.error is not None and self._on_error is not None:
                self._on_error(stage, outcome, stage_input)
        self._record_timings(node, outcome)
        error = outcome.error
        if error is not None and error.leaf == node.leaf_index:
            worker = outcome.error_worker or {}
            exc = error.error
            exc.add_note(
                f"on worker {worker.get('slot')} (pid {worker.get('pid')}, host {worker.get('host')}, "
                f"node {worker.get('node_id')})"
            )
            raise exc

    def _record_timings(self, node: PlanNode, outcome: StageOutcome) -> None:
        per_worker = outcome.timings.get(node.leaf_index, {})
        for instrument in self._ctx.instruments:
            if isinstance(instrument, PassTimingInstrument):
                for slot, (seconds, count) in sorted(per_worker.items()):
                    instrument.record_remote(node.name, slot, seconds, count)


def plan_leaf_names(plan: Plan, start: int) -> list[str]:
    return [leaf.name for leaf in plan.leaves[start:]]


__all__ = ["PlanExecutor", "instrument_needs_module", "batching_allowed", "plan_leaf_names", "Any"]

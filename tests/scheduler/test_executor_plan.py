"""A run hands its plan to the instruments that listen (``on_plan``), so a display shows
the plan that runs rather than one it derived itself: the executor its own plan, the
local backend the plan its in-process run follows."""

from __future__ import annotations

from typing import Any

import pytest

from passinfra.instrument import PassInstrument
from passinfra.ir.module import IRModule
from passinfra.transform import PassContext, Sequential
from scheduler import Scheduler, executor
from scheduler.executor import PlanExecutor, PlanListener
from scheduler.plan import Plan
from tests.scheduler import passes_for_tests as P


class PlanRecorder(PassInstrument):
    uses_module = False  # so that listening leaves batching as it is

    def __init__(self) -> None:
        self.plans: list[tuple[Plan, PassContext]] = []

    def on_plan(self, plan: Plan, ctx: PassContext) -> None:
        self.plans.append((plan, ctx))


def _no_stage(*args: Any) -> Any:
    raise AssertionError("a pipeline of module passes runs no function stage")


def test_the_executor_hands_over_the_plan_it_walks() -> None:
    recorder = PlanRecorder()
    assert isinstance(recorder, PlanListener)
    pipeline = Sequential([P.add_helper_function], opt_level=0)
    with PassContext(opt_level=0, instruments=[recorder]) as ctx:
        runner = PlanExecutor(_no_stage, ctx)
        out = runner.run(pipeline, P.chain_module(2, length=1))
    assert "helper" in [gv.name_hint for gv in out.get_global_vars()]
    ((plan, seen),) = recorder.plans
    assert plan is runner.plan and seen is ctx


def test_the_local_backend_hands_over_the_plan_its_run_follows() -> None:
    recorder = PlanRecorder()
    pipeline = Sequential([P.identity, P.tag_opt_level, P.add_helper_function], opt_level=0)
    with PassContext(opt_level=0, instruments=[recorder]) as ctx:
        Scheduler(backend="local").run(pipeline, P.chain_module(3, length=1))
    ((plan, seen),) = recorder.plans
    assert seen is ctx
    assert [leaf.name for leaf in plan.leaves] == ["Identity", "TagOptLevel", "AddHelperFunction"]
    assert [stage.kind for stage in plan.stages] == ["function", "module"]


def test_no_plan_is_made_for_a_run_nobody_listens_to(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[object] = []
    original = executor.plan_for
    monkeypatch.setattr(executor, "plan_for", lambda *args: made.append(args) or original(*args))
    mod: IRModule = P.chain_module(2, length=1)
    with PassContext(opt_level=0, instruments=[PassInstrument()]):
        Scheduler(backend="local").run(Sequential([P.identity], opt_level=0), mod)
    assert made == []

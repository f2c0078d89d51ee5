"""The one kernel that runs function passes over functions, for every executor.

A *function stage* is a list of function passes run back to back on each function (all
passes for one function, then the next). Three executors run stages:
``FunctionPass.transform_module_functions`` in-process (a stage of one pass), the
scheduler's driver when a stage is too small to ship (``scheduler.ray_runner``) and a
Ray worker on its shard (``workers.actor``). They all call this module, so what DESIGN
principle 4 needs to hold everywhere exists once:

* which passes run on a function (``accepts``), against which view of the module
  (``FunctionPass.transform_function_in``, through ``module_view``);
* the note an exception gains (``FunctionPass.transform_function`` adds it: pass and
  function) and the facts a pass reports (``run_facts``), per run;
* the timing of each (pass, function) run (:class:`PassRun`);
* the config a function's own schedule sets (:mod:`passinfra.transform.schedule`);
* which error is *the* error: the one an in-process run raises first, i.e. the lowest
  pass position, then the first function in the order given.

:func:`run_function_stage` runs a stage over one function; :func:`run_stage_over` over
several, in order, applying the first-error rule. Each pass comes with a *key* (an int
chosen by the caller, reported in its runs and error: the scheduler uses the plan's
leaf index, ``FunctionPass`` 0). An exception (``Exception``; interrupts propagate) is
returned, not raised, so a worker can send it back and the driver pick the first one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from passinfra.transform.run_facts import RunFact, collect_facts
from passinfra.transform.schedule import function_context

if TYPE_CHECKING:
    from passinfra.ir.expr import BaseFunc
    from passinfra.ir.module import IRModule
    from passinfra.transform.context import PassContext
    from passinfra.transform.passes import FunctionPass

StagePasses = Sequence[tuple[int, "FunctionPass"]]  # (key, pass), in the order they run


class PassRun(NamedTuple):
    """One pass run on one function (a NamedTuple: thousands per stage travel back from
    the workers). ``start`` is wall-clock (``time.time()``), for traces across processes."""

    key: int
    function: str
    start: float
    seconds: float
    facts: tuple[RunFact, ...] = ()


@dataclass
class StageFailure:
    """The exception pass ``key`` (at ``position`` in the stage) raised on ``function``;
    it carries its notes (which pass, which function)."""

    key: int
    position: int
    function: str
    error: Exception


@dataclass
class FunctionStageResult:
    """A stage over one function: the new function (None when the passes returned it
    unchanged, or when one failed), every run, and the failure if any."""

    function: BaseFunc | None
    runs: list[PassRun] = field(default_factory=list)
    error: StageFailure | None = None


@dataclass
class StageRun:
    """A stage over several functions: the changed ones by name (in the order given),
    every run, and the first failure in an in-process run's order (after a failure,
    ``changed`` holds what the passes that still ran made: the stage has no result)."""

    changed: dict[str, BaseFunc] = field(default_factory=dict)
    runs: list[PassRun] = field(default_factory=list)
    error: StageFailure | None = None

    @property
    def facts(self) -> list[RunFact]:
        return [fact for run in self.runs for fact in run.facts]


def run_function_stage(
    passes: StagePasses, func: BaseFunc, name: str, base: IRModule | None, ctx: PassContext
) -> FunctionStageResult:
    """Run ``passes`` in order on ``func``, called ``name`` in ``base`` (the module before
    the stage; None where only the function is at hand), stopping at the first error."""
    with collect_facts() as facts:
        return _run_one(passes, len(passes), func, name, base, ctx, facts)


def run_stage_over(
    passes: StagePasses, functions: Iterable[tuple[str, BaseFunc]], base: IRModule | None, ctx: PassContext
) -> StageRun:
    """Run ``passes`` on each ``(name, function)``, in order. After a failure, the later
    functions only run the passes before the failing one: a failure there is the one an
    in-process run (pass by pass over every function) would raise first."""
    stage = StageRun()
    limit = len(passes)  # passes at this position and later cannot change the outcome
    with collect_facts() as facts:
        for name, func in functions:
            if limit == 0:
                break
            one = _run_one(passes, limit, func, name, base, ctx, facts)
            stage.runs.extend(one.runs)
            if one.error is not None:
                stage.error, limit = one.error, one.error.position
            elif one.function is not None:
                stage.changed[name] = one.function
    return stage


def _run_one(
    passes: StagePasses, limit: int, func: BaseFunc, name: str, base: IRModule | None,
    ctx: PassContext, facts: list[RunFact],
) -> FunctionStageResult:
    """The passes before position ``limit`` on one function; ``facts`` is the open
    collector, whose new entries belong to the run that reported them."""
    result = FunctionStageResult(None)
    original = func
    for position in range(limit):
        key, pass_ = passes[position]
        if not pass_.accepts(func):
            continue
        start, t0, reported = time.time(), time.perf_counter(), len(facts)
        try:
            with function_context(ctx, func) as scheduled:  # the function's own schedule, if any
                func = pass_.transform_function_in(func, base, scheduled, name)
        except Exception as error:  # the caller raises it, or sends it to the driver that does
            result.error = StageFailure(key, position, name, error)
        seconds = time.perf_counter() - t0
        new_facts = tuple(facts[reported:]) if len(facts) > reported else ()
        result.runs.append(PassRun(key, name, start, seconds, new_facts))
        if result.error is not None:
            return result
    if func is not original:
        result.function = func
    return result


__all__ = ["FunctionStageResult", "PassRun", "StageFailure", "StagePasses", "StageRun",
           "run_function_stage", "run_stage_over"]

"""The one kernel every executor runs a function stage through (in-process, driver, worker)."""

from __future__ import annotations

import pytest

from passinfra import ir
from passinfra.codegen.passes.lower_to_prim_func import LowerToPrimFunc, LowerToPrimFuncPass
from passinfra.errors import IRError
from passinfra.ir import op
from passinfra.transform import PassContext, Sequential, function_pass
from passinfra.transform.function_stage import run_function_stage, run_stage_over
from passinfra.transform.passes import FunctionPass
from passinfra.transform.run_facts import report_fact
from tests.scheduler import passes_for_tests as P


class StageBoom(Exception):
    """Raised by the failing passes below, to tell the errors apart."""


def _fail_on(name: str, tags: set[str]) -> FunctionPass:
    @function_pass(opt_level=0, name=name, reads_module=False)
    def fail(func, mod, ctx):
        if func.attrs.get("tag") in tags:
            raise StageBoom(f"{name} refuses {func.attrs['tag']}")
        return func.with_attr(name, True)

    return fail


@function_pass(opt_level=0, name="Reporter", reads_module=False)
def _reporter(func, mod, ctx):
    report_fact("seen", func.attrs["tag"])
    return func


def _items(mod: ir.IRModule) -> list[tuple[str, ir.Function]]:
    return [(gv.name_hint, func) for gv, func in mod.items()]


def test_one_function_gets_every_pass_in_order_with_its_timings_and_facts():
    mod = P.chain_module(2)
    passes = [(4, P.add_to_multiply), (5, _reporter), (6, P.identity)]
    with PassContext():
        result = run_function_stage(passes, mod["f1"], "f1", mod, PassContext.current())
    assert result.error is None
    ir.assert_structural_equal(result.function, P.add_to_multiply(mod)["f1"])
    assert [(run.key, run.function) for run in result.runs] == [(4, "f1"), (5, "f1"), (6, "f1")]
    assert all(run.seconds >= 0.0 and run.start > 0.0 for run in result.runs)
    facts = [fact for run in result.runs for fact in run.facts]
    assert [(f.pass_name, f.function, f.name, f.value) for f in facts] == [("Reporter", "f1", "seen", "f1")]


def test_an_unchanged_function_comes_back_as_none():
    mod = P.chain_module(1)
    result = run_function_stage([(0, P.identity)], mod["f0"], "f0", mod, PassContext())
    assert result.function is None and result.error is None and len(result.runs) == 1


def test_the_first_error_is_the_one_an_in_process_run_raises():
    """Pass by pass over every function (in-process) f3 fails in the first pass before f1
    reaches the second; the kernel, function by function, must report the same error."""
    first, second = _fail_on("First", {"f3"}), _fail_on("Second", {"f1"})
    mod = P.chain_module(5)
    with pytest.raises(StageBoom) as in_process:
        Sequential([first, second], opt_level=0)(mod)
    run = run_stage_over([(0, first), (1, second)], _items(mod), mod, PassContext())
    assert (run.error.key, run.error.position, run.error.function) == (0, 0, "f3")
    assert type(run.error.error) is type(in_process.value)
    assert str(run.error.error) == str(in_process.value)
    assert run.error.error.__notes__[0] == in_process.value.__notes__[0]
    # after f1's failure in pass 1, later functions ran pass 0 only; after f3's, nothing
    assert [(r.key, r.function) for r in run.runs] == [
        (0, "f0"), (1, "f0"), (0, "f1"), (1, "f1"), (0, "f2"), (0, "f3"),
    ]
    assert list(run.changed) == ["f0", "f2"]  # a failed function is not a result


def test_the_note_names_pass_and_function_once():
    failing = _fail_on("Picky", {"f0"})
    with pytest.raises(StageBoom) as info:
        failing(P.chain_module(2))
    assert info.value.__notes__.count("raised by function pass 'Picky' on function 'f0'") == 1


def test_function_pass_runs_through_the_kernel_and_keeps_unchanged_functions():
    mod = P.chain_module(3)
    out = P.identity(mod)
    assert all(out[name] is mod[name] for name in ("f0", "f1", "f2"))
    out = P.tag_opt_level(mod)
    assert [func.attrs["opt_level_seen"] for func in out.functions.values()] == [2, 2, 2]


def test_lower_to_prim_func_uses_the_common_error_note():
    """LowerToPrimFunc learns its C symbol from the module view; its errors get the
    note every function pass gets, once."""
    assert "transform_function" not in vars(LowerToPrimFuncPass)
    func = ir.Function([], op.random.uniform(0.0, 1.0, (2,)), attrs={"Primitive": 1})
    with pytest.raises(IRError) as info:
        LowerToPrimFunc()(ir.IRModule({"fused_random": func}))
    note = "raised by function pass 'LowerToPrimFunc' on function 'fused_random'"
    assert info.value.__notes__.count(note) == 1

"""DeadCodeElimination (and the Purity analysis it shares with other passes)."""

from __future__ import annotations

import pytest

from passinfra import ir
from passinfra.ir import op
from passinfra.transform import get_pass
from passinfra.transform.builtin.dead_code_elimination import DeadCodeElimination
from passinfra.transform.builtin.purity import Purity
from tests.transform.pass_equivalence import property_test, run_on_chain

pytestmark = pytest.mark.usefixtures("default_recursion_limit")


def dce(func: ir.Function, inline_once: bool = False, **others: ir.Function) -> ir.Function:
    return DeadCodeElimination(inline_once)(ir.IRModule({"main": func, **others}))["main"]


def test_unused_pure_binding_and_its_dead_dependencies_are_removed():
    x, a, b, c = ir.var("x", (2,)), ir.Var("a"), ir.Var("b"), ir.Var("c")
    before = ir.Function([x], ir.Let(a, op.exp(x), ir.Let(b, op.add(a, x), ir.Let(c, op.negative(x), c))))
    expected = ir.Function([x], ir.Let(c, op.negative(x), c))
    ir.assert_structural_equal(dce(before), expected)


def test_stateful_binding_stays_even_when_unused():
    x, r = ir.var("x", (2,)), ir.Var("r")
    before = ir.Function([x], ir.Let(r, op.random.uniform(0.0, 1.0, (2,)), op.exp(x)))
    assert dce(before) is before


def test_binding_calling_a_global_that_draws_random_numbers_stays():
    x, r = ir.var("x", (2,)), ir.Var("r")
    noisy = ir.Function([], op.random.uniform(0.0, 1.0, (2,)))
    before = ir.Function([x], ir.Let(r, ir.Call(ir.GlobalVar("noisy"), []), x))
    assert dce(before, noisy=noisy) is before
    # a pure global is removable when the pass may read it (interprocedural); by default
    # the pass reads only its own function, so any call of a global counts as impure
    pure = ir.Function([], op.zeros((2,)))
    removable = ir.Function([x], ir.Let(r, ir.Call(ir.GlobalVar("pure"), []), x))
    mod = ir.IRModule({"main": removable, "pure": pure})
    ir.assert_structural_equal(DeadCodeElimination(interprocedural=True)(mod)["main"], ir.Function([x], x))
    assert dce(removable, pure=pure) is removable
    assert not DeadCodeElimination().reads_module
    assert DeadCodeElimination(interprocedural=True).reads_module


def test_inline_once_substitutes_single_use_and_keeps_multi_use():
    x, a, b = ir.var("x", (2,)), ir.Var("a"), ir.Var("b")
    before = ir.Function([x], ir.Let(a, op.exp(x), ir.Let(b, op.negative(x), op.add(op.add(a, b), b))))
    expected = ir.Function([x], ir.Let(b, op.negative(x), op.add(op.add(op.exp(x), b), b)))
    ir.assert_structural_equal(dce(before, inline_once=True), expected)
    # without inline_once nothing is dead
    assert dce(before) is before


def test_dead_binding_inside_if_branch_and_function_literal():
    x, c = ir.var("x", (2,)), ir.var("c", (), "bool")
    a, y, d = ir.Var("a"), ir.var("y", (2,)), ir.Var("d")
    lit = ir.Function([y], ir.Let(d, op.exp(y), y))
    before = ir.Function([x, c], ir.If(c, ir.Let(a, op.exp(x), x), ir.Call(lit, [x])))
    expected = ir.Function([x, c], ir.If(c, x, ir.Call(ir.Function([y], y), [x])))
    ir.assert_structural_equal(dce(before), expected)


def test_purity_analysis_handles_recursion_between_globals():
    x = ir.var("x", (2,))
    f, g = ir.GlobalVar("f"), ir.GlobalVar("g")
    xf, xg = ir.var("xf", (2,)), ir.var("xg", (2,))
    mod = ir.IRModule(
        {
            "f": ir.Function([xf], ir.Call(g, [xf]), ir.TensorType((2,), "float32")),
            "g": ir.Function(
                [xg],
                ir.TupleGetItem(ir.Tuple([ir.Call(f, [xg]), op.random.uniform(0.0, 1.0, (2,))]), 0),
                ir.TensorType((2,), "float32"),
            ),
        }
    )
    purity = Purity(mod)
    assert not purity.is_pure(ir.Call(f, [x]))
    # the same cycle without the random draw is pure
    pure_mod = ir.IRModule(
        {"f": mod["f"], "g": ir.Function([xg], ir.Call(f, [xg]), ir.TensorType((2,), "float32"))}
    )
    assert Purity(pure_mod).is_pure(ir.Call(g, [x]))
    assert purity.is_pure(op.exp(x))
    assert purity.is_pure(ir.Function([x], op.random.uniform(0.0, 1.0, (2,))))  # defining is pure
    assert not purity.is_pure(ir.Call(x, []))  # unknown callee


def test_registered_with_opt_level_one():
    assert get_pass("DeadCodeElimination").info.opt_level == 1


def test_deep_chains():
    run_on_chain(DeadCodeElimination(), 30_000, "add")
    after = run_on_chain(DeadCodeElimination(inline_once=True), 20_000, "let")
    assert type(after["main"].body) is not ir.Let  # every binding was used once


def test_long_dead_let_chain_is_removed():
    x = ir.var("x", (2,))
    body: ir.Expr = x
    for i in range(20_000):
        body = ir.Let(ir.Var(f"v{i}"), op.exp(x), body)
    after = dce(ir.Function([x], body))
    ir.assert_structural_equal(after, ir.Function([x], x))


test_dce_preserves_semantics = property_test(DeadCodeElimination)
test_dce_inline_once_preserves_semantics = property_test(lambda: DeadCodeElimination(inline_once=True))

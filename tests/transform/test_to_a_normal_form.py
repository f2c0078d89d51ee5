"""ToANormalForm: bindings in evaluation order, shared nodes bound once in the right scope."""

from __future__ import annotations

import pytest
from hypothesis import given

from passinfra import ir
from passinfra.ir import op
from passinfra.transform import get_pass
from passinfra.transform.builtin.to_a_normal_form import ToANormalForm, is_atom
from tests.strategies import GEN_SETTINGS, programs
from tests.transform.pass_equivalence import property_test, run_on_chain

pytestmark = pytest.mark.usefixtures("default_recursion_limit")


def anf(func: ir.Function) -> ir.Function:
    return ToANormalForm()(ir.IRModule({"main": func}))["main"]


def assert_a_normal_form(expr: ir.Expr) -> None:
    """Every operand (call callee and arguments, tuple fields, getitem operand, If
    condition) is an atom, so non-atoms only appear as Let values, bodies or branches."""
    for node in ir.iter_post_order(expr):
        if isinstance(node, ir.Call):
            assert all(is_atom(a) for a in (node.op, *node.args)), node
        elif isinstance(node, ir.Tuple):
            assert all(is_atom(f) for f in node.fields)
        elif isinstance(node, ir.TupleGetItem):
            assert is_atom(node.tuple_value)
        elif isinstance(node, ir.If):
            assert is_atom(node.cond)


def test_nested_calls_become_a_let_chain_in_evaluation_order():
    x = ir.var("x", (2,))
    before = ir.Function([x], op.add(op.exp(x), op.negative(x)))
    a, b, c = ir.Var("a"), ir.Var("b"), ir.Var("c")
    expected = ir.Function([x], ir.Let(a, op.exp(x), ir.Let(b, op.negative(x), ir.Let(c, op.add(a, b), c))))
    ir.assert_structural_equal(anf(before), expected)
    with pytest.raises(AssertionError):
        assert_a_normal_form(before)


def test_shared_node_is_bound_once_and_original_let_keeps_its_var():
    x, y = ir.var("x", (2,)), ir.Var("y")
    shared = op.exp(x)
    before = ir.Function([x], ir.Let(y, op.add(shared, shared), op.multiply(y, shared)))
    a, c = ir.Var("a"), ir.Var("c")
    expected = ir.Function(
        [x], ir.Let(a, op.exp(x), ir.Let(y, op.add(a, a), ir.Let(c, op.multiply(y, a), c)))
    )
    ir.assert_structural_equal(anf(before), expected)


def test_node_used_in_both_branches_is_bound_before_the_if():
    x, c = ir.var("x", (2,)), ir.var("c", (), "bool")
    shared, only_true = op.exp(x), op.negative(x)
    before = ir.Function([x, c], ir.If(c, op.add(shared, only_true), shared))
    s, t, u, r = ir.Var("s"), ir.Var("t"), ir.Var("u"), ir.Var("r")
    expected = ir.Function(
        [x, c],
        ir.Let(
            s, op.exp(x), ir.Let(r, ir.If(c, ir.Let(t, op.negative(x), ir.Let(u, op.add(s, t), u)), s), r)
        ),
    )
    ir.assert_structural_equal(anf(before), expected)


def test_function_literal_is_bound_and_its_body_converted():
    x, p = ir.var("x", (2,)), ir.var("p", (2,))
    before = ir.Function([x], ir.Call(ir.Function([p], op.exp(op.exp(p))), [op.negative(x)]))
    after = anf(before)
    assert_a_normal_form(after)
    assert anf(after) is after  # already in A-normal form: nothing to do


def test_already_normal_function_is_returned_unchanged():
    x, a = ir.var("x", (2,)), ir.Var("a")
    func = ir.Function([x], ir.Let(a, op.exp(x), a))
    assert anf(func) is func


def test_registered_with_opt_level_one():
    assert get_pass("ToANormalForm").info.opt_level == 1


def test_deep_chains():
    after = run_on_chain(ToANormalForm(), 30_000, "add")
    assert type(after["main"].body) is ir.Let
    run_on_chain(ToANormalForm(), 20_000, "let")


@GEN_SETTINGS
@given(programs())
def test_random_programs_are_in_a_normal_form(mod):
    after = ToANormalForm()(mod)
    for func in after.functions.values():
        assert_a_normal_form(func)


test_anf_preserves_semantics = property_test(ToANormalForm)

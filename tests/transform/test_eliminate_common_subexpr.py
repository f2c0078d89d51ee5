"""EliminateCommonSubexpr: merging, stateful calls, scoping, depth."""

from __future__ import annotations

import pytest

from passinfra import ir
from passinfra.ir import op
from passinfra.transform import get_pass
from passinfra.transform.builtin.eliminate_common_subexpr import EliminateCommonSubexpr
from tests.transform.pass_equivalence import assert_pass_preserves_semantics, property_test, run_on_chain

pytestmark = pytest.mark.usefixtures("default_recursion_limit")


def cse(func: ir.Function) -> ir.Function:
    return EliminateCommonSubexpr()(ir.IRModule({"main": func}))["main"]


def test_equal_calls_merge_bottom_up():
    x, y = ir.var("x", (2,)), ir.var("y", (2,))
    before = ir.Function([x, y], op.multiply(op.exp(op.add(x, y)), op.exp(op.add(x, y))))
    shared = op.exp(op.add(x, y))
    expected = ir.Function([x, y], op.multiply(shared, shared))
    after = cse(before)
    ir.assert_structural_equal(after, expected)
    assert after.body.args[0] is after.body.args[1]


def test_different_attrs_do_not_merge_and_equal_small_constants_do():
    x = ir.var("x", (2, 3))
    before = ir.Function([x], ir.Tuple([op.sum(x, axis=0), op.sum(x, axis=1),
                                        op.add(x, ir.const(1.0)), op.add(x, ir.const(1.0))]))
    after = cse(before)
    fields = after.body.fields
    assert fields[0] is not fields[1]
    assert fields[2] is fields[3]


def test_stateful_calls_never_merge():
    before = ir.Function([], op.add(op.random.uniform(0.0, 1.0, (2,)), op.random.uniform(0.0, 1.0, (2,))))
    after = cse(before)
    assert after is before
    assert after.body.args[0] is not after.body.args[1]


def test_no_merging_out_of_or_between_if_branches():
    x, c, r = ir.var("x", (2,)), ir.var("c", (), "bool"), ir.Var("r")
    branches = ir.If(c, op.exp(x), op.add(op.exp(x), op.exp(x)))
    before = ir.Function([x, c], ir.Let(r, branches, ir.Tuple([r, op.exp(x)])))
    after = cse(before)
    true_exp, false_add = after.body.value.true_branch, after.body.value.false_branch
    outer = after.body.body.fields[1]
    assert false_add.args[0] is false_add.args[1]  # merged inside one branch
    assert true_exp is not false_add.args[0]  # not across sibling branches
    assert outer is not true_exp and outer is not false_add.args[0]  # not out of a branch


def test_outer_occurrence_is_reused_inside_a_branch():
    x, c = ir.var("x", (2,)), ir.var("c", (), "bool")
    before = ir.Function([x, c], ir.Tuple([op.exp(x), ir.If(c, op.exp(x), x)]))
    after = cse(before)
    assert after.body.fields[1].true_branch is after.body.fields[0]


def test_let_bound_equal_values_share_one_node():
    x, a, b = ir.var("x", (2,)), ir.Var("a"), ir.Var("b")
    before = ir.Function([x], ir.Let(a, op.exp(x), ir.Let(b, op.exp(x), op.add(a, b))))
    after = assert_pass_preserves_semantics(EliminateCommonSubexpr, ir.IRModule({"main": before}))["main"]
    assert after.body.value is after.body.body.value


def test_registered_with_opt_level_three():
    assert get_pass("EliminateCommonSubexpr").info.opt_level == 3


def test_deep_chains():
    run_on_chain(EliminateCommonSubexpr(), 30_000, "add")
    run_on_chain(EliminateCommonSubexpr(), 20_000, "let")


test_cse_preserves_semantics = property_test(EliminateCommonSubexpr)

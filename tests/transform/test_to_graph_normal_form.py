"""ToGraphNormalForm: pure Let bindings become shared nodes; a round trip with ANF."""

from __future__ import annotations

import pytest

from passinfra import ir
from passinfra.ir import op
from passinfra.transform.builtin.to_a_normal_form import ToANormalForm
from passinfra.transform.builtin.to_graph_normal_form import ToGraphNormalForm
from passinfra.transform.sequential import Sequential
from tests.transform.pass_equivalence import property_test, run_on_chain

pytestmark = pytest.mark.usefixtures("default_recursion_limit")


def gnf(func: ir.Function) -> ir.Function:
    return ToGraphNormalForm()(ir.IRModule({"main": func}))["main"]


def test_multi_use_var_becomes_a_shared_node():
    x, a = ir.var("x", (2,)), ir.Var("a")
    before = ir.Function([x], ir.Let(a, op.exp(x), op.add(a, a)))
    after = gnf(before)
    shared = op.exp(x)
    ir.assert_structural_equal(after, ir.Function([x], op.add(shared, shared)))
    assert after.body.args[0] is after.body.args[1]


def test_impure_and_recursive_bindings_stay():
    x, r, f, n = ir.var("x", (2,)), ir.Var("r"), ir.Var("f"), ir.var("n", (2,))
    draw = ir.Function([x], ir.Let(r, op.random.uniform(0.0, 1.0, (2,)), op.add(r, x)))
    assert gnf(draw) is draw
    loop = ir.Function([n], ir.Call(f, [n]), ir.TensorType((2,), "float32"))
    recursive = ir.Function([x], ir.Let(f, loop, x))
    assert gnf(recursive) is recursive


def test_round_trip_with_a_normal_form():
    x = ir.var("x", (2,))
    shared = op.exp(x)
    graph = ir.Function([x], op.multiply(op.add(shared, op.negative(shared)), shared))
    mod = ir.IRModule({"main": graph})
    back = ToGraphNormalForm()(ToANormalForm()(mod))
    ir.assert_structural_equal(back["main"], graph)


def test_deep_let_chain():
    after = run_on_chain(ToGraphNormalForm(), 20_000, "let")
    assert type(after["main"].body) is ir.Call
    run_on_chain(ToGraphNormalForm(), 30_000, "add")


test_gnf_preserves_semantics = property_test(ToGraphNormalForm)
test_anf_then_gnf_preserves_semantics = property_test(
    lambda: Sequential([ToANormalForm(), ToGraphNormalForm()])
)

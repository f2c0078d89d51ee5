"""LambdaLift: nested literals become globals; captured vars become leading params."""

from __future__ import annotations

import numpy as np
import pytest

from passinfra import ir
from passinfra.ir import op
from passinfra.runtime.interpreter import evaluate
from passinfra.transform import get_pass
from passinfra.transform.builtin.lambda_lift import LambdaLift
from tests.transform.pass_equivalence import assert_pass_preserves_semantics, property_test, run_on_chain

pytestmark = pytest.mark.usefixtures("default_recursion_limit")
T2 = ir.TensorType((2,), "float32")


def lifted(main: ir.Function) -> ir.IRModule:
    return assert_pass_preserves_semantics(LambdaLift, ir.IRModule({"main": main}))


def test_closed_literal_becomes_a_global():
    x, p = ir.var("x", (2,)), ir.var("p", (2,))
    after = lifted(ir.Function([x], ir.Call(ir.Function([p], op.exp(p)), [x])))
    gv = ir.GlobalVar("main_lifted_0")
    ir.assert_structural_equal(after["main"], ir.Function([x], ir.Call(gv, [x])))
    ir.assert_structural_equal(after[gv], ir.Function([p], op.exp(p), T2))


def test_let_bound_closure_gets_captured_vars_as_leading_params():
    x, y, p, f = ir.var("x", (2,)), ir.var("y", (2,)), ir.var("p", (2,)), ir.Var("f")
    closure = ir.Function([p], op.add(p, y))
    main = ir.Function([x, y], ir.Let(f, closure, op.multiply(ir.Call(f, [x]), ir.Call(f, [y]))))
    after = lifted(main)
    gv = ir.GlobalVar("main_lifted_0")
    ir.assert_structural_equal(
        after["main"], ir.Function([x, y], op.multiply(ir.Call(gv, [y, x]), ir.Call(gv, [y, y])))
    )
    cy, cp = ir.var("y", (2,)), ir.var("p", (2,))
    ir.assert_structural_equal(after[gv], ir.Function([cy, cp], op.add(cp, cy), T2))
    assert after[gv].params[0] is not y  # a fresh var: y stays bound only in main


def test_escaping_closure_stays_and_closed_escaping_literal_becomes_a_global_value():
    x, y, p = ir.var("x", (2,)), ir.var("y", (2,)), ir.var("p", (2,))
    closure = ir.Function([p], op.add(p, y))
    main = ir.Function([x, y], ir.Tuple([closure, ir.Call(closure, [x])]))
    after = LambdaLift()(ir.IRModule({"main": main}))
    assert len(after) == 1 and after["main"] is main
    closed = ir.Function([p], op.exp(p))
    main2 = ir.Function([x], ir.Tuple([x, closed]))
    after2 = LambdaLift()(ir.IRModule({"main": main2}))
    assert isinstance(after2["main"].body.fields[1], ir.GlobalVar)


def test_nested_and_recursive_literals():
    ts = ir.TensorType((), "float32")
    x, n, i = ir.var("x", (), "float32"), ir.var("n", (), "float32"), ir.var("i", (), "float32")
    f = ir.Var("f", ir.FuncType([ts], ts))
    # f(n) = n <= 0 ? x : f(n - 1) + x, with x captured: a recursive closure
    body = ir.If(op.less_equal(n, ir.const(0.0)), x, op.add(ir.Call(f, [op.subtract(n, ir.const(1.0))]), x))
    rec = ir.Function([n], body, ts)
    inner = ir.Function([i], op.multiply(i, x))  # nested literal inside main's body
    main = ir.Function([x], ir.Let(f, rec, ir.Call(inner, [ir.Call(f, [ir.const(3.0)])])))
    after = lifted(main)
    assert sorted(gv.name_hint for gv in after.functions) == ["main", "main_lifted_0", "main_lifted_1"]
    np.testing.assert_allclose(evaluate(after, np.float32(2.0)), 16.0)  # f(3) = 4x; times x
    for func in after.functions.values():
        assert not any(
            isinstance(node, ir.Function) and node is not func for node in ir.iter_post_order(func)
        )


def test_a_body_sharing_a_let_with_its_function_binds_fresh_vars_when_lifted():
    """The literal's body uses a node of main's (the IR is a DAG) that binds a let: lifted,
    the global must bind a var of its own (found by hypothesis: "bound twice")."""
    x, b, p, v = (ir.var(name, (), "float64") for name in "xbpv")
    shared = ir.If(op.cast(x, dtype="bool"), ir.Let(b, op.negative(x), op.add(b, x)), x)
    literal = ir.Function([p], op.add(shared, p))
    after = lifted(ir.Function([x], ir.Let(v, op.negative(shared), ir.Call(literal, [v]))))
    lifted_let = next(node for node in ir.iter_post_order(after["main_lifted_0"]) if isinstance(node, ir.Let))
    assert lifted_let.var is not b


def test_registered_with_opt_level_zero_requiring_infer_type():
    info = get_pass("LambdaLift").info
    assert info.opt_level == 0 and "InferType" in info.required


def test_deep_chains():
    run_on_chain(LambdaLift(), 30_000, "add")
    run_on_chain(LambdaLift(), 20_000, "let")


test_lambda_lift_preserves_semantics = property_test(LambdaLift)

"""FoldConstant: Before/Expected cases, one semantics with the interpreter, depth."""

from __future__ import annotations

import numpy as np
import pytest

from passinfra import ir
from passinfra.ir import op
from passinfra.transform import get_pass
from passinfra.transform.builtin.fold_constant import FoldConstant
from tests.transform.pass_equivalence import property_test, run_on_chain

pytestmark = pytest.mark.usefixtures("default_recursion_limit")


def fold(func: ir.Function) -> ir.Function:
    return FoldConstant()(ir.IRModule({"main": func}))["main"]


def test_folds_a_constant_subgraph_with_the_op_implementation():
    x = ir.var("x", (2,))
    c1, c2 = ir.const(np.array([1.0, 2.0], "float32")), ir.const(np.array([3.0, 4.0], "float32"))
    before = ir.Function([x], op.add(x, op.multiply(op.exp(c1), c2)))
    expected_data = (np.exp(c1.data) * c2.data).astype("float32")
    expected = ir.Function([x], op.add(x, ir.const(expected_data)))
    ir.assert_structural_equal(fold(before), expected)


def test_let_bound_constant_is_propagated_and_binding_removed():
    x, t = ir.var("x", (2,)), ir.Var("t")
    before = ir.Function([x], ir.Let(t, op.add(ir.const([1.0, 2.0]), ir.const(1.0)), op.multiply(x, t)))
    expected = ir.Function([x], op.multiply(x, ir.const(np.array([2.0, 3.0], "float32"))))
    ir.assert_structural_equal(fold(before), expected)


def test_tuple_valued_op_folds_to_a_tuple_and_getitem_to_its_field():
    x = ir.var("x", (4,))
    data = np.arange(4, dtype="float32")
    parts = op.split(ir.const(data), 2)
    before = ir.Function([x], op.add(x, ir.TupleGetItem(parts, 1)))
    expected = ir.Function([x], op.add(x, ir.const(data[2:])))
    ir.assert_structural_equal(fold(before), expected)


def test_getitem_of_literal_tuple_with_variable_fields():
    x, y = ir.var("x", (2,)), ir.var("y", (2,))
    before = ir.Function([x, y], ir.TupleGetItem(ir.Tuple([op.exp(x), y]), 1))
    ir.assert_structural_equal(fold(before), ir.Function([x, y], y))


def test_weight_subgraph_transpose_reshape_and_full_fold():
    x = ir.var("x", (1, 6))
    w = np.arange(6, dtype="float32").reshape(2, 3)
    weight = op.reshape(op.transpose(ir.const(w)), (1, 6))
    scale = op.full(ir.const(2.0), (1, 6), "float32")
    before = ir.Function([x], op.multiply(op.add(x, weight), scale))
    expected = ir.Function(
        [x], op.multiply(op.add(x, ir.const(w.T.reshape(1, 6))), ir.const(np.full((1, 6), 2.0, "float32")))
    )
    ir.assert_structural_equal(fold(before), expected)


def test_zero_argument_and_stateful_calls_are_not_folded():
    x = ir.var("x", (2,))
    before = ir.Function([x], ir.Tuple([op.add(x, op.ones((2,))), op.random.uniform(0.0, 1.0, (2,))]))
    after = fold(before)
    assert after is before


def test_unchanged_function_is_returned_as_the_same_object():
    x = ir.var("x", (2,))
    func = ir.Function([x], op.nn.relu(op.add(x, ir.const(1.0))))
    assert fold(func) is func


def test_failing_op_implementation_leaves_the_call():
    before = ir.Function([], op.reshape(ir.const(np.zeros(4, "float32")), (4,)))
    # a bad attribute only the NumPy implementation notices
    broken = ir.Function(
        [], ir.Call(ir.Op.get("reshape"), [ir.const(np.zeros(4, "float32"))], {"newshape": (3,)})
    )
    assert fold(broken) is broken
    assert isinstance(fold(before).body, ir.Constant)


def test_registered_with_opt_level_two():
    assert get_pass("FoldConstant").info.opt_level == 2


def test_deep_chain_of_constants_folds_without_recursion():
    acc: ir.Expr = ir.const(np.ones(2, "float32"))
    for _ in range(20_000):
        acc = op.add(acc, ir.const(np.ones(2, "float32")))
    after = fold(ir.Function([], acc))
    assert isinstance(after.body, ir.Constant)
    np.testing.assert_allclose(after.body.data, 20_001.0)
    run_on_chain(FoldConstant(), 30_000, "add")
    run_on_chain(FoldConstant(), 20_000, "let")


test_fold_constant_preserves_semantics = property_test(FoldConstant)

"""``op.random.uniform`` with expressions for ``low``/``high`` (Relay's form), next to the
compact form with Python numbers: builder, type relation, interpreter, text, passes and
the (deliberately missing) compute rule."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import passinfra
from passinfra import ir, transform
from passinfra.errors import EvaluationError, IRError, IRTypeError
from passinfra.ir import op
from passinfra.ir.types import TensorType
from passinfra.transform import PassContext


def _scalar(name: str, dtype: str = "float32") -> ir.Var:
    return ir.var(name, (), dtype)


def _module(params: list[ir.Var], body: ir.Expr) -> ir.IRModule:
    return transform.InferType()(ir.IRModule.from_expr(ir.Function(params, body)))


def _draw_of_bounds(low: float, high: float) -> np.ndarray:
    """What the expression form draws for runtime bounds ``low``/``high`` after seed 11."""
    lo, hi = _scalar("lo"), _scalar("hi")
    mod = _module([lo, hi], op.random.uniform(lo, hi, (3, 4)))
    op.random.seed(11)
    return passinfra.evaluate(mod, np.float32(low), np.float32(high))


# --------------------------------------------------------------------------- builder


def test_numbers_keep_the_compact_attribute_form():
    call = op.random.uniform(-1, 2.5, (2,))
    assert call.args == ()
    assert dict(call.attrs) == {"low": -1.0, "high": 2.5, "shape": (2,), "dtype": "float32"}


def test_expressions_become_arguments_and_leave_the_bound_attributes_unset():
    lo, hi = _scalar("lo"), _scalar("hi")
    call = op.random.uniform(lo, hi, (2, 3))
    assert call.args == (lo, hi)
    assert dict(call.attrs) == {"shape": (2, 3), "dtype": "float32"}


def test_a_number_next_to_an_expression_becomes_a_scalar_constant_of_the_dtype():
    hi = _scalar("hi", "float64")
    call = op.random.uniform(0, hi, (2,), "float64")
    low = call.args[0]
    assert isinstance(low, ir.Constant)
    assert low.data.shape == () and low.data.dtype == np.float64 and low.data == 0.0
    assert call.args[1] is hi
    assert op.random.uniform(hi, 5, (2,), "float64").args[1].data.dtype == np.float64


def test_builder_rejects_known_bounds_in_the_wrong_order_and_non_expressions():
    with pytest.raises(IRError, match=r"low <= high, got low=3.0, high=1.0"):
        op.random.uniform(ir.const(3.0), 1.0, (2,))
    with pytest.raises(IRError, match=r"low <= high"):
        op.random.uniform(3.0, 1.0, (2,))
    with pytest.raises(IRError, match=r"low must be a number or an expression, got 'a'"):
        op.random.uniform("a", _scalar("hi"), (2,))
    with pytest.raises(IRError, match="float dtype"):
        op.random.uniform(_scalar("lo", "int32"), _scalar("hi", "int32"), (2,), "int32")


# --------------------------------------------------------------------------- type relation


def test_relation_gives_the_result_type_for_scalar_bounds():
    lo, hi = _scalar("lo"), _scalar("hi")
    mod = _module([lo, hi], op.random.uniform(lo, op.add(hi, ir.const(1.0)), (4, 5)))
    assert mod["main"].body.checked_type == TensorType((4, 5), "float32")


_EXPECTED_LOW = r"expected low of type Tensor\[\(\), float32\]"


@pytest.mark.parametrize(
    ("low", "message"),
    [
        (ir.var("lo", (2,)), _EXPECTED_LOW + r".*got Tensor\[\(2\), float32\]"),
        (ir.var("lo", (), "float64"), _EXPECTED_LOW + r".*got Tensor\[\(\), float64\]"),
    ],
)
def test_relation_rejects_bounds_that_are_not_scalars_of_the_dtype(low: ir.Var, message: str):
    hi = _scalar("hi")
    with pytest.raises(IRTypeError, match=message):
        _module([low, hi], op.random.uniform(low, hi, (2,)))


def test_relation_rejects_one_argument_and_bounds_given_twice():
    lo, hi = _scalar("lo"), _scalar("hi")
    uniform = ir.Op.get("random.uniform")
    one = ir.Call(uniform, [lo], {"shape": (2,), "dtype": "float32"})
    with pytest.raises(IRTypeError, match=r"no arguments .* or two .*, got 1"):
        _module([lo], one)
    both = ir.Call(uniform, [lo, hi], {"low": 0.0, "high": 1.0, "shape": (2,), "dtype": "float32"})
    with pytest.raises(IRTypeError, match="both as arguments and as attributes"):
        _module([lo, hi], both)


# --------------------------------------------------------------------------- interpreter


def test_interpreter_draws_within_runtime_bounds():
    out = _draw_of_bounds(2.0, 3.0)
    assert out.shape == (3, 4) and out.dtype == np.float32
    assert np.all((out >= 2.0) & (out < 3.0))


def test_expression_form_draws_exactly_what_the_number_form_draws():
    expected_mod = _module([], op.random.uniform(2.0, 3.0, (3, 4)))
    op.random.seed(11)
    expected = passinfra.evaluate(expected_mod)
    np.testing.assert_array_equal(_draw_of_bounds(2.0, 3.0), expected)


def test_runtime_bounds_in_the_wrong_order_are_an_evaluation_error():
    with pytest.raises(EvaluationError, match=r"random\.uniform.*low <= high, got low=3.0, high=2.0"):
        _draw_of_bounds(3.0, 2.0)


def test_a_hand_written_compact_call_without_bounds_draws_from_zero_to_one():
    call = ir.Call(ir.Op.get("random.uniform"), [], {"shape": (50,)})
    out = passinfra.evaluate(_module([], call))
    assert out.dtype == np.float32 and np.all((out >= 0.0) & (out < 1.0)) and out.max() > 0.5


# --------------------------------------------------------------------------- text, pickle, passes


def test_text_and_pickle_round_trip():
    lo, hi = _scalar("lo"), _scalar("hi")
    mod = _module([lo, hi], op.random.uniform(lo, op.add(hi, ir.const(1.0)), (2, 3)))
    text = mod.astext()
    assert "random.uniform(%lo, %0, shape=(2, 3)" in text
    ir.assert_structural_equal(ir.parse(text), mod)
    ir.assert_structural_equal(pickle.loads(pickle.dumps(mod)), mod)


def test_fold_constant_folds_the_bounds_but_never_the_draw():
    body = op.random.uniform(op.add(ir.const(1.0), ir.const(1.0)), 3.0, (5,))
    folded = transform.FoldConstant()(_module([], body))
    call = folded["main"].body
    assert isinstance(call, ir.Call) and call.op.name == "random.uniform"
    assert [float(a.data) for a in call.args] == [2.0, 3.0]
    first, second = passinfra.evaluate(folded), passinfra.evaluate(folded)
    assert np.all((first >= 2.0) & (first < 3.0))
    assert not np.array_equal(first, second)


def test_dce_and_cse_keep_every_draw_with_expression_bounds():
    lo, hi = _scalar("lo"), _scalar("hi")
    draw = op.random.uniform(lo, hi, (2,))
    twice = ir.Function([lo, hi], op.add(draw, op.random.uniform(lo, hi, (2,))))
    after = transform.EliminateCommonSubexpr()(_module(twice.params, twice.body))["main"].body
    assert after.args[0] is not after.args[1]
    r = ir.Var("r")
    unused = ir.Function([lo, hi], ir.Let(r, draw, op.exp(lo)))
    kept = transform.DeadCodeElimination()(_module(unused.params, unused.body))["main"].body
    assert isinstance(kept, ir.Let) and kept.value.op.name == "random.uniform"


def test_fuse_ops_passes_the_bounds_to_the_fused_draw():
    lo, hi = _scalar("lo"), _scalar("hi")
    fused = transform.FuseOps()(_module([lo, hi], op.exp(op.random.uniform(lo, hi, (2,)))))
    draw = fused["fused_random_uniform"]
    assert len(draw.params) == 2 and len(draw.body.args) == 2
    out = passinfra.evaluate(fused, np.float32(0.0), np.float32(0.5))
    assert np.all((out >= 1.0) & (out < np.exp(0.5)))


def test_building_the_expression_form_names_the_missing_compute_rule(tmp_path):
    lo, hi = _scalar("lo"), _scalar("hi")
    mod = ir.IRModule.from_expr(ir.Function([lo, hi], op.random.uniform(lo, hi, (2, 3))))
    with PassContext(config={"codegen.cache_dir": str(tmp_path)}):
        with pytest.raises(IRError, match=r"op random\.uniform has no compute rule: it is stateful"):
            passinfra.build(mod)

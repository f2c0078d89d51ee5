"""The op library: every op's type relation and NumPy reference against hand-written NumPy,
type errors with their messages, registration (names, patterns, stateful), builders.

Relations and implementations are called directly (``Op.infer_type`` / ``Op.compute``),
so these tests do not depend on the type-inference engine or the interpreter.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis.extra import numpy as hnp

from passinfra import ir
from passinfra.errors import EvaluationError, IRError, IRTypeError
from passinfra.ir import op
from passinfra.ir.op import _impl
from passinfra.ir.op.registry import Op, OpPattern, register_op
from passinfra.ir.types import TensorType, TupleType
from tests.numerics import assert_sums_close

RNG = np.random.default_rng(0)


def tensor_type(array: np.ndarray) -> TensorType:
    return TensorType(array.shape, array.dtype)


def value_type(value):
    if isinstance(value, tuple):
        return TupleType([value_type(v) for v in value])
    return tensor_type(value)


def infer(call: ir.Call, *arg_types):
    return call.op.infer_type(arg_types, call.attrs)


def check(call: ir.Call, args, expected, rtol=1e-6, atol=1e-6, terms=None, magnitude=None):
    """The relation gives the type of ``expected``, and the implementation its values,
    with exactly its dtype and shape. Results that are sums of ``terms`` terms, which the
    implementation may add in another order than the reference, are compared within the
    bound for any order (tests/numerics.py) given the sums of the terms' absolute values
    ``magnitude``, instead of ``rtol``/``atol``."""
    out_type = infer(call, *[value_type(a) for a in args])
    result = call.op.compute(args, call.attrs)
    if isinstance(expected, tuple):
        assert out_type == TupleType([tensor_type(e) for e in expected])
        assert isinstance(result, tuple) and len(result) == len(expected)
        pairs = list(zip(result, expected))
    else:
        assert out_type == tensor_type(expected)
        pairs = [(result, expected)]
    for got, want in pairs:
        assert isinstance(got, np.ndarray)
        assert got.dtype == want.dtype and got.shape == want.shape
        if terms is not None:
            assert_sums_close(got, want, terms, magnitude, dtype=str(want.dtype))
        else:
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return result


def rand(*shape, dtype="float32"):
    return RNG.standard_normal(shape).astype(dtype)


def ints(*shape, low=-5, high=6, dtype="int32"):
    return RNG.integers(low, high, size=shape).astype(dtype)


X, Y, Z = ir.var("x"), ir.var("y"), ir.var("z")
F32 = TensorType((2, 3), "float32")


# --------------------------------------------------------------------------- registration

EXPECTED_OPS = {
    # name: (pattern, stateful)
    **{name: (OpPattern.BROADCAST, False)
       for name in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "where")},
    **{name: (OpPattern.ELEMWISE, False)
       for name in ("negative", "exp", "log", "sqrt", "abs", "tanh", "sigmoid", "cast", "nn.relu",
                    "nn.gelu")},
    **{name: (OpPattern.INJECTIVE, False)
       for name in ("reshape", "transpose", "concatenate", "split", "squeeze", "expand_dims", "take",
                    "full", "zeros", "ones")},
    **{name: (OpPattern.COMM_REDUCE, False) for name in ("sum", "mean", "max")},
    **{name: (OpPattern.OUT_EWISE_FUSABLE, False)
       for name in ("matmul", "nn.conv2d", "nn.dense", "nn.max_pool2d", "nn.avg_pool2d",
                    "nn.global_avg_pool2d")},
    "nn.bias_add": (OpPattern.BROADCAST, False),
    **{name: (OpPattern.OPAQUE, False)
       for name in ("nn.softmax", "nn.batch_norm", "nn.dropout", "nn.layer_norm")},
    "random.uniform": (OpPattern.OPAQUE, True),
}


def builder_for(name: str):
    namespace = op
    *packages, leaf = name.split(".")
    for package in packages:
        namespace = getattr(namespace, package)
    return getattr(namespace, leaf)


@pytest.mark.parametrize("name", sorted(EXPECTED_OPS))
def test_design_ops_are_registered_under_their_builder_path(name):
    registered = Op.get(name)
    assert registered.name == name
    assert (registered.pattern, registered.stateful) == EXPECTED_OPS[name]
    assert callable(builder_for(name))


def test_builders_call_the_op_named_by_their_path():
    data = ir.var("d", (1, 2, 4, 4))
    samples = {
        "add": op.add(X, Y), "nn.conv2d": op.nn.conv2d(data, Y),
        "random.uniform": op.random.uniform(0, 1, (2,)),
        "sum": op.sum(X), "max": op.max(X), "concatenate": op.concatenate([X, Y]),
        "nn.batch_norm": op.nn.batch_norm(X, Y, Y, Y, Y), "zeros": op.zeros((2,)),
    }
    for name, call in samples.items():
        assert isinstance(call, ir.Call) and call.op is Op.get(name)


def test_only_random_ops_are_stateful():
    stateful = {o.name for o in op.list_ops() if o.stateful}
    assert stateful == {"random.uniform"}


def test_attrs_are_plain_python_values():
    call = op.nn.conv2d(X, Y, strides=np.array([2, 2]), padding=np.int64(1), groups=np.int32(1))
    assert call.attrs["strides"] == (2, 2) and type(call.attrs["strides"][0]) is int
    assert call.attrs["padding"] == (1, 1, 1, 1)
    assert type(call.attrs["groups"]) is int
    assert op.cast(X, np.float64).attrs["dtype"] == "float64"
    assert op.sum(X, axis=1).attrs["axis"] == (1,)


# --------------------------------------------------------------------------- builders


def test_python_scalars_become_relay_default_constants():
    call = op.add(X, 2.0)
    assert isinstance(call.args[1], ir.Constant) and call.args[1].dtype == "float32"
    assert op.multiply(X, 3).args[1].dtype == "int32"
    assert op.add(X, np.float64(1.0)).args[1].dtype == "float64"
    array_call = op.add(np.ones((2, 2), "int64"), X)
    assert array_call.args[0].dtype == "int64" and array_call.args[0].shape == (2, 2)
    # add(x, 2.0) on a float32 tensor type-checks
    assert infer(call, F32, TensorType(call.args[1].shape, call.args[1].dtype)) == F32


def test_list_of_expressions_is_rejected_where_a_tensor_is_expected():
    with pytest.raises(IRError, match="wrap it in ir.Tuple"):
        op.add([X, Y], X)


def test_concatenate_takes_one_tuple_argument():
    call = op.concatenate((X, Y, 1.0), axis=1)
    assert len(call.args) == 1 and isinstance(call.args[0], ir.Tuple)
    assert len(call.args[0].fields) == 3 and call.attrs["axis"] == 1
    tup = ir.Tuple([X, Y])
    assert op.concatenate(tup).args[0] is tup


def test_builder_argument_errors():
    with pytest.raises(IRError, match="dtype"):
        op.zeros((2,), "complex64")
    with pytest.raises(IRError, match="padding must have 1, 2 or 4 ints"):
        op.nn.conv2d(X, Y, padding=(1, 2, 3))
    with pytest.raises(IRError, match="strides must be positive"):
        op.nn.max_pool2d(X, (2, 2), strides=(0, 1))
    with pytest.raises(IRError, match="data_layout 'NCWH' is not supported"):
        op.nn.conv2d(X, Y, data_layout="NCWH")
    with pytest.raises(IRError, match="dropout rate"):
        op.nn.dropout(X, rate=1.5)
    with pytest.raises(IRError, match="float dtype"):
        op.random.uniform(0, 1, (2,), "int32")
    with pytest.raises(IRError, match="a_min <= a_max"):
        op.clip(X, 2, 1)


# --------------------------------------------------------------------------- binary elementwise

BINARY_REFERENCES = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np.maximum, "minimum": np.minimum,
}


@pytest.mark.parametrize("name", sorted(BINARY_REFERENCES))
@pytest.mark.parametrize("lhs_shape, rhs_shape", [((2, 3), (2, 3)), ((4, 1, 3), (5, 1)), ((), (3,))])
def test_binary_float_broadcast(name, lhs_shape, rhs_shape):
    lhs, rhs = rand(*lhs_shape), rand(*rhs_shape) + 3.0
    expected = BINARY_REFERENCES[name](lhs, rhs)
    check(builder_for(name)(X, Y), [lhs, rhs], expected)


def test_power_float_and_int():
    base, exponent = np.abs(rand(3, 4)) + 0.5, rand(4)
    check(op.power(X, Y), [base, exponent], np.power(base, exponent), rtol=1e-5)
    int_base = np.array([2, -3, 4], "int32")
    check(op.power(X, Y), [int_base, np.array(3, "int32")], np.array([8, -27, 64], "int32"))
    with pytest.raises(EvaluationError, match="negative exponent"):
        Op.get("power").compute([int_base, np.array(-1, "int32")], op.power(X, Y).attrs)


def test_integer_arithmetic_keeps_int32():
    lhs, rhs = ints(3, 4), ints(4, low=1)
    for name in ("add", "subtract", "multiply", "maximum", "minimum"):
        check(builder_for(name)(X, Y), [lhs, rhs], BINARY_REFERENCES[name](lhs, rhs).astype("int32"))


def test_integer_divide_truncates_toward_zero_like_c():
    lhs = np.array([7, -7, 7, -7, 6, 0, -1], "int32")
    rhs = np.array([2, 2, -2, -2, 3, 5, 4], "int32")
    expected = np.array([math.trunc(a / b) for a, b in zip(lhs, rhs)], "int32")
    result = check(op.divide(X, Y), [lhs, rhs], expected)
    assert list(result) == [3, -3, -3, 3, 2, 0, 0]
    check(op.divide(X, Y), [lhs.astype("int64"), rhs.astype("int64")], expected.astype("int64"))
    with pytest.raises(EvaluationError, match="integer division by zero"):
        Op.get("divide").compute([lhs, np.zeros(7, "int32")], op.divide(X, Y).attrs)


def test_float_divide_by_zero_is_ieee():
    result = Op.get("divide").compute([np.array([1.0, -1.0, 0.0], "float32"), np.zeros(3, "float32")],
                                      op.divide(X, Y).attrs)
    assert result[0] == np.inf and result[1] == -np.inf and np.isnan(result[2])


@pytest.mark.parametrize("name, reference", [
    ("equal", np.equal), ("not_equal", np.not_equal), ("less", np.less),
    ("less_equal", np.less_equal), ("greater", np.greater), ("greater_equal", np.greater_equal),
])
def test_comparisons_return_bool(name, reference):
    lhs, rhs = ints(2, 3, low=0, high=3), ints(3, low=0, high=3)
    check(builder_for(name)(X, Y), [lhs, rhs], reference(lhs, rhs))


def test_logical_ops():
    a = np.array([[True, False], [True, True]])
    b = np.array([False, True])
    check(op.logical_and(X, Y), [a, b], np.logical_and(a, b))
    check(op.logical_or(X, Y), [a, b], np.logical_or(a, b))
    check(op.logical_not(X), [a], ~a)
    with pytest.raises(IRTypeError, match="op logical_and: expected operands of dtype bool"):
        infer(op.logical_and(X, Y), F32, F32)


def test_binary_dtype_mismatch_names_both_types():
    message = (r"op add: expected the right operand of dtype float32 \(the dtype of the left operand, "
               r"Tensor\[\(2, 3\), float32\]\), got Tensor\[\(3\), int32\]")
    with pytest.raises(IRTypeError, match=message):
        infer(op.add(X, Y), F32, TensorType((3,), "int32"))


def test_binary_broadcast_clash_and_tuple_operand():
    with pytest.raises(IRTypeError, match=r"op multiply: shapes \(2, 3\), \(4,\) cannot be broadcast"):
        infer(op.multiply(X, Y), F32, TensorType((4,), "float32"))
    with pytest.raises(IRTypeError, match=r"op subtract: expected a tensor for the right operand, got \("):
        infer(op.subtract(X, Y), F32, TupleType([F32, F32]))
    with pytest.raises(IRTypeError, match="op add: expected operands of dtype"):
        infer(op.add(X, Y), TensorType((2,), "bool"), TensorType((2,), "bool"))
    with pytest.raises(IRTypeError, match="op less: expected operands of dtype"):
        infer(op.less(X, Y), TensorType((2,), "bool"), TensorType((2,), "bool"))


def test_wrong_argument_count():
    with pytest.raises(IRTypeError, match="op add expects 2 arguments, got 1"):
        Op.get("add").infer_type([F32], ir.Attrs())


@settings(max_examples=40, deadline=None)
@given(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=4, max_side=3))
def test_add_broadcasting_matches_numpy(shapes):
    lhs, rhs = rand(*shapes.input_shapes[0]), rand(*shapes.input_shapes[1])
    check(op.add(X, Y), [lhs, rhs], lhs + rhs)
    assert infer(op.add(X, Y), tensor_type(lhs), tensor_type(rhs)).shape == shapes.result_shape


# --------------------------------------------------------------------------- unary elementwise

UNARY_FLOAT_REFERENCES = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "erf": np.vectorize(math.erf, otypes=["float64"]),
    "negative": np.negative,
    "abs": np.abs,
}


@pytest.mark.parametrize("name", sorted(UNARY_FLOAT_REFERENCES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_unary_float(name, dtype):
    data = rand(3, 4, dtype=dtype)
    if name in ("log", "sqrt"):
        data = np.abs(data) + 0.1
    expected = UNARY_FLOAT_REFERENCES[name](data).astype(dtype)
    check(builder_for(name)(X), [data], expected, rtol=1e-6 if dtype == "float32" else 1e-12)


def test_unary_int_ops_keep_int_and_float_only_ops_reject_int():
    data = ints(5)
    check(op.negative(X), [data], -data)
    check(op.abs(X), [data], np.abs(data))
    int_type = TensorType((5,), "int32")
    for name in ("exp", "log", "sqrt", "tanh", "sigmoid", "erf", "nn.gelu"):
        message = rf"op {name}: .*dtype float16, bfloat16, float32 or float64, got Tensor\[\(5\), int32\]"
        with pytest.raises(IRTypeError, match=message):
            infer(builder_for(name)(X), int_type)
    with pytest.raises(IRTypeError, match=r"op exp: expected a tensor for the operand, got \("):
        infer(op.exp(X), TupleType([F32]))


def test_sigmoid_saturates_without_nan():
    result = Op.get("sigmoid").compute([np.array([-1000.0, 0.0, 1000.0], "float32")], ir.Attrs())
    np.testing.assert_array_equal(result, np.array([0.0, 0.5, 1.0], "float32"))


def test_clip_and_cast():
    data = rand(4, 5) * 10
    check(op.clip(X, -1.5, 2.0), [data], np.clip(data, -1.5, 2.0))
    int_data = ints(6)
    check(op.clip(X, 0, 3), [int_data], np.clip(int_data, 0, 3))
    check(op.cast(X, "int32"), [data], data.astype("int32"))
    check(op.cast(X, "bool"), [int_data], int_data.astype(bool))
    check(op.cast(X, "float64"), [int_data], int_data.astype("float64"))
    with pytest.raises(IRTypeError, match=r"op cast: expected a tensor for the operand"):
        infer(op.cast(X, "int32"), TupleType([]))


# --------------------------------------------------------------------------- erf accuracy


def test_erf_matches_math_erf_to_1e_12():
    points = np.concatenate([
        np.linspace(-7, 7, 20001), np.geomspace(1e-12, 8, 2001), -np.geomspace(1e-12, 8, 2001),
        np.array([0.0, 2.5, -2.5, 2.4999999999, 2.5000000001, 30.0, -30.0, 1e-300]),
    ])
    expected = np.array([math.erf(p) for p in points])
    result = _impl.erf(points)
    assert result.dtype == np.float64
    assert np.max(np.abs(result - expected)) < 1e-12
    # relative accuracy near zero too, where erf is tiny
    tiny = points[np.abs(points) < 1e-3]
    assert np.allclose(_impl.erf(tiny), [math.erf(p) for p in tiny], rtol=1e-13, atol=0)


def test_erf_special_values_and_float32():
    result = _impl.erf(np.array([np.inf, -np.inf, np.nan, -0.0]))
    assert result[0] == 1.0 and result[1] == -1.0 and np.isnan(result[2])
    assert result[3] == 0.0 and np.signbit(result[3])
    data = np.linspace(-4, 4, 101, dtype="float32")
    out = _impl.erf(data)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [math.erf(v) for v in data.astype("float64")], rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------- layout and shape


@pytest.mark.parametrize("newshape, expected_shape", [
    ((6, 4), (6, 4)), ((-1,), (24,)), ((0, -1), (2, 12)), ((0, 0, 2, 2), (2, 3, 2, 2)),
    ((4, -1, 2), (4, 3, 2)),
])
def test_reshape(newshape, expected_shape):
    data = rand(2, 3, 4)
    call = op.reshape(X, newshape)
    assert call.attrs["newshape"] == newshape
    check(call, [data], data.reshape(expected_shape))


def test_reshape_errors():
    data_type = TensorType((2, 3, 4), "float32")
    message = r"op reshape: cannot reshape \(2, 3, 4\) \(24 elements\) into \(5, 5\)"
    with pytest.raises(IRTypeError, match=message):
        infer(op.reshape(X, (5, 5)), data_type)
    with pytest.raises(IRTypeError, match="more than one -1"):
        infer(op.reshape(X, (-1, -1)), data_type)
    with pytest.raises(IRTypeError, match="do not fill the -1"):
        infer(op.reshape(X, (5, -1)), data_type)
    with pytest.raises(IRTypeError, match="copies dimension 3"):
        infer(op.reshape(X, (0, 0, 0, 0)), data_type)


@pytest.mark.parametrize("axes", [None, (1, 0, 2), (2, 0, 1), (-1, 0, 1)])
def test_transpose(axes):
    data = rand(2, 3, 4)
    check(op.transpose(X, axes), [data], np.transpose(data, axes))


def test_transpose_rejects_a_non_permutation():
    with pytest.raises(IRTypeError, match=r"op transpose: axes \(0, 0\) is not a permutation of the 2 axes"):
        infer(op.transpose(X, (0, 0)), F32)
    with pytest.raises(IRTypeError, match="axis 5 is out of range for a tensor of rank 2"):
        infer(op.transpose(X, (5, 0)), F32)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concatenate(axis):
    fields = (rand(2, 3), rand(2, 3), rand(2, 3))
    check(op.concatenate([X, Y, Z], axis=axis), [fields], np.concatenate(fields, axis=axis))


def test_concatenate_unequal_extents_and_ints():
    fields = (ints(2, 1), ints(2, 4))
    check(op.concatenate([X, Y], axis=1), [fields], np.concatenate(fields, axis=1))


def test_concatenate_errors():
    call = op.concatenate([X, Y], axis=0)
    with pytest.raises(IRTypeError, match=r"op concatenate: expected a tuple of tensors .*got Tensor"):
        infer(call, F32)
    with pytest.raises(IRTypeError, match=r"expected field 1 to match field 0 .* except on axis 0, "
                                          r"got Tensor\[\(2, 4\), float32\]"):
        infer(call, TupleType([F32, TensorType((2, 4), "float32")]))
    with pytest.raises(IRTypeError, match="expected field 1 of dtype float32"):
        infer(call, TupleType([F32, TensorType((2, 3), "int32")]))
    with pytest.raises(IRTypeError, match="empty tuple"):
        infer(call, TupleType([]))


@pytest.mark.parametrize("sections, axis", [(3, 0), (2, 1), ((1, 4), 1), ((2,), -1), ((0, 6), 1)])
def test_split(sections, axis):
    data = rand(6, 6)
    expected = tuple(np.split(data, sections, axis=axis))
    check(op.split(X, sections, axis), [data], expected)


def test_split_errors():
    with pytest.raises(IRTypeError, match=r"op split: cannot split an axis of size 3 into 2 equal sections"):
        infer(op.split(X, 2, axis=1), F32)
    with pytest.raises(IRTypeError, match="must be ascending"):
        infer(op.split(X, (2, 1), axis=1), F32)


@pytest.mark.parametrize("axis, expected_shape", [
    (None, (3, 4)), ((0,), (3, 1, 4)), ((-2, 0), (3, 4)), (2, (1, 3, 4)),
])
def test_squeeze(axis, expected_shape):
    data = rand(1, 3, 1, 4)
    check(op.squeeze(X, axis), [data], data.reshape(expected_shape))


def test_squeeze_rejects_a_non_unit_axis():
    with pytest.raises(IRTypeError, match=r"op squeeze: cannot squeeze axis 1 of size 3; expected size 1"):
        infer(op.squeeze(X, 1), F32)


@pytest.mark.parametrize("axis, count, expected_shape", [
    (0, 1, (1, 2, 3)), (2, 1, (2, 3, 1)), (-1, 1, (2, 3, 1)), (-3, 1, (1, 2, 3)), (1, 2, (2, 1, 1, 3)),
    (1, 0, (2, 3)),
])
def test_expand_dims(axis, count, expected_shape):
    data = rand(2, 3)
    check(op.expand_dims(X, axis, num_newaxis=count), [data], data.reshape(expected_shape))


def test_expand_dims_axis_out_of_range():
    with pytest.raises(IRTypeError, match=r"op expand_dims: axis 3 is out of range \[-3, 2\]"):
        infer(op.expand_dims(X, 3), F32)


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_take(axis):
    data = rand(4, 5)
    indices = np.array([[0, 3], [-1, 2]], "int32")
    check(op.take(X, Y, axis=axis), [data, indices], np.take(data, indices, axis=axis))


def test_take_errors():
    with pytest.raises(IRTypeError, match=r"op take: expected the indices of dtype int32, int64 or uint8"):
        infer(op.take(X, Y, axis=0), F32, TensorType((2,), "float32"))
    with pytest.raises(EvaluationError, match="index 4 is out of range for an axis of size 4"):
        Op.get("take").compute([rand(4, 5), np.array([1, 4], "int64")], op.take(X, Y, axis=0).attrs)
    with pytest.raises(EvaluationError, match="index -21 is out of range"):
        Op.get("take").compute([rand(4, 5), np.array([-21], "int64")], op.take(X, Y).attrs)


def test_where_broadcasts_all_three():
    condition = RNG.random((2, 1, 4)) > 0.5
    on_true, on_false = rand(3, 1), rand(4)
    check(op.where(X, Y, Z), [condition, on_true, on_false], np.where(condition, on_true, on_false))
    int_true = ints(4)
    check(op.where(X, Y, Z), [condition, int_true, np.array(0, "int32")], np.where(condition, int_true, 0)
          .astype("int32"))


def test_where_errors():
    bool_type = TensorType((2, 3), "bool")
    message = r"op where: expected the condition of dtype bool, got Tensor\[\(2, 3\), float32\]"
    with pytest.raises(IRTypeError, match=message):
        infer(op.where(X, Y, Z), F32, F32, F32)
    with pytest.raises(IRTypeError, match="expected the false values of dtype float32"):
        infer(op.where(X, Y, Z), bool_type, F32, TensorType((2, 3), "float64"))


# --------------------------------------------------------------------------- reductions

REDUCTIONS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, (0, 2), (2, 0), (-3, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_over_each_axis(name, axis, keepdims):
    data = rand(2, 3, 4)
    call = builder_for(name)(X, axis=axis, keepdims=keepdims)
    numpy_axis = axis if axis is None or isinstance(axis, tuple) else (axis,)
    expected = np.asarray(REDUCTIONS[name](data, axis=numpy_axis, keepdims=keepdims)).astype("float32")
    if name in ("max", "min"):  # no rounding: any order gives the same element
        check(call, [data], expected, rtol=0, atol=0)
        return
    # sum and mean add in whatever order NumPy's SIMD loops take (mean: the sum, then / n)
    terms = data.size // expected.size
    magnitude = np.asarray(REDUCTIONS[name](np.abs(data), axis=numpy_axis, keepdims=keepdims))
    check(call, [data], expected, terms=terms, magnitude=magnitude)


def test_integer_sum_and_max_keep_dtype():
    data = ints(3, 4, low=-1000, high=1000)
    check(op.sum(X, axis=1), [data], data.sum(axis=1).astype("int32"))
    check(op.max(X), [data], np.asarray(data.max()))
    wide = ints(3, dtype="int64")
    check(op.sum(X), [wide], np.asarray(wide.sum()))


def test_reduction_errors():
    with pytest.raises(IRTypeError, match="op sum: axis 2 is out of range for a tensor of rank 2"):
        infer(op.sum(X, axis=2), F32)
    with pytest.raises(IRTypeError, match=r"op mean: expected the data of dtype float16, .* or float64, got "
                                          r"Tensor\[\(3\), int32\]"):
        infer(op.mean(X), TensorType((3,), "int32"))
    with pytest.raises(IRTypeError, match=r"names a dimension twice"):
        infer(op.max(X, axis=(1, -1)), F32)



def test_max_and_min_over_an_empty_axis_give_onnx_s_identity():
    # the type's lowest (max) or highest (min) value, as ONNX defines it and the compiled
    # kernels start from
    attrs = op.max(X, axis=0).attrs
    for dtype, lowest, highest in (("float32", -np.inf, np.inf), ("int8", -128, 127), ("bool", False, True)):
        empty = np.zeros((0, 2), dtype)
        np.testing.assert_array_equal(Op.get("max").compute([empty], attrs), np.full(2, lowest, dtype))
        np.testing.assert_array_equal(Op.get("min").compute([empty], attrs), np.full(2, highest, dtype))


# --------------------------------------------------------------------------- matmul, creation


@pytest.mark.parametrize("lhs_shape, rhs_shape", [
    ((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (4, 5)), ((2, 3, 4), (4,)),
    ((4,), (4,)),
])
def test_matmul_follows_numpy(lhs_shape, rhs_shape):
    lhs, rhs = rand(*lhs_shape), rand(*rhs_shape)
    # the implementation may block the dot products of 4 terms as it likes (BLAS)
    check(op.matmul(X, Y), [lhs, rhs], np.matmul(lhs, rhs), terms=4,
          magnitude=np.matmul(np.abs(lhs), np.abs(rhs)))


def test_matmul_int_and_errors():
    lhs, rhs = ints(2, 3), ints(3, 2)
    check(op.matmul(X, Y), [lhs, rhs], lhs @ rhs)
    message = r"op matmul: inner dimensions differ: Tensor\[\(2, 3\), float32\] @ Tensor\[\(4, 5\), float32\]"
    with pytest.raises(IRTypeError, match=message):
        infer(op.matmul(X, Y), F32, TensorType((4, 5), "float32"))
    with pytest.raises(IRTypeError, match=r"cannot be broadcast"):
        infer(op.matmul(X, Y), TensorType((2, 3, 4), "float32"), TensorType((3, 4, 5), "float32"))
    with pytest.raises(IRTypeError, match="rank >= 1"):
        infer(op.matmul(X, Y), TensorType((), "float32"), F32)


def test_full_zeros_ones():
    call = op.full(2.5, (2, 3))
    assert call.args[0].dtype == "float32" and call.attrs["dtype"] is None
    check(call, [np.array(2.5, "float32")], np.full((2, 3), 2.5, "float32"))
    check(op.full(X, (4,), "int64"), [np.array(7.9, "float32")], np.full((4,), 7, "int64"))
    check(op.zeros((2, 2)), [], np.zeros((2, 2), "float32"))
    check(op.ones((3,), "int32"), [], np.ones(3, "int32"))
    check(op.ones((), "bool"), [], np.ones((), bool))
    assert op.zeros((2,)).args == ()
    message = r"op full: expected a scalar \(rank 0\) fill value, got Tensor\[\(2, 3\)"
    with pytest.raises(IRTypeError, match=message):
        infer(op.full(X, (2,)), F32)


# --------------------------------------------------------------------------- nn


def reference_conv2d(data, weight, strides, padding, dilation, groups):
    """Straightforward grouped convolution: a loop over groups and kernel taps."""
    top, left, bottom, right = padding
    padded = np.pad(data, ((0, 0), (0, 0), (top, bottom), (left, right)))
    batch, channels, height, width = padded.shape
    out_channels, group_in, kh, kw = weight.shape
    out_h = (height - dilation[0] * (kh - 1) - 1) // strides[0] + 1
    out_w = (width - dilation[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((batch, out_channels, out_h, out_w), np.float64)
    group_out = out_channels // groups
    for g in range(groups):
        inputs = padded[:, g * group_in:(g + 1) * group_in]
        for i in range(kh):
            for j in range(kw):
                rows = i * dilation[0] + strides[0] * np.arange(out_h)
                cols = j * dilation[1] + strides[1] * np.arange(out_w)
                patch = inputs[:, :, rows][:, :, :, cols]  # (N, Cg, OH, OW)
                taps = weight[g * group_out:(g + 1) * group_out, :, i, j]  # (Og, Cg)
                out[:, g * group_out:(g + 1) * group_out] += np.einsum("nchw,oc->nohw", patch, taps)
    return out.astype(data.dtype)


@pytest.mark.parametrize("channels, out_channels, kernel, strides, padding, dilation, groups", [
    (3, 4, (3, 3), (1, 1), (0, 0), (1, 1), 1),
    (3, 2, (3, 3), (2, 2), (1, 1), (1, 1), 1),
    (4, 6, (3, 2), (1, 2), (1, 0, 2, 1), (2, 1), 2),
    (4, 4, (3, 3), (1, 1), (1, 1), (1, 1), 4),  # depthwise
    (2, 3, (1, 1), (1, 1), (0, 0), (1, 1), 1),
])
def test_conv2d(channels, out_channels, kernel, strides, padding, dilation, groups):
    data = rand(2, channels, 7, 8)
    weight = rand(out_channels, channels // groups, *kernel)
    call = op.nn.conv2d(X, Y, strides=strides, padding=padding, dilation=dilation, groups=groups)
    expected = reference_conv2d(data, weight, strides, call.attrs["padding"], dilation, groups)
    # a sum of (channels / groups) * kh * kw products, in the reference tap by tap, in the
    # implementation as one einsum (BLAS)
    magnitude = reference_conv2d(np.abs(data), np.abs(weight), strides, call.attrs["padding"], dilation,
                                 groups)
    check(call, [data, weight], expected, terms=weight[0].size, magnitude=magnitude)


def test_conv2d_padding_forms():
    assert op.nn.conv2d(X, Y, padding=(1, 2)).attrs["padding"] == (1, 2, 1, 2)
    assert op.nn.conv2d(X, Y, padding=1).attrs["padding"] == (1, 1, 1, 1)
    assert op.nn.conv2d(X, Y, padding=(1, 2, 3, 4)).attrs["padding"] == (1, 2, 3, 4)


def test_conv2d_int_and_nhwc():
    data, weight = ints(1, 2, 5, 5), ints(3, 2, 3, 3)
    check(op.nn.conv2d(X, Y), [data, weight], reference_conv2d(data, weight, (1, 1), (0,) * 4, (1, 1), 1))
    data, weight = rand(2, 3, 6, 6), rand(4, 3, 3, 3)
    nchw = reference_conv2d(data, weight, (2, 2), (1, 1, 1, 1), (1, 1), 1)
    magnitude = reference_conv2d(np.abs(data), np.abs(weight), (2, 2), (1, 1, 1, 1), (1, 1), 1)
    call = op.nn.conv2d(X, Y, strides=2, padding=1, data_layout="NHWC", kernel_layout="HWIO")
    check(call, [data.transpose(0, 2, 3, 1), weight.transpose(2, 3, 1, 0)], nchw.transpose(0, 2, 3, 1),
          terms=3 * 3 * 3, magnitude=magnitude.transpose(0, 2, 3, 1))


def test_conv2d_errors():
    data = TensorType((1, 4, 8, 8), "float32")
    with pytest.raises(IRTypeError, match=r"op nn.conv2d: expected the weight to have 2 input channels "
                                          r"\(data channels 4 / groups 2\), got Tensor\[\(6, 4, 3, 3\)"):
        infer(op.nn.conv2d(X, Y, groups=2), data, TensorType((6, 4, 3, 3), "float32"))
    with pytest.raises(IRTypeError, match="groups=3 must divide the input channels"):
        infer(op.nn.conv2d(X, Y, groups=3), data, TensorType((6, 1, 3, 3), "float32"))
    message = r"height: window of extent 9 .* larger than the padded input extent 8"
    with pytest.raises(IRTypeError, match=message):
        infer(op.nn.conv2d(X, Y), data, TensorType((2, 4, 9, 1), "float32"))
    with pytest.raises(IRTypeError, match=r"expected the data of rank 4 \(NCHW\), got Tensor\[\(2, 3\)"):
        infer(op.nn.conv2d(X, Y), F32, TensorType((2, 4, 3, 3), "float32"))
    with pytest.raises(IRTypeError, match="expected the weight of dtype float32"):
        infer(op.nn.conv2d(X, Y), data, TensorType((2, 4, 3, 3), "float64"))


def test_dense_and_bias_add():
    data, weight = rand(5, 4), rand(3, 4)
    # dot products of 4 terms, blocked as BLAS likes
    check(op.nn.dense(X, Y), [data, weight], data @ weight.T, terms=4,
          magnitude=np.abs(data) @ np.abs(weight).T)
    batched = rand(2, 5, 4)
    check(op.nn.dense(X, Y), [batched, weight], batched @ weight.T, terms=4,
          magnitude=np.abs(batched) @ np.abs(weight).T)
    bias = rand(3)
    image = rand(2, 3, 4, 5)
    check(op.nn.bias_add(X, Y), [image, bias], image + bias.reshape(1, 3, 1, 1))
    channels_last = rand(2, 4, 3)
    check(op.nn.bias_add(X, Y, axis=-1), [channels_last, bias], channels_last + bias)
    with pytest.raises(IRTypeError, match=r"op nn.dense: expected the data's last dimension to be 4"):
        infer(op.nn.dense(X, Y), TensorType((5, 3), "float32"), TensorType((3, 4), "float32"))
    message = r"op nn.bias_add: expected the bias of type Tensor\[\(3\), float32\], got Tensor\[\(4\)"
    with pytest.raises(IRTypeError, match=message):
        infer(op.nn.bias_add(X, Y), TensorType((2, 3, 4), "float32"), TensorType((4,), "float32"))


def test_relu_gelu_softmax_dropout():
    data = rand(3, 5)
    check(op.nn.relu(X), [data], np.maximum(data, 0))
    int_data = ints(6)
    check(op.nn.relu(X), [int_data], np.maximum(int_data, 0))
    erf = np.vectorize(math.erf)
    check(op.nn.gelu(X), [data], (0.5 * data * (1 + erf(data / math.sqrt(2)))).astype("float32"))
    for axis in (-1, 0):
        shifted = np.exp(data - data.max(axis=axis, keepdims=True))
        check(op.nn.softmax(X, axis=axis), [data], shifted / shifted.sum(axis=axis, keepdims=True))
    large = np.array([[1000.0, 1000.0]], "float32")
    np.testing.assert_allclose(Op.get("nn.softmax").compute([large], op.nn.softmax(X).attrs), [[0.5, 0.5]])
    check(op.nn.dropout(X, rate=0.3), [data], data)
    with pytest.raises(IRTypeError, match=r"op nn.softmax: axis 2 is out of range"):
        infer(op.nn.softmax(X, axis=2), F32)
    with pytest.raises(IRTypeError, match=r"op nn.softmax: expected the data of dtype float16, .*float64"):
        infer(op.nn.softmax(X), TensorType((3,), "int32"))


def test_batch_norm_is_inference_and_returns_three_fields():
    data = rand(2, 3, 4, 4)
    gamma, beta, mean = rand(3), rand(3), rand(3)
    var = np.abs(rand(3)) + 0.5
    shape = (1, 3, 1, 1)
    expected = (data - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + 1e-3) * gamma.reshape(shape) \
        + beta.reshape(shape)
    call = op.nn.batch_norm(X, Y, Y, Y, Y, epsilon=1e-3)
    check(call, [data, gamma, beta, mean, var], (expected.astype("float32"), mean, var), rtol=1e-5, atol=1e-5)
    last = rand(5, 3)
    call_last = op.nn.batch_norm(X, Y, Y, Y, Y, axis=-1)
    expected_last = (last - mean) / np.sqrt(var + 1e-5) * gamma + beta
    check(call_last, [last, gamma, beta, mean, var], (expected_last, mean, var), rtol=1e-5, atol=1e-5)
    vector = TensorType((3,), "float32")
    with pytest.raises(IRTypeError, match=r"op nn.batch_norm: expected moving_var of type Tensor\[\(3\), "
                                          r"float32\], got Tensor\[\(4\), float32\]"):
        infer(call, tensor_type(data), vector, vector, vector, TensorType((4,), "float32"))


def test_layer_norm():
    data, gamma, beta = rand(2, 3, 6), rand(6), rand(6)
    mean = data.mean(axis=-1, keepdims=True)
    var = data.var(axis=-1, keepdims=True)
    expected = (data - mean) / np.sqrt(var + 1e-5) * gamma + beta
    check(op.nn.layer_norm(X, Y, Z), [data, gamma, beta], expected, rtol=1e-4, atol=1e-5)
    gamma1, beta1 = rand(3), rand(3)
    mean1, var1 = data.mean(axis=1, keepdims=True), data.var(axis=1, keepdims=True)
    expected1 = (data - mean1) / np.sqrt(var1 + 1e-2) * gamma1.reshape(1, 3, 1) + beta1.reshape(1, 3, 1)
    check(op.nn.layer_norm(X, Y, Z, axis=1, epsilon=1e-2), [data, gamma1, beta1], expected1,
          rtol=1e-4, atol=1e-5)
    message = r"op nn.layer_norm: expected gamma of type Tensor\[\(6\), float32\]"
    with pytest.raises(IRTypeError, match=message):
        infer(op.nn.layer_norm(X, Y, Z), tensor_type(data), TensorType((3,), "float32"),
              TensorType((6,), "float32"))


def reference_pool(data, pool_size, strides, padding, reducer, fill):
    top, left, bottom, right = padding
    padded = np.pad(data, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=fill)
    out_h = (padded.shape[2] - pool_size[0]) // strides[0] + 1
    out_w = (padded.shape[3] - pool_size[1]) // strides[1] + 1
    out = np.empty(data.shape[:2] + (out_h, out_w), np.float64)
    for y in range(out_h):
        for x in range(out_w):
            window = padded[:, :, y * strides[0]:y * strides[0] + pool_size[0],
                            x * strides[1]:x * strides[1] + pool_size[1]]
            out[:, :, y, x] = reducer(window)
    return out.astype(data.dtype)


@pytest.mark.parametrize("pool_size, strides, padding", [
    ((2, 2), (2, 2), (0, 0)), ((3, 3), (1, 1), (1, 1)), ((3, 2), (2, 1), (1, 0, 0, 1)),
])
def test_pools(pool_size, strides, padding):
    data = rand(2, 3, 7, 6)
    max_call = op.nn.max_pool2d(X, pool_size, strides, padding)
    pad4 = max_call.attrs["padding"]
    check(max_call, [data], reference_pool(data, pool_size, strides, pad4,
                                           lambda w: w.max(axis=(2, 3)), -np.inf))
    # the divisor counts only the real cells of each window (count_include_pad=False)
    ones = np.ones_like(data)
    counts = reference_pool(ones, pool_size, strides, pad4, lambda w: w.sum(axis=(2, 3)), 0)
    sums = reference_pool(data, pool_size, strides, pad4, lambda w: w.sum(axis=(2, 3)), 0)
    # averages of at most pool_h * pool_w cells, each summed in its own order, then divided
    abs_sums = reference_pool(np.abs(data), pool_size, strides, pad4, lambda w: w.sum(axis=(2, 3)), 0)
    terms = pool_size[0] * pool_size[1]
    check(op.nn.avg_pool2d(X, pool_size, strides, padding), [data], sums / counts, terms=terms,
          magnitude=abs_sums / counts)
    including = op.nn.avg_pool2d(X, pool_size, strides, padding, count_include_pad=True)
    check(including, [data], sums / terms, terms=terms, magnitude=abs_sums / terms)


def test_pool_int_nhwc_and_errors():
    data = ints(1, 2, 4, 4)
    check(op.nn.max_pool2d(X, 2, 2, padding=1), [data],
          reference_pool(data, (2, 2), (2, 2), (1, 1, 1, 1), lambda w: w.max(axis=(2, 3)), -(2**31)))
    image = rand(2, 3, 6, 6)
    nchw = reference_pool(image, (2, 2), (2, 2), (0,) * 4, lambda w: w.max(axis=(2, 3)), 0)
    check(op.nn.max_pool2d(X, (2, 2), (2, 2), layout="NHWC"), [image.transpose(0, 2, 3, 1)],
          nchw.transpose(0, 2, 3, 1))
    with pytest.raises(IRTypeError, match=r"op nn.max_pool2d: width: window of extent 5"):
        infer(op.nn.max_pool2d(X, (1, 5)), TensorType((1, 1, 8, 4), "float32"))
    with pytest.raises(IRTypeError, match=r"op nn.avg_pool2d: expected the data of dtype float16,.*float64"):
        infer(op.nn.avg_pool2d(X, 2), TensorType((1, 1, 4, 4), "int32"))


def test_global_avg_pool2d():
    data = rand(2, 3, 5, 4)
    check(op.nn.global_avg_pool2d(X), [data], data.mean(axis=(2, 3), keepdims=True))
    check(op.nn.global_avg_pool2d(X, layout="NHWC"), [data], data.mean(axis=(1, 2), keepdims=True))
    with pytest.raises(IRTypeError, match=r"op nn.global_avg_pool2d: expected the data of rank 4"):
        infer(op.nn.global_avg_pool2d(X), F32)


def test_small_cnn_runs_fast_enough():
    # the interpreter runs small CNNs with these kernels: a 3x3 conv over a 1x16x56x56
    # batch must not be a Python loop over pixels
    import time

    data, weight = rand(1, 16, 56, 56), rand(32, 16, 3, 3)
    call = op.nn.conv2d(X, Y, padding=1)
    start = time.perf_counter()
    out = call.op.compute([data, weight], call.attrs)
    assert out.shape == (1, 32, 56, 56) and out.dtype == np.float32
    assert time.perf_counter() - start < 2.0


# --------------------------------------------------------------------------- random


def test_random_uniform():
    call = op.random.uniform(-2.0, 3, (4, 5), "float64")
    assert call.args == ()
    assert dict(call.attrs) == {"low": -2.0, "high": 3.0, "shape": (4, 5), "dtype": "float64"}
    assert infer(call) == TensorType((4, 5), "float64")
    op.random.seed(7)
    first = call.op.compute([], call.attrs)
    second = call.op.compute([], call.attrs)
    op.random.seed(7)
    again = call.op.compute([], call.attrs)
    assert first.dtype == np.float64 and first.shape == (4, 5)
    assert np.all((first >= -2.0) & (first < 3.0))
    assert not np.array_equal(first, second)  # stateful: each run draws anew
    np.testing.assert_array_equal(first, again)
    default = op.random.uniform(0, 1, 3)
    assert infer(default) == TensorType((3,), "float32")
    assert default.op.compute([], default.attrs).dtype == np.float32


# --------------------------------------------------------------------------- user-registered ops


def test_user_can_register_an_op_and_build_calls():
    def scale_relation(arg_types, attrs):
        data = arg_types[0]
        if not isinstance(data, TensorType):
            raise IRTypeError(f"expected a tensor, got {data!r}")
        return data

    def scale_impl(args, attrs):
        return (args[0] * attrs["factor"]).astype(args[0].dtype)

    registered = register_op("test.scale", num_inputs=1, type_rel=scale_relation, impl=scale_impl,
                             pattern=OpPattern.ELEMWISE, doc="multiply by attrs factor", override=True)
    assert Op.get("test.scale") is registered
    call = op.call_op("test.scale", X, factor=2.5)
    assert call.op is registered and call.attrs["factor"] == 2.5
    assert infer(call, F32) == F32
    data = rand(2, 3)
    np.testing.assert_allclose(call.op.compute([data], call.attrs), data * 2.5, rtol=1e-6)
    with pytest.raises(IRTypeError, match="op test.scale: expected a tensor"):
        infer(call, TupleType([]))
    with pytest.raises(IRError, match="already registered"):
        register_op("test.scale", num_inputs=1, type_rel=scale_relation, impl=scale_impl,
                    pattern=OpPattern.ELEMWISE)


# --------------------------------------------------------------------------- attribute schema


def test_hand_built_calls_get_default_attrs():
    # a call built without a builder (or parsed from text) may leave attributes out
    conv = ir.Call(Op.get("nn.conv2d"), [X, Y])
    data, weight = rand(1, 2, 5, 5), rand(3, 2, 3, 3)
    assert infer(conv, tensor_type(data), tensor_type(weight)) == TensorType((1, 3, 3, 3), "float32")
    expected = Op.get("nn.conv2d").compute([data, weight], op.nn.conv2d(X, Y).attrs)
    np.testing.assert_array_equal(conv.op.compute([data, weight], conv.attrs), expected)
    total = ir.Call(Op.get("sum"), [X], {"axis": (1,)})
    assert infer(total, F32) == TensorType((2,), "float32")


def test_builders_set_every_attribute_of_the_schema():
    for call in (op.nn.conv2d(X, Y), op.sum(X), op.nn.avg_pool2d(X, 2), op.random.uniform(0, 1, 2),
                 op.split(X, 2), op.full(X, (1,))):
        assert set(call.attrs) == set(call.op.get_attr("attr_defaults"))


def test_missing_and_unknown_attributes_are_named():
    with pytest.raises(IRTypeError, match="op reshape: missing required attribute 'newshape'"):
        infer(ir.Call(Op.get("reshape"), [X]), F32)
    message = r"op sum: unknown attribute 'axes' \(known attributes: axis, keepdims\)"
    with pytest.raises(IRTypeError, match=message):
        infer(ir.Call(Op.get("sum"), [X], {"axes": (0,)}), F32)
    with pytest.raises(IRTypeError, match=r"op add: unknown attribute 'axis' \(known attributes: none\)"):
        Op.get("add").compute([rand(2), rand(2)], ir.Attrs(axis=0))


def test_error_messages_show_types_as_the_printer_does():
    from passinfra.ir.op._rel import type_text

    samples = [TensorType((), "float32"), TensorType((3,), "int32"), F32, TupleType([F32, TensorType((1,))]),
               TupleType([F32]), TupleType([]), ir.FuncType([F32], TensorType(()))]
    for sample in samples:
        assert type_text(sample) == str(sample)

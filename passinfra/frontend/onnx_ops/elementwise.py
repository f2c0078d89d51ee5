"""Elementwise ONNX ops: arithmetic, comparisons, logic, math functions, activations."""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np

from passinfra.frontend.onnx_ops.context import NodeContext, OnnxImportWarning
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.ir import op
from passinfra.ir.expr import Expr
from passinfra.ir.op import extra
from passinfra.ir.op.precision import compute_op
from passinfra.ir.op.registry import Op
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import is_float_dtype, is_int_dtype, normalize_dtype

# ONNX op type -> registered IR op, for ops that map one to one on all their inputs
_BINARY = {
    "Add": "add",
    "Sub": "subtract",
    "Mul": "multiply",
    "Div": "divide",
    "Equal": "equal",
    "Less": "less",
    "Greater": "greater",
    "LessOrEqual": "less_equal",
    "GreaterOrEqual": "greater_equal",
    "And": "logical_and",
    "Or": "logical_or",
    "Xor": "not_equal",
    "BitwiseAnd": "bitwise_and",
    "BitwiseOr": "bitwise_or",
    "BitwiseXor": "bitwise_xor",
}
_UNARY = {
    "Neg": "negative",
    "Abs": "abs",
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Tanh": "tanh",
    "Sigmoid": "sigmoid",
    "Erf": "erf",
    "Not": "logical_not",
    "BitwiseNot": "bitwise_not",
    "Relu": "nn.relu",
    "Floor": "floor",
    "Ceil": "ceil",
    "Round": "round",
    "Sign": "sign",
    "Reciprocal": "reciprocal",
    "Sin": "sin",
    "Cos": "cos",
    "Tan": "tan",
    "Asin": "asin",
    "Acos": "acos",
    "Atan": "atan",
    "Sinh": "sinh",
    "Cosh": "cosh",
    "Asinh": "asinh",
    "Acosh": "acosh",
    "Atanh": "atanh",
    "Softplus": "nn.softplus",
    "Softsign": "nn.softsign",
}
# activations with float attributes: ONNX attribute -> IR attribute, with ONNX defaults
_ACTIVATIONS = {
    "LeakyRelu": ("nn.leaky_relu", {"alpha": 0.01}),
    "Elu": ("nn.elu", {"alpha": 1.0}),
    "Selu": ("nn.selu", {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}),
    "HardSigmoid": ("nn.hard_sigmoid", {"alpha": 0.2, "beta": 0.5}),
}


def _binary(op_name: str):
    def convert(node: NodeContext) -> Expr:
        return call_op(op_name, node.arg(0), node.arg(1))

    return convert


def _unary(op_name: str):
    def convert(node: NodeContext) -> Expr:
        return call_op(op_name, node.arg(0))

    return convert


def _activation(op_name: str, defaults: dict[str, float]):
    def convert(node: NodeContext) -> Expr:
        attrs = {key: float(node.attr(key, default)) for key, default in defaults.items()}
        return call_op(op_name, node.arg(0), **attrs)

    return convert


for _onnx, _ir in _BINARY.items():
    converter(_onnx)(_binary(_ir))
for _onnx, _ir in _UNARY.items():
    converter(_onnx)(_unary(_ir))
for _onnx, (_ir, _defaults) in _ACTIVATIONS.items():
    converter(_onnx)(_activation(_ir, _defaults))


def scalar(value: float, dtype: str) -> np.ndarray:
    return np.asarray(value, dtype=dtype)


@converter("Pow")
def _pow(node: NodeContext) -> Expr:
    base = node.arg(0)
    exponent = node.input(1)
    dtype = node.dtype(node.input(0))
    # ONNX lets the exponent have another dtype; the IR op needs one dtype
    if node.dtype(exponent) != dtype:
        known = node.is_known(exponent)
        exponent = node.expr(cast_known(node, exponent, dtype)) if known else op.cast(exponent, dtype)
    return op.power(base, node.expr(exponent))


@converter("Identity")
def _identity(node: NodeContext):
    return node.input(0)


@converter("Dropout")
def _dropout(node: NodeContext):
    # inference: the identity; the optional mask output is all true
    data = node.input(0)
    if node.num_outputs > 1:
        return [data, np.ones(node.shape(data), dtype=bool)]
    return data


@converter("PRelu")
def _prelu(node: NodeContext) -> Expr:
    data, slope = node.arg(0), node.arg(1)
    shape, slope_shape = node.shape(node.input(0)), node.shape(node.input(1))
    # exporters write a per-channel slope as (C,); lay it along axis 1 as older ONNX did
    if len(slope_shape) == 1 and len(shape) > 2 and slope_shape[0] == shape[1] != shape[-1]:
        slope = op.reshape(slope, (shape[1],) + (1,) * (len(shape) - 2))
    zero = scalar(0, node.dtype(node.input(0)))
    return op.where(op.less(data, node.expr(zero)), op.multiply(data, slope), data)


@converter("ThresholdedRelu")
def _thresholded_relu(node: NodeContext) -> Expr:
    data = node.arg(0)
    dtype = node.dtype(node.input(0))
    alpha = node.expr(scalar(node.attr("alpha", 1.0), dtype))
    return op.where(op.greater(data, alpha), data, node.expr(scalar(0, dtype)))


@converter("Shrink")
def _shrink(node: NodeContext) -> Expr:
    data = node.arg(0)
    dtype = node.dtype(node.input(0))
    lambd, bias = node.attr("lambd", 0.5), node.attr("bias", 0.0)
    below = op.less(data, node.expr(scalar(-lambd, dtype)))
    above = op.greater(data, node.expr(scalar(lambd, dtype)))
    shifted_up = op.add(data, node.expr(scalar(bias, dtype)))
    shifted_down = op.subtract(data, node.expr(scalar(bias, dtype)))
    return op.where(below, shifted_up, op.where(above, shifted_down, node.expr(scalar(0, dtype))))


@converter("Gelu", since=20)
def _gelu(node: NodeContext) -> Expr:
    data = node.arg(0)
    if node.attr("approximate", "none") == "none":
        return op.nn.gelu(data)
    # tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    dtype = node.dtype(node.input(0))
    cubic = op.multiply(op.multiply(op.multiply(data, data), data), node.expr(scalar(0.044715, dtype)))
    inner = op.multiply(op.add(data, cubic), node.expr(scalar(math.sqrt(2 / math.pi), dtype)))
    half = op.multiply(data, node.expr(scalar(0.5, dtype)))
    return op.multiply(half, op.add(op.tanh(inner), node.expr(scalar(1, dtype))))


@converter("Clip", since=1)
def _clip_attrs(node: NodeContext) -> Expr:
    return op.clip(
        node.arg(0), node.attr("min", -3.4028234663852886e38), node.attr("max", 3.4028234663852886e38)
    )


@converter("Clip", since=11)
def _clip_inputs(node: NodeContext) -> Expr:
    data = node.arg(0)
    low, high = node.input(1), node.input(2)
    # minimum/maximum keep the dtype (ints too) and accept bounds computed at run time
    if low is not None:
        data = op.maximum(data, node.expr(low))
    if high is not None:
        data = op.minimum(data, node.expr(high))
    return data


def _variadic(op_name: str, mean: bool = False):
    def convert(node: NodeContext) -> Expr:
        args = [node.arg(i) for i in range(len(node.inputs))]
        result = functools.reduce(lambda a, b: call_op(op_name, a, b), args)
        if mean:
            result = op.divide(result, node.expr(scalar(len(args), node.dtype(node.input(0)))))
        return result

    return convert


converter("Sum")(_variadic("add"))
converter("Max")(_variadic("maximum"))
converter("Min")(_variadic("minimum"))
converter("Mean")(_variadic("add", mean=True))


def cast_known(node: NodeContext, value: np.ndarray, dtype: str | np.dtype) -> np.ndarray:
    """``value`` (known at import) cast to ``dtype`` by the ``cast`` op's own implementation,
    the one the interpreter and FoldConstant run, so a cast folded here and the same cast
    at run time agree, and without NumPy's warnings.

    ONNX's Cast leaves one numeric conversion undefined: "Casting from floating point to
    fixed point: undefined if OOR (out of range)". Every other is defined, and NumPy's
    warnings about them are noise: a float past a float type's range is "+/- infinity",
    an integer past a float type's is "+/- infinity", one past an integer type's keeps its
    low bits ("discard higher bits and reinterpret"), and to bool "+/- 0.0 to False; all
    else to True" (NaN too). The undefined elements (NaN, infinities, floats whose integer
    part the type cannot hold: a T5 export casts log(0) = -inf to int64, then drops it with
    a Where) keep the op's value (what the interpreter and FoldConstant compute; on x86-64
    INT_MIN, the "integer indefinite", for int32/int64, as compiled code gives) and get an
    OnnxImportWarning naming the node: a model whose output depends on them has no
    meaning that compiled code or other runtimes must agree with.
    """
    source, target = normalize_dtype(value.dtype), normalize_dtype(dtype)
    result = np.asarray(compute_op(Op.get("cast"), [value], {"dtype": target}))  # silences NumPy itself
    if is_float_dtype(source) and is_int_dtype(target):
        undefined = _outside_integer_range(value, target)
        if undefined.any():
            first = int(np.flatnonzero(undefined)[0])
            example, got = value.reshape(-1)[first], result.reshape(-1)[first]
            warnings.warn(
                f"{node.where()}: {int(undefined.sum())} of {value.size} value(s) cast from {source} to "
                f"{target} are NaN, infinite or out of {target}'s range (e.g. {example}), which ONNX leaves "
                f"undefined; they get the reference interpreter's value (here {got}), which compiled code "
                "and other runtimes need not match",
                OnnxImportWarning,
                stacklevel=2,
            )
    return result


def _outside_integer_range(value: np.ndarray, dtype: str) -> np.ndarray:
    """Where ``value`` (floats) has no integer part that ``dtype`` holds: NaN, infinities,
    out-of-range values (a fraction is truncated toward zero, as C does: -0.5 -> 0 fits
    uint8)."""
    info = np.iinfo(dtype)
    whole = np.trunc(value.astype(np.float64)).reshape(-1)  # float64 holds every float the IR has
    # the bounds are powers of two (the least value, one past the greatest): exact floats,
    # where float(info.max) of a 64-bit type would round up into the range's outside
    low, past_high = float(info.min), float(int(info.max) + 1)
    return ~((whole >= low) & (whole < past_high))  # NaN compares false: outside


@converter("Cast")
def _cast(node: NodeContext):
    from passinfra.frontend.onnx_ops.tensor import onnx_dtype

    dtype = onnx_dtype(node.attr("to"), node)
    value = node.input(0)
    if node.is_known(value):
        return cast_known(node, value, dtype)
    return op.cast(value, dtype)


@converter("CastLike", since=15)
def _cast_like(node: NodeContext):
    value = node.input(0)
    dtype = node.dtype(node.input(1))
    if node.is_known(value):
        return cast_known(node, value, dtype)
    return op.cast(value, dtype)


@converter("Where")
def _where(node: NodeContext) -> Expr:
    return op.where(node.arg(0), node.arg(1), node.arg(2))


@converter("HardSwish", since=14)
def _hard_swish(node: NodeContext) -> Expr:
    data = node.arg(0)
    gate = extra.unary("nn.hard_sigmoid", data, alpha=1 / 6, beta=0.5)
    return op.multiply(data, gate)

"""Compute rules of the elementwise and broadcast ops: arithmetic, comparisons, logic,
math intrinsics, clip, relu, gelu, bias_add and dropout (the identity at inference).

Every rule is a :class:`ComputeOp` whose value at an output index reads each input at
the broadcast index. Math intrinsics are named generically (``exp``, ``erf``, ``pow``,
``fabs``); the C renderer picks the float or double variant from the dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from passinfra import tir
from passinfra.codegen.compute.base import (
    ComputeOp,
    TensorHandle,
    imm,
    intrinsic,
    load_broadcast,
    register_compute,
)
from passinfra.ir.attrs import Attrs
from passinfra.ir.op._rel import normalize_axis
from passinfra.ir.types import TensorType, Type, is_float_dtype

Scalar = tir.PrimExpr


def _is_float(dtype: str) -> bool:
    return is_float_dtype(dtype)  # bfloat16 too


def _divide(a: Scalar, b: Scalar) -> Scalar:
    # tir.Div truncates on integers, which is the op's semantics (C, not NumPy floor)
    return tir.Div(a, b)


def _power(a: Scalar, b: Scalar) -> Scalar:
    if _is_float(a.dtype):
        return intrinsic("pow", a, b)
    # integer power through double: exact for every result an int64 can hold closely
    # enough for the small exponents integer power is used with
    return tir.Cast(a.dtype, intrinsic("pow", tir.Cast("float64", a), tir.Cast("float64", b)))


_BINARY: dict[str, Callable[[Scalar, Scalar], Scalar]] = {
    "add": tir.Add,
    "subtract": tir.Sub,
    "multiply": tir.Mul,
    "divide": _divide,
    "maximum": tir.Max,
    "minimum": tir.Min,
    "power": _power,
    "equal": tir.EQ,
    "not_equal": tir.NE,
    "less": tir.LT,
    "less_equal": tir.LE,
    "greater": tir.GT,
    "greater_equal": tir.GE,
    "logical_and": tir.And,
    "logical_or": tir.Or,
}


def _abs(x: Scalar) -> Scalar:
    if _is_float(x.dtype):
        return intrinsic("fabs", x)
    return tir.Select(tir.LT(x, imm(0, x.dtype)), imm(0, x.dtype) - x, x)


def _sigmoid(x: Scalar) -> Scalar:
    one = imm(1, x.dtype)
    return one / (one + intrinsic("exp", imm(0, x.dtype) - x))


def _gelu(x: Scalar) -> Scalar:
    half, one = imm(0.5, x.dtype), imm(1, x.dtype)
    return half * x * (one + intrinsic("erf", x / imm(math.sqrt(2.0), x.dtype)))


_UNARY: dict[str, Callable[[Scalar], Scalar]] = {
    "negative": lambda x: imm(0, x.dtype) - x,
    "abs": _abs,
    "exp": lambda x: intrinsic("exp", x),
    "log": lambda x: intrinsic("log", x),
    "sqrt": lambda x: intrinsic("sqrt", x),
    "tanh": lambda x: intrinsic("tanh", x),
    "erf": lambda x: intrinsic("erf", x),
    "sigmoid": _sigmoid,
    "logical_not": tir.Not,
    "nn.relu": lambda x: tir.Max(x, imm(0, x.dtype)),
    "nn.gelu": _gelu,
    "nn.dropout": lambda x: x,  # inference: every element kept, unscaled
}


def _out(out_type: Type) -> TensorType:
    assert isinstance(out_type, TensorType)
    return out_type


def _binary_rule(name: str) -> Callable:
    combine = _BINARY[name]

    def rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
        lhs, rhs = inputs
        shape = _out(out_type).shape
        def value(idx: tuple) -> Scalar:
            return combine(load_broadcast(lhs, idx, shape), load_broadcast(rhs, idx, shape))

        return ComputeOp(name, shape, out_type.dtype, value)

    return rule


def _unary_rule(name: str) -> Callable:
    apply = _UNARY[name]

    def rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
        (data,) = inputs
        return ComputeOp(name, _out(out_type).shape, out_type.dtype, lambda idx: apply(data.load(*idx)))

    return rule


for _name in _BINARY:
    register_compute(_name)(_binary_rule(_name))
for _name in _UNARY:
    register_compute(_name)(_unary_rule(_name))


@register_compute("clip")
def _clip(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (data,) = inputs
    dtype = data.dtype
    # the bounds are floats; clamping integers in double and truncating back matches NumPy
    work = dtype if _is_float(dtype) else "float64"
    low, high = imm(attrs["a_min"], work), imm(attrs["a_max"], work)

    def value(idx: tuple) -> Scalar:
        x = data.load(*idx)
        x = x if work == dtype else tir.Cast(work, x)
        clamped = tir.Min(tir.Max(x, low), high)
        return clamped if work == dtype else tir.Cast(dtype, clamped)

    return ComputeOp("clip", _out(out_type).shape, dtype, value)


@register_compute("cast")
def _cast(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (data,) = inputs
    dtype = out_type.dtype

    def value(idx: tuple) -> Scalar:
        x = data.load(*idx)
        return x if x.dtype == dtype else tir.Cast(dtype, x)

    return ComputeOp("cast", _out(out_type).shape, dtype, value)


@register_compute("nn.bias_add")
def _bias_add(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    data, bias = inputs
    axis = normalize_axis(attrs["axis"], len(data.shape))
    return ComputeOp("nn.bias_add", data.shape, data.dtype,
                     lambda idx: data.load(*idx) + bias.load(idx[axis]))

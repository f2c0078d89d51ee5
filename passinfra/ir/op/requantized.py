"""Integer contractions with their requantization: ``qnn.requantized_conv2d`` and
``qnn.requantized_matmul``.

Each is, exactly, ``qnn.requantize(qnn.conv2d(...) + bias, multiplier, zero_point)`` (or
``qnn.matmul``): the int32 sum plus an int32 bias (wrapping), converted to float32,
times the float32 multiplier, rounded half to even, plus the output's zero point,
saturated to its 8-bit type (:mod:`passinfra.ir.op.quantize` has the arithmetic). One op
so the code generator runs the requantization inside the integer GEMM, on each block of
sums while it is in the cache, instead of storing int32 and reading it back
(RequantizeInKernels, :mod:`passinfra.codegen.passes.requantize_in_kernels`, forms them;
nothing else does). ``bias`` and ``multiplier`` vary along the output's last axis at
most (one value, or one per output channel / column).

With six more inputs, ``(q_scale, residual, residual_scale, residual_zero, add_scale,
add_zero)``, the op is also a residual block's QLinearAdd of its requantized output ``q``
(scale ``q_scale``, zero point ``zero_point``) and ``residual`` (a tensor of the output's
shape and type): ``qnn.add(q, q_scale, zero_point, residual, residual_scale,
residual_zero, add_scale, add_zero)``, or with attribute ``residual_first`` the residual
as qnn.add's first operand (its arithmetic is not symmetric). RequantizeInKernels forms
it too, so the GEMM adds the residual to each block of outputs while it is in the cache.

With one more input last, ``table`` (256 values of the output's type), each output is then
looked up in it: ``table[value - lowest value of the type]``, the ``take`` of an
element-wise function of the 8-bit output that QuantizedLookupTables made (a hard-swish
between a DequantizeLinear and a QuantizeLinear); RequantizeInKernels joins it, so the
kernel stores the looked-up values and no loop reads the output back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op import quantize as qnn
from passinfra.ir.op._rel import expect_dtype, expect_tensor, register_tensor_op, type_text
from passinfra.ir.op.registry import Op, OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, Type

__all__ = ["CONTRACTIONS", "REQUANTIZED_INPUTS", "RESIDUAL_INPUTS", "TABLE_SIZE", "has_residual",
           "has_table", "requantized_conv2d", "requantized_matmul"]

# the requantized op of each contraction
CONTRACTIONS = {"qnn.conv2d": "qnn.requantized_conv2d", "qnn.matmul": "qnn.requantized_matmul"}
_EIGHT_BITS = ("int8", "uint8")


def along_last_axis(ty: Type, out: TensorType, what: str, dtype: str) -> TensorType:
    """``ty`` must be a ``dtype`` tensor of one value or one per entry of ``out``'s last
    axis (any leading axes of size 1)."""
    tensor = expect_tensor(ty, what)
    expect_dtype(tensor, (dtype,), what)
    shape = tuple(tensor.shape)
    along = not shape or (all(d == 1 for d in shape[:-1]) and shape[-1] in (1, out.shape[-1]))
    if tensor.ndim > out.ndim or not along:
        raise IRTypeError(f"expected {what} of one value or one per entry of the last axis of "
                          f"{type_text(out)}, got {type_text(tensor)}")
    return tensor


# the inputs of the op alone and with its residual add (each with one more: its table)
REQUANTIZED_INPUTS, RESIDUAL_INPUTS = 7, 13
# the values of a lookup table: one per value of an 8-bit type
TABLE_SIZE = 256


def has_residual(inputs: int) -> bool:
    """Whether an op of this many inputs adds a residual."""
    return inputs >= RESIDUAL_INPUTS


def has_table(inputs: int) -> bool:
    """Whether an op of this many inputs looks its outputs up in a table (its last input)."""
    return inputs in (REQUANTIZED_INPUTS + 1, RESIDUAL_INPUTS + 1)


def _scalar(ty: Type, what: str, dtype: str) -> None:
    tensor = expect_tensor(ty, what)
    if tensor.ndim != 0 or tensor.dtype != dtype:
        raise IRTypeError(f"expected {what} to be a {dtype} scalar, got {type_text(tensor)}")


def _base_attrs(attrs: Attrs) -> Attrs:
    """The contraction's attrs of the op's (all but residual_first)."""
    return Attrs({key: value for key, value in attrs.items() if key != "residual_first"})


def _relation(contraction: str) -> Any:
    base = Op.get(contraction)

    def relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
        if len(arg_types) not in (REQUANTIZED_INPUTS, RESIDUAL_INPUTS) and not has_table(len(arg_types)):
            raise IRTypeError(f"expected {REQUANTIZED_INPUTS} arguments, or {RESIDUAL_INPUTS} with a "
                              f"residual add, one more with a table, got {len(arg_types)}")
        acc = base.type_rel(arg_types[:4], _base_attrs(attrs))
        assert isinstance(acc, TensorType)
        along_last_axis(arg_types[4], acc, "the bias", "int32")
        along_last_axis(arg_types[5], acc, "the multiplier", "float32")
        zero = expect_tensor(arg_types[6], "the output zero point")
        if zero.ndim != 0 or zero.dtype not in _EIGHT_BITS:
            raise IRTypeError(f"expected the output zero point to be an int8 or uint8 scalar, got "
                              f"{type_text(zero)}")
        out = TensorType(acc.shape, zero.dtype)
        if has_table(len(arg_types)):
            table = expect_tensor(arg_types[-1], "the table")
            if table.shape != (TABLE_SIZE,) or table.dtype != zero.dtype:
                raise IRTypeError(f"expected the table to be {TABLE_SIZE} values of the output's type "
                                  f"{zero.dtype}, got {type_text(table)}")
        if has_residual(len(arg_types)):
            residual = expect_tensor(arg_types[8], "the residual")
            if residual != out:
                raise IRTypeError(f"expected the residual to be {type_text(out)} (the requantized output's "
                                  f"type), got {type_text(residual)}")
            for index, what, dtype in ((7, "the requantized output's scale", "float32"),
                                       (9, "the residual's scale", "float32"),
                                       (10, "the residual's zero point", zero.dtype),
                                       (11, "the sum's scale", "float32"),
                                       (12, "the sum's zero point", zero.dtype)):
                _scalar(arg_types[index], what, dtype)
        return out

    return relation


def _impl(contraction: str) -> Any:
    base = Op.get(contraction)
    add = Op.get("qnn.add")

    def impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
        acc = base.impl(args[:4], _base_attrs(attrs))
        with np.errstate(over="ignore"):
            total = (np.asarray(acc, np.int32) + np.asarray(args[4], np.int32)).astype(np.int32)
        q = qnn.requantize_values(total, np.asarray(args[5]), np.asarray(args[6]))
        if has_residual(len(args)):
            q_scale, residual, residual_scale, residual_zero, add_scale, add_zero = args[7:13]
            operands = [(q, q_scale, args[6]), (residual, residual_scale, residual_zero)]
            if attrs["residual_first"]:
                operands.reverse()
            q = add.impl([*operands[0], *operands[1], add_scale, add_zero], Attrs({}))
        if has_table(len(args)):
            values = np.asarray(q)
            q = np.asarray(args[-1])[values.astype(np.int64) - int(np.iinfo(values.dtype).min)]
        return q

    return impl


for _contraction, _name in CONTRACTIONS.items():
    register_tensor_op(
        _name, attrs={**Op.get(_contraction).get_attr("attr_defaults"), "residual_first": False},
        num_inputs=-1, type_rel=_relation(_contraction), impl=_impl(_contraction),
        pattern=OpPattern.OUT_EWISE_FUSABLE,
        doc=f"qnn.requantize({_contraction}(...) + bias, multiplier, zero_point), one op; with six more "
            "inputs, then a residual add (qnn.add); with a table last, then a lookup in it",
    )


def requantized_conv2d(data: Any, weight: Any, data_zero: Any, weight_zero: Any, bias: Any, multiplier: Any,
                       out_zero: Any, *residual: Any, **attrs: Any) -> Call:
    """``qnn.requantize(qnn.conv2d(data, weight, data_zero, weight_zero, **attrs) + bias,
    multiplier, out_zero)`` as one op (``attrs`` those of the qnn.conv2d call); with
    ``residual`` the six more inputs of its residual add (module docstring)."""
    return call_op("qnn.requantized_conv2d", data, weight, data_zero, weight_zero, bias, multiplier, out_zero,
                   *residual, **attrs)


def requantized_matmul(lhs: Any, rhs: Any, lhs_zero: Any, rhs_zero: Any, bias: Any, multiplier: Any,
                       out_zero: Any, **attrs: Any) -> Call:
    """``qnn.requantize(qnn.matmul(lhs, rhs, lhs_zero, rhs_zero, **attrs) + bias, multiplier,
    out_zero)`` as one op (``attrs`` those of the qnn.matmul call)."""
    return call_op("qnn.requantized_matmul", lhs, rhs, lhs_zero, rhs_zero, bias, multiplier, out_zero,
                   **attrs)

"""``bitcast``: the bits of every element read as another type of the same size (ONNX
BitCast, opset 26). The shape is unchanged.

Pairs are any two dtypes of one byte width: 1 (int8, uint8, bool), 2 (int16, uint16,
float16, bfloat16), 4 (int32, uint32, float32) or 8 (int64, uint64, float64); a dtype to
itself is the identity. Where the spec is silent:

* ``bool`` has one byte but only two values: read from int8/uint8 it is ``byte != 0``,
  and read as a byte it is 0 or 1.
* A float16 or bfloat16 NaN has no one bit pattern in compiled code: 16-bit floats are
  computed as float32 and rounded on store (:mod:`passinfra.codegen.c_renderer`), which
  gives a float16 NaN the pattern ``sign | 0x7e00`` and a bfloat16 NaN its quiet bit
  (``| 0x0040``). The reference applies the same rule on both sides of a 16-bit float, so
  the interpreter and compiled code agree bit for bit; every other pattern is kept.

The compute rule (:mod:`passinfra.codegen.compute.bitcast`) is one ``reinterpret``
intrinsic of the loop-level IR (:func:`passinfra.tir.intrinsics.reinterpret`), whose
meaning is :func:`reinterpret_array`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op._rel import REQUIRED, expect_tensor, register_tensor_op
from passinfra.ir.op.precision import BITS_ATTR
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import DTYPES, TensorType, Type, normalize_dtype

__all__ = ["bitcast", "bit_width", "reinterpret_array"]

# the canonical NaN of each 16-bit float, as the compiled store writes it (see above)
_HALF_NAN_BITS = {"float16": lambda bits: (bits & 0x8000) | 0x7E00, "bfloat16": lambda bits: bits | 0x0040}


def bit_width(dtype: str) -> int:
    """Bytes per element of ``dtype`` (bool: 1)."""
    return np.dtype(dtype).itemsize


def _canonical_half(values: np.ndarray) -> np.ndarray:
    """A 16-bit float array with its NaNs in the compiled code's pattern."""
    fix = _HALF_NAN_BITS.get(values.dtype.name)
    if fix is None:
        return values
    bits = values.view(np.uint16)
    nan = np.isnan(values.astype(np.float32))
    return np.where(nan, fix(bits), bits).astype(np.uint16).view(values.dtype)


def reinterpret_array(values: Any, dtype: str) -> np.ndarray:
    """``values`` (an array or NumPy scalar) with each element's bits read as ``dtype``."""
    source = _canonical_half(np.asarray(values))
    if source.dtype.name == dtype:
        return source
    if dtype == "bool":
        return source.view(np.uint8) != 0
    if source.dtype == np.bool_:
        source = source.astype(np.uint8)  # 0 or 1, whatever byte NumPy holds
    return _canonical_half(source.view(np.dtype(dtype)))


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    target = attrs["dtype"]
    if target not in DTYPES:
        raise IRTypeError(f"dtype must be one of {', '.join(DTYPES)}, got {target!r}")
    if bit_width(target) != bit_width(data.dtype):
        raise IRTypeError(f"cannot bitcast {data.dtype} ({bit_width(data.dtype)} bytes) to {target} "
                          f"({bit_width(target)} bytes): the sizes must match")
    return TensorType(data.shape, target)


_OP = register_tensor_op("bitcast", attrs={"dtype": REQUIRED}, num_inputs=1, type_rel=_relation,
                         impl=lambda args, attrs: reinterpret_array(args[0], attrs["dtype"]),
                         pattern=OpPattern.ELEMWISE,
                         doc="each element's bits read as another dtype of the same size", symbolic=True)
_OP.set_attr(BITS_ATTR, True)  # a float16 argument's bits, not its float32 widening


def bitcast(data: Any, dtype: Any) -> Call:
    """``data`` with its bits read as ``dtype`` (same element size)."""
    return call_op("bitcast", data, dtype=normalize_dtype(dtype))

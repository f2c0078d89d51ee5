"""How ops compute on float16 and bfloat16: in float32, rounded to nearest-even on store.

float16 and bfloat16 are storage types here, as on onnxruntime's CPU provider: an op
whose arguments hold them runs its NumPy implementation on float32 copies of those
arguments, and each float result is rounded back to the dtype the op's type relation
gives (NumPy's and ml_dtypes' casts round to nearest-even; too large a value becomes
inf, NaN stays NaN). So every op, including those NumPy cannot run on bfloat16 at all
(``matmul``'s einsum-based cousins, ``conv2d``), computes on half-precision data the
way the compiled kernels do: widen on load, float32 arithmetic, round once per result.

The interpreter and FoldConstant both evaluate ops through :func:`compute_op`, so
folding and evaluation cannot disagree (one semantics).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.ir.attrs import Attrs
from passinfra.ir.op.registry import Op
from passinfra.ir.types import HALF_DTYPES, TensorType, TupleType, Type

__all__ = ["BITS_ATTR", "compute_op", "has_half_precision"]

BITS_ATTR = "reads_bits"  # op attribute: the implementation takes 16-bit floats unwidened

_HALF = frozenset(HALF_DTYPES)


def has_half_precision(value: Any) -> bool:
    """Does ``value`` (an array or a tuple of values) hold a float16/bfloat16 array?"""
    if isinstance(value, np.ndarray):
        return value.dtype.name in _HALF
    if isinstance(value, tuple):
        return any(has_half_precision(field) for field in value)
    return False


def compute_op(op: Op, args: Sequence[Any], attrs: Attrs) -> Any:
    """``op``'s NumPy implementation on ``args``; half-precision arguments are computed
    in float32 and the results rounded to the dtypes of the op's type relation."""
    # an op that reads bits, not values (bitcast), gets its half-precision arguments as is
    if op.get_attr(BITS_ATTR) or not any(has_half_precision(arg) for arg in args):
        return op.compute(args, attrs)
    # the relation, not the implementation, says which results are half precision: a
    # cast to float32 of a float16 tensor must stay float32
    out_type = op.infer_type([_type_of(arg) for arg in args], attrs)
    result = op.compute([_widen(arg) for arg in args], attrs)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf is the semantics
        return _round_to(result, out_type)


def _type_of(value: Any) -> Type:
    if isinstance(value, tuple):
        return TupleType([_type_of(field) for field in value])
    array = np.asarray(value)
    return TensorType(array.shape, array.dtype)


def _widen(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_widen(field) for field in value)
    if isinstance(value, np.ndarray) and value.dtype.name in _HALF:
        return value.astype(np.float32)
    return value


def _round_to(result: Any, ty: Type) -> Any:
    if isinstance(ty, TupleType) and isinstance(result, (tuple, list)) and len(result) == len(ty.fields):
        return tuple(_round_to(field, field_type) for field, field_type in zip(result, ty.fields))
    if isinstance(ty, TensorType) and isinstance(result, (np.ndarray, np.generic)):
        array = np.asarray(result)
        if ty.dtype in _HALF and array.dtype.name != ty.dtype:
            return array.astype(ty.dtype)
        return array
    return result  # not what the relation says: the caller's own checks report it

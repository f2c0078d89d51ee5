"""``det``: the determinant of each square matrix in the last two axes (ONNX Det):
``[..., M, M] -> [...]``.

Both the reference and the compute rule (:mod:`passinfra.codegen.compute.linalg`) run
the same algorithm, LU elimination with partial pivoting, so they agree to rounding:

* column k's pivot is the first row i >= k of largest ``|a[i, k]|`` (a strictly larger
  one replaces it, so ties keep the upper row);
* the pivot row is swapped up (the determinant changes sign), the determinant is
  multiplied by the pivot, and the rows below subtract ``a[i, k] / pivot`` times it;
  a zero pivot (a singular matrix) eliminates nothing and leaves the determinant 0.

The arithmetic is in the data's precision (float32 for float16 and bfloat16); an empty
0x0 matrix has determinant 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op._rel import FLOAT_DTYPES, expect_dtype, expect_tensor, register_tensor_op, type_text
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, Type

__all__ = ["det", "lu_determinant"]


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the matrices")
    expect_dtype(data, FLOAT_DTYPES, "the matrices")
    if data.ndim < 2 or data.shape[-1] != data.shape[-2]:
        raise IRTypeError(f"expected square matrices in the last two axes ([..., M, M]), "
                          f"got {type_text(data)}")
    return TensorType(data.shape[:-2], data.dtype)


def lu_determinant(matrices: np.ndarray) -> np.ndarray:
    """Determinants of ``matrices`` ([..., M, M], float32 or float64), by the elimination
    the module docstring describes, vectorized over the leading axes."""
    m = matrices.shape[-1]
    a = matrices.reshape(-1, m, m).copy()
    batch = np.arange(a.shape[0])
    det = np.ones(a.shape[0], a.dtype)
    with np.errstate(all="ignore"):  # inf/NaN data: IEEE results, as in C
        for k in range(m):
            best, pivot_row = np.abs(a[:, k, k]), np.full(a.shape[0], k)
            for i in range(k + 1, m):
                take = np.abs(a[:, i, k]) > best
                best, pivot_row = np.where(take, np.abs(a[:, i, k]), best), np.where(take, i, pivot_row)
            upper, lower = a[batch, k].copy(), a[batch, pivot_row].copy()
            a[batch, pivot_row], a[batch, k] = upper, lower
            det = np.where(pivot_row != k, -det, det) * a[:, k, k]
            pivot = a[:, k, k]
            factor = np.where(pivot[:, None] != 0, a[:, k + 1:, k] / pivot[:, None], 0).astype(a.dtype)
            a[:, k + 1:, k + 1:] -= factor[:, :, None] * a[:, k, None, k + 1:]
    return det.reshape(matrices.shape[:-2])


def _impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data = np.asarray(args[0])
    return np.asarray(lu_determinant(data)).astype(data.dtype, copy=False)


register_tensor_op("det", attrs={}, num_inputs=1, type_rel=_relation, impl=_impl, pattern=OpPattern.OPAQUE,
                   doc="determinant of each [M, M] matrix in the last two axes (LU, partial pivoting)")


def det(data: Any) -> Call:
    """The determinant of each square matrix in the last two axes of ``data``."""
    return call_op("det", data)

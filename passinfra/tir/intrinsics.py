"""Intrinsics of the loop-level IR with their meaning: the GEMM statement and the
bitwise integer operations.

A GEMM is ``Evaluate(Intrinsic("rp_sgemm", (A, B, C, m, n, k, lda, ldb, ldc, trans_b)))``
whose first three arguments are ``BufferLoad``\\ s naming the first element of A, B and
C; every TIR pass handles it without a new node kind. The name and the reference
semantics live here, with the IR, so the evaluator needs nothing from codegen; building
the call, planning contractions and rendering it as a BLAS call stay in
:mod:`passinfra.codegen.gemm`.

The bitwise operations (``bitwise_and``, ``bitwise_or``, ``bitwise_xor`` of two integers
of one dtype, ``bitwise_not`` of one) are value intrinsics, not node kinds, for the same
reason: every functor, printer, structural comparison and wire format already handles an
``Intrinsic``. Their meaning is NumPy's on the dtype's two's-complement bits; the C
renderer writes them as ``&``, ``|``, ``^`` and ``~`` cast back to the dtype.

``reinterpret`` (:func:`reinterpret`) reads its operand's bits as the intrinsic's dtype,
of the same size (the ``bitcast`` op); its meaning is
:func:`passinfra.ir.op.bitcast.reinterpret_array`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from passinfra.errors import IRError
from passinfra.tir.nodes import BufferLoad, Intrinsic, PrimExpr

GEMM_INTRINSIC = "rp_sgemm"


def is_gemm(expr: PrimExpr) -> bool:
    return isinstance(expr, Intrinsic) and expr.name == GEMM_INTRINSIC


def evaluate_gemm(intrinsic: Intrinsic, flat_view: Callable[[BufferLoad], np.ndarray],
                  scalar: Callable[[PrimExpr], int]) -> None:
    """Run a ``rp_sgemm`` in the TIR interpreter: ``flat_view(load)`` is the buffer's
    memory from the loaded element on (1-d view), ``scalar`` evaluates an argument."""
    a_load, b_load, c_load, *rest = intrinsic.args
    m, n, k, lda, ldb, ldc, trans_b = (int(scalar(x)) for x in rest)
    a = _matrix(flat_view(a_load), m, k, lda)
    b = _matrix(flat_view(b_load), n, k, ldb).T if trans_b else _matrix(flat_view(b_load), k, n, ldb)
    _matrix(flat_view(c_load), m, n, ldc)[...] = (a.astype(np.float64) @ b.astype(np.float64))


def _matrix(flat: np.ndarray, rows: int, cols: int, leading: int) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(flat, (rows, cols), (leading * flat.itemsize, flat.itemsize))


# name -> (number of operands, NumPy meaning)
BITWISE_INTRINSICS: dict[str, tuple[int, Callable[..., Any]]] = {
    "bitwise_and": (2, np.bitwise_and),
    "bitwise_or": (2, np.bitwise_or),
    "bitwise_xor": (2, np.bitwise_xor),
    "bitwise_not": (1, np.invert),
}
_INTEGER_KINDS = "iu"


def bitwise(name: str, *operands: PrimExpr) -> Intrinsic:
    """The bitwise intrinsic ``name`` of integer operands of one dtype (IRError naming the
    problem otherwise)."""
    spec = BITWISE_INTRINSICS.get(name)
    if spec is None:
        raise IRError(f"unknown bitwise intrinsic {name!r}; known: {', '.join(BITWISE_INTRINSICS)}")
    if len(operands) != spec[0]:
        raise IRError(f"{name} takes {spec[0]} operand(s), got {len(operands)}")
    dtypes = {x.dtype for x in operands}
    dtype = operands[0].dtype
    if len(dtypes) != 1 or dtype == "bool" or np.dtype(dtype).kind not in _INTEGER_KINDS:
        got = ", ".join(x.dtype for x in operands)
        raise IRError(f"{name} needs integer operands of one dtype, got {got}")
    return Intrinsic(name, tuple(operands), dtype)


REINTERPRET = "reinterpret"


def reinterpret(value: PrimExpr, dtype: str) -> Intrinsic:
    """``value``'s bits read as ``dtype``, a type of the same size (IRError otherwise)."""
    if np.dtype(value.dtype).itemsize != np.dtype(dtype).itemsize:
        raise IRError(f"reinterpret needs types of one size, got {value.dtype} -> {dtype}")
    return Intrinsic(REINTERPRET, (value,), dtype)


__all__ = ["GEMM_INTRINSIC", "BITWISE_INTRINSICS", "REINTERPRET", "bitwise", "is_gemm", "evaluate_gemm",
           "reinterpret"]

"""Intrinsics of the loop-level IR that are statements of their own, with their meaning.

A GEMM is ``Evaluate(Intrinsic("rp_sgemm", (A, B, C, m, n, k, lda, ldb, ldc, trans_b)))``
whose first three arguments are ``BufferLoad``\\ s naming the first element of A, B and
C; every TIR pass handles it without a new node kind. The name and the reference
semantics live here, with the IR, so the evaluator needs nothing from codegen; building
the call, planning contractions and rendering it as a BLAS call stay in
:mod:`passinfra.codegen.gemm`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

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


__all__ = ["GEMM_INTRINSIC", "is_gemm", "evaluate_gemm"]

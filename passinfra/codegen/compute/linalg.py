"""Compute rule of ``det`` (:mod:`passinfra.ir.op.linalg`): per matrix, a copy into a
scratch buffer, then LU elimination with partial pivoting in place, the determinant
accumulated pivot by pivot, exactly as the reference orders it.

The loops over rows and columns run over the whole matrix with a guard (``i > k``)
rather than from k + 1: every loop keeps constant bounds, which the loop passes expect.
"""

from __future__ import annotations

from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import (
    ExternOp,
    Indices,
    TensorHandle,
    imm,
    intrinsic,
    local_scalar,
    loop_nest,
    output_shape,
    register_compute,
    seq,
)
from passinfra.ir.attrs import Attrs
from passinfra.ir.types import Type


def _for(extent: int, body, name: str) -> tir.Stmt:
    var = tir.TVar(name)
    return tir.For(var, tir.IntImm(0), tir.IntImm(extent), tir.ForKind.SERIAL, body(var))


@register_compute("det")
def _det(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    (data,) = inputs
    m, batch, dtype = data.shape[-1], output_shape(out_type), data.dtype
    work = "float64" if dtype == "float64" else "float32"  # float16/bfloat16 in float32

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (out,) = outputs

        def matrix(idx: Indices) -> tir.Stmt:
            a = tir.Buffer("det_lu", (m, m), work)
            det, best = local_scalar("det", work), local_scalar("pivot_abs", work)
            row, take, factor = local_scalar("pivot_row", "int64"), local_scalar("take", "bool"), \
                local_scalar("factor", work)
            spare = local_scalar("swap", work)

            def pivot_step(k: tir.TVar) -> tir.Stmt:
                pivot = a.load(k, k)

                def scan(i: tir.TVar) -> tir.Stmt:
                    magnitude = intrinsic("fabs", a.load(i, k))
                    return seq(  # `take` once: both stores below change what it reads
                        tir.BufferStore(take, tir.And(tir.GT(i, k), tir.GT(magnitude, best.load())), ()),
                        tir.BufferStore(best, tir.Select(take.load(), magnitude, best.load()), ()),
                        tir.BufferStore(row, tir.Select(take.load(), i, row.load()), ()))

                def swap(j: tir.TVar) -> tir.Stmt:  # a no-op when the pivot row is row k
                    return seq(tir.BufferStore(spare, a.load(k, j), ()),
                               tir.BufferStore(a, a.load(row.load(), j), (k, j)),
                               tir.BufferStore(a, spare.load(), (row.load(), j)))

                def eliminate(i: tir.TVar) -> tir.Stmt:
                    ratio = tir.Select(tir.NE(pivot, imm(0, work)), a.load(i, k) / pivot, imm(0, work))
                    update = _for(m, lambda j: tir.IfThenElse(tir.GT(j, k), tir.BufferStore(
                        a, a.load(i, j) - factor.load() * a.load(k, j), (i, j))), "j")
                    return tir.IfThenElse(tir.GT(i, k), seq(tir.BufferStore(factor, ratio, ()), update))

                return seq(
                    tir.BufferStore(best, intrinsic("fabs", pivot), ()),
                    tir.BufferStore(row, k, ()),
                    _for(m, scan, "i"),
                    _for(m, swap, "j"),
                    tir.BufferStore(det, tir.Select(tir.NE(row.load(), k), -det.load(), det.load()), ()),
                    tir.BufferStore(det, det.load() * pivot, ()),
                    _for(m, eliminate, "i"),
                )

            def copy(i: tir.TVar) -> tir.Stmt:
                return _for(m, lambda j: tir.BufferStore(
                    a, _widened(data.load(*idx, i, j), work), (i, j)), "j")

            result = det.load() if dtype == work else tir.Cast(dtype, det.load())
            body = seq(_for(m, copy, "i"), tir.BufferStore(det, imm(1, work), ()), _for(m, pivot_step, "k"),
                       tir.BufferStore(out, result, idx))
            for scratch in (a, det, best, row, take, factor, spare):
                body = tir.Allocate(scratch, body)
            return body

        return loop_nest(batch, matrix, prefix="b")

    return ExternOp("det", ((batch, dtype),), build)


def _widened(value: tir.PrimExpr, work: str) -> tir.PrimExpr:
    return value if value.dtype == work else tir.Cast(work, value)

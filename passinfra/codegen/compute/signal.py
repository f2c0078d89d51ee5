"""Compute rule of ``dft`` (:mod:`passinfra.ir.op.signal`): a :class:`ReduceOp` per
output element summing ``x[.., n, .., d] * T[(k n) mod L, c, d]`` over the inputs n and
their parts d (the twiddle table T is the call's constant second argument), times the
irfft's bin weights where they apply, finalized by ``/ L`` for the inverse transforms."""

from __future__ import annotations

from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import (
    Indices,
    ReduceOp,
    TensorHandle,
    imm,
    output_shape,
    register_compute,
)
from passinfra.ir.attrs import Attrs
from passinfra.ir.op.signal import dft_plan
from passinfra.ir.types import Type


def _irfft_weight(n: tir.PrimExpr, d: tir.PrimExpr, length: int, dtype: str) -> tir.PrimExpr:
    """How often bin n's part d counts (see :func:`passinfra.ir.op.signal.irfft_weights`)."""
    edge = tir.Or(tir.EQ(n, tir.IntImm(0)), tir.EQ(n * tir.IntImm(2), tir.IntImm(length)))
    return tir.Select(edge, tir.Select(tir.EQ(d, tir.IntImm(0)), imm(1, dtype), imm(0, dtype)), imm(2, dtype))


@register_compute("dft")
def _dft(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
    data, table = inputs
    axis, _, used, _ = dft_plan(data.shape, attrs)
    length, dtype = attrs["length"], data.dtype
    irfft = attrs["inverse"] and attrs["onesided"]

    def body(out: Indices, red: Indices) -> tir.PrimExpr:
        n, d = red
        k, c = out[axis], out[-1]
        at = list(out)
        at[axis], at[-1] = n, d
        term = data.load(*at) * table.load(tir.FloorMod(k * n, tir.IntImm(length)), c, d)
        return term * _irfft_weight(n, d, length, dtype) if irfft else term

    def finalize(acc: tir.PrimExpr, out: Indices) -> tir.PrimExpr:
        return acc / imm(length, dtype) if attrs["inverse"] else acc

    return ReduceOp("dft", output_shape(out_type), dtype, (used, data.shape[-1]), "sum", body, finalize)

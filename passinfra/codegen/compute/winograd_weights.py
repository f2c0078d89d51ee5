"""Compute rule of ``winograd_weights.unpack`` (:mod:`passinfra.ir.op.winograd_weights`): the
weight ``L U L^T`` from its stored transform, for a consumer other than the Winograd kernel
(which the lowering hands the transform itself: ``_Tensor.winograd`` in
:mod:`passinfra.codegen.lower`)."""

from __future__ import annotations

from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import ComputeOp, TensorHandle, output_shape, register_compute
from passinfra.ir.attrs import Attrs
from passinfra.ir.op.winograd_weights import LEFT_INVERSE, OP_NAME, PANEL_WIDTH
from passinfra.ir.types import Type

# per weight row (or column) i: the transform points a with L[i, a] != 0, and L[i, a]
_TERMS = tuple(tuple((a, int(LEFT_INVERSE[i, a])) for a in range(4) if LEFT_INVERSE[i, a]) for i in range(3))


@register_compute(OP_NAME)
def _unpack(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (panels,) = inputs
    shape = output_shape(out_type)
    channels = int(shape[2])
    width = tir.IntImm(PANEL_WIDTH)

    def value(idx: Sequence[tir.PrimExpr]) -> tir.PrimExpr:
        kh, kw, channel, out = idx
        block, lane = tir.FloorDiv(out, width), tir.FloorMod(out, width)

        def at(i: int, j: int) -> tir.PrimExpr:
            total: tir.PrimExpr | None = None
            for a, sign_a in _TERMS[i]:
                for b, sign_b in _TERMS[j]:
                    row = tir.IntImm((a * 4 + b) * channels) + channel
                    load = panels.load(block, row, lane)
                    positive = sign_a * sign_b > 0
                    if total is None:  # L's first term of a row is +1
                        assert positive
                        total = load
                    else:
                        total = tir.Add(total, load) if positive else tir.Sub(total, load)
            assert total is not None
            return total

        def row(i: int) -> tir.PrimExpr:
            return tir.Select(tir.EQ(kw, tir.IntImm(0)), at(i, 0),
                              tir.Select(tir.EQ(kw, tir.IntImm(1)), at(i, 1), at(i, 2)))

        return tir.Select(tir.EQ(kh, tir.IntImm(0)), row(0),
                          tir.Select(tir.EQ(kh, tir.IntImm(1)), row(1), row(2)))
    return ComputeOp(OP_NAME, shape, panels.dtype, value)

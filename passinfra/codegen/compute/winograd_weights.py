"""Compute rule of ``winograd_weights.unpack`` (:mod:`passinfra.ir.op.winograd_weights`): the
weight ``L U L^T`` from its stored transform, for a consumer other than the Winograd kernel
(which the lowering hands the transform itself: ``_Tensor.winograd`` in
:mod:`passinfra.codegen.lower`)."""

from __future__ import annotations

from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import ComputeOp, TensorHandle, output_shape, register_compute
from passinfra.ir.attrs import Attrs
from passinfra.ir.op.winograd_weights import OP_NAME, PANEL_WIDTH, transform
from passinfra.ir.types import Type


def _terms(tile: int) -> tuple[tuple[tuple[int, float], ...], ...]:
    """Per weight row (or column) i: the transform points a with L[i, a] != 0, and L[i, a]."""
    left = transform(tile).left_inverse
    return tuple(tuple((a, float(left[i, a])) for a in range(left.shape[1]) if left[i, a]) for i in range(3))


@register_compute(OP_NAME)
def _unpack(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (panels,) = inputs
    shape = output_shape(out_type)
    channels, tile = int(shape[2]), int(attrs["tile"])
    alpha, terms = tile + 2, _terms(tile)
    width = tir.IntImm(PANEL_WIDTH)

    def value(idx: Sequence[tir.PrimExpr]) -> tir.PrimExpr:
        kh, kw, channel, out = idx
        block, lane = tir.FloorDiv(out, width), tir.FloorMod(out, width)

        def at(i: int, j: int) -> tir.PrimExpr:
            total: tir.PrimExpr | None = None
            for a, coefficient_a in terms[i]:
                for b, coefficient_b in terms[j]:
                    load = panels.load(block, tir.IntImm((a * alpha + b) * channels) + channel, lane)
                    coefficient = coefficient_a * coefficient_b
                    scale = tir.FloatImm(coefficient, panels.dtype)
                    term = load if coefficient == 1 else tir.Mul(scale, load)
                    total = term if total is None else tir.Add(total, term)
            assert total is not None
            return total

        def row(i: int) -> tir.PrimExpr:
            return tir.Select(tir.EQ(kw, tir.IntImm(0)), at(i, 0),
                              tir.Select(tir.EQ(kw, tir.IntImm(1)), at(i, 1), at(i, 2)))

        return tir.Select(tir.EQ(kh, tir.IntImm(0)), row(0),
                          tir.Select(tir.EQ(kh, tir.IntImm(1)), row(1), row(2)))
    return ComputeOp(OP_NAME, shape, panels.dtype, value)

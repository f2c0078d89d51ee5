"""Compute rule of ``qgemm_panels.unpack`` (:mod:`passinfra.ir.op.qgemm_panels`): an
index map into the panels. The integer GEMM never runs it: the lowering hands it the
panels themselves (``_Tensor.qgemm_panels`` in :mod:`passinfra.codegen.lower`)."""

from __future__ import annotations

from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import ComputeOp, TensorHandle, output_shape, register_compute
from passinfra.ir.attrs import Attrs
from passinfra.ir.op.qgemm_panels import DEPTH, OP_NAME, panel_width
from passinfra.ir.types import Type


@register_compute(OP_NAME)
def _unpack(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (panels,) = inputs
    shape = output_shape(out_type)
    dtype = attrs["dtype"]
    groups = attrs["groups"]
    per_group = int(shape[-1]) // groups
    width = panel_width(per_group)
    columns, depth = tir.IntImm(width), tir.IntImm(DEPTH)
    tiles_per_group = tir.IntImm(-(-per_group // width))

    def value(idx: Sequence[tir.PrimExpr]) -> tir.PrimExpr:
        *leading, n = idx
        k = leading[0]  # the leading axes, flattened row-major into k
        for axis, index in zip(shape[1:-1], leading[1:]):
            k = k * tir.as_prim(axis) + index
        tile, column = tir.FloorDiv(n, columns), tir.FloorMod(n, columns)
        if groups > 1:  # each group's columns in panels of their own
            group, within = tir.FloorDiv(n, tir.IntImm(per_group)), tir.FloorMod(n, tir.IntImm(per_group))
            tile = group * tiles_per_group + tir.FloorDiv(within, columns)
            column = tir.FloorMod(within, columns)
        stored = panels.load(tile, tir.FloorDiv(k, depth), column, tir.FloorMod(k, depth))
        if dtype == "int8":
            return stored
        # a uint8 weight is stored minus 128
        return tir.Cast("uint8", tir.Cast("int32", stored) + tir.IntImm(128, "int32"))

    return ComputeOp(OP_NAME, shape, dtype, value)

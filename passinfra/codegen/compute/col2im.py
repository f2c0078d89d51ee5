"""Compute rule of ``col2im`` (:mod:`passinfra.ir.op.col2im`): a :class:`ReduceOp` per
image cell summing, over the block cells in row-major order, the column entry that lands
on it. Block cell ``k`` at block position ``q`` covers padded position
``q * stride + k * dilation``: an image cell ``y`` reads cell ``k`` where
``t = y + pad - k * dilation`` is a non-negative multiple of the stride below
``stride * count``. Other (cell, k) pairs read 0 through a Select around a load at a
clamped index, so a load never leaves its buffer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import (
    Indices,
    ReduceOp,
    TensorHandle,
    clamp,
    imm,
    output_shape,
    ravel,
    register_compute,
)
from passinfra.ir.attrs import Attrs
from passinfra.ir.op.col2im import block_counts, filled
from passinfra.ir.types import Type


@register_compute("col2im")
def _rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
    (data,) = inputs
    attrs = filled(attrs)
    block, counts = tuple(attrs["block_shape"]), block_counts(attrs)
    rank, cells = len(block), math.prod(block)
    begins = attrs["pads"][:rank]

    def body(out: Indices, red: Indices) -> tir.PrimExpr:
        n, c, *where = out
        valid, positions = None, []
        for y, k, pad, d, s, m in zip(where, red, begins, attrs["dilations"], attrs["strides"], counts):
            t = y + tir.IntImm(pad) - k * tir.IntImm(d)
            step = tir.FloorDiv(t, tir.IntImm(s)) if s > 1 else t
            ok = tir.And(tir.GE(t, tir.IntImm(0)), tir.LT(step, tir.IntImm(m)))
            if s > 1:
                ok = tir.And(ok, tir.EQ(tir.FloorMod(t, tir.IntImm(s)), tir.IntImm(0)))
            valid = ok if valid is None else tir.And(valid, ok)
            positions.append(clamp(step, 0, m - 1))
        row = c * tir.IntImm(cells) + ravel(red, block)
        return tir.Select(valid, data.load(n, row, ravel(tuple(positions), counts)), imm(0, data.dtype))

    return ReduceOp("col2im", output_shape(out_type), data.dtype, block, "sum", body)

"""Compute rule of ``roi_align`` (:mod:`passinfra.ir.op.roi_align`): an :class:`ExternOp`.

Per roi, its box (start, bin size, sample count per axis) and batch index are computed
once in LetStmts; per output cell a local accumulator runs over the sample grid. With
``sampling_ratio = 0`` the grid's extent is the roi's own ``ceil(extent / cells)``, a
loop bound computed at run time. Sample points and weights come from the formulas of the
NumPy reference, evaluated in the loop-level IR; the batch index is clamped into the
data, so a load never leaves its buffer (the interpreter rejects such an index instead).
"""

from __future__ import annotations

from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import (
    ExternOp,
    TensorHandle,
    clamp,
    imm,
    local_scalar,
    loop_nest,
    output_shape,
    register_compute,
    seq,
)
from passinfra.codegen.compute.grid_sample import GridArith, working_dtype
from passinfra.ir.attrs import Attrs
from passinfra.ir.op.roi_align import AxisSample, Box, roi_box, sample_axis
from passinfra.ir.types import Type

Expr = tir.PrimExpr


def _bound_box(m: GridArith, box: Box, axis: str) -> Box:
    return Box(m.bind(box.start, f"{axis}_start"), m.bind(box.bin_size, f"{axis}_bin"),
               m.bind(box.grid, f"{axis}_grid"))


def _bound_sample(m: GridArith, s: AxisSample, axis: str) -> AxisSample:
    return AxisSample(*(m.bind(v, f"{axis}_{name}") for v, name in
                        ((s.low, "low"), (s.high, "high"), (s.low_weight, "wlow"), (s.high_weight, "whigh"),
                         (s.outside, "outside"))))


@register_compute("roi_align")
def _rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    data, rois, batch = inputs
    shape, dtype = output_shape(out_type), data.dtype
    work = working_dtype(dtype)
    _, _, height, width = data.shape
    averaging = attrs["mode"] == "avg"

    def cell(out_buffer: tir.Buffer, r: Expr, b: Expr, box_y: Box, box_x: Box, where: tuple) -> tir.Stmt:
        c, ph, pw = where
        iy, ix = tir.TVar("iy"), tir.TVar("ix")
        my, mx = GridArith(work), GridArith(work)
        ys = _bound_sample(my, sample_axis(my, box_y, ph, iy, height), "y")
        xs = _bound_sample(mx, sample_axis(mx, box_x, pw, ix, width), "x")
        corners = [(ys.low_weight * xs.low_weight) * mx.to_real(data.load(b, c, ys.low, xs.low)),
                   (ys.low_weight * xs.high_weight) * mx.to_real(data.load(b, c, ys.low, xs.high)),
                   (ys.high_weight * xs.low_weight) * mx.to_real(data.load(b, c, ys.high, xs.low)),
                   (ys.high_weight * xs.high_weight) * mx.to_real(data.load(b, c, ys.high, xs.high))]
        acc = local_scalar("roi_acc", work)
        if averaging:
            value = corners[0] + corners[1] + corners[2] + corners[3]
        else:
            value = tir.Max(tir.Max(tir.Max(corners[0], corners[1]), corners[2]), corners[3])
        value = tir.Select(tir.Or(ys.outside, xs.outside), imm(0, work), value)
        update = tir.BufferStore(acc, acc.load() + value if averaging else tir.Max(acc.load(), value), ())
        along_x = tir.For(ix, tir.IntImm(0), box_x.grid, tir.ForKind.SERIAL, mx.wrap(update))
        samples = tir.For(iy, tir.IntImm(0), box_y.grid, tir.ForKind.SERIAL, my.wrap(along_x))
        if averaging:
            count = tir.Max(box_y.grid * box_x.grid, tir.IntImm(1))
            final = acc.load() / tir.Cast(work, count)
        else:
            empty = tir.Or(tir.LT(box_y.grid, tir.IntImm(1)), tir.LT(box_x.grid, tir.IntImm(1)))
            final = tir.Select(empty, imm(0, work), acc.load())
        if final.dtype != dtype:
            final = tir.Cast(dtype, final)
        start = imm(0 if averaging else float("-inf"), work)
        return tir.Allocate(acc, seq(tir.BufferStore(acc, start, ()), samples,
                                     tir.BufferStore(out_buffer, final, (r, c, ph, pw))))

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (out_buffer,) = outputs
        r = tir.TVar("r")
        m = GridArith(work)
        x1, y1, x2, y2 = (m.bind(m.to_real(rois.load(r, tir.IntImm(k))), f"roi{k}") for k in range(4))
        b = m.bind(clamp(m.to_i64(batch.load(r)), 0, data.shape[0] - 1), "batch")
        box_y = _bound_box(m, roi_box(m, y1, y2, shape[2], attrs), "y")
        box_x = _bound_box(m, roi_box(m, x1, x2, shape[3], attrs), "x")
        body = loop_nest(shape[1:], lambda where: cell(out_buffer, r, b, box_y, box_x, where), prefix="c")
        return tir.For(r, tir.IntImm(0), tir.IntImm(shape[0]), tir.ForKind.SERIAL, m.wrap(body))

    return ExternOp("roi_align", ((shape, dtype),), build)

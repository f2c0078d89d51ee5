"""Compute rule of ``deform_conv`` (:mod:`passinfra.ir.op.deform_conv`): an :class:`ExternOp`.

Per batch and output position, an accumulator row of the output channels starts at the
bias; then per offset group and kernel tap the sampling position and its bilinear taps
(:func:`passinfra.ir.op.deform_conv.sample_taps`, GridSample's zero-padded read) are
computed once in LetStmts, and for every input channel of that offset group the masked
sample is read once and added, times the weight, into the row of each output channel of
the channel's group. Tap indices are clamped, so a load never leaves its buffer; a tap
outside the image is a Select to 0.

Arithmetic is in float64 for float64 data, else in float32 (half-precision inputs are
widened on load, the result is rounded once on store, as onnxruntime on CPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from passinfra import tir
from passinfra.codegen.compute.base import (
    ExternOp,
    TensorHandle,
    imm,
    loop_nest,
    output_shape,
    register_compute,
    seq,
)
from passinfra.codegen.compute.grid_sample import GridArith, working_dtype
from passinfra.ir.attrs import Attrs
from passinfra.ir.op import _grid_sample
from passinfra.ir.op.deform_conv import sample_taps
from passinfra.ir.types import Type

Expr = tir.PrimExpr


def _loop(name: str, extent: int, body: Callable[[Expr], tir.Stmt]) -> tir.Stmt:
    var = tir.TVar(name)
    return tir.For(var, tir.IntImm(0), tir.IntImm(extent), tir.ForKind.SERIAL, body(var))


@register_compute("deform_conv")
def _rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    data, weight, offset = inputs[:3]
    bias = inputs[3] if len(inputs) > 3 else None
    mask = inputs[4] if len(inputs) > 4 else None
    shape, dtype = output_shape(out_type), data.dtype
    work = working_dtype(dtype)
    _, channels, height, width = data.shape
    out_channels, per_group, kh, kw = weight.shape
    per_offset_group = channels // attrs["offset_group"]
    per_out = out_channels // attrs["group"]
    (sh, sw), (dh, dw), pads = attrs["strides"], attrs["dilations"], attrs["pads"]
    taps = kh * kw

    def tap(acc: tir.Buffer, n: Expr, oy: Expr, ox: Expr, og: Expr, ky: Expr, kx: Expr) -> tir.Stmt:
        m = GridArith(work)
        k = ky * tir.IntImm(kw) + kx
        first = og * tir.IntImm(2 * taps) + k * tir.IntImm(2)
        at_y = m.bind(m.to_real(oy * tir.IntImm(sh) + ky * tir.IntImm(dh) - tir.IntImm(pads[0]))
                      + m.to_real(offset.load(n, first, oy, ox)), "at_y")
        at_x = m.bind(m.to_real(ox * tir.IntImm(sw) + kx * tir.IntImm(dw) - tir.IntImm(pads[1]))
                      + m.to_real(offset.load(n, first + tir.IntImm(1), oy, ox)), "at_x")
        axes = [sample_taps(m, at_y, height, "y"), sample_taps(m, at_x, width, "x")]
        scale = None
        if mask is not None:
            scale = m.bind(m.to_real(mask.load(n, og * tir.IntImm(taps) + k, oy, ox)), "mask")

        def channel(cl: Expr) -> tir.Stmt:
            c = og * tir.IntImm(per_offset_group) + cl
            inner = GridArith(work)
            value = _grid_sample.interpolate(inner, axes, lambda at: inner.to_real(data.load(n, c, *at)))
            sample = inner.bind(value * scale if scale is not None else value, "sample")
            g = inner.bind(tir.FloorDiv(c, tir.IntImm(per_group)), "g")
            ci = c - g * tir.IntImm(per_group)

            def out_channel(o: Expr) -> tir.Stmt:
                oc = g * tir.IntImm(per_out) + o
                term = inner.to_real(weight.load(oc, ci, ky, kx)) * sample
                return tir.BufferStore(acc, acc.load(oc) + term, (oc,))

            return inner.wrap(_loop("o", per_out, out_channel))

        return m.wrap(_loop("cl", per_offset_group, channel))

    def position(out_buffer: tir.Buffer, where: tuple[Expr, ...]) -> tir.Stmt:
        n, oy, ox = where
        # per position (not shared by the iterations, which may run in parallel)
        acc = tir.Buffer("deform_acc", (out_channels,), work)
        start = _loop("oc", out_channels, lambda oc: tir.BufferStore(
            acc, GridArith(work).to_real(bias.load(oc)) if bias is not None else imm(0, work), (oc,)))
        taps_loop = _loop("og", attrs["offset_group"], lambda og: _loop(
            "ky", kh, lambda ky: _loop("kx", kw, lambda kx: tap(acc, n, oy, ox, og, ky, kx))))

        def store(oc: Expr) -> tir.Stmt:
            value = acc.load(oc)
            return tir.BufferStore(out_buffer, value if value.dtype == dtype else tir.Cast(dtype, value),
                                   (n, oc, oy, ox))

        return tir.Allocate(acc, seq(start, taps_loop, _loop("oc", out_channels, store)))

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (out_buffer,) = outputs
        spatial = (shape[0], shape[2], shape[3])
        return loop_nest(spatial, lambda where: position(out_buffer, where), prefix="p")

    return ExternOp("deform_conv", ((shape, dtype),), build)

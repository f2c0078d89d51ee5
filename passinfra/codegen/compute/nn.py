"""Compute rules of the neural-network contractions and normalizations.

* conv2d (NCHW/OIHW and NHWC/HWIO, strides, padding, dilation, groups), dense, matmul
  and the pools are :class:`ReduceOp`: a value per output index summed (or maxed) over
  the window / contraction axes. The lowering fuses their elementwise epilogue (bias,
  activation) into the same loop nest. Loop order is chosen for memory order: dense
  reads both operands along k contiguously; NHWC conv walks the input channel innermost.
* softmax, layer_norm and batch_norm are :class:`ExternOp`: several passes over the
  normalized axis per outer index, with one-element local temporaries.

Padding is a Select around a read at a clamped index (never an out-of-bounds read).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from passinfra import tir
from passinfra.codegen.compute.base import (
    ExternOp,
    Indices,
    ReduceOp,
    TensorHandle,
    broadcast_indices,
    clamp,
    imm,
    in_range,
    intrinsic,
    local_scalar,
    loop_nest,
    output_shape,
    reduction_identity,
    register_compute,
    seq,
)
from passinfra.ir.attrs import Attrs
from passinfra.ir.op._rel import normalize_axis
from passinfra.ir.types import Type


def _window_index(out: tir.PrimExpr, stride: int, tap: tir.PrimExpr, dilation: int, pad: int) -> tir.PrimExpr:
    """``out * stride + tap * dilation - pad``, leaving out the trivial parts."""
    index = out if stride == 1 else out * tir.IntImm(stride)
    index = index + (tap if dilation == 1 else tap * tir.IntImm(dilation))
    return index - tir.IntImm(pad) if pad else index


class _PaddedReader:
    """Reads a 4-D tensor of ``layout`` at (n, c, h, w); where (h, w) falls into the
    padding, the value is ``pad_value`` instead."""

    def __init__(self, data: TensorHandle, layout: str, padding: Sequence[int], pad_value: tir.PrimExpr):
        self.data, self.layout, self.pad_value = data, layout, pad_value
        top, left, bottom, right = padding
        self.height = data.shape[layout.index("H")]
        self.width = data.shape[layout.index("W")]
        self.check_h = bool(top or bottom)
        self.check_w = bool(left or right)

    def read(self, n: tir.PrimExpr, c: tir.PrimExpr, h: tir.PrimExpr, w: tir.PrimExpr) -> tir.PrimExpr:
        conditions = []
        if self.check_h:
            conditions.append(in_range(h, self.height))
            h = clamp(h, 0, self.height - 1)
        if self.check_w:
            conditions.append(in_range(w, self.width))
            w = clamp(w, 0, self.width - 1)
        by_axis = {"N": n, "C": c, "H": h, "W": w}
        value = self.data.load(*(by_axis[axis] for axis in self.layout))
        if not conditions:
            return value
        cond = conditions[0] if len(conditions) == 1 else tir.And(conditions[0], conditions[1])
        return tir.Select(cond, value, self.pad_value)


@register_compute("nn.conv2d")
def _conv2d(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
    data, weight = inputs
    data_layout, kernel_layout = attrs["data_layout"], attrs["kernel_layout"]
    out_channels, group_channels, kh, kw = (weight.shape[kernel_layout.index(a)] for a in "OIHW")
    groups = attrs["groups"]
    out_per_group = out_channels // groups
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    top, left, _, _ = attrs["padding"]
    reader = _PaddedReader(data, data_layout, attrs["padding"], imm(0, data.dtype))
    # channels-last data is contiguous along the input channel: make it the innermost tap
    channels_last = data_layout == "NHWC"
    extents = (kh, kw, group_channels) if channels_last else (group_channels, kh, kw)

    def body(out: Indices, red: Indices) -> tir.PrimExpr:
        o = dict(zip(data_layout, out))
        ry, rx, rc = red if channels_last else (red[1], red[2], red[0])
        oc = o["C"]
        if groups == 1:
            ic = rc
        else:
            ic = tir.FloorDiv(oc, tir.IntImm(out_per_group)) * tir.IntImm(group_channels) + rc
        h, w = _window_index(o["H"], sh, ry, dh, top), _window_index(o["W"], sw, rx, dw, left)
        value = reader.read(o["N"], ic, h, w)
        taps = {"O": oc, "I": rc, "H": ry, "W": rx}
        return value * weight.load(*(taps[axis] for axis in kernel_layout))

    return ReduceOp("nn.conv2d", output_shape(out_type), data.dtype, extents, "sum", body)


@register_compute("nn.dense")
def _dense(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
    data, weight = inputs
    return ReduceOp("nn.dense", output_shape(out_type), data.dtype, (data.shape[-1],), "sum",
                    lambda out, red: data.load(*out[:-1], red[0]) * weight.load(out[-1], red[0]))


@register_compute("matmul")
def _matmul(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
    lhs, rhs = inputs
    out_shape = output_shape(out_type)
    lhs_vector, rhs_vector = len(lhs.shape) == 1, len(rhs.shape) == 1

    def body(out: Indices, red: Indices) -> tir.PrimExpr:
        (k,) = red
        batch_rank = len(out) - (0 if lhs_vector else 1) - (0 if rhs_vector else 1)
        batch, batch_shape = out[:batch_rank], out_shape[:batch_rank]
        rest = list(out[batch_rank:])
        row = None if lhs_vector else rest.pop(0)
        col = None if rhs_vector else rest.pop(0)
        if lhs_vector:
            left = lhs.load(k)
        else:
            left = lhs.load(*broadcast_indices(lhs.shape[:-2], batch, batch_shape), row, k)
        if rhs_vector:
            right = rhs.load(k)
        else:
            right = rhs.load(*broadcast_indices(rhs.shape[:-2], batch, batch_shape), k, col)
        return left * right

    return ReduceOp("matmul", out_shape, lhs.dtype, (lhs.shape[-1],), "sum", body)


def _pool(name: str, combiner: str, data: TensorHandle, attrs: Attrs, out_type: Type,
          divide_by_count: bool) -> ReduceOp:
    layout = attrs["layout"]
    (ph, pw), (sh, sw) = attrs["pool_size"], attrs["strides"]
    top, left, _, _ = attrs["padding"]
    # padded cells never win a max, and add nothing to a sum
    reader = _PaddedReader(data, layout, attrs["padding"], reduction_identity(combiner, data.dtype))

    def body(out: Indices, red: Indices) -> tir.PrimExpr:
        o = dict(zip(layout, out))
        return reader.read(o["N"], o["C"], _window_index(o["H"], sh, red[0], 1, top),
                           _window_index(o["W"], sw, red[1], 1, left))

    finalize = None
    if divide_by_count:
        padded = any(attrs["padding"])

        def finalize(acc: tir.PrimExpr, out: Indices) -> tir.PrimExpr:
            if attrs["count_include_pad"] or not padded:
                return acc / imm(ph * pw, acc.dtype)
            o = dict(zip(layout, out))
            rows = _valid_count(o["H"], sh, top, ph, reader.height)
            cols = _valid_count(o["W"], sw, left, pw, reader.width)
            return acc / tir.Cast(acc.dtype, rows * cols)

    return ReduceOp(name, output_shape(out_type), data.dtype, (ph, pw), combiner, body, finalize)


def _valid_count(out: tir.PrimExpr, stride: int, pad: int, window: int, extent: int) -> tir.PrimExpr:
    """How many cells of the window starting at ``out * stride - pad`` lie in [0, extent)."""
    start = _window_index(out, stride, tir.IntImm(0), 1, pad)
    return tir.Min(start + tir.IntImm(window), tir.IntImm(extent)) - tir.Max(start, tir.IntImm(0))


@register_compute("nn.max_pool2d")
def _max_pool2d(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
    return _pool("nn.max_pool2d", "max", inputs[0], attrs, out_type, divide_by_count=False)


@register_compute("nn.avg_pool2d")
def _avg_pool2d(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
    return _pool("nn.avg_pool2d", "sum", inputs[0], attrs, out_type, divide_by_count=True)


@register_compute("nn.global_avg_pool2d")
def _global_avg_pool2d(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
    (data,) = inputs
    layout = attrs["layout"]
    height, width = data.shape[layout.index("H")], data.shape[layout.index("W")]

    def body(out: Indices, red: Indices) -> tir.PrimExpr:
        taps = dict(zip(layout, out)) | {"H": red[0], "W": red[1]}
        return data.load(*(taps[axis] for axis in layout))

    return ReduceOp("nn.global_avg_pool2d", output_shape(out_type), data.dtype, (height, width), "sum", body,
                    lambda acc, out: acc / imm(height * width, acc.dtype))


# --------------------------------------------------------------------------- normalizations


def _along_axis(shape: Sequence[int], axis: int, build_row: Callable) -> tir.Stmt:
    """Loops over every axis but ``axis``; ``build_row(at)`` gets ``at(k)``, the full
    index of element k along ``axis`` in the current row."""
    outer = [extent for i, extent in enumerate(shape) if i != axis]

    def body(outer_vars: Indices) -> tir.Stmt:
        def at(k: tir.PrimExpr) -> Indices:
            return (*outer_vars[:axis], k, *outer_vars[axis:])

        return build_row(at)

    return loop_nest(outer, body, prefix="i")


def _row_loop(extent: int, body: Callable, name: str = "k") -> tir.Stmt:
    k = tir.TVar(name)
    return tir.For(k, tir.IntImm(0), tir.IntImm(extent), tir.ForKind.SERIAL, body(k))


def _accumulate(acc: tir.Buffer, extent: int, combine: Callable, value: Callable,
                init: tir.PrimExpr) -> tir.Stmt:
    """``acc = init; for k: acc = combine(acc, value(k))``."""
    return seq(tir.BufferStore(acc, init, ()),
               _row_loop(extent, lambda k: tir.BufferStore(acc, combine(acc.load(), value(k)), ())))


# exp(d) of a float32 softmax, d = x - max <= 0: glibc's vector expf (codegen.vector_math)
# takes every lane below about -87.3 (a result below FLT_MIN: a denormal, then 0) one at
# a time down a slow path, which made masked attention (-1e9 where masked) 4x slower: 4
# heads of 64x64, 23 -> 94 us. A vector loop notes whether the row has a d below
# EXP_FAST_FROM (1.5 us more on an unmasked row set: cheaper than a minimum beside the
# maximum in the scalar loop, 5.5 us). Such a row computes expf(max(d, EXP_FAST_FROM)),
# always in the fast range, and 0 where d < EXP_FAST_FROM, noting whether any such d lies
# in [EXP_ZERO_BELOW, EXP_FAST_FROM), the only ones whose expf is not 0 (expf rounds to
# +0 below -103.97); a row with one gets their exact expf from the scalar expf. The
# masked rows take 30 us. Values are those of before, but for a few denormal results,
# which are now the scalar expf's (the vector expf's slow path gave some 1 ulp away).
EXP_FAST_FROM = -87.0
EXP_ZERO_BELOW = -104.0


@register_compute("nn.softmax")
def _softmax(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    (data,) = inputs
    shape, dtype = output_shape(out_type), out_type.dtype
    axis = normalize_axis(attrs["axis"], len(shape))
    extent = shape[axis]

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (out,) = outputs

        def row(at: Callable) -> tir.Stmt:
            peak, total = local_scalar("row_max", dtype), local_scalar("row_sum", dtype)
            # exp(x - max) is stored by a loop of its own, which vectorizes (a vector exp,
            # see codegen.vector_math), then summed in order by a scalar loop (a float sum
            # does not vectorize without reassociating it), then normalized
            def exps_then_sum() -> tir.Stmt:
                exps = _row_loop(extent, lambda k: tir.BufferStore(
                    out, intrinsic("exp", data.load(*at(k)) - peak.load()), at(k)))
                row_sum = _accumulate(total, extent, tir.Add, lambda k: out.load(*at(k)), imm(0, dtype))
                return seq(exps, row_sum)

            if dtype == "float32":
                exps_and_sum = _exps_in_fast_range(data, out, at, peak, total, extent, exps_then_sum())
            else:
                exps_and_sum = seq(_accumulate(peak, extent, tir.Max, lambda k: data.load(*at(k)),
                                               reduction_identity("max", dtype)), exps_then_sum())
            stmts = seq(
                exps_and_sum,
                _row_loop(extent, lambda k: tir.BufferStore(out, out.load(*at(k)) / total.load(), at(k))),
            )
            return tir.Allocate(peak, tir.Allocate(total, stmts))

        return _along_axis(shape, axis, row)

    return ExternOp("nn.softmax", ((shape, dtype),), build)


def _exps_in_fast_range(data: TensorHandle, out: tir.Buffer, at: Callable, peak: tir.Buffer,
                        total: tir.Buffer, extent: int, plain: tir.Stmt) -> tir.Stmt:
    """``peak`` = the float32 row's maximum, then ``out[k] = expf(x[k] - max)`` and
    ``total`` their sum in order: by ``plain``, or with the exps in the vector expf's fast
    range when the row needs it (the comment on :data:`EXP_FAST_FROM`). Each branch has
    its own sum loop: after a branch gcc vectorized the in-order sum, one add at a time
    from vector lanes, slower than the scalar loop it keeps after a plain exp loop
    (23 -> 29 us for 4 heads of 64x64)."""
    dtype = "float32"
    below, window = local_scalar("row_below", "int32"), local_scalar("row_window", "int32")
    fast_from, zero_below = imm(EXP_FAST_FROM, dtype), imm(EXP_ZERO_BELOW, dtype)

    def shifted(k: tir.PrimExpr) -> tir.PrimExpr:
        return data.load(*at(k)) - peak.load()

    def note_below(k: tir.PrimExpr) -> tir.Stmt:
        is_below = tir.Cast("int32", tir.LT(shifted(k), fast_from))
        return tir.BufferStore(below, tir.Max(below.load(), is_below), ())

    def clamp(k: tir.PrimExpr) -> tir.Stmt:  # a NaN-propagating max: a NaN stays NaN
        return tir.BufferStore(out, tir.Max(shifted(k), fast_from), at(k))

    def exp_fast(k: tir.PrimExpr) -> tir.Stmt:
        value = tir.Select(tir.LT(shifted(k), fast_from), imm(0, dtype), intrinsic("exp", out.load(*at(k))))
        return tir.BufferStore(out, value, at(k))

    def note(k: tir.PrimExpr) -> tir.Stmt:  # min of the two tests, not C's &&: it vectorizes
        d = shifted(k)
        inside = tir.Min(tir.Cast("int32", tir.LT(d, fast_from)), tir.Cast("int32", tir.GE(d, zero_below)))
        return tir.BufferStore(window, tir.Max(window.load(), inside), ())

    def exact(k: tir.PrimExpr) -> tir.Stmt:
        d = shifted(k)
        inside = tir.And(tir.LT(d, fast_from), tir.GE(d, zero_below))
        return tir.IfThenElse(inside, tir.BufferStore(out, intrinsic("exp", d), at(k)))

    clamped = seq(
        # the clamped arguments go through memory: in one expression, gcc sees that the
        # lanes the max changes are the ones the select discards, and drops the max
        _row_loop(extent, clamp, name="k_clamp"),
        _row_loop(extent, exp_fast),
        tir.BufferStore(window, tir.IntImm(0, "int32"), ()),
        _row_loop(extent, note, name="k_note"),
        tir.IfThenElse(tir.NE(window.load(), tir.IntImm(0, "int32")),
                       _row_loop(extent, exact, name="k_exact")),
        _accumulate(total, extent, tir.Add, lambda k: out.load(*at(k)), imm(0, dtype)))
    return tir.Allocate(below, tir.Allocate(window, seq(
        _accumulate(peak, extent, tir.Max, lambda k: data.load(*at(k)), reduction_identity("max", dtype)),
        tir.BufferStore(below, tir.IntImm(0, "int32"), ()),
        _row_loop(extent, note_below, name="k_below"),
        tir.IfThenElse(tir.NE(below.load(), tir.IntImm(0, "int32")), clamped, plain))))


@register_compute("nn.layer_norm")
def _layer_norm(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    data, gamma, beta = inputs
    shape, dtype = output_shape(out_type), out_type.dtype
    axis = normalize_axis(attrs["axis"], len(shape))
    extent = shape[axis]
    count, epsilon = imm(extent, dtype), imm(attrs["epsilon"], dtype)

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (out,) = outputs

        def row(at: Callable) -> tir.Stmt:
            mean, spread = local_scalar("row_mean", dtype), local_scalar("row_std", dtype)

            def centered(k: tir.PrimExpr) -> tir.PrimExpr:
                return data.load(*at(k)) - mean.load()

            stmts = seq(
                _accumulate(mean, extent, tir.Add, lambda k: data.load(*at(k)), imm(0, dtype)),
                tir.BufferStore(mean, mean.load() / count, ()),
                _accumulate(spread, extent, tir.Add, lambda k: centered(k) * centered(k), imm(0, dtype)),
                tir.BufferStore(spread, intrinsic("sqrt", spread.load() / count + epsilon), ()),
                _row_loop(extent, lambda k: tir.BufferStore(
                    out, centered(k) / spread.load() * gamma.load(k) + beta.load(k), at(k))),
            )
            return tir.Allocate(mean, tir.Allocate(spread, stmts))

        return _along_axis(shape, axis, row)

    return ExternOp("nn.layer_norm", ((shape, dtype),), build)


@register_compute("nn.batch_norm")
def _batch_norm(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    data, gamma, beta, mean, var = inputs
    shape, dtype = data.shape, data.dtype
    axis = normalize_axis(attrs["axis"], len(shape))
    channels = shape[axis]
    epsilon = imm(attrs["epsilon"], dtype)

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        out, mean_out, var_out = outputs
        # per-channel scale computed once, not per element
        scale = tir.Buffer("bn_scale", (channels,), dtype)
        per_channel = _row_loop(channels, lambda c: seq(
            tir.BufferStore(scale, gamma.load(c) / intrinsic("sqrt", var.load(c) + epsilon), (c,)),
            tir.BufferStore(mean_out, mean.load(c), (c,)),
            tir.BufferStore(var_out, var.load(c), (c,)),
        ), name="c")
        normalize = loop_nest(shape, lambda idx: tir.BufferStore(
            out, (data.load(*idx) - mean_out.load(idx[axis])) * scale.load(idx[axis]) + beta.load(idx[axis]),
            idx))
        return tir.Allocate(scale, seq(per_channel, normalize))

    stats = ((channels,), dtype)
    return ExternOp("nn.batch_norm", ((shape, dtype), stats, stats), build)

"""Compute rules of the channels-first sliding-window ops over any number of spatial axes
(:mod:`passinfra.ir.op.window`): ``nn.conv3d``, ``nn.conv2d_transpose`` and
``nn.conv3d_transpose``, ``nn.max_pool2d_dilated``, ``nn.max_pool3d`` and ``nn.avg_pool3d``.

All are :class:`ReduceOp`: a value per output index combined over the window taps.

* Convolution sums, over the input channels of the group and the kernel taps, the
  padded input times the weight.
* The transposed convolution is a gather, not a scatter: an output position sums the
  input positions whose strided place lands on it through a tap; a tap contributes only
  where ``out + pad_begin - tap * dilation`` is a non-negative multiple of the stride
  inside the input.
* Pools combine (max, or sum) the window's cells; cells in the padding, or past it in a
  ceil-mode window, hold the combiner's identity. The average divides by the number of
  real cells (or of cells inside the padded input with ``count_include_pad``), counted
  per axis in closed form.

Every out-of-range read is a Select around a load at a clamped index, so a load never
leaves its buffer (both sides of a Select may be evaluated). The 2-D ``nn.conv2d`` and
pools with layouts keep their own rules (:mod:`passinfra.codegen.compute.nn`).
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
    in_range,
    output_shape,
    reduction_identity,
    register_compute,
)
from passinfra.ir.attrs import Attrs
from passinfra.ir.op import _window
from passinfra.ir.types import Type


def _all(conditions: Sequence[tir.PrimExpr]) -> tir.PrimExpr | None:
    if not conditions:
        return None
    result = conditions[0]
    for condition in conditions[1:]:
        result = tir.And(result, condition)
    return result


def _scaled(index: tir.PrimExpr, factor: int) -> tir.PrimExpr:
    return index if factor == 1 else index * tir.IntImm(factor)


def _window_position(out: tir.PrimExpr, stride: int, tap: tir.PrimExpr, dilation: int,
                     pad: int) -> tir.PrimExpr:
    """``out * stride + tap * dilation - pad``: the input position a tap reads."""
    index = _scaled(out, stride) + _scaled(tap, dilation)
    return index - tir.IntImm(pad) if pad else index


def _ceil_div(numerator: tir.PrimExpr, divisor: int) -> tir.PrimExpr:
    """ceil(numerator / divisor) for a positive divisor (floor division rounds down)."""
    if divisor == 1:
        return numerator
    return tir.FloorDiv(numerator + tir.IntImm(divisor - 1), tir.IntImm(divisor))


class _Padded:
    """Reads channels-first data at (n, c, *positions); a position outside the data (the
    padding, or past it) reads ``fill`` instead. Axes that can never leave the data are
    not tested."""

    def __init__(self, data: TensorHandle, fill: tir.PrimExpr, may_leave: Sequence[bool]):
        self.data, self.fill, self.may_leave = data, fill, may_leave

    def read(self, n: tir.PrimExpr, c: tir.PrimExpr, positions: Sequence[tir.PrimExpr]) -> tir.PrimExpr:
        conditions, indices = [], []
        for position, extent, leaves in zip(positions, self.data.shape[2:], self.may_leave):
            if leaves:
                conditions.append(in_range(position, extent))
                position = clamp(position, 0, extent - 1)
            indices.append(position)
        value = self.data.load(n, c, *indices)
        inside = _all(conditions)
        return value if inside is None else tir.Select(inside, value, self.fill)


def _conv(name: str):
    def rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
        data, weight = inputs
        rank = len(data.shape) - 2
        out_channels, group_channels = weight.shape[:2]
        kernel = weight.shape[2:]
        groups, strides, dilation = attrs["groups"], attrs["strides"], attrs["dilation"]
        padding = attrs["padding"]
        reader = _Padded(data, imm(0, data.dtype), [any(p) for p in zip(padding[:rank], padding[rank:])])
        out_per_group = out_channels // groups

        def body(out: Indices, red: Indices) -> tir.PrimExpr:
            n, oc, *positions = out
            rc, *taps = red
            ic = rc if groups == 1 else \
                tir.FloorDiv(oc, tir.IntImm(out_per_group)) * tir.IntImm(group_channels) + rc
            where = [_window_position(o, s, t, d, b)
                     for o, s, t, d, b in zip(positions, strides, taps, dilation, padding[:rank])]
            return reader.read(n, ic, where) * weight.load(oc, rc, *taps)

        return ReduceOp(name, output_shape(out_type), data.dtype, (group_channels, *kernel), "sum", body)

    return rule


def _conv_transpose(name: str):
    def rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
        data, weight = inputs
        rank = len(data.shape) - 2
        channels, in_spatial = data.shape[1], data.shape[2:]
        group_out, kernel = weight.shape[1], weight.shape[2:]
        groups, strides, dilation = attrs["groups"], attrs["strides"], attrs["dilation"]
        crop = attrs["padding"][:rank]
        group_in = channels // groups

        def source(out: tir.PrimExpr, begin: int, tap: tir.PrimExpr, dilation: int, stride: int,
                   extent: int) -> tuple[tir.PrimExpr, list[tir.PrimExpr]]:
            """The input position an output position reads through ``tap``, and the
            conditions under which that read exists."""
            shifted = (out + tir.IntImm(begin) if begin else out) - _scaled(tap, dilation)
            conditions = [tir.GE(shifted, tir.IntImm(0))]
            if stride != 1:
                conditions.append(tir.EQ(tir.FloorMod(shifted, tir.IntImm(stride)), tir.IntImm(0)))
                shifted = tir.FloorDiv(shifted, tir.IntImm(stride))
            conditions.append(tir.LT(shifted, tir.IntImm(extent)))
            return clamp(shifted, 0, extent - 1), conditions

        def body(out: Indices, red: Indices) -> tir.PrimExpr:
            n, oc, *positions = out
            ic, *taps = red
            if groups == 1:
                in_channel, oc_in_group = ic, oc
            else:
                group = tir.FloorDiv(oc, tir.IntImm(group_out))
                in_channel = group * tir.IntImm(group_in) + ic
                oc_in_group = tir.FloorMod(oc, tir.IntImm(group_out))
            reads, conditions = [], []
            for o, b, t, d, s, e in zip(positions, crop, taps, dilation, strides, in_spatial):
                where, exists = source(o, b, t, d, s, e)
                reads.append(where)
                conditions += exists
            product = data.load(n, in_channel, *reads) * weight.load(in_channel, oc_in_group, *taps)
            return tir.Select(_all(conditions), product, imm(0, data.dtype))

        return ReduceOp(name, output_shape(out_type), data.dtype, (group_in, *kernel), "sum", body)

    return rule


def _pool(name: str, combiner: str):
    def rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
        (data,) = inputs
        rank = len(data.shape) - 2
        sizes, out_shape = data.shape[2:], output_shape(out_type)
        window, strides, dilation = attrs["pool_size"], attrs["strides"], attrs["dilation"]
        begins, ends = attrs["padding"][:rank], attrs["padding"][rank:]
        extra = [_window.overhang(n, k, s, d, b, e, o) for n, k, s, d, b, e, o
                 in zip(sizes, window, strides, dilation, begins, ends, out_shape[2:])]
        # padded cells never win a max, and add nothing to a sum
        reader = _Padded(data, reduction_identity(combiner, data.dtype),
                         [bool(b or e or x) for b, e, x in zip(begins, ends, extra)])

        def body(out: Indices, red: Indices) -> tir.PrimExpr:
            n, c, *positions = out
            where = [_window_position(o, s, t, d, b)
                     for o, s, t, d, b in zip(positions, strides, red, dilation, begins)]
            return reader.read(n, c, where)

        finalize = None
        if combiner == "sum":
            include_pad = attrs.get("count_include_pad", False)

            def count(o: tir.PrimExpr, axis: int) -> tir.PrimExpr | int:
                """The window's counted cells along one axis: the taps t in [0, k) whose
                position ``o*s - b + t*d`` lies in [low, high)."""
                k, s, d, b, n = window[axis], strides[axis], dilation[axis], begins[axis], sizes[axis]
                low, high = (-b, n + ends[axis]) if include_pad else (0, n)
                if not (extra[axis] or (not include_pad and (b or ends[axis]))):
                    return k  # every tap of every window is counted
                start = _scaled(o, s) - tir.IntImm(b) if b else _scaled(o, s)
                first = tir.Max(_ceil_div(tir.IntImm(low) - start, d), tir.IntImm(0))
                last = tir.Min(_ceil_div(tir.IntImm(high) - start, d), tir.IntImm(k))
                return tir.Max(last - first, tir.IntImm(0))

            def finalize(acc: tir.PrimExpr, out: Indices) -> tir.PrimExpr:
                counts = [count(o, axis) for axis, o in enumerate(out[2:])]
                fixed = math.prod(c for c in counts if isinstance(c, int))
                varying = [c for c in counts if not isinstance(c, int)]
                if not varying:
                    return acc / imm(fixed, acc.dtype)
                total = varying[0]
                for extra_count in varying[1:]:
                    total = total * extra_count
                if fixed != 1:
                    total = total * tir.IntImm(fixed)
                return acc / tir.Cast(acc.dtype, total)

        return ReduceOp(name, out_shape, data.dtype, tuple(window), combiner, body, finalize)

    return rule


for _name in ("nn.conv3d",):
    register_compute(_name)(_conv(_name))
for _name in ("nn.conv2d_transpose", "nn.conv3d_transpose"):
    register_compute(_name)(_conv_transpose(_name))
for _name in ("nn.max_pool2d_dilated", "nn.max_pool3d"):
    register_compute(_name)(_pool(_name, "max"))
register_compute("nn.avg_pool3d")(_pool("nn.avg_pool3d", "sum"))

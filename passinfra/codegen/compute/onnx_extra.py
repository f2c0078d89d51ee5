"""Compute rules of the three ONNX-driven nn ops that had none: ``nn.lrn``,
``nn.conv2d_transpose`` and ``nn.max_pool2d_dilated`` (ops of :mod:`passinfra.ir.op.extra`).

All three are :class:`ReduceOp`: a value per output index combined over a small window.

* LRN sums the squares over a window of channels, then divides the input by
  ``(bias + alpha / size * sum) ** beta`` in the finalize step.
* The transposed convolution is written as a gather, not a scatter: an output pixel
  sums, over the input channels of its group and the kernel taps, the input pixels whose
  strided position lands on it. A tap contributes only where ``y + top - ky * dilation``
  is a non-negative multiple of the stride inside the input.
* Dilated max pooling is max pooling whose window taps are ``dilation`` apart.

Every out-of-window read is a Select around a load at a clamped index, so a load never
leaves its buffer (both sides of a Select may be evaluated).
"""

from __future__ import annotations

from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import (
    Indices,
    ReduceOp,
    TensorHandle,
    clamp,
    imm,
    in_range,
    intrinsic,
    reduction_identity,
    register_compute,
)
from passinfra.ir.attrs import Attrs
from passinfra.ir.types import TensorType, Type


def _shape(out_type: Type) -> tuple[int, ...]:
    assert isinstance(out_type, TensorType)
    return out_type.shape


def _all(conditions: Sequence[tir.PrimExpr]) -> tir.PrimExpr:
    result = conditions[0]
    for condition in conditions[1:]:
        result = tir.And(result, condition)
    return result


def _scaled(index: tir.PrimExpr, factor: int) -> tir.PrimExpr:
    return index if factor == 1 else index * tir.IntImm(factor)


@register_compute("nn.lrn")
def _lrn(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
    (data,) = inputs
    size, dtype = attrs["size"], data.dtype
    channels = data.shape[1]
    before = (size - 1) // 2  # the ONNX window: [c - floor((size-1)/2), c + ceil((size-1)/2)]

    def body(out: Indices, red: Indices) -> tir.PrimExpr:
        channel = out[1] - tir.IntImm(before) + red[0] if before else out[1] + red[0]
        value = data.load(out[0], clamp(channel, 0, channels - 1), *out[2:])
        return tir.Select(in_range(channel, channels), value * value, imm(0, dtype))

    def finalize(acc: tir.PrimExpr, out: Indices) -> tir.PrimExpr:
        base = imm(attrs["bias"], dtype) + imm(attrs["alpha"] / size, dtype) * acc
        return data.load(*out) / intrinsic("pow", base, imm(attrs["beta"], dtype))

    return ReduceOp("nn.lrn", _shape(out_type), dtype, (size,), "sum", body, finalize)


@register_compute("nn.conv2d_transpose")
def _conv2d_transpose(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
    data, weight = inputs
    _, channels, in_h, in_w = data.shape
    _, group_out, kh, kw = weight.shape
    groups = attrs["groups"]
    group_in = channels // groups
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    top, left, _, _ = attrs["padding"]

    def source(out: tir.PrimExpr, crop: int, tap: tir.PrimExpr, dilation: int, stride: int,
               extent: int) -> tuple[tir.PrimExpr, list[tir.PrimExpr]]:
        """The input row/column an output position reads through ``tap``, and the
        conditions under which that read exists."""
        shifted = (out + tir.IntImm(crop) if crop else out) - _scaled(tap, dilation)
        conditions = [tir.GE(shifted, tir.IntImm(0))]
        if stride != 1:
            conditions.append(tir.EQ(tir.FloorMod(shifted, tir.IntImm(stride)), tir.IntImm(0)))
            shifted = tir.FloorDiv(shifted, tir.IntImm(stride))
        conditions.append(tir.LT(shifted, tir.IntImm(extent)))
        return clamp(shifted, 0, extent - 1), conditions

    def body(out: Indices, red: Indices) -> tir.PrimExpr:
        n, oc, y, x = out
        ic, ky, kx = red
        if groups == 1:
            in_channel, oc_in_group = ic, oc
        else:
            group = tir.FloorDiv(oc, tir.IntImm(group_out))
            in_channel = group * tir.IntImm(group_in) + ic
            oc_in_group = tir.FloorMod(oc, tir.IntImm(group_out))
        row, row_ok = source(y, top, ky, dh, sh, in_h)
        col, col_ok = source(x, left, kx, dw, sw, in_w)
        product = data.load(n, in_channel, row, col) * weight.load(in_channel, oc_in_group, ky, kx)
        return tir.Select(_all(row_ok + col_ok), product, imm(0, data.dtype))

    return ReduceOp("nn.conv2d_transpose", _shape(out_type), data.dtype, (group_in, kh, kw), "sum", body)


@register_compute("nn.max_pool2d_dilated")
def _max_pool2d_dilated(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
    (data,) = inputs
    _, _, height, width = data.shape
    (ph, pw), (sh, sw), (dh, dw) = attrs["pool_size"], attrs["strides"], attrs["dilation"]
    top, left, bottom, right = attrs["padding"]
    lowest = reduction_identity("max", data.dtype)  # a padded cell never wins

    def window(out: tir.PrimExpr, stride: int, tap: tir.PrimExpr, dilation: int, pad: int) -> tir.PrimExpr:
        index = _scaled(out, stride) + _scaled(tap, dilation)
        return index - tir.IntImm(pad) if pad else index

    def body(out: Indices, red: Indices) -> tir.PrimExpr:
        n, c, y, x = out
        row, col = window(y, sh, red[0], dh, top), window(x, sw, red[1], dw, left)
        # ceil-mode windows may also run past the far edge, so check whenever any padding exists
        conditions = []
        if top or bottom:
            conditions.append(in_range(row, height))
            row = clamp(row, 0, height - 1)
        if left or right:
            conditions.append(in_range(col, width))
            col = clamp(col, 0, width - 1)
        value = data.load(n, c, row, col)
        return tir.Select(_all(conditions), value, lowest) if conditions else value

    return ReduceOp("nn.max_pool2d_dilated", _shape(out_type), data.dtype, (ph, pw), "max", body)

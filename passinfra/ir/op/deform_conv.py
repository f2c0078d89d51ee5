"""``deform_conv``: ONNX DeformConv on 2-D images (NCHW data, OIHW weights).

Each kernel tap of each output position reads the input at its regular convolution
position (``out * stride - pad_begin + tap * dilation``) moved by a learned offset, by
bilinear interpolation; a neighbour outside the image reads 0 (so a point at or beyond
one cell outside reads 0). The offsets (N, offset_group * KH * KW * 2, OH, OW) hold, per
offset group and tap, the (y, x) shift; the optional mask (N, offset_group * KH * KW,
OH, OW) scales each sample; channels are split in ``group`` convolution groups and, for
the offsets, in ``offset_group`` groups. The result is the sum, over the input channels
of the output channel's group and the kernel taps, of weight times masked sample, plus
the optional bias.

Arguments: ``data, weight, offset`` and optionally ``bias`` and then ``mask`` (the
converter passes a zero bias when only a mask is given). The bilinear read is
GridSample's zero-padded linear tap (:mod:`passinfra.ir.op._grid_sample`), taken at a
pixel position instead of a normalized one: :func:`sample_taps` is shared with the
compute rule.

Where the spec is silent: only 2-D images (onnxruntime's CPU kernel and the ONNX
reference implement no other rank); every input has the data's dtype, as onnxruntime
requires; arithmetic is in float64 for float64 data, else float32 (float16 and bfloat16
are widened on load and rounded once on store); the offsets' spatial shape must be the
convolution's output shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op import _grid_sample
from passinfra.ir.op._rel import (
    FLOAT_DTYPES,
    expect_dtype,
    expect_ndim,
    expect_same_dtype,
    expect_tensor,
    register_tensor_op,
    type_text,
    window_out_size,
)
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, Type

__all__ = ["deform_conv", "sample_taps", "output_size"]

Expr = Any
# a tap's validity and clamped index as GridSample's zeros padding computes them
_ZERO_PADDED = _grid_sample.Method("linear", "zeros", True)


def sample_taps(m: _grid_sample.Arith, at: Expr, length: int, name: str) -> _grid_sample.AxisTaps:
    """The two bilinear taps of pixel position ``at`` along an axis of ``length`` cells:
    ``floor(at)`` and the next, weighted ``1 - f`` and ``f``, each reading 0 outside."""
    # a position at or beyond one cell outside reads 0 either way: clamping it there
    # first keeps the integer conversion in range for any offset
    at = m.maximum(m.minimum(at, m.real(length)), m.real(-1.0))
    low = m.floor(at)
    frac = m.bind(at - low, f"{name}_frac")
    base = m.bind(m.to_i64(low), f"{name}_base")
    taps = [_grid_sample._tap(m, p, length, _ZERO_PADDED) for p in (base, base + 1)]
    indices = [m.bind(index, f"{name}_i{k}") for k, (index, _) in enumerate(taps)]
    return _grid_sample.AxisTaps(indices, [1.0 - frac, frac], [valid for _, valid in taps])


def _checked(attrs: Attrs) -> None:
    for name, count, low in (("strides", 2, 1), ("dilations", 2, 1), ("pads", 4, 0)):
        value = attrs[name]
        if len(value) != count or any(not isinstance(v, int) or v < low for v in value):
            raise IRTypeError(f"{name} must hold {count} ints >= {low}, got {value!r}")
    for name in ("group", "offset_group"):
        if not isinstance(attrs[name], int) or attrs[name] < 1:
            raise IRTypeError(f"{name} must be a positive int, got {attrs[name]!r}")


def output_size(data: Sequence[int], kernel: Sequence[int], attrs: Attrs) -> tuple[int, int]:
    """(OH, OW) of the convolution of ``data`` (N, C, H, W) by ``kernel`` (KH, KW)."""
    pads = attrs["pads"]
    return tuple(  # type: ignore[return-value]
        window_out_size(data[2 + a], kernel[a], attrs["strides"][a], pads[a], pads[2 + a],
                        attrs["dilations"][a], "deform_conv") for a in range(2))


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    if not 3 <= len(arg_types) <= 5:
        raise IRTypeError(f"expected 3 to 5 arguments (data, weight, offset[, bias[, mask]]), "
                          f"got {len(arg_types)}")
    _checked(attrs)
    data = expect_tensor(arg_types[0], "the data")
    expect_ndim(data, 4, "the data", "NCHW")
    expect_dtype(data, FLOAT_DTYPES, "the data")
    weight, offset = expect_tensor(arg_types[1], "the weight"), expect_tensor(arg_types[2], "the offset")
    expect_ndim(weight, 4, "the weight", "OIHW")
    group, offset_group = attrs["group"], attrs["offset_group"]
    n, channels = data.shape[:2]
    out_channels, kernel = weight.shape[0], weight.shape[2:]
    if weight.shape[1] * group != channels or out_channels % group:
        raise IRTypeError(f"weight {type_text(weight)} does not fit data {type_text(data)} in {group} "
                          "groups: expected (O, C / group, KH, KW) with O divisible by group")
    if channels % offset_group:
        raise IRTypeError(f"the data's {channels} channels do not split in offset_group {offset_group}")
    cells = (kh_kw := kernel[0] * kernel[1]) * offset_group
    spatial = output_size(data.shape, kernel, attrs)
    if offset.shape != (n, cells * 2, *spatial):
        raise IRTypeError(f"expected an offset of shape {(n, cells * 2, *spatial)} (offset_group "
                          f"{offset_group} x {kh_kw} taps x 2), got {type_text(offset)}")
    expected = [(weight, None), (offset, None)]
    if len(arg_types) > 3:
        expected.append((expect_tensor(arg_types[3], "the bias"), (out_channels,)))
    if len(arg_types) > 4:
        expected.append((expect_tensor(arg_types[4], "the mask"), (n, cells, *spatial)))
    for (tensor, shape), what in zip(expected, ("the weight", "the offset", "the bias", "the mask")):
        expect_same_dtype(data, tensor, what, "the data")
        if shape is not None and tensor.shape != shape:
            raise IRTypeError(f"expected {what} of shape {shape}, got {type_text(tensor)}")
    return TensorType((n, out_channels, *spatial), data.dtype)


def _impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data, weight, offset = (np.asarray(a) for a in args[:3])
    work = np.dtype(np.float64 if data.dtype == np.float64 else np.float32)
    m = _grid_sample.NumpyArith(work)
    n, channels, height, width = data.shape
    out_channels, per_group, kh, kw = weight.shape
    offset_group, group = attrs["offset_group"], attrs["group"]
    oh, ow = offset.shape[2:]
    taps = kh * kw
    # per channel, the offsets of its offset group: (N, C, taps, 2, OH, OW)
    shifts = m.to_real(offset).reshape(n, offset_group, taps, 2, oh, ow)[:, np.arange(channels) //
                                                                              (channels // offset_group)]
    (sh, sw), (dh, dw), pads = attrs["strides"], attrs["dilations"], attrs["pads"]
    rows = (np.arange(oh) * sh - pads[0])[None, None, :, None] + (np.arange(kh) * dh)[:, None, None, None]
    cols = (np.arange(ow) * sw - pads[1])[None, None, None, :] + (np.arange(kw) * dw)[None, :, None, None]
    y = m.to_real(np.broadcast_to(rows, (kh, kw, oh, ow)).reshape(taps, oh, ow)) + shifts[:, :, :, 0]
    x = m.to_real(np.broadcast_to(cols, (kh, kw, oh, ow)).reshape(taps, oh, ow)) + shifts[:, :, :, 1]
    where_n = np.arange(n).reshape(-1, 1, 1, 1, 1)
    where_c = np.arange(channels).reshape(1, -1, 1, 1, 1)
    with np.errstate(invalid="ignore", over="ignore"):  # far-off offsets: as in C
        axes = [sample_taps(m, y, height, "y"), sample_taps(m, x, width, "x")]
        samples = _grid_sample.interpolate(m, axes, lambda at: m.to_real(data[(where_n, where_c, *at)]))
    if len(args) > 4:
        mask = m.to_real(np.asarray(args[4])).reshape(n, offset_group, taps, oh, ow)
        samples = samples * mask[:, np.arange(channels) // (channels // offset_group)]
    out = np.zeros((n, out_channels, oh, ow), work)
    per_out = out_channels // group
    kernel = m.to_real(weight).reshape(out_channels, per_group, taps)
    for g in range(group):
        outs, ins = slice(g * per_out, (g + 1) * per_out), slice(g * per_group, (g + 1) * per_group)
        out[:, outs] = np.einsum("oct,nctyx->noyx", kernel[outs], samples[:, ins])
    if len(args) > 3:
        out += m.to_real(np.asarray(args[3]))[None, :, None, None]
    return out.astype(data.dtype)


register_tensor_op(
    "deform_conv", attrs={"strides": (1, 1), "pads": (0, 0, 0, 0), "dilations": (1, 1), "group": 1,
                          "offset_group": 1},
    num_inputs=-1, type_rel=_relation, impl=_impl, pattern=OpPattern.OPAQUE,
    doc="ONNX DeformConv: convolution reading the input bilinearly at learned offsets (optional mask)",
)


def deform_conv(data: Any, weight: Any, offset: Any, bias: Any = None, mask: Any = None,
                strides: Sequence[int] = (1, 1), pads: Sequence[int] = (0, 0, 0, 0),
                dilations: Sequence[int] = (1, 1), group: int = 1, offset_group: int = 1) -> Call:
    """Deformable 2-D convolution of ``data`` (NCHW) by ``weight`` (OIHW) at ``offset``;
    ``pads`` are (top, left, bottom, right), ONNX's begins-then-ends order."""
    if mask is not None and bias is None:
        raise IRTypeError("deform_conv: a mask needs a bias argument before it (pass zeros)")
    args = [a for a in (data, weight, offset, bias, mask) if a is not None]
    return call_op("deform_conv", *args, strides=tuple(int(v) for v in strides),
                   pads=tuple(int(v) for v in pads), dilations=tuple(int(v) for v in dilations),
                   group=int(group), offset_group=int(offset_group))

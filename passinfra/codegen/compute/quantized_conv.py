"""Compute rule of ``qnn.conv2d``: the int32 convolution of ``data - zd`` with ``weight
- zw`` (:mod:`passinfra.ir.op.quantize`), exact, so every kernel below gives the
reference's bits whatever its order of summation or its thread count.

In NHWC/HWIO (AlterOpLayout's layout) with static sizes and a per-tensor data zero point:

* **groups of at least** :data:`MIN_GEMM_GROUP_CHANNELS` **input channels** (one group,
  or RegNet's groups of 16): the runtime's integer GEMM (``c/qgemm.c``, the body the CPU
  can run: AMX, AVX-512 VNNI, AVX2 or portable), every group in one call, on the im2col
  matrix ``[N*OH*OW, KH*KW*C]``, which the runtime gathers row by row (a pointwise
  convolution of stride 1 is the data itself; narrow groups of whole quads of channels
  are read from the image in place where there is AVX-512 VNNI); the padding holds the
  data's zero point, so it adds nothing, as in the reference. The weight is the GEMM's
  ``[KH*KW*C, O]`` matrix, which PanelWeights stores in the GEMM's panels;
* **a depthwise convolution** (one input channel and one output a group): the same call,
  which the runtime runs on its depthwise bodies (``c/qgemm.c``: per output pixel, 8 to 32
  channels of two taps at a time by VPMADDWD, over the image's rows or over rows widened
  once to 16 bits), requantizing, adding a residual and looking outputs up as the GEMM does;
* **other narrow groups** (2 to 7 channels, or a depthwise one of several outputs a
  channel that ExactFloatConvolutions left integer): the direct channels-last kernel of the
  float convolutions (:mod:`passinfra.codegen.compute.conv_direct`) on int32 values ``x -
  zd`` and ``w - zw`` with int32 accumulators: its vector lanes run over output channels,
  its skipped padding adds nothing where the reference adds 0.

Anything else (NCHW, symbolic sizes, a per-element data zero point) is the generic loop
nest: an int32 sum of the centered products, a padded tap contributing 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from passinfra import tir
from passinfra.codegen.compute.base import (
    ExternOp,
    Indices,
    ReduceOp,
    TensorHandle,
    clamp,
    in_range,
    output_shape,
    register_compute,
    seq,
)
from passinfra.codegen.compute.conv_direct import ConvGeometry, direct_conv
from passinfra.codegen.compute.quantize import (
    Requantization,
    allocated,
    centered,
    first_element,
    in_memory,
    no_requantization,
    qgemm_call,
    staged,
    weight_in_memory,
)
from passinfra.errors import IRError
from passinfra.ir.attrs import Attrs
from passinfra.ir.dims import is_static as is_static_dim
from passinfra.ir.types import Type
from passinfra.tir.intrinsics import QCONV_INTRINSIC, SATURATING_PAIRS

_I32 = "int32"
# a group of at least this many input channels runs on the integer GEMM; fewer (a
# depthwise convolution) on the direct kernel. RegNetX-like's groups of 16 (3x3,
# one thread): 7.8 ms for the model on the direct kernel, 1.9 ms on the GEMM (its
# direct body, AVX-512 VNNI)
MIN_GEMM_GROUP_CHANNELS = 8


def _tap(out: tir.PrimExpr, stride: int, tap: tir.PrimExpr, dilation: int, pad: int) -> tir.PrimExpr:
    """``out * stride + tap * dilation - pad``, leaving out the trivial parts."""
    index = out if stride == 1 else out * tir.IntImm(stride)
    index = index + (tap if dilation == 1 else tap * tir.IntImm(dilation))
    return index - tir.IntImm(pad) if pad else index


@dataclass(frozen=True)
class _Centered:
    """An operand read as int32 ``value - zero_point`` (what the direct kernel multiplies)."""

    operand: TensorHandle
    zero_point: TensorHandle

    @property
    def shape(self) -> tuple:
        return tuple(self.operand.shape)

    dtype = _I32

    def load(self, *indices: tir.PrimExpr) -> tir.PrimExpr:
        return centered(self.operand, self.zero_point, tuple(indices))


def _size(shape: Sequence) -> int | None:
    return math.prod(int(d) for d in shape) if all(is_static_dim(d) for d in shape) else None


def _on_gemm(g: ConvGeometry, data: TensorHandle, weight: TensorHandle, data_zero: TensorHandle,
             weight_zero: TensorHandle, out_shape: tuple[int, ...], per_channel: bool,
             requantization: Requantization | None = None, saturate: bool = False) -> ExternOp:
    """One integer GEMM per group, in one call: the im2col matrix of each group's input
    channels (gathered by the runtime, ``rp_qconv``; a pointwise convolution of stride 1
    and one group multiplies the data itself, ``rp_qgemm``) times the group's columns of
    the HWIO weight (``[KH*KW*Cg, O]``, group ``g``'s outputs from ``g * Og`` on), into
    the NHWC output; ``saturate``: its u8 x s8 pairs saturate (``saturate_pairs``)."""
    (kh, kw), (sh, sw), (dh, dw) = g.kernel, g.strides, g.dilation
    top, left, _, _ = g.padding
    pointwise = g.groups == 1 and (kh, kw) == (1, 1) and (sh, sw) == (1, 1) and not any(g.padding)
    m, k = g.batch * g.out_height * g.out_width, kh * kw * g.group_channels
    signs = (data.dtype == "int8", SATURATING_PAIRS if saturate else int(weight.dtype == "int8"))

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (out,) = outputs
        a_first, a_scratch, a_fill = in_memory(data, "qconv_image")
        b_first, b_scratch, b_fill, panels = weight_in_memory(weight, "qconv_b")
        za, za_fill = staged(data_zero, "qconv_za", data.shape, (), False)
        zb, zb_fill = staged(weight_zero, "qconv_zb", weight.shape, (g.out_channels,) if per_channel else (),
                             True)
        epilogue, epilogue_fill, epilogue_buffers = (requantization.staged(g.out_channels)
                                                     if requantization is not None else (None, None, []))
        if pointwise:
            call = qgemm_call(a_first, b_first, za, zb, first_element(out), tir.IntImm(m, tir.INDEX_DTYPE),
                              g.out_channels, k, *signs, 0, int(per_channel), panels is not None,
                              epilogue=epilogue)
        else:
            sizes = (g.batch, g.height, g.width, g.channels, g.out_height, g.out_width, kh, kw, sh, sw, dh,
                     dw, top, left, g.group_outputs, g.groups, *signs, int(per_channel), panels is not None)
            call = tir.Evaluate(tir.Intrinsic(QCONV_INTRINSIC, (
                a_first, b_first, first_element(za), first_element(zb), first_element(out),
                *(tir.IntImm(int(v), tir.INDEX_DTYPE) for v in sizes),
                *(epilogue if epilogue is not None else no_requantization(za))), _I32))
        body = seq(a_fill, b_fill, za_fill, zb_fill, epilogue_fill, call)
        return allocated(body, a_scratch, b_scratch, za, zb, *epilogue_buffers)

    dtype = _I32 if requantization is None else requantization.zero_point.dtype
    return ExternOp("qnn.conv2d", ((out_shape, dtype),), build)


def _direct(g: ConvGeometry, data: TensorHandle, weight: TensorHandle, data_zero: TensorHandle,
            weight_zero: TensorHandle, out_shape: tuple[int, ...]) -> ExternOp:
    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (out,) = outputs
        return direct_conv(g, _Centered(data, data_zero), _Centered(weight, weight_zero), out)

    return ExternOp("qnn.conv2d", ((out_shape, _I32),), build)


def _kernel_shapes(shapes: Sequence[tuple]) -> bool:
    """Whether the data, weight and zero point shapes (and the output's, when given) suit
    the kernels: static, one data zero point, the weight's per tensor or per output
    channel (else, one per input channel or tap: the loop nest)."""
    if any(_size(shape) is None for shape in shapes) or _size(shapes[2]) != 1:
        return False
    out_channels = int(shapes[1][-1])
    padded_zero = (1,) * (4 - len(shapes[3])) + tuple(int(d) for d in shapes[3])
    return _size(shapes[3]) == 1 or padded_zero == (1, 1, 1, out_channels)


def depthwise(groups: int, group_channels: int, out_channels: int) -> bool:
    """A depthwise convolution of one output a channel: one input channel and one output a
    group (the integer runtime's depthwise body computes it; a channel multiplier above 1
    has no kernel of its own)."""
    return groups > 1 and group_channels == 1 and out_channels == groups


def runs_on_integer_gemm(attrs: Attrs, shapes: Sequence[tuple]) -> bool:
    """Whether a qnn.conv2d of these attrs and argument shapes (data, weight, data zero
    point, weight zero point) runs on the integer runtime (``rp_qconv``): NHWC/HWIO,
    :func:`_kernel_shapes`, one group, groups of at least :data:`MIN_GEMM_GROUP_CHANNELS`
    input channels (the GEMM) or :func:`depthwise` (its depthwise body)."""
    if (attrs["data_layout"], attrs["kernel_layout"]) != ("NHWC", "HWIO") or not _kernel_shapes(shapes):
        return False
    groups, group_channels, out_channels = attrs["groups"], int(shapes[1][2]), int(shapes[1][3])
    return groups == 1 or group_channels >= MIN_GEMM_GROUP_CHANNELS or depthwise(groups, group_channels,
                                                                                out_channels)


def _channels_last_kernel(data: TensorHandle, weight: TensorHandle, data_zero: TensorHandle,
                          weight_zero: TensorHandle, attrs: Attrs, out_shape: tuple,
                          requantization: Requantization | None = None) -> ExternOp | None:
    """The NHWC/HWIO kernels of the module docstring, or None where they do not apply."""
    shapes = [tuple(handle.shape) for handle in (data, weight, data_zero, weight_zero)]
    if not _kernel_shapes([*shapes, tuple(out_shape)]):
        return None
    per_channel = _size(shapes[3]) != 1
    static = [tuple(int(d) for d in shape) for shape in (shapes[0], shapes[1], out_shape)]
    g = ConvGeometry.of(attrs, *static)
    if runs_on_integer_gemm(attrs, shapes):
        return _on_gemm(g, data, weight, data_zero, weight_zero, tuple(out_shape), per_channel,
                        requantization, bool(attrs.get("saturate_pairs", False)))
    if requantization is not None or attrs.get("saturate_pairs", False):
        return None
    return _direct(g, data, weight, data_zero, weight_zero, tuple(out_shape))


@register_compute("qnn.requantized_conv2d")
def _requantized_conv2d(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    data, weight, data_zero, weight_zero = inputs[:4]
    kernel = None
    if attrs["data_layout"] == "NHWC":
        kernel = _channels_last_kernel(data, weight, data_zero, weight_zero, attrs, output_shape(out_type),
                                       Requantization.of(inputs, attrs))
    if kernel is None:
        raise IRError("qnn.requantized_conv2d runs on the integer GEMM only (RequantizeInKernels forms it "
                      "where the GEMM applies: NHWC/HWIO, static sizes, groups of 8 or more channels)")
    return kernel


@register_compute("qnn.conv2d")
def _conv2d(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp | ExternOp:
    data, weight, data_zero, weight_zero = inputs
    out_shape = output_shape(out_type)
    nhwc = attrs["data_layout"] == "NHWC"
    if nhwc:
        kernel = _channels_last_kernel(data, weight, data_zero, weight_zero, attrs, out_shape)
        if kernel is not None:
            return kernel
    if attrs.get("saturate_pairs", False):
        raise IRError("a qnn.conv2d with saturate_pairs runs on the integer GEMM only (SaturatePairs marks "
                      "those: NHWC/HWIO after AlterOpLayout, static sizes, one data zero point, one group "
                      f"or groups of {MIN_GEMM_GROUP_CHANNELS} or more channels)")
    # the generic loop nest, in either layout
    height, width = (data.shape[1], data.shape[2]) if nhwc else (data.shape[2], data.shape[3])
    if nhwc:
        kh, kw, group_channels, out_channels = weight.shape
    else:
        out_channels, group_channels, kh, kw = weight.shape
    groups = attrs["groups"]
    out_per_group = out_channels // groups
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    top, left, bottom, right = attrs["padding"]
    check_h, check_w = bool(top or bottom), bool(left or right)

    def body(out: Indices, red: Indices) -> tir.PrimExpr:
        n, oh, ow, oc = out if nhwc else (out[0], out[2], out[3], out[1])
        rc, ry, rx = red
        ic = rc
        if groups > 1:
            ic = tir.FloorDiv(oc, tir.IntImm(out_per_group)) * tir.IntImm(group_channels) + rc
        h, w = _tap(oh, sh, ry, dh, top), _tap(ow, sw, rx, dw, left)
        conditions = []
        if check_h:
            conditions.append(in_range(h, height))
            h = clamp(h, 0, height - 1)
        if check_w:
            conditions.append(in_range(w, width))
            w = clamp(w, 0, width - 1)
        data_idx = (n, h, w, ic) if nhwc else (n, ic, h, w)
        weight_idx = (ry, rx, rc, oc) if nhwc else (oc, rc, ry, rx)
        product = centered(data, data_zero, data_idx) * centered(weight, weight_zero, weight_idx)
        if not conditions:
            return product
        inside = conditions[0] if len(conditions) == 1 else tir.And(conditions[0], conditions[1])
        return tir.Select(inside, product, tir.IntImm(0, _I32))  # the padding holds the zero point

    return ReduceOp("qnn.conv2d", out_shape, _I32, (group_channels, kh, kw), "sum", body)


__all__: list[str] = []

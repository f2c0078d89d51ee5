"""Intrinsics of the loop-level IR with their meaning: the GEMM and convolution
statements and the bitwise integer operations.

A GEMM is ``Evaluate(Intrinsic("rp_sgemm", (A, B, C, m, n, k, lda, ldb, ldc, trans_b)))``
whose first three arguments are ``BufferLoad``\\ s naming the first element of A, B and
C; every TIR pass handles it without a new node kind. The name and the reference
semantics live here, with the IR, so the evaluator needs nothing from codegen; building
the call, planning contractions and rendering it as a BLAS call stay in
:mod:`passinfra.codegen.gemm`.

A convolution call is ``Evaluate(Intrinsic("rp_conv2d", (image, weight, out, H, W, C, OC,
KH, KW, sh, sw, dh, dw, pad_top, pad_left, OW, first, count, groups, panel)))``: output
pixels ``first .. first+count`` (flat ``oy*OW + ox``) of one channels-last image
(``image``: its first element, ``[H, W, C]``) through an HWIO ``weight`` (``[KH, KW,
C/groups, OC]``), or with ``panel`` = B > 0 (one group) the same weight stored in panels
of B output channels (``[ceil(OC/B), KH*KW*C, B]``, zeros past OC:
:func:`passinfra.ir.op.weight_panels.to_panels`), every output channel, written from
``out`` on (pixel stride ``OC``); stride, dilation, the top and left padding and the
groups as in ``nn.conv2d``, reading zeros outside the image. The C runtime that
computes it is :mod:`passinfra.codegen.conv_runtime`. A ``rp_conv2d`` may end in an
epilogue its runtime applies as it stores the outputs (:class:`ConvEpilogue`): ``(...,
panel, flags, p0, p1[, bias][, residual])``.

The bitwise operations (``bitwise_and``, ``bitwise_or``, ``bitwise_xor`` of two integers
of one dtype, ``bitwise_not`` of one) are value intrinsics, not node kinds, for the same
reason: every functor, printer, structural comparison and wire format already handles an
``Intrinsic``. Their meaning is NumPy's on the dtype's two's-complement bits; the C
renderer writes them as ``&``, ``|``, ``^`` and ``~`` cast back to the dtype.

``reinterpret`` (:func:`reinterpret`) reads its operand's bits as the intrinsic's dtype,
of the same size (the ``bitcast`` op); its meaning is
:func:`passinfra.ir.op.bitcast.reinterpret_array`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from passinfra.errors import IRError
from passinfra.tir.nodes import BufferLoad, FloatImm, IntImm, Intrinsic, PrimExpr

GEMM_INTRINSIC = "rp_sgemm"


def is_gemm(expr: PrimExpr) -> bool:
    return isinstance(expr, Intrinsic) and expr.name == GEMM_INTRINSIC


def evaluate_gemm(intrinsic: Intrinsic, flat_view: Callable[[BufferLoad], np.ndarray],
                  scalar: Callable[[PrimExpr], int]) -> None:
    """Run a ``rp_sgemm`` in the TIR interpreter: ``flat_view(load)`` is the buffer's
    memory from the loaded element on (1-d view), ``scalar`` evaluates an argument."""
    a_load, b_load, c_load, *rest = intrinsic.args
    m, n, k, lda, ldb, ldc, trans_b = (int(scalar(x)) for x in rest)
    a = _matrix(flat_view(a_load), m, k, lda)
    b = _matrix(flat_view(b_load), n, k, ldb).T if trans_b else _matrix(flat_view(b_load), k, n, ldb)
    _matrix(flat_view(c_load), m, n, ldc)[...] = (a.astype(np.float64) @ b.astype(np.float64))


CONV_INTRINSIC = "rp_conv2d"
# the same arguments, a depthwise convolution: one input channel per output channel
# (OC == C, weight [KH, KW, 1, C]); ``first`` and ``count`` cover whole output rows
DEPTHWISE_CONV_INTRINSIC = "rp_dwconv2d"
# position of ``first`` among the size arguments (after the three loads)
CONV_FIRST_PIXEL = 13
# the size arguments of a convolution call (H .. panel); an epilogue's follow them
CONV_SIZE_ARGS = 17
# the activations of a convolution's epilogue (ConvEpilogue.activation), numbered as the C
# runtime's RP_ACT_*; and its flags' bits above the activation's (RP_EPI_*)
CONV_ACTIVATIONS = ("none", "relu", "clip", "hardswish")
EPILOGUE_BIAS, EPILOGUE_RESIDUAL, EPILOGUE_RESIDUAL_FIRST = 16, 32, 64


def conv_sizes(call: Intrinsic) -> tuple[PrimExpr, ...]:
    """A convolution call's size arguments (``H`` .. ``panel``): those after its three
    loads, before its epilogue's."""
    return tuple(call.args[3:3 + CONV_SIZE_ARGS])


@dataclass(frozen=True)
class ConvEpilogue:
    """What a ``rp_conv2d`` applies to each output as it stores it, in float32 and in this
    order: ``bias`` (a load of its channel 0: one value per output channel) added, then
    ``residual`` (a load of the element at the call's first output: a tensor laid out as
    the output) added (``residual_first``: the residual, then the bias), then the
    activation: ``relu`` ``max(x, 0)``, ``clip`` ``min(max(x, p0), p1)``, ``hardswish``
    ``x * min(max(x * p0 + p1, 0), 1)``; max and min keep an operand that is NaN, as the
    code generator's do (:mod:`passinfra.codegen.compute.conv_epilogue` builds it from the
    loop it replaces)."""

    activation: str = "none"
    p0: float = 0.0
    p1: float = 0.0
    bias: BufferLoad | None = None
    residual: BufferLoad | None = None
    residual_first: bool = False

    @property
    def flags(self) -> int:
        return (CONV_ACTIVATIONS.index(self.activation) | (EPILOGUE_BIAS if self.bias is not None else 0)
                | (EPILOGUE_RESIDUAL if self.residual is not None else 0)
                | (EPILOGUE_RESIDUAL_FIRST if self.residual_first else 0))

    def args(self) -> tuple[PrimExpr, ...]:
        """The call's arguments after its sizes."""
        # int32 flags: a constant of the kernel's own, never one of the numbers a class of
        # kernels alike passes (passinfra.codegen.shared_kernels lifts int64 ones), so the
        # loads that follow are known from the call itself
        return (IntImm(self.flags, "int32"), FloatImm(self.p0, "float32"), FloatImm(self.p1, "float32"),
                *self.loads())

    @staticmethod
    def of(call: Intrinsic, scalar: Callable[[PrimExpr], Any] | None = None) -> ConvEpilogue | None:
        """The epilogue of a convolution call, None without one; ``scalar`` evaluates its
        flags and parameters (default: constants, as the lowering builds them)."""
        tail = call.args[3 + CONV_SIZE_ARGS:]
        if not tail:
            return None
        value_of = scalar or (lambda expr: expr.value)  # type: ignore[attr-defined]
        flags, p0, p1, *loads = tail
        value = int(value_of(flags))
        bias = loads.pop(0) if value & EPILOGUE_BIAS else None
        residual = loads.pop(0) if value & EPILOGUE_RESIDUAL else None
        return ConvEpilogue(CONV_ACTIVATIONS[value & 15], float(value_of(p0)), float(value_of(p1)),
                            bias, residual, bool(value & EPILOGUE_RESIDUAL_FIRST))

    def loads(self) -> tuple[BufferLoad, ...]:
        """The buffers it reads, each from its first element read."""
        return tuple(load for load in (self.bias, self.residual) if load is not None)

    def apply(self, values: np.ndarray, flat_view: Callable[[BufferLoad], np.ndarray],
              channels: int) -> np.ndarray:
        """Its meaning on ``values`` (the outputs as stored, ``[pixels, channels]`` float32)."""
        x = values.astype(np.float32)
        bias = None if self.bias is None else flat_view(self.bias)[:channels].astype(np.float32)
        residual = None if self.residual is None else flat_view(self.residual)[:x.size].reshape(x.shape)
        for term in ((residual, bias) if self.residual_first else (bias, residual)):
            if term is not None:
                x = x + term.astype(np.float32)
        p0, p1 = np.float32(self.p0), np.float32(self.p1)
        if self.activation == "relu":
            return _kept_max(x, np.float32(0))
        if self.activation == "clip":
            return _kept_min(_kept_max(x, p0), p1)
        if self.activation == "hardswish":
            return x * _kept_min(_kept_max(x * p0 + p1, np.float32(0)), np.float32(1))
        return x


def _kept_max(x: np.ndarray, c: np.float32) -> np.ndarray:
    """``x > c or x is NaN ? x : c``, elementwise (the C renderer's max)."""
    return np.where((x > c) | np.isnan(x), x, c).astype(np.float32)


def _kept_min(x: np.ndarray, c: np.float32) -> np.ndarray:
    return np.where((x < c) | np.isnan(x), x, c).astype(np.float32)


# a stride-1 3x3 convolution by Winograd's F(m x m, 3x3): ``(image, transform, out, H, W, C,
# OC, pad_top, pad_left, OH, OW, m)``, the three buffer loads naming each buffer's first element;
# one NHWC image, every output, from the weight's transform
# (:mod:`passinfra.ir.op.winograd_weights`); the C runtime computes it and splits it over the
# threads (:mod:`passinfra.codegen.compute.conv_winograd`)
WINOGRAD_INTRINSIC = "rp_winograd"


def is_winograd(expr: PrimExpr) -> bool:
    return isinstance(expr, Intrinsic) and expr.name == WINOGRAD_INTRINSIC


def winograd_tiles(out_height: int, out_width: int, tile: int) -> int:
    """The ``tile`` x ``tile`` tiles of output of an image."""
    return -(-out_height // tile) * -(-out_width // tile)


def winograd_regions(sizes: tuple[int, ...]) -> tuple[int, int, int]:
    """Elements a Winograd call with these size arguments may read from its image and
    transform and write from its output pointer on."""
    height, width, channels, out_channels, _top, _left, out_height, out_width, tile = sizes
    transform = -(-out_channels // 32) * (tile + 2) ** 2 * channels * 32
    return height * width * channels, transform, out_height * out_width * out_channels


def evaluate_winograd(intrinsic: Intrinsic, flat_view: Callable[[BufferLoad], np.ndarray],
                      scalar: Callable[[PrimExpr], int]) -> None:
    """Run a ``rp_winograd`` in the TIR interpreter (arguments as :func:`evaluate_gemm`): the
    convolution with the weight computed back from its transform, in float64."""
    from passinfra.ir.op.winograd_weights import from_winograd, winograd_shape

    image_load, transform_load, out_load, *rest = intrinsic.args
    sizes = (int(scalar(x)) for x in rest)
    height, width, channels, out_channels, top, left, out_height, out_width, tile = sizes
    shape = winograd_shape(channels, out_channels, tile)
    transform = flat_view(transform_load)[:math.prod(shape)].reshape(shape)
    weight = from_winograd(transform.astype(np.float64), (3, 3, channels, out_channels), tile)
    image = flat_view(image_load)[:height * width * channels].reshape(height, width, channels)
    padded = np.zeros((max(height + top, out_height + 2), max(width + left, out_width + 2), channels))
    padded[top:top + height, left:left + width] = image
    result = np.zeros((out_height, out_width, out_channels))
    for ky in range(3):
        for kx in range(3):
            result += padded[ky:ky + out_height, kx:kx + out_width] @ weight[ky, kx]
    flat_view(out_load)[:out_height * out_width * out_channels] = result.reshape(-1)


def is_conv(expr: PrimExpr) -> bool:
    """A convolution call (dense or depthwise)."""
    return isinstance(expr, Intrinsic) and expr.name in (CONV_INTRINSIC, DEPTHWISE_CONV_INTRINSIC)


# a weight-only quantized matmul: ``(A, codes, scales, zero_points, out, M, N, K, block,
# bits)``, the five buffer loads naming each buffer's first element; ``out[M, N] = A[M, K]
# @ W.T`` with ``W[n, k] = (code - zero_point) * scale`` per block of ``block`` k
# (:mod:`passinfra.ir.op.matmul_nbits` has the layout; the C runtime computes it:
# :mod:`passinfra.codegen.compute.matmul_nbits`)
MATMUL_NBITS_INTRINSIC = "rp_matmul_nbits"

# integer matrix products of 8-bit operands (qnn.matmul, qnn.conv2d): ``(A, B, za, zb, out,
# M, N, K, a_signed, b_signed, za_step, zb_step, b_packed, groups)``, the five buffer loads
# naming each buffer's first element; per group ``g``, ``out[m, g*N + n] = sum_k (A[g, m,
# k] - za[m * za_step]) * (B[k, g*N + n] - zb[(g*N + n) * zb_step])`` in int32 (wrapping),
# A ``[groups, M, K]`` row-major, B ``[K, groups * N]`` row-major or (b_packed 1) the
# groups' panels of :mod:`passinfra.ir.op.qgemm_panels`, int8 where the flag is 1, else
# uint8, and 2 (:data:`SATURATING_PAIRS`) for an int8 B whose products with a uint8 A
# are added in pairs saturated to int16 (``saturate_pairs`` of :mod:`passinfra.ir.op.quantize`)
# (the C runtime computes it: ``passinfra/codegen/c/qgemm.c``); then the epilogue
# ``(bias, multiplier, out_zero, bias_kind, multiplier_step, out_type)``: out_type 0 stores
# the int32 sums, 1 / 2 requantizes them into uint8 / int8 (qnn.requantize of the sums plus
# the bias: bias_kind 0 none, 1 one value, 2 one per column; multiplier one or per column)
QGEMM_INTRINSIC = "rp_qgemm"
# b_signed of a rp_qgemm / rp_qconv whose u8 x s8 pairs saturate
SATURATING_PAIRS = 2
# the same GEMMs on a convolution's im2col matrix (qnn.conv2d in NHWC/HWIO), which the C
# runtime gathers itself: ``(image, B, za, zb, out, batch, height, width, channels,
# out_height, out_width, kh, kw, sh, sw, dh, dw, top, left, N, groups, a_signed, b_signed,
# zb_step, b_packed)``; the image NHWC with one zero point ``za`` (what its padding holds),
# ``K = kh * kw * channels / groups``, out NHWC ``[batch, out_height, out_width, groups * N]``
QCONV_INTRINSIC = "rp_qconv"
# the arguments of each without a residual add; with one, eight more: ``(residual, lhs_scale,
# lhs_zero, rhs_scale, rhs_zero, add_scale, add_zero, residual_first)``, the requantized
# output then added to ``residual`` (laid out as the output) by qnn.add, the residual its
# first operand where residual_first is 1 (:mod:`passinfra.ir.op.requantized`); then, with
# a lookup table of the outputs, one more: its first element (256 values of the output's type)
QGEMM_ARGUMENTS = {QGEMM_INTRINSIC: 20, QCONV_INTRINSIC: 31}
QGEMM_RESIDUAL_ARGUMENTS = 8
# a take of a table of 256 bytes by uint8 indices, which the C runtime computes 32 at a time
# (``rp_lookup_u8`` of ``passinfra/codegen/c/qgemm.c``): ``(table, indices, out, count)``, the
# first three naming their buffers' first elements; ``out[i] = table[indices[i]]`` for ``i < count``
LOOKUP_INTRINSIC = "rp_lookup"

_KERNEL_CALLS = (GEMM_INTRINSIC, CONV_INTRINSIC, DEPTHWISE_CONV_INTRINSIC, MATMUL_NBITS_INTRINSIC,
                 QGEMM_INTRINSIC, QCONV_INTRINSIC, WINOGRAD_INTRINSIC, LOOKUP_INTRINSIC)


def is_kernel_call(expr: PrimExpr) -> bool:
    """A GEMM, a convolution or a quantized matmul call: a statement that reads and writes
    whole regions of the buffers its loads name."""
    return isinstance(expr, Intrinsic) and expr.name in _KERNEL_CALLS


def is_matmul_nbits(expr: PrimExpr) -> bool:
    return isinstance(expr, Intrinsic) and expr.name == MATMUL_NBITS_INTRINSIC


def evaluate_matmul_nbits(intrinsic: Intrinsic, flat_view: Callable[[BufferLoad], np.ndarray],
                          scalar: Callable[[PrimExpr], int]) -> None:
    """Run a ``rp_matmul_nbits`` in the TIR interpreter (arguments as :func:`evaluate_gemm`)."""
    a_load, codes_load, scales_load, zero_load, out_load, *rest = intrinsic.args
    m, n, k, block, bits = (int(scalar(x)) for x in rest)
    blocks = -(-k // block)
    codes = flat_view(codes_load)[:n * blocks * block * bits // 8].reshape(n, -1)
    if bits == 4:
        codes = np.stack([codes & 15, codes >> 4], axis=-1).reshape(n, -1)
    per_element = np.repeat(np.arange(blocks), block)[:k]
    zero = flat_view(zero_load)[:n * blocks].reshape(n, blocks).astype(np.float64)[:, per_element]
    scale = flat_view(scales_load)[:n * blocks].reshape(n, blocks).astype(np.float64)[:, per_element]
    weight = (codes[:, :k].astype(np.float64) - zero) * scale
    a = flat_view(a_load)[:m * k].reshape(m, k).astype(np.float64)
    flat_view(out_load)[:m * n].reshape(m, n)[...] = a @ weight.T


def is_lookup(expr: PrimExpr) -> bool:
    return isinstance(expr, Intrinsic) and expr.name == LOOKUP_INTRINSIC


def evaluate_lookup(intrinsic: Intrinsic, flat_view: Callable[[BufferLoad], np.ndarray],
                    scalar: Callable[[PrimExpr], int]) -> None:
    """Run a ``rp_lookup`` in the TIR interpreter."""
    table_load, indices_load, out_load, count = intrinsic.args
    n = int(scalar(count))
    flat_view(out_load)[:n] = flat_view(table_load)[:256][flat_view(indices_load)[:n].astype(np.int64)]


def is_qgemm(expr: PrimExpr) -> bool:
    """A ``rp_qgemm`` or a ``rp_qconv`` call (:func:`evaluate_qgemm` runs both)."""
    return isinstance(expr, Intrinsic) and expr.name in (QGEMM_INTRINSIC, QCONV_INTRINSIC)


def _im2col(image: np.ndarray, sizes: list[int]) -> np.ndarray:
    """The ``[groups, M, K]`` im2col matrices a ``rp_qconv`` multiplies (padding: ``za``)."""
    (batch, height, width, channels, out_height, out_width, kh, kw, sh, sw, dh, dw, top, left, groups,
     za) = sizes
    image = image[:batch * height * width * channels].reshape(batch, height, width, channels)
    padded = np.full((batch, height + top + (out_height - 1) * sh + (kh - 1) * dh + 1,
                      width + left + (out_width - 1) * sw + (kw - 1) * dw + 1, channels), za, image.dtype)
    padded[:, top:top + height, left:left + width] = image
    rows, columns = (out_height - 1) * sh + 1, (out_width - 1) * sw + 1
    taps = [padded[:, ky * dh:ky * dh + rows:sh, kx * dw:kx * dw + columns:sw]
            for ky in range(kh) for kx in range(kw)]
    stacked = np.stack(taps, axis=3)  # [batch, oh, ow, taps, channels]
    cg = channels // groups
    grouped = stacked.reshape(batch * out_height * out_width, kh * kw, groups, cg).transpose(2, 0, 1, 3)
    return grouped.reshape(groups, batch * out_height * out_width, kh * kw * cg)


def evaluate_qgemm(intrinsic: Intrinsic, flat_view: Callable[[BufferLoad], np.ndarray],
                   scalar: Callable[[PrimExpr], int]) -> None:
    """Run a ``rp_qgemm`` in the TIR interpreter (arguments as :func:`evaluate_gemm`):
    exactly, in int64, then wrapped to int32 as the C runtime's arithmetic is."""
    arguments = list(intrinsic.args)
    extra = arguments[QGEMM_ARGUMENTS[intrinsic.name]:]
    table_load = extra.pop() if len(extra) % 2 else None  # (eight residual arguments, a table: one)
    residual_args = extra
    a_load, b_load, za_load, zb_load, out_load, *rest = arguments[:QGEMM_ARGUMENTS[intrinsic.name]]
    *rest, bias_load, multiplier_load, zero_load, bias_kind, multiplier_step, out_type = rest
    if intrinsic.name == QCONV_INTRINSIC:
        geometry = [int(scalar(x)) for x in rest[:14]]
        n, groups, _a_signed, b_signed, zb_step, b_packed = (int(scalar(x)) for x in rest[14:])
        batch, _, _, channels, out_height, out_width, kh, kw = geometry[:8]
        m, k, za_step = batch * out_height * out_width, kh * kw * (channels // groups), 0
        za_value = flat_view(za_load)[0]
        a = _im2col(flat_view(a_load), [*geometry, groups, za_value]).astype(np.int64)
    else:
        m, n, k, _a_signed, b_signed, za_step, zb_step, b_packed, groups = (int(scalar(x)) for x in rest)
        a = flat_view(a_load)[:groups * m * k].reshape(groups, m, k).astype(np.int64)
    if b_packed:
        from passinfra.ir.op.qgemm_panels import from_panels, panels_shape

        shape = panels_shape(k, groups * n, groups)
        panels = flat_view(b_load)[:math.prod(shape)].reshape(shape)
        b = from_panels(panels, (k, groups * n), "int8" if b_signed else "uint8", groups).astype(np.int64)
    else:
        b = flat_view(b_load)[:k * groups * n].reshape(k, groups * n).astype(np.int64)
    za = flat_view(za_load)[:m if za_step else 1].astype(np.int64).reshape(-1, 1)
    zb = flat_view(zb_load)[:groups * n if zb_step else 1].astype(np.int64).reshape(1, -1)
    centered = (b - zb).reshape(k, groups, n).transpose(1, 0, 2)  # [groups, k, n]
    result = np.matmul(a - za, centered).transpose(1, 0, 2)
    if b_signed == SATURATING_PAIRS:  # the raw sums' pairs saturated (passinfra.ir.op.quantize)
        from passinfra.ir.op.quantize import saturated_pair_excess

        raw = b.reshape(k, groups, n).transpose(1, 0, 2)
        result = result + np.stack([saturated_pair_excess(a[g], raw[g]) for g in range(groups)], axis=1)
    result = result.reshape(m, groups * n).astype(np.int32)
    kind, step, out = (int(scalar(x)) for x in (bias_kind, multiplier_step, out_type))
    if out:  # requantized: qnn.requantize of the sums plus the bias
        from passinfra.ir.op.quantize import requantize_values

        if kind:
            with np.errstate(over="ignore"):
                result = result + flat_view(bias_load)[:groups * n if kind == 2 else 1].astype(np.int32)
        multiplier = flat_view(multiplier_load)[:groups * n if step else 1]
        zero = np.asarray(flat_view(zero_load)[0], dtype=zero_load.buffer.dtype)  # the output's type
        result = requantize_values(result.astype(np.int32), multiplier, zero)
        if residual_args:  # then qnn.add of it and the residual
            from passinfra.ir.attrs import Attrs
            from passinfra.ir.op.registry import Op

            residual_load, *scalars, first = residual_args
            lhs_scale, lhs_zero, rhs_scale, rhs_zero, add_scale, add_zero = (scalar(x) for x in scalars)
            residual = flat_view(residual_load)[:m * groups * n].reshape(result.shape)
            operands = [result, residual] if not int(scalar(first)) else [residual, result]
            dtype, f32 = result.dtype, np.float32
            result = Op.get("qnn.add").impl(
                [operands[0], f32(lhs_scale), np.asarray(lhs_zero, dtype), operands[1], f32(rhs_scale),
                 np.asarray(rhs_zero, dtype), f32(add_scale), np.asarray(add_zero, dtype)], Attrs({}))
        if table_load is not None:  # then each looked up in the table
            table = flat_view(table_load)[:256]
            result = table[np.asarray(result).astype(np.int64) - int(np.iinfo(np.asarray(result).dtype).min)]
    flat_view(out_load)[:m * groups * n] = result.reshape(-1)


def conv_regions(sizes: tuple[int, ...], depthwise: bool = False) -> tuple[int, int, int]:
    """Elements a convolution call with these size arguments may read from its image and
    weight and write from its output pointer on."""
    height, width, channels, out_channels, kh, kw, *_rest, count, groups, panel = sizes
    weight = kh * kw * channels * (1 if depthwise else out_channels // max(groups, 1))
    if panel > 0 and not depthwise:
        weight = kh * kw * channels * -(-out_channels // panel) * panel
    return height * width * channels, weight, count * out_channels


def evaluate_conv(intrinsic: Intrinsic, flat_view: Callable[[BufferLoad], np.ndarray],
                  scalar: Callable[[PrimExpr], int]) -> None:
    """Run a ``rp_conv2d`` or ``rp_dwconv2d`` in the TIR interpreter (arguments as
    :func:`evaluate_gemm`)."""
    image_load, weight_load, out_load = intrinsic.args[:3]
    (height, width, channels, out_channels, kh, kw, sh, sw, dh, dw, top, left, out_width, first, count,
     groups, panel) = (int(scalar(x)) for x in conv_sizes(intrinsic))
    image = flat_view(image_load)[:height * width * channels].reshape(height, width, channels)
    pixels = np.arange(first, first + count)
    oy, ox = pixels // out_width, pixels % out_width
    iy = oy[:, None, None] * sh + np.arange(kh)[None, :, None] * dh - top
    ix = ox[:, None, None] * sw + np.arange(kw)[None, None, :] * dw - left
    inside = (iy >= 0) & (iy < height) & (ix >= 0) & (ix < width)
    windows = image[np.clip(iy, 0, height - 1), np.clip(ix, 0, width - 1)]  # [count, kh, kw, C]
    windows = np.where(inside[..., None], windows, 0)
    if intrinsic.name == DEPTHWISE_CONV_INTRINSIC:  # [count, kh, kw, C] * [kh, kw, C], summed over taps
        weight = flat_view(weight_load)[:kh * kw * channels].reshape(kh, kw, channels)
        result = (windows.astype(np.float64) * weight.astype(np.float64)).sum(axis=(1, 2))
    else:
        sizes = (count, channels, out_channels, kh, kw, groups, panel)
        result = _grouped_conv(windows, flat_view(weight_load), *sizes)
    epilogue = ConvEpilogue.of(intrinsic, scalar)
    if epilogue is not None:  # on the sums as the output's float32 holds them
        result = epilogue.apply(result.astype(np.float32), flat_view, out_channels)
    flat_view(out_load)[:count * out_channels] = result.reshape(-1)


def _grouped_conv(windows: np.ndarray, weights: np.ndarray, count: int, channels: int, out_channels: int,
                  kh: int, kw: int, groups: int, panel: int) -> np.ndarray:
    """A ``rp_conv2d``'s sums (float64, ``[count, out_channels]``) of its ``windows`` through
    its weight (``weights``: the weight's memory from its first element, 1-d)."""
    cg, og = channels // groups, out_channels // groups
    if panel > 0:  # [blocks, rows, panel] -> [rows, out_channels]
        blocks = -(-out_channels // panel)
        panels = weights[:blocks * kh * kw * cg * panel].reshape(blocks, kh * kw * cg, panel)
        weight = panels.transpose(1, 0, 2).reshape(kh * kw * cg, blocks * panel)[:, :out_channels]
    else:
        weight = weights[:kh * kw * cg * out_channels].reshape(kh * kw * cg, out_channels)
    result = np.empty((count, out_channels))
    for group in range(groups):  # each group's channels of the windows meet its weight columns
        columns = windows[..., group * cg:(group + 1) * cg].reshape(count, -1).astype(np.float64)
        outputs = slice(group * og, (group + 1) * og)
        result[:, outputs] = columns @ weight[:, outputs].astype(np.float64)
    return result


def _matrix(flat: np.ndarray, rows: int, cols: int, leading: int) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(flat, (rows, cols), (leading * flat.itemsize, flat.itemsize))


# name -> (number of operands, NumPy meaning)
BITWISE_INTRINSICS: dict[str, tuple[int, Callable[..., Any]]] = {
    "bitwise_and": (2, np.bitwise_and),
    "bitwise_or": (2, np.bitwise_or),
    "bitwise_xor": (2, np.bitwise_xor),
    "bitwise_not": (1, np.invert),
}
_INTEGER_KINDS = "iu"


def bitwise(name: str, *operands: PrimExpr) -> Intrinsic:
    """The bitwise intrinsic ``name`` of integer operands of one dtype (IRError naming the
    problem otherwise)."""
    spec = BITWISE_INTRINSICS.get(name)
    if spec is None:
        raise IRError(f"unknown bitwise intrinsic {name!r}; known: {', '.join(BITWISE_INTRINSICS)}")
    if len(operands) != spec[0]:
        raise IRError(f"{name} takes {spec[0]} operand(s), got {len(operands)}")
    dtypes = {x.dtype for x in operands}
    dtype = operands[0].dtype
    if len(dtypes) != 1 or dtype == "bool" or np.dtype(dtype).kind not in _INTEGER_KINDS:
        got = ", ".join(x.dtype for x in operands)
        raise IRError(f"{name} needs integer operands of one dtype, got {got}")
    return Intrinsic(name, tuple(operands), dtype)


REINTERPRET = "reinterpret"


def reinterpret(value: PrimExpr, dtype: str) -> Intrinsic:
    """``value``'s bits read as ``dtype``, a type of the same size (IRError otherwise)."""
    if np.dtype(value.dtype).itemsize != np.dtype(dtype).itemsize:
        raise IRError(f"reinterpret needs types of one size, got {value.dtype} -> {dtype}")
    return Intrinsic(REINTERPRET, (value,), dtype)


__all__ = ["WINOGRAD_INTRINSIC", "evaluate_winograd", "is_winograd", "winograd_regions", "winograd_tiles",
           "BITWISE_INTRINSICS", "CONV_ACTIVATIONS", "CONV_FIRST_PIXEL", "CONV_INTRINSIC", "CONV_SIZE_ARGS",
           "ConvEpilogue", "EPILOGUE_BIAS", "EPILOGUE_RESIDUAL",
           "EPILOGUE_RESIDUAL_FIRST", "conv_sizes", "DEPTHWISE_CONV_INTRINSIC",
           "GEMM_INTRINSIC", "MATMUL_NBITS_INTRINSIC", "QCONV_INTRINSIC", "QGEMM_INTRINSIC", "REINTERPRET",
           "QGEMM_ARGUMENTS", "QGEMM_RESIDUAL_ARGUMENTS", "SATURATING_PAIRS", "LOOKUP_INTRINSIC",
           "evaluate_lookup", "is_lookup",
           "bitwise", "conv_regions", "evaluate_conv", "evaluate_gemm", "evaluate_matmul_nbits",
           "evaluate_qgemm", "is_conv", "is_gemm", "is_kernel_call", "is_matmul_nbits", "is_qgemm",
           "reinterpret"]

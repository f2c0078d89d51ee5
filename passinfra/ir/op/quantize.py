"""Quantization ops (``qnn.*``): linear (de)quantization and integer kernels, with
onnxruntime's arithmetic.

Ops (builders below; the registered names carry the ``qnn.`` prefix, as in TVM):

* ``qnn.quantize(x, scale, zero_point)``: ``saturate(rne(x / scale) + zero_point)``
  (ONNX QuantizeLinear), to the zero point's dtype (int8, uint8, int16, uint16).
* ``qnn.dequantize(x, scale, zero_point, out_dtype)``: ``float(x - zero_point) * scale``
  (ONNX DequantizeLinear).
* ``qnn.requantize(acc, multiplier, zero_point)``: ``saturate(rne(float(acc) *
  multiplier) + zero_point)`` of an int32 accumulator (the output stage of QLinearConv,
  QLinearMatMul, QGemm, QLinearGlobalAveragePool).
* ``qnn.matmul(a, b, a_zero_point, b_zero_point)``: ``(a - za) @ (b - zb)`` summed in
  int32 (ONNX MatMulInteger), batched with NumPy's broadcasting.
* ``qnn.conv2d(data, weight, data_zero_point, weight_zero_point, ...)``: the NCHW/OIHW
  (or NHWC/HWIO) convolution of ``data - zd`` and ``weight - zw`` summed in int32 (ONNX ConvInteger);
  padded cells contribute nothing (they hold the zero point).
* ``qnn.add`` / ``qnn.mul``: QLinearAdd / QLinearMul (com.microsoft) of two quantized
  tensors into a third quantization.
* ``qnn.dynamic_quantize(x)``: ONNX DynamicQuantizeLinear, a 3-tuple (uint8 tensor,
  float32 scale, uint8 zero point).

Scales and zero points are tensors that broadcast (NumPy rules) to the tensor they
describe, so per-tensor (a scalar), per-axis (a 1-D scale reshaped to broadcast along its
axis) and blocked quantization (a scale repeated along the blocked axis) are one op; the
ONNX importer does the reshaping. Zero points have the dtype of the tensor they describe.

Arithmetic. Every result is the one onnxruntime's CPU kernels (MLAS) compute on x86-64,
step by step in float32 (``rne``: round half to even, the SSE conversion; ``saturate``:
clamp to the dtype's range, where NaN becomes the lowest value, as MLAS's MAXPS/MINPS
clamp does):

* quantize divides (``x / scale``, not a multiplication by a reciprocal), clamps to
  ``[qmin - zp, qmax - zp]``, rounds and adds the zero point. float16/bfloat16/int32
  inputs and scales are converted to float32 first.
* dequantize converts ``x - zp`` (computed in int32) to float32 and multiplies once.
* requantize converts the int32 accumulator to float32 (round to nearest, as CVTDQ2PS),
  multiplies by the float32 multiplier, clamps, rounds and adds the zero point: MLAS's
  MlasRequantizeOutput. The importer computes the multipliers as onnxruntime does:
  ``(x_scale * w_scale) / y_scale`` in float32 for QLinearConv/QLinearMatMul,
  ``(alpha * a_scale * b_scale) / y_scale`` for QGemm, and
  ``x_scale / (y_scale * float(image_size))`` for QLinearGlobalAveragePool.
* add: with ``rA = sa / sc`` and ``rB = sb / sc``, ``fixed = float(zc) - (rA * float(za)
  + rB * float(zb))``, then ``saturate(rne((fixed + float(a) * rA) + float(b) * rB))``:
  the formula of MLAS's SSE2 QLinearAdd kernel, each operation rounded to float32.
  onnxruntime's AVX2 kernel (used on x86-64 CPUs with AVX2) evaluates it with fused
  multiply-adds and ``b``'s term first, ``fma(a, rA, fma(b, rB, fixed))``, and its kernel
  for an operand that is a scalar within the broadcast span adds that operand to
  ``fixed`` first; the NEON kernel uses fixed-point arithmetic. Those round differently
  where the exact value lies within a float32 rounding error of a half-integer: there
  onnxruntime's result is 1 away from this one (``b - zb = 125`` with ``rB = 0.004 /
  0.04``: ``12.5000011`` here, exactly ``12.5`` there, so 13 against 12; in a ResNet-50
  that one step propagates to a fifth of the logits, each one step off).
* mul: ``saturate(rne(float((a - za) * (b - zb)) * ((sa * sb) / sc) + float(zc)))``,
  the zero point added in float32 before rounding, as MLAS's QLinearMul (SSE2 and NEON).
* dynamic_quantize: ``lo = min(0, min(x))``, ``hi = max(0, max(x))``, ``scale = (hi - lo)
  / 255`` (1 when ``hi == lo``: the spec's formula divides by zero for an all-zero
  tensor, onnxruntime uses 1), ``zp = rne(clamp(0 - lo / scale, 0, 255))``, then
  quantize: onnxruntime's DynamicQuantizeLinear. A NaN in ``x`` makes ``lo``/``hi`` NaN
  (as NumPy's min/max).

The integer kernels accumulate exactly in int32 (the products of 8-bit operands with
their zero points removed), never through float: onnxruntime's U8S8 kernels on AVX2
CPUs without VNNI can saturate a pair of products in int16 (VPMADDUBSW), which is why
onnxruntime's quantizer offers ``reduce_range``; raypass does not saturate unless asked.

Saturating pairs (``saturate_pairs=True`` on ``qnn.matmul`` / ``qnn.conv2d``, set by the
SaturatePairs pass, off by default): the arithmetic of onnxruntime's U8S8 kernels on x86-64
CPUs without VNNI, defined for uint8 data and int8 weights. The raw products (zero points
not yet removed; a convolution's padding holds the data's zero point) are added in pairs
of consecutive ``k`` (``2j, 2j + 1``; a convolution's ``k`` runs over its taps' rows, their
pixels, then the channels of its group: the NHWC im2col order), each pair's sum saturated
to int16, the pairs' sums added exactly in int32, and then the zero points removed
exactly with the rows' and columns' sums (:func:`saturated_pair_excess`). Where no pair
exceeds int16 (every pair ``|b0| + |b1| <= 128``: a 7-bit weight) it is the exact result.

The compute rules (:mod:`passinfra.codegen.compute.quantize`) emit the same operations
in the same order in C, compiled as ISO C11 (``-std=c11`` in the default flags), where the
compiler does not contract ``a * b + c`` into a fused multiply-add, even with
``-march=native``; so interpreted, folded and compiled results are identical.

Checked against onnxruntime 1.32 (tests/frontend/test_onnx_quantization.py): every op
above gives onnxruntime's results bit for bit on x86-64, QLinearAdd over all 65,536 input
pairs of several scale sets where its AVX2 kernel's rounding agrees (see add above).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op import _window
from passinfra.ir.op._rel import (
    broadcast_shapes,
    dtype_choice,
    expect_dtype,
    expect_ndim,
    expect_same_dtype,
    expect_tensor,
    int_tuple,
    pad_tuple_2d,
    positive_ints,
    register_tensor_op,
    type_text,
    window_out_size,
)
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import HALF_DTYPES, TensorType, TupleType, Type, normalize_dtype

__all__ = [
    "QUANTIZED_DTYPES", "SCALE_DTYPES", "INTEGER_KERNEL_DTYPES",
    "quantize", "dequantize", "requantize", "matmul", "conv2d", "add", "mul", "dynamic_quantize",
    "round_saturate", "dynamic_parameters", "requantize_values", "saturated_pair_excess", "conv_rows",
]

# what a quantized tensor may be (ONNX QuantizeLinear's targets without the sub-byte and
# float8 types, which the IR does not have)
QUANTIZED_DTYPES = ("int8", "uint8", "int16", "uint16")
# what a scale may be (computed in float32, as onnxruntime does)
SCALE_DTYPES = (*HALF_DTYPES, "float32")
# operands of the integer kernels and of QLinearAdd/QLinearMul (onnxruntime's types)
INTEGER_KERNEL_DTYPES = ("int8", "uint8")
_QUANTIZE_INPUT_DTYPES = (*SCALE_DTYPES, "int32")
_DEQUANTIZE_INPUT_DTYPES = (*QUANTIZED_DTYPES, "int32")
_F32 = np.float32


# --------------------------------------------------------------------------- shared pieces


def _expect_broadcasts_to(param: Type, target: TensorType, what: str, target_what: str) -> TensorType:
    """``param`` must be a tensor whose shape broadcasts to ``target``'s without growing it."""
    tensor = expect_tensor(param, what)
    try:
        shape = broadcast_shapes(target.shape, tensor.shape)
    except IRTypeError:
        shape = None
    if shape != target.shape:
        raise IRTypeError(f"expected {what} to broadcast to the shape of {target_what} {type_text(target)}, "
                          f"got {type_text(tensor)}")
    return tensor


def _scale(ty: Type, target: TensorType, what: str, target_what: str) -> TensorType:
    scale = _expect_broadcasts_to(ty, target, what, target_what)
    expect_dtype(scale, SCALE_DTYPES, what)
    return scale


def _zero_point(ty: Type, target: TensorType, what: str, target_what: str, dtype: str | None) -> TensorType:
    zero_point = _expect_broadcasts_to(ty, target, what, target_what)
    if dtype is None:
        expect_dtype(zero_point, QUANTIZED_DTYPES, what)
    elif zero_point.dtype != dtype:
        raise IRTypeError(f"expected {what} of dtype {dtype} (the dtype of {target_what}, "
                          f"{type_text(target)}), got {type_text(zero_point)}")
    return zero_point


def _f32(value: Any) -> np.ndarray:
    return np.asarray(value).astype(_F32, copy=False)


def _i32(value: Any) -> np.ndarray:
    return np.asarray(value).astype(np.int32, copy=False)


def round_saturate(values: np.ndarray, dtype: str, zero_point: np.ndarray | None = None) -> np.ndarray:
    """``saturate(rne(values) + zero_point)`` into ``dtype``: float32 ``values`` clamped to
    ``[qmin - zp, qmax - zp]`` (NaN to the lower bound, as MLAS's MAXPS clamp), rounded
    half to even, then the zero point added in int32."""
    info = np.iinfo(dtype)
    zp = np.int32(0) if zero_point is None else _i32(zero_point)
    low, high = _f32(info.min - zp), _f32(info.max - zp)
    rounded = np.rint(_f32(values))
    clamped = np.where(rounded > low, rounded, low)
    clamped = np.where(clamped < high, clamped, high)
    return np.ascontiguousarray((clamped.astype(np.int32) + zp).astype(dtype))


# --------------------------------------------------------------------------- quantize


def _quantize_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    expect_dtype(data, _QUANTIZE_INPUT_DTYPES, "the data")
    _scale(arg_types[1], data, "the scale", "the data")
    zero_point = _zero_point(arg_types[2], data, "the zero point", "the data", None)
    return TensorType(data.shape, zero_point.dtype)


def _quantize_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data, scale, zero_point = (np.asarray(a) for a in args)
    with np.errstate(all="ignore"):  # x / 0 is inf or NaN, then saturated: the semantics
        values = _f32(data) / _f32(scale)
    values = np.broadcast_to(values, data.shape)
    return round_saturate(values, zero_point.dtype.name, zero_point)


register_tensor_op(
    "qnn.quantize", attrs={}, num_inputs=3, type_rel=_quantize_relation, impl=_quantize_impl,
    pattern=OpPattern.BROADCAST,
    doc="saturate(rne(x / scale) + zero_point) in the zero point's dtype (ONNX QuantizeLinear)",
    symbolic=True,
)


def quantize(data: Any, scale: Any, zero_point: Any) -> Call:
    """Quantize ``data`` (float32, float16, bfloat16 or int32) with ``scale`` and
    ``zero_point`` (both broadcasting to ``data``); the result has the zero point's dtype."""
    return call_op("qnn.quantize", data, scale, zero_point)


# --------------------------------------------------------------------------- dequantize


def dequantize_dtype(scale: TensorType, attrs: Attrs) -> str:
    """The result dtype of a dequantize call: ``out_dtype``, else the scale's."""
    out_dtype = attrs["out_dtype"]
    if out_dtype is None:
        return scale.dtype
    name = normalize_dtype(out_dtype)
    if name not in SCALE_DTYPES:
        raise IRTypeError(f"out_dtype must be {dtype_choice(SCALE_DTYPES)}, got {out_dtype!r}")
    return name


def _dequantize_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    expect_dtype(data, _DEQUANTIZE_INPUT_DTYPES, "the data")
    scale = _scale(arg_types[1], data, "the scale", "the data")
    _zero_point(arg_types[2], data, "the zero point", "the data", data.dtype)
    return TensorType(data.shape, dequantize_dtype(scale, attrs))


def _dequantize_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data, scale, zero_point = (np.asarray(a) for a in args)
    # an int32 input's difference in int64: it cannot overflow (onnxruntime's int32
    # subtraction could; ONNX gives int32 data no zero point, so it is 0 there)
    wide = np.int64 if data.dtype == np.int32 else np.int32
    difference = data.astype(wide) - zero_point.astype(wide)
    values = np.broadcast_to(difference.astype(_F32) * _f32(scale), data.shape)
    out_dtype = attrs["out_dtype"] or scale.dtype.name
    return np.ascontiguousarray(values.astype(out_dtype))


register_tensor_op(
    "qnn.dequantize", attrs={"out_dtype": None}, num_inputs=3, type_rel=_dequantize_relation,
    impl=_dequantize_impl, pattern=OpPattern.BROADCAST,
    doc="float32(x - zero_point) * scale, in out_dtype (default: the scale's) (ONNX DequantizeLinear)",
    symbolic=True,
)


def dequantize(data: Any, scale: Any, zero_point: Any, out_dtype: str | None = None) -> Call:
    """Dequantize ``data`` (int8/uint8/int16/uint16/int32) with ``scale`` and ``zero_point``
    (of ``data``'s dtype; both broadcasting to ``data``); ``out_dtype`` defaults to the
    scale's dtype."""
    return call_op("qnn.dequantize", data, scale, zero_point,
                   out_dtype=None if out_dtype is None else normalize_dtype(out_dtype))


# --------------------------------------------------------------------------- requantize


def _requantize_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the accumulator")
    expect_dtype(data, ("int32",), "the accumulator")
    multiplier = _expect_broadcasts_to(arg_types[1], data, "the multiplier", "the accumulator")
    expect_dtype(multiplier, ("float32",), "the multiplier")
    zero_point = _zero_point(arg_types[2], data, "the zero point", "the accumulator", None)
    return TensorType(data.shape, zero_point.dtype)


def requantize_values(data: np.ndarray, multiplier: np.ndarray, zero_point: np.ndarray) -> np.ndarray:
    """qnn.requantize of arrays: ``saturate(rne(float32(data) * multiplier) + zero_point)``."""
    with np.errstate(all="ignore"):
        values = np.broadcast_to(_f32(data) * _f32(multiplier), data.shape)
    return round_saturate(values, zero_point.dtype.name, zero_point)


def _requantize_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    return requantize_values(*(np.asarray(a) for a in args))


register_tensor_op(
    "qnn.requantize", attrs={}, num_inputs=3, type_rel=_requantize_relation, impl=_requantize_impl,
    pattern=OpPattern.BROADCAST,
    doc="saturate(rne(float32(acc) * multiplier) + zero_point) of an int32 accumulator", symbolic=True,
)


def requantize(data: Any, multiplier: Any, zero_point: Any) -> Call:
    """Requantize an int32 accumulator: ``float32(data) * multiplier`` (float32,
    broadcasting), rounded, plus ``zero_point``, saturated to the zero point's dtype."""
    return call_op("qnn.requantize", data, multiplier, zero_point)


# --------------------------------------------------------------------------- matmul


def _operand(ty: Type, what: str) -> TensorType:
    tensor = expect_tensor(ty, what)
    expect_dtype(tensor, INTEGER_KERNEL_DTYPES, what)
    return tensor


def _matmul_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    lhs = _operand(arg_types[0], "the left operand")
    rhs = _operand(arg_types[1], "the right operand")
    if lhs.ndim < 2 or rhs.ndim < 2:
        raise IRTypeError(f"expected operands of rank >= 2, got {type_text(lhs)} and {type_text(rhs)}")
    if lhs.shape[-1] != rhs.shape[-2]:
        raise IRTypeError(f"the contracted dimensions differ: {type_text(lhs)} @ {type_text(rhs)}")
    _zero_point(arg_types[2], lhs, "the left zero point", "the left operand", lhs.dtype)
    _zero_point(arg_types[3], rhs, "the right zero point", "the right operand", rhs.dtype)
    batch = broadcast_shapes(lhs.shape[:-2], rhs.shape[:-2])
    _expect_saturating_operands(attrs, lhs, rhs)
    return TensorType((*batch, lhs.shape[-2], rhs.shape[-1]), "int32")


def _centered(value: Any, zero_point: Any) -> np.ndarray:
    """``value - zero_point`` exactly (int64)."""
    return np.asarray(value).astype(np.int64) - np.asarray(zero_point).astype(np.int64)


# the int16 range a pair of VPMADDUBSW's products saturates to
_INT16_MIN, _INT16_MAX = -32768, 32767
# the int32 elements of the pair sums computed at once (rows are taken in chunks of this)
_PAIR_CHUNK = 1 << 22


def saturated_pair_excess(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``sum_j sat16(a[m, 2j] b[2j, n] + a[m, 2j+1] b[2j+1, n]) - sum_k a[m, k] b[k, n]``
    (int64 ``[M, N]``) for raw operands ``a`` ``[M, K]`` and ``b`` ``[K, N]`` (integer
    values; an odd ``K``'s last pair has one product): what saturating the pairs changes in
    the raw sums. Zero where no pair leaves int16; only the pairs of a ``b`` pair that can
    (``|b0| + |b1| > 128``) are computed."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    m, k = a.shape
    n = b.shape[1]
    excess = np.zeros((m, n), np.int64)
    if k % 2:
        a, b = np.pad(a, ((0, 0), (0, 1))), np.pad(b, ((0, 1), (0, 0)))
    b_pairs = np.abs(b[0::2]) + np.abs(b[1::2])  # [K/2, N]: a pair's largest sum is 255 times this
    for j in np.flatnonzero((b_pairs * 255 > _INT16_MAX).any(axis=1)):
        columns = np.flatnonzero(b_pairs[j] * 255 > _INT16_MAX)
        rows_at_once = max(1, _PAIR_CHUNK // max(1, columns.size))
        for start in range(0, m, rows_at_once):
            rows = slice(start, start + rows_at_once)
            pair = (np.outer(a[rows, 2 * j], b[2 * j, columns])
                    + np.outer(a[rows, 2 * j + 1], b[2 * j + 1, columns]))
            excess[rows, columns] += np.clip(pair, _INT16_MIN, _INT16_MAX) - pair
    return excess


def _expect_saturating_operands(attrs: Attrs, data: TensorType, weight: TensorType) -> None:
    if attrs["saturate_pairs"] and (data.dtype, weight.dtype) != ("uint8", "int8"):
        raise IRTypeError(f"saturate_pairs is defined for uint8 data and int8 weights (VPMADDUBSW's "
                          f"operands), got {type_text(data)} and {type_text(weight)}")


def _matmul_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    lhs, rhs, lhs_zero, rhs_zero = args
    product = np.matmul(_centered(lhs, lhs_zero), _centered(rhs, rhs_zero))
    if attrs["saturate_pairs"]:
        lhs, rhs = np.asarray(lhs), np.asarray(rhs)
        batch = product.shape[:-2]
        lhs_all = np.broadcast_to(lhs, (*batch, *lhs.shape[-2:])).reshape(-1, *lhs.shape[-2:])
        rhs_all = np.broadcast_to(rhs, (*batch, *rhs.shape[-2:])).reshape(-1, *rhs.shape[-2:])
        excess = np.stack([saturated_pair_excess(x, w) for x, w in zip(lhs_all, rhs_all)])
        product = product + excess.reshape(product.shape)
    return np.ascontiguousarray(product.astype(np.int32))  # wraps as int32 arithmetic does


register_tensor_op(
    "qnn.matmul", attrs={"saturate_pairs": False}, num_inputs=4, type_rel=_matmul_relation, impl=_matmul_impl,
    pattern=OpPattern.OUT_EWISE_FUSABLE,
    doc="(a - a_zero_point) @ (b - b_zero_point), int8/uint8 operands summed in int32 (ONNX MatMulInteger)",
    symbolic=True,
)


def matmul(lhs: Any, rhs: Any, lhs_zero_point: Any, rhs_zero_point: Any,
           saturate_pairs: bool = False) -> Call:
    """``(lhs - lhs_zero_point) @ (rhs - rhs_zero_point)`` in int32; operands int8/uint8 of
    rank >= 2 (batch axes broadcast); each zero point broadcasts to its operand.
    ``saturate_pairs``: onnxruntime's arithmetic without VNNI (module docstring; uint8
    ``lhs``, int8 ``rhs``)."""
    return call_op("qnn.matmul", lhs, rhs, lhs_zero_point, rhs_zero_point,
                   **({"saturate_pairs": True} if saturate_pairs else {}))


# --------------------------------------------------------------------------- conv2d

_CONV_DEFAULTS = {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
                  "data_layout": "NCHW", "kernel_layout": "OIHW", "saturate_pairs": False}
# the pairs nn.conv2d has (AlterOpLayout turns NCHW/OIHW into NHWC/HWIO)
CONV_LAYOUTS = (("NCHW", "OIHW"), ("NHWC", "HWIO"))


def _layout_perms(attrs: Attrs) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The permutations from the call's data and kernel layouts to NCHW and OIHW."""
    layouts = (attrs["data_layout"], attrs["kernel_layout"])
    if layouts not in CONV_LAYOUTS:
        raise IRTypeError(f"layouts {layouts[0]}/{layouts[1]} are not supported (NCHW/OIHW or NHWC/HWIO)")
    return tuple(layouts[0].index(c) for c in "NCHW"), tuple(layouts[1].index(c) for c in "OIHW")


def _conv2d_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data_perm, weight_perm = _layout_perms(attrs)
    data = _operand(arg_types[0], "the data")
    weight = _operand(arg_types[1], "the weight")
    expect_ndim(data, 4, "the data", attrs["data_layout"])
    expect_ndim(weight, 4, "the weight", attrs["kernel_layout"])
    _zero_point(arg_types[2], data, "the data zero point", "the data", data.dtype)
    _zero_point(arg_types[3], weight, "the weight zero point", "the weight", weight.dtype)
    batch, channels, height, width = (data.shape[i] for i in data_perm)
    out_channels, group_channels, kh, kw = (weight.shape[i] for i in weight_perm)
    groups = attrs["groups"]
    if not isinstance(groups, int) or groups < 1 or channels % groups or out_channels % groups:
        raise IRTypeError(f"groups={groups!r} must divide the input channels ({channels}) and the output "
                          f"channels ({out_channels})")
    if group_channels != channels // groups:
        raise IRTypeError(f"expected the weight to have {channels // groups} input channels "
                          f"(data channels {channels} / groups {groups}), got {type_text(weight)}")
    _expect_saturating_operands(attrs, data, weight)
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    top, left, bottom, right = attrs["padding"]
    out_h = window_out_size(height, kh, sh, top, bottom, dh, "height")
    out_w = window_out_size(width, kw, sw, left, right, dw, "width")
    canonical = (batch, out_channels, out_h, out_w)
    return TensorType(tuple(canonical["NCHW".index(c)] for c in attrs["data_layout"]), "int32")


def _conv2d_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data, weight, data_zero, weight_zero = args
    data_perm, weight_perm = _layout_perms(attrs)
    # the padding holds the data's zero point: zero once it is subtracted
    centered_data = np.transpose(_centered(data, data_zero), data_perm)
    centered_weight = np.transpose(_centered(weight, weight_zero), weight_perm)
    out = _window.conv_nd(centered_data, centered_weight, attrs["strides"], attrs["padding"],
                          attrs["dilation"], attrs["groups"])
    if attrs["saturate_pairs"]:
        out = out + _conv_pair_excess(np.transpose(np.asarray(data), data_perm),
                                      np.transpose(np.asarray(weight), weight_perm),
                                      int(np.asarray(data_zero).reshape(-1)[0]), attrs, out.shape)
    back = tuple("NCHW".index(c) for c in attrs["data_layout"])
    return np.ascontiguousarray(np.transpose(out, back).astype(np.int32))


def conv_rows(data: np.ndarray, kh: int, kw: int, attrs: Attrs, out_hw: tuple[int, int],
              pad: int) -> np.ndarray:
    """The ``[groups, N * OH * OW, KH * KW * C / groups]`` im2col rows of an NCHW ``data``
    (raw values, the padding ``pad``), ``k`` over the taps' rows, their pixels, then the
    group's channels (the NHWC order of the integer GEMM)."""
    (sh, sw), (dh, dw), groups = attrs["strides"], attrs["dilation"], attrs["groups"]
    top, left, _bottom, _right = attrs["padding"]
    batch, channels, height, width = data.shape
    out_h, out_w = out_hw
    image = np.transpose(data, (0, 2, 3, 1))
    padded = np.full((batch, top + (out_h - 1) * sh + (kh - 1) * dh + 1,
                      left + (out_w - 1) * sw + (kw - 1) * dw + 1, channels), pad, np.int64)
    inside_h, inside_w = min(height, padded.shape[1] - top), min(width, padded.shape[2] - left)
    padded[:, top:top + inside_h, left:left + inside_w] = image[:, :inside_h, :inside_w]
    taps = [padded[:, ky * dh:ky * dh + (out_h - 1) * sh + 1:sh, kx * dw:kx * dw + (out_w - 1) * sw + 1:sw]
            for ky in range(kh) for kx in range(kw)]
    rows = np.stack(taps, axis=3).reshape(batch * out_h * out_w, kh * kw, groups, channels // groups)
    return rows.transpose(2, 0, 1, 3).reshape(groups, batch * out_h * out_w, -1)


def _conv_pair_excess(data: np.ndarray, weight: np.ndarray, data_zero: int, attrs: Attrs,
                      out_shape: tuple[int, ...]) -> np.ndarray:
    """:func:`saturated_pair_excess` of an NCHW/OIHW convolution's GEMMs, NCHW."""
    batch, out_channels, out_h, out_w = out_shape
    groups = attrs["groups"]
    _, group_channels, kh, kw = weight.shape
    rows = conv_rows(data, kh, kw, attrs, (out_h, out_w), data_zero)
    per_group = out_channels // groups
    # the weight's [KH * KW * C/groups, O] matrix in the rows' k order, a group's columns at a time
    matrix = np.transpose(weight, (2, 3, 1, 0)).reshape(kh * kw * group_channels, out_channels)
    excess = np.concatenate([saturated_pair_excess(rows[g], matrix[:, g * per_group:(g + 1) * per_group])
                             for g in range(groups)], axis=1)
    return excess.reshape(batch, out_h, out_w, out_channels).transpose(0, 3, 1, 2)


register_tensor_op(
    "qnn.conv2d", attrs=_CONV_DEFAULTS, num_inputs=4, type_rel=_conv2d_relation, impl=_conv2d_impl,
    pattern=OpPattern.OUT_EWISE_FUSABLE,
    doc="conv2d (NCHW/OIHW or NHWC/HWIO) of data - data_zero_point and weight - weight_zero_point, "
        "summed in int32 (ONNX ConvInteger)",
)


def conv2d(data: Any, weight: Any, data_zero_point: Any, weight_zero_point: Any, strides: Any = (1, 1),
           padding: Any = (0, 0), dilation: Any = (1, 1), groups: int = 1, data_layout: str = "NCHW",
           kernel_layout: str = "OIHW", saturate_pairs: bool = False) -> Call:
    """The int32 convolution of ``data - data_zero_point`` (NCHW, int8/uint8) with
    ``weight - weight_zero_point`` (OIHW, int8/uint8); zero points broadcast to their
    operand (a per-output-channel weight zero point has shape (O, 1, 1, 1)). ``padding``
    as for ``nn.conv2d`` (1, 2 or 4 ints). ``data_layout="NHWC"`` with
    ``kernel_layout="HWIO"`` is the same convolution on transposed operands (the result
    NHWC; a per-channel weight zero point then has shape (1, 1, 1, O)). ``saturate_pairs``:
    onnxruntime's arithmetic without VNNI (module docstring; uint8 data, int8 weight)."""
    return call_op(
        "qnn.conv2d", data, weight, data_zero_point, weight_zero_point,
        strides=positive_ints(int_tuple(strides, 2, "strides"), "strides"),
        padding=pad_tuple_2d(padding),
        dilation=positive_ints(int_tuple(dilation, 2, "dilation"), "dilation"),
        groups=int(groups), data_layout=str(data_layout), kernel_layout=str(kernel_layout),
        **({"saturate_pairs": True} if saturate_pairs else {}),
    )


# --------------------------------------------------------------------------- add / mul


def _binary_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    lhs = _operand(arg_types[0], "the left operand")
    rhs = _operand(arg_types[3], "the right operand")
    expect_same_dtype(lhs, rhs, "the right operand", "the left operand")
    out = TensorType(broadcast_shapes(lhs.shape, rhs.shape), lhs.dtype)
    for index, target, what, target_what in ((1, lhs, "the left scale", "the left operand"),
                                             (4, rhs, "the right scale", "the right operand"),
                                             (6, out, "the output scale", "the output")):
        scale = _expect_broadcasts_to(arg_types[index], target, what, target_what)
        expect_dtype(scale, ("float32",), what)
    for index, target, what, target_what in ((2, lhs, "the left zero point", "the left operand"),
                                             (5, rhs, "the right zero point", "the right operand"),
                                             (7, out, "the output zero point", "the output")):
        _zero_point(arg_types[index], target, what, target_what, lhs.dtype)
    return out


def _binary_args(args: Sequence[Any]) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(a) for a in args)


def _add_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    lhs, lhs_scale, lhs_zero, rhs, rhs_scale, rhs_zero, out_scale, out_zero = _binary_args(args)
    with np.errstate(all="ignore"):
        ratio_lhs, ratio_rhs = _f32(lhs_scale) / _f32(out_scale), _f32(rhs_scale) / _f32(out_scale)
        fixed = _f32(out_zero) - (ratio_lhs * _f32(lhs_zero) + ratio_rhs * _f32(rhs_zero))
        values = (fixed + _f32(lhs) * ratio_lhs) + _f32(rhs) * ratio_rhs
    return round_saturate(values, lhs.dtype.name)


def _mul_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    lhs, lhs_scale, lhs_zero, rhs, rhs_scale, rhs_zero, out_scale, out_zero = _binary_args(args)
    product = (_i32(lhs) - _i32(lhs_zero)) * (_i32(rhs) - _i32(rhs_zero))
    with np.errstate(all="ignore"):
        ratio = (_f32(lhs_scale) * _f32(rhs_scale)) / _f32(out_scale)
        values = _f32(product) * ratio + _f32(out_zero)
    return round_saturate(values, lhs.dtype.name)


register_tensor_op(
    "qnn.add", attrs={}, num_inputs=8, type_rel=_binary_relation, impl=_add_impl, pattern=OpPattern.BROADCAST,
    doc="QLinearAdd: a + b of two quantized int8/uint8 tensors, requantized (MLAS's float32 formula)",
    symbolic=True,
)
register_tensor_op(
    "qnn.mul", attrs={}, num_inputs=8, type_rel=_binary_relation, impl=_mul_impl, pattern=OpPattern.BROADCAST,
    doc="QLinearMul: a * b of two quantized int8/uint8 tensors, requantized (MLAS's float32 formula)",
    symbolic=True,
)


def add(lhs: Any, lhs_scale: Any, lhs_zero_point: Any, rhs: Any, rhs_scale: Any, rhs_zero_point: Any,
        out_scale: Any, out_zero_point: Any) -> Call:
    """QLinearAdd: ``lhs`` and ``rhs`` (int8 or uint8, broadcasting) with their float32
    scales and zero points, added and quantized with ``out_scale``/``out_zero_point``."""
    return call_op("qnn.add", lhs, lhs_scale, lhs_zero_point, rhs, rhs_scale, rhs_zero_point, out_scale,
                   out_zero_point)


def mul(lhs: Any, lhs_scale: Any, lhs_zero_point: Any, rhs: Any, rhs_scale: Any, rhs_zero_point: Any,
        out_scale: Any, out_zero_point: Any) -> Call:
    """QLinearMul: as :func:`add`, for the product."""
    return call_op("qnn.mul", lhs, lhs_scale, lhs_zero_point, rhs, rhs_scale, rhs_zero_point, out_scale,
                   out_zero_point)


# --------------------------------------------------------------------------- dynamic_quantize


def _dynamic_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    expect_dtype(data, ("float32",), "the data")
    return TupleType([TensorType(data.shape, "uint8"), TensorType((), "float32"), TensorType((), "uint8")])


def dynamic_parameters(data: np.ndarray) -> tuple[np.float32, np.float32]:
    """(scale, zero point as a float32 integer) of DynamicQuantizeLinear on ``data``, step
    by step as the compute rule does it (NaN propagates through min/max)."""
    zero = _F32(0)
    low = np.minimum(zero, data.min()) if data.size else zero
    high = np.maximum(zero, data.max()) if data.size else zero
    with np.errstate(all="ignore"):
        scale = _F32(1) if high == low else _F32((high - low) / _F32(255))
        initial = zero - low / scale
    upper = initial if initial < _F32(255) else _F32(255)  # std::min(255, z)
    clamped = upper if zero < upper else zero  # std::max(0, z)
    return _F32(scale), _F32(np.rint(clamped))


def _dynamic_impl(args: Sequence[Any], attrs: Attrs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    data = _f32(args[0])
    scale, zero = dynamic_parameters(data)
    zero_point = np.asarray(zero).astype(np.uint8)
    with np.errstate(all="ignore"):
        values = data / scale
    return round_saturate(values, "uint8", zero_point), np.asarray(scale, dtype=_F32), zero_point


register_tensor_op(
    "qnn.dynamic_quantize", attrs={}, num_inputs=1, type_rel=_dynamic_relation, impl=_dynamic_impl,
    pattern=OpPattern.OPAQUE,
    doc="DynamicQuantizeLinear: (uint8 tensor, float32 scale, uint8 zero point) from the data's range",
    symbolic=True,
)


def dynamic_quantize(data: Any) -> Call:
    """Quantize float32 ``data`` to uint8 with a scale and zero point computed from its
    range (which always includes 0); a 3-tuple (quantized, scale, zero point)."""
    return call_op("qnn.dynamic_quantize", data)

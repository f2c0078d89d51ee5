"""Quantization ONNX ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv, and the com.microsoft ops that
``onnxruntime.quantization`` emits in its QOperator format (QGemm, QLinearAdd,
QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool, QLinearConcat).

Each becomes ``qnn.*`` ops (:mod:`passinfra.ir.op.quantize`, where the arithmetic is
described): the QLinear contractions are an int32 ``qnn.matmul`` / ``qnn.conv2d``, plus
the int32 bias, then ``qnn.requantize`` with the multiplier onnxruntime computes, in the
same float32 order (``(x_scale * w_scale) / y_scale``; QGemm ``(alpha * a_scale *
b_scale) / y_scale``; QLinearGlobalAveragePool ``x_scale / (y_scale * image_size)``).
onnxruntime evaluates QLinearSigmoid, QLinearLeakyRelu and QLinearConcat through a lookup
table of ``quantize(f(dequantize(v)))`` over the 256 values ``v``: the same function of
each element, so they become dequantize, the float function, quantize (sigmoid in
float64 rounded to float32, so interpreter and compiled code agree; onnxruntime's MLAS
logistic is an approximation, so its table may be 1 off in places).

Scales and zero points: a scalar (or one-element tensor) is per-tensor; a 1-D tensor
along ``axis`` is per-axis (reshaped to broadcast along it); with ``block_size`` the
scale has the input's rank and is repeated ``block_size`` times along ``axis``. A
missing zero point is 0 (uint8 for QuantizeLinear unless ``output_dtype`` says
otherwise). Values known at import (initializers) stay NumPy arrays and are reshaped
with NumPy; the multipliers are computed in float32 either way.
"""

from __future__ import annotations

import numpy as np

from passinfra.frontend.onnx_ops.context import NodeContext, Value
from passinfra.frontend.onnx_ops.nn import _window_padding
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.frontend.onnx_ops.tensor import onnx_dtype
from passinfra.ir import op
from passinfra.ir.expr import Expr, TupleGetItem
from passinfra.ir.op import extra, matmul_nbits
from passinfra.ir.op import quantize as qnn

MICROSOFT = "com.microsoft."  # the converter table's prefix for the com.microsoft domain


# --------------------------------------------------------------------------- values


def _required(node: NodeContext, index: int, what: str) -> Value:
    value = node.input(index)
    if value is None:
        raise node.fail(f"input {index} ({what}) is required")
    return value


def _reshape(value: Value, shape: tuple[int, ...]) -> Value:
    if isinstance(value, np.ndarray):
        return value.reshape(shape)
    return op.reshape(value, shape)


def _float32(node: NodeContext, value: Value) -> Value:
    if isinstance(value, np.ndarray):
        return value.astype(np.float32, copy=False)
    return value if node.dtype(value) == "float32" else op.cast(value, "float32")


def _times(node: NodeContext, lhs: Value, rhs: Value) -> Value:
    """``lhs * rhs`` in float32 (NumPy for known values: the same IEEE operation)."""
    if isinstance(lhs, np.ndarray) and isinstance(rhs, np.ndarray):
        return np.asarray(lhs * rhs, dtype=np.float32)
    return op.multiply(node.expr(lhs), node.expr(rhs))


def _over(node: NodeContext, lhs: Value, rhs: Value) -> Value:
    if isinstance(lhs, np.ndarray) and isinstance(rhs, np.ndarray):
        with np.errstate(all="ignore"):
            return np.asarray(lhs / rhs, dtype=np.float32)
    return op.divide(node.expr(lhs), node.expr(rhs))


def _zeros_like(node: NodeContext, value: Value, dtype: str) -> np.ndarray:
    return np.zeros(node.shape(value), dtype=dtype)


def _scalar(node: NodeContext, value: Value, what: str) -> Value:
    """A per-tensor parameter as a scalar (a one-element tensor of any rank)."""
    if int(np.prod(node.shape(value), dtype=np.int64)) != 1:
        raise node.fail(f"{what} must be a scalar (per-tensor), got shape {tuple(node.shape(value))}")
    return _reshape(value, ())


def _along(node: NodeContext, value: Value, axis: int, rank: int, what: str) -> Value:
    """A 1-D per-axis parameter reshaped to broadcast along ``axis`` of a rank-``rank``
    tensor; a one-element parameter becomes a scalar."""
    shape = tuple(node.shape(value))
    if int(np.prod(shape, dtype=np.int64)) == 1:
        return _reshape(value, ())
    if len(shape) != 1:
        raise node.fail(f"{what} must be a scalar or a 1-D tensor, got shape {shape}")
    return _reshape(value, tuple(shape[0] if i == axis else 1 for i in range(rank)))


def _axis(node: NodeContext, rank: int) -> int:
    axis = int(node.attr("axis", 1))
    if not -rank <= axis < max(rank, 1):
        raise node.fail(f"axis {axis} is out of range for an input of rank {rank}")
    return axis % rank if rank else 0


def _granular(node: NodeContext, value: Value, data_shape: tuple[int, ...], what: str) -> Value:
    """A QuantizeLinear/DequantizeLinear scale or zero point broadcastable to the data:
    per-tensor, per-axis, or blocked (``block_size``)."""
    rank = len(data_shape)
    shape = tuple(node.shape(value))
    block = int(node.attr("block_size", 0) or 0)
    if block > 0:
        axis = _axis(node, rank)
        expected = tuple(-(-d // block) if i == axis else d for i, d in enumerate(data_shape))
        if shape != expected:
            raise node.fail(f"{what} of shape {shape} does not fit blocks of {block} along axis {axis} of an "
                            f"input of shape {data_shape} (expected {expected})")
        extent = data_shape[axis]
        indices = np.arange(extent, dtype=np.int64) // block
        if isinstance(value, np.ndarray):
            return np.ascontiguousarray(np.take(value, indices, axis=axis))
        return op.take(value, indices, axis=axis)
    if int(np.prod(shape, dtype=np.int64)) == 1:
        return _reshape(value, ())
    if len(shape) != 1:
        raise node.fail(f"{what} must be a scalar, a 1-D tensor (per-axis) or blocked (block_size), got "
                        f"shape {shape}")
    axis = _axis(node, rank)
    if shape[0] != data_shape[axis]:
        raise node.fail(f"per-axis {what} has {shape[0]} elements, but axis {axis} of the input has "
                        f"{data_shape[axis]}")
    return _along(node, value, axis, rank, what)


def _checked_scale(node: NodeContext, value: Value, what: str) -> None:
    dtype = node.dtype(value)
    if dtype not in qnn.SCALE_DTYPES:
        raise node.fail(f"{what} of dtype {dtype} is not supported (float32, float16 or bfloat16)")


def _checked_quantized(node: NodeContext, dtype: str, what: str) -> None:
    if dtype not in qnn.QUANTIZED_DTYPES:
        raise node.fail(f"{what} of dtype {dtype} is not supported (int8, uint8, int16 or uint16)")


# --------------------------------------------------------------------------- Quantize/DequantizeLinear


@converter("QuantizeLinear", since=10)
def _quantize_linear(node: NodeContext) -> Expr:
    data = _required(node, 0, "x")
    scale = _required(node, 1, "y_scale")
    _checked_scale(node, scale, "y_scale")
    precision = int(node.attr("precision", 0) or 0)
    if precision not in (0, 1):  # 1: FLOAT
        raise node.fail(f"precision {onnx_dtype(precision, node)} is not supported: raypass divides in "
                        "float32, as onnxruntime's CPU kernels do")
    zero_point = node.input(2)
    code = int(node.attr("output_dtype", 0) or 0)
    declared = onnx_dtype(code, node).name if code else None
    if zero_point is None:
        dtype = declared or "uint8"
        _checked_quantized(node, dtype, "the output")
        zero_point = _zeros_like(node, scale, dtype)
    else:
        _checked_quantized(node, node.dtype(zero_point), "y_zero_point")
        if declared is not None and declared != node.dtype(zero_point):
            raise node.fail(f"output_dtype {declared} differs from the dtype of y_zero_point "
                            f"({node.dtype(zero_point)})")
    shape = tuple(node.shape(data))
    return qnn.quantize(node.expr(data), node.expr(_granular(node, scale, shape, "y_scale")),
                        node.expr(_granular(node, zero_point, shape, "y_zero_point")))


@converter("DequantizeLinear", since=10)
def _dequantize_linear(node: NodeContext) -> Expr:
    data = _required(node, 0, "x")
    scale = _required(node, 1, "x_scale")
    _checked_scale(node, scale, "x_scale")
    dtype = node.dtype(data)
    if dtype != "int32":
        _checked_quantized(node, dtype, "x")
    zero_point = node.input(2)
    if zero_point is None:
        zero_point = _zeros_like(node, scale, dtype)
    code = int(node.attr("output_dtype", 0) or 0)
    out_dtype = onnx_dtype(code, node).name if code else None
    if out_dtype is not None and out_dtype not in qnn.SCALE_DTYPES:
        raise node.fail(f"output_dtype {out_dtype} is not supported (float32, float16 or bfloat16)")
    shape = tuple(node.shape(data))
    return qnn.dequantize(node.expr(data), node.expr(_granular(node, scale, shape, "x_scale")),
                          node.expr(_granular(node, zero_point, shape, "x_zero_point")), out_dtype)


@converter("DynamicQuantizeLinear", since=11)
def _dynamic_quantize_linear(node: NodeContext) -> list[Expr]:
    call = qnn.dynamic_quantize(node.arg(0))
    return [TupleGetItem(call, index) for index in range(3)]


# --------------------------------------------------------------------------- integer contractions


def _operand_zero_point(node: NodeContext, index: int, operand: Value) -> Value:
    zero_point = node.input(index)
    if zero_point is None:
        return np.zeros((), dtype=node.dtype(operand))
    return zero_point


def _integer_matmul(node: NodeContext, lhs: Value, rhs: Value, lhs_zero: Value, rhs_zero: Value) -> Expr:
    """``(lhs - lhs_zero) @ (rhs - rhs_zero)`` in int32, NumPy's matmul rules (1-D
    operands included). ``lhs_zero`` may be per row (1-D, one per row of ``lhs``),
    ``rhs_zero`` per column (1-D, one per column of ``rhs``), or shaped to broadcast."""
    lhs_shape, rhs_shape = tuple(node.shape(lhs)), tuple(node.shape(rhs))
    if not lhs_shape or not rhs_shape:
        raise node.fail("operands must have rank >= 1")
    lhs_vector, rhs_vector = len(lhs_shape) == 1, len(rhs_shape) == 1
    lhs_expr = op.reshape(node.expr(lhs), (1, lhs_shape[0])) if lhs_vector else node.expr(lhs)
    rhs_expr = op.reshape(node.expr(rhs), (rhs_shape[0], 1)) if rhs_vector else node.expr(rhs)
    lhs_zero_shape = tuple(node.shape(lhs_zero))
    if int(np.prod(lhs_zero_shape, dtype=np.int64)) == 1:
        lhs_zero = _reshape(lhs_zero, ())
    elif len(lhs_zero_shape) == 1:  # per row: one zero point per row of the left operand
        lhs_zero = _reshape(lhs_zero, (lhs_zero_shape[0], 1))
    if int(np.prod(node.shape(rhs_zero), dtype=np.int64)) == 1:
        rhs_zero = _reshape(rhs_zero, ())
    result = qnn.matmul(lhs_expr, rhs_expr, node.expr(lhs_zero), node.expr(rhs_zero))
    if lhs_vector or rhs_vector:
        result = op.squeeze(result, axis=[a for a, drop in ((-2, lhs_vector), (-1, rhs_vector)) if drop])
    return result


@converter("MatMulInteger", since=10)
def _matmul_integer(node: NodeContext) -> Expr:
    lhs, rhs = _required(node, 0, "A"), _required(node, 1, "B")
    lhs_zero, rhs_zero = _operand_zero_point(node, 2, lhs), _operand_zero_point(node, 3, rhs)
    return _integer_matmul(node, lhs, rhs, lhs_zero, rhs_zero)


def _integer_conv(node: NodeContext, data: Value, weight: Value, data_zero: Value, weight_zero: Value,
                  bias: Value | None = None) -> tuple[Expr, int]:
    """The int32 convolution (plus an int32 bias), and how many unit axes were added to
    run a 1-D convolution as 2-D."""
    shape, wshape = tuple(node.shape(data)), tuple(node.shape(weight))
    kernel = list(node.attr("kernel_shape", wshape[2:]))
    rank = len(shape) - 2
    if rank not in (1, 2) or len(kernel) != rank:
        raise node.fail(f"only 1-D and 2-D convolutions are supported, got data of shape {shape}")
    strides = list(node.attr("strides", [1] * rank))
    dilations = list(node.attr("dilations", [1] * rank))
    begin, end = _window_padding(node, shape[2:], kernel, strides, dilations)
    added = 2 - rank  # 1-D runs as 2-D over a unit height (exact)
    data_expr, weight_expr = node.expr(data), node.expr(weight)
    if added:
        data_expr = op.reshape(data_expr, (*shape[:2], 1, *shape[2:]))
        weight_expr = op.reshape(weight_expr, (*wshape[:2], 1, *wshape[2:]))
    out_channels = wshape[0]
    result = qnn.conv2d(
        data_expr, weight_expr,
        node.expr(_scalar(node, data_zero, "the data zero point")),
        node.expr(_along(node, weight_zero, 0, 4, "the weight zero point")),
        strides=(1,) * added + tuple(strides),
        padding=(0,) * added + tuple(begin) + (0,) * added + tuple(end),
        dilation=(1,) * added + tuple(dilations), groups=int(node.attr("group", 1)),
    )
    if bias is not None:
        if node.dtype(bias) != "int32" or tuple(node.shape(bias)) != (out_channels,):
            raise node.fail(f"the bias must be an int32 vector of {out_channels} elements, got "
                            f"{node.dtype(bias)} of shape {tuple(node.shape(bias))}")
        result = op.add(result, node.expr(_reshape(bias, (out_channels, 1, 1))))
    return result, added


def _unlift(result: Expr, added: int) -> Expr:
    return op.squeeze(result, axis=[2]) if added else result


@converter("ConvInteger", since=10)
def _conv_integer(node: NodeContext) -> Expr:
    data, weight = _required(node, 0, "x"), _required(node, 1, "w")
    result, added = _integer_conv(node, data, weight, _operand_zero_point(node, 2, data),
                                  _operand_zero_point(node, 3, weight))
    return _unlift(result, added)


def _requantized(node: NodeContext, acc: Expr, multiplier: Value, zero_point: Value) -> Expr:
    return qnn.requantize(acc, node.expr(_float32(node, multiplier)), node.expr(zero_point))


@converter("QLinearMatMul", since=10)
def _qlinear_matmul(node: NodeContext) -> Expr:
    lhs, rhs = _required(node, 0, "a"), _required(node, 3, "b")
    lhs_scale, rhs_scale, out_scale = (_float32(node, _required(node, i, what))
                                       for i, what in ((1, "a_scale"), (4, "b_scale"), (6, "y_scale")))
    rows = tuple(node.shape(lhs))[-2] if len(node.shape(lhs)) > 1 else 1
    lhs_zero, rhs_zero = _required(node, 2, "a_zero_point"), _required(node, 5, "b_zero_point")
    acc = _integer_matmul(node, lhs, rhs, lhs_zero, rhs_zero)
    # per-row a_scale (1-D, one per row) and per-column b_scale broadcast to the output
    if int(np.prod(node.shape(lhs_scale), dtype=np.int64)) != 1:
        lhs_scale = _reshape(lhs_scale, (rows, 1))
    else:
        lhs_scale = _reshape(lhs_scale, ())
    multiplier = _over(node, _times(node, lhs_scale, rhs_scale), _scalar(node, out_scale, "y_scale"))
    zero_point = _scalar(node, _required(node, 7, "y_zero_point"), "y_zero_point")
    return _requantized(node, acc, multiplier, zero_point)


@converter("QLinearConv", since=10)
def _qlinear_conv(node: NodeContext) -> Expr:
    data, weight = _required(node, 0, "x"), _required(node, 3, "w")
    acc, added = _integer_conv(node, data, weight, _required(node, 2, "x_zero_point"),
                               _required(node, 5, "w_zero_point"), node.input(8))
    data_scale = _scalar(node, _float32(node, _required(node, 1, "x_scale")), "x_scale")
    weight_scale = _along(node, _float32(node, _required(node, 4, "w_scale")), 0, 3, "w_scale")  # (O, 1, 1)
    out_scale = _scalar(node, _float32(node, _required(node, 6, "y_scale")), "y_scale")
    multiplier = _over(node, _times(node, data_scale, weight_scale), out_scale)
    zero_point = _scalar(node, _required(node, 7, "y_zero_point"), "y_zero_point")
    return _unlift(_requantized(node, acc, multiplier, zero_point), added)


# --------------------------------------------------------------------------- com.microsoft


@converter(MICROSOFT + "QGemm")
def _qgemm(node: NodeContext) -> Expr:
    lhs, rhs = _required(node, 0, "A"), _required(node, 3, "B")
    lhs_expr = op.transpose(node.expr(lhs)) if node.attr("transA", 0) else node.expr(lhs)
    rhs_expr = op.transpose(node.expr(rhs)) if node.attr("transB", 0) else node.expr(rhs)
    if len(node.shape(lhs)) != 2 or len(node.shape(rhs)) != 2:
        raise node.fail("A and B must be matrices")
    lhs_zero = _scalar(node, _operand_zero_point(node, 2, lhs), "a_zero_point")
    rhs_zero = _operand_zero_point(node, 5, rhs)
    rhs_zero = _reshape(rhs_zero, ()) if int(np.prod(node.shape(rhs_zero), dtype=np.int64)) == 1 else rhs_zero
    acc = qnn.matmul(lhs_expr, rhs_expr, node.expr(lhs_zero), node.expr(rhs_zero))
    if node.has_input(6):
        acc = op.add(acc, node.arg(6))
    alpha = np.float32(node.attr("alpha", 1.0))
    lhs_scale = _scalar(node, _float32(node, _required(node, 1, "a_scale")), "a_scale")
    rhs_scale = _float32(node, _required(node, 4, "b_scale"))
    if int(np.prod(node.shape(rhs_scale), dtype=np.int64)) == 1:
        rhs_scale = _reshape(rhs_scale, ())
    multiplier = _times(node, _times(node, np.asarray(alpha), lhs_scale), rhs_scale)
    if node.has_input(7):
        multiplier = _over(node, multiplier, _scalar(node, _float32(node, node.input(7)), "y_scale"))
    if node.has_input(8):
        return _requantized(node, acc, multiplier, _scalar(node, node.input(8), "y_zero_point"))
    return op.multiply(op.cast(acc, "float32"), node.expr(multiplier))  # float output


def _tensor_parameters(node: NodeContext, first: int, data: Value) -> tuple[Expr, Expr]:
    """(scale, zero point) at inputs ``first``, ``first + 1``, per-tensor (a missing zero
    point is 0 of the data's dtype)."""
    scale = _scalar(node, _float32(node, _required(node, first, f"the scale (input {first})")), "the scale")
    zero_point = node.input(first + 1)
    zero_point = np.zeros((), node.dtype(data)) if zero_point is None else _scalar(node, zero_point,
                                                                                     "the zero point")
    return node.expr(scale), node.expr(zero_point)


def _qlinear_binary(build):
    def convert(node: NodeContext) -> Expr:
        lhs, rhs = _required(node, 0, "A"), _required(node, 3, "B")
        return build(node.expr(lhs), *_tensor_parameters(node, 1, lhs), node.expr(rhs),
                     *_tensor_parameters(node, 4, rhs), *_tensor_parameters(node, 6, lhs))

    return convert


converter(MICROSOFT + "QLinearAdd")(_qlinear_binary(qnn.add))
converter(MICROSOFT + "QLinearMul")(_qlinear_binary(qnn.mul))


def _through_float(node: NodeContext, function) -> Expr:
    """``quantize(function(dequantize(x)))``: what onnxruntime's lookup table holds."""
    data = _required(node, 0, "X")
    data_scale, data_zero = _tensor_parameters(node, 1, data)
    out_scale, out_zero = _tensor_parameters(node, 3, data)
    real = qnn.dequantize(node.expr(data), data_scale, data_zero, "float32")
    return qnn.quantize(function(real), out_scale, out_zero)


@converter(MICROSOFT + "QLinearSigmoid")
def _qlinear_sigmoid(node: NodeContext) -> Expr:
    # in float64, rounded once to float32: the correctly rounded sigmoid wherever float64's
    # few-ulp error cannot reach a float32 rounding boundary, so the interpreter (NumPy's
    # exp) and compiled code (libm's) agree
    return _through_float(node, lambda x: op.cast(op.sigmoid(op.cast(x, "float64")), "float32"))


@converter(MICROSOFT + "QLinearLeakyRelu")
def _qlinear_leaky_relu(node: NodeContext) -> Expr:
    alpha = float(np.float32(node.attr("alpha", 0.01)))
    return _through_float(node, lambda x: extra.unary("nn.leaky_relu", x, alpha=alpha))


@converter(MICROSOFT + "QLinearGlobalAveragePool")
def _qlinear_global_average_pool(node: NodeContext) -> Expr:
    data = _required(node, 0, "X")
    shape = tuple(node.shape(data))
    if len(shape) < 3:
        raise node.fail(f"the input must have rank >= 3, got shape {shape}")
    spatial = list(range(1, len(shape) - 1)) if node.attr("channels_last", 0) else list(range(2, len(shape)))
    size = int(np.prod([shape[a] for a in spatial], dtype=np.int64))
    data_scale, data_zero = _tensor_parameters(node, 1, data)
    out_scale, out_zero = _tensor_parameters(node, 3, data)
    total = op.sum(op.cast(node.expr(data), "int32"), axis=spatial, keepdims=True)
    # the int32 sum minus zero_point * size (MLAS's bias), then requantized
    acc = op.subtract(total, op.multiply(op.cast(data_zero, "int32"), np.int32(size)))
    multiplier = op.divide(data_scale, op.multiply(out_scale, np.float32(size)))
    return qnn.requantize(acc, multiplier, out_zero)


@converter(MICROSOFT + "QLinearConcat")
def _qlinear_concat(node: NodeContext) -> Expr:
    if len(node.inputs) < 5 or (len(node.inputs) - 2) % 3:
        raise node.fail("expects Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input")
    first = _required(node, 2, "X")
    out_scale, out_zero = _tensor_parameters(node, 0, first)
    fields = []
    for start in range(2, len(node.inputs), 3):
        data = _required(node, start, "X")
        scale, zero_point = node.input(start + 1), node.input(start + 2)
        same = all(isinstance(v, np.ndarray) for v in (scale, zero_point, node.input(0), node.input(1))) and (
            np.array_equal(scale, node.input(0)) and np.array_equal(zero_point, node.input(1)))
        if same:  # onnxruntime copies an input already in the output's quantization
            fields.append(node.expr(data))
            continue
        data_scale, data_zero = _tensor_parameters(node, start + 1, data)
        real = qnn.dequantize(node.expr(data), data_scale, data_zero, "float32")
        fields.append(qnn.quantize(real, out_scale, out_zero))
    return op.concatenate(fields, axis=int(node.attr("axis")))


@converter(MICROSOFT + "MatMulNBits")
def _matmul_nbits(node: NodeContext) -> Expr:
    """Weight-only quantized MatMul: the codes stay codes (``qnn.matmul_nbits``); zero
    points are unpacked to one uint8 per block (absent: the middle code, 2^(bits-1))."""
    data = _required(node, 0, "A")
    k, n = int(node.attr("K")), int(node.attr("N"))
    bits, block_size = int(node.attr("bits", 4)), int(node.attr("block_size"))
    if bits not in matmul_nbits.BITS:
        supported = " and ".join(map(str, matmul_nbits.BITS))
        raise node.fail(f"{bits}-bit weights are not supported (only {supported})")
    if node.dtype(data) != "float32":
        raise node.fail(f"A must be float32, got {node.dtype(data)}")
    if tuple(node.shape(data))[-1:] != (k,):
        raise node.fail(f"A's last dimension must be K={k}, got shape {tuple(node.shape(data))}")
    if node.input(4) is not None:
        raise node.fail("g_idx (act-order weights) is not supported")
    blocks = -(-k // block_size)
    codes, scales = _required(node, 1, "B"), _required(node, 2, "scales")
    zero_points = node.input(3)
    for value, what in ((codes, "B"), (scales, "scales"), (zero_points, "zero_points")):
        if value is not None and not isinstance(value, np.ndarray):
            raise node.fail(f"{what} must be an initializer (a weight known at import)")
    blob = matmul_nbits.blob_bytes(block_size, bits)
    if codes.dtype != np.uint8 or codes.size != n * blocks * blob:
        raise node.fail(f"B must be uint8 of shape ({n}, {blocks}, {blob}), got {codes.dtype} of shape "
                        f"{codes.shape}")
    if scales.dtype != np.float32 or scales.size != n * blocks:
        raise node.fail(f"scales must be float32 with {n}x{blocks} elements, got {scales.dtype} of shape "
                        f"{scales.shape}")
    if zero_points is None:
        zeros = np.full((n, blocks), 1 << (bits - 1), np.uint8)
    elif zero_points.dtype == np.uint8 and zero_points.size == n * -(-blocks * bits // 8):
        per_row = zero_points.reshape(n, -1)
        unpacked = np.stack([per_row & 15, per_row >> 4], -1).reshape(n, -1) if bits == 4 else per_row
        zeros = unpacked[:, :blocks]
    else:
        raise node.fail(f"zero_points must be packed uint8 codes ({n} rows of {blocks} {bits}-bit codes), "
                        f"got {zero_points.dtype} of shape {zero_points.shape}")
    codes, scales = codes.reshape(n, blocks, blob), scales.reshape(n, blocks)
    zeros = np.ascontiguousarray(zeros)
    if matmul_nbits.supported_layout(bits, block_size):
        result = matmul_nbits.matmul_nbits(node.expr(data), node.expr(codes), node.expr(scales),
                                           node.expr(zeros), bits, block_size)
    else:  # blocks the kernel does not read (16 codes of 4 bits): a float weight
        weight = matmul_nbits.dequantized_weight(codes, scales, zeros, bits, block_size, k)
        result = op.matmul(node.expr(data), node.expr(np.ascontiguousarray(weight.T)))
    bias = node.input(5)
    return result if bias is None else op.add(result, node.expr(_float32(node, bias)))

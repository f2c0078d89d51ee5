"""Neural-network ONNX ops: convolutions, pooling, normalizations, Gemm/MatMul, softmax.

1-D convolutions and pools run as 2-D ones over an inserted unit height, which is exact.
"""

from __future__ import annotations

import math

import numpy as np

from passinfra.frontend.onnx_ops.context import NodeContext
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.ir import op
from passinfra.ir.expr import Expr, TupleGetItem
from passinfra.ir.op import extra


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _window_padding(node: NodeContext, in_sizes, kernel, strides, dilations) -> tuple[list[int], list[int]]:
    """(begin, end) padding per spatial axis from ``pads`` or ``auto_pad``."""
    auto_pad = _text(node.attr("auto_pad", "NOTSET"))
    rank = len(in_sizes)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for size, k, s, d in zip(in_sizes, kernel, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, large = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else large)
            end.append(large if auto_pad == "SAME_UPPER" else small)
        return begin, end
    if auto_pad == "VALID":
        return [0] * rank, [0] * rank
    if auto_pad != "NOTSET":
        raise node.fail(f"unknown auto_pad {auto_pad!r}")
    pads = list(node.attr("pads", [0] * (2 * rank)))
    return pads[:rank], pads[rank:]


def _to_2d(node: NodeContext, data: Expr, shape) -> tuple[Expr, bool]:
    """N, C, L data as N, C, 1, L (1-D windows as 2-D ones); other ranks must be 4."""
    if len(shape) == 3:
        return op.reshape(data, (shape[0], shape[1], 1, shape[2])), True
    if len(shape) != 4:
        raise node.fail(f"only 1-D and 2-D windows are supported, got data of shape {tuple(shape)}")
    return data, False


def _as_pair(values, lifted: bool, fill: int) -> tuple[int, int]:
    return (fill, values[0]) if lifted else (values[0], values[1])


def _from_2d(result: Expr, lifted: bool, node: NodeContext) -> Expr:
    if not lifted:
        return result
    return op.squeeze(result, axis=[2])


@converter("Conv")
def _conv(node: NodeContext) -> Expr:
    data, weight = node.input(0), node.input(1)
    shape, wshape = node.shape(data), node.shape(weight)
    kernel = list(node.attr("kernel_shape", wshape[2:]))
    rank = len(kernel)
    strides = list(node.attr("strides", [1] * rank))
    dilations = list(node.attr("dilations", [1] * rank))
    begin, end = _window_padding(node, shape[2:], kernel, strides, dilations)
    data2d, lifted = _to_2d(node, node.expr(data), shape)
    weight2d = node.expr(weight)
    if lifted:
        weight2d = op.reshape(weight2d, (wshape[0], wshape[1], 1, wshape[2]))
    top, bottom = _as_pair(begin, lifted, 0), _as_pair(end, lifted, 0)
    result = op.nn.conv2d(
        data2d,
        weight2d,
        strides=_as_pair(strides, lifted, 1),
        padding=(top[0], top[1], bottom[0], bottom[1]),
        dilation=_as_pair(dilations, lifted, 1),
        groups=node.attr("group", 1),
    )
    if node.has_input(2):
        result = op.nn.bias_add(result, node.arg(2), axis=1)
    return _from_2d(result, lifted, node)


@converter("ConvTranspose")
def _conv_transpose(node: NodeContext) -> Expr:
    data, weight = node.input(0), node.input(1)
    shape, wshape = node.shape(data), node.shape(weight)
    if len(shape) != 4:
        raise node.fail(f"only 2-D transposed convolutions are supported, got data of shape {tuple(shape)}")
    kernel = list(node.attr("kernel_shape", wshape[2:]))
    strides = list(node.attr("strides", [1, 1]))
    dilations = list(node.attr("dilations", [1, 1]))
    output_padding = list(node.attr("output_padding", [0, 0]))
    groups = node.attr("group", 1)
    full = [
        s * (i - 1) + op_ + (k - 1) * d + 1
        for i, k, s, d, op_ in zip(shape[2:], kernel, strides, dilations, output_padding)
    ]
    auto_pad = _text(node.attr("auto_pad", "NOTSET"))
    if "output_shape" in node.attrs or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        wanted = list(node.attr("output_shape", [i * s for i, s in zip(shape[2:], strides)]))[-2:]
        totals = [f - w for f, w in zip(full, wanted)]
        # an output_shape beyond the full output is reached by extra output padding
        output_padding = [p + max(0, -t) for p, t in zip(output_padding, totals)]
        totals = [max(0, t) for t in totals]
        # ONNX: SAME_UPPER (and an explicit output_shape) put the larger half at the end
        if auto_pad == "SAME_LOWER":
            begin, end = [t - t // 2 for t in totals], [t // 2 for t in totals]
        else:
            begin, end = [t // 2 for t in totals], [t - t // 2 for t in totals]
    else:
        pads = list(node.attr("pads", [0, 0, 0, 0]))
        begin, end = pads[:2], pads[2:]
    result = extra.conv2d_transpose(
        node.expr(data),
        node.expr(weight),
        strides=strides,
        padding=(begin[0], begin[1], end[0], end[1]),
        output_padding=output_padding,
        dilation=dilations,
        groups=groups,
    )
    if node.has_input(2):
        result = op.nn.bias_add(result, node.arg(2), axis=1)
    return result


def _pool(node: NodeContext, kind: str) -> Expr:
    if node.num_outputs > 1:
        raise node.fail("the Indices output of MaxPool is not supported")
    data = node.input(0)
    shape = node.shape(data)
    kernel = list(node.attr("kernel_shape"))
    rank = len(kernel)
    strides = list(node.attr("strides", [1] * rank))
    dilations = list(node.attr("dilations", [1] * rank))
    begin, end = _window_padding(node, shape[2:], kernel, strides, dilations)
    if node.attr("ceil_mode", 0):
        # grow the end padding so the last partial window is kept (and starts inside)
        for axis, (size, k, s, d) in enumerate(zip(shape[2:], kernel, strides, dilations)):
            span = (k - 1) * d + 1
            out = -(-(size + begin[axis] + end[axis] - span) // s) + 1
            if (out - 1) * s >= size + begin[axis]:
                out -= 1
            end[axis] = max(end[axis], (out - 1) * s + span - size - begin[axis])
    data2d, lifted = _to_2d(node, node.expr(data), shape)
    top, bottom = _as_pair(begin, lifted, 0), _as_pair(end, lifted, 0)
    padding = (top[0], top[1], bottom[0], bottom[1])
    window, steps, dilation = (
        _as_pair(kernel, lifted, 1),
        _as_pair(strides, lifted, 1),
        _as_pair(dilations, lifted, 1),
    )
    if kind == "max":
        if dilation != (1, 1):
            result = extra.max_pool2d_ext(data2d, window, steps, padding, dilation)
        else:
            result = op.nn.max_pool2d(data2d, window, steps, padding)
    else:
        if dilation != (1, 1):
            raise node.fail("dilated average pooling is not supported")
        result = op.nn.avg_pool2d(
            data2d, window, steps, padding, count_include_pad=bool(node.attr("count_include_pad", 0))
        )
    return _from_2d(result, lifted, node)


converter("MaxPool")(lambda node: _pool(node, "max"))
converter("AveragePool")(lambda node: _pool(node, "avg"))


@converter("GlobalAveragePool")
def _global_avg_pool(node: NodeContext) -> Expr:
    data = node.arg(0)
    ndim = len(node.shape(node.input(0)))
    if ndim == 4:
        return op.nn.global_avg_pool2d(data)
    return op.mean(data, axis=list(range(2, ndim)), keepdims=True)


@converter("GlobalMaxPool")
def _global_max_pool(node: NodeContext) -> Expr:
    ndim = len(node.shape(node.input(0)))
    return op.max(node.arg(0), axis=list(range(2, ndim)), keepdims=True)


@converter("BatchNormalization")
def _batch_norm(node: NodeContext) -> Expr:
    if node.attr("training_mode", 0) or node.num_outputs > 1:
        raise node.fail("training-mode BatchNormalization (running statistics outputs) is not supported")
    result = op.nn.batch_norm(*(node.arg(i) for i in range(5)), axis=1, epsilon=node.attr("epsilon", 1e-5))
    return TupleGetItem(result, 0)


def _normalize_over(node: NodeContext, data: Expr, axes: list[int], epsilon: float, dtype: str):
    """(x - mean) / sqrt(var + eps), with the mean and 1/std, reducing over ``axes``."""
    mean = op.mean(data, axis=axes, keepdims=True)
    centered = op.subtract(data, mean)
    variance = op.mean(op.multiply(centered, centered), axis=axes, keepdims=True)
    inv_std = op.divide(
        node.expr(np.asarray(1, dtype)), op.sqrt(op.add(variance, node.expr(np.asarray(epsilon, dtype))))
    )
    return op.multiply(centered, inv_std), mean, inv_std


@converter("InstanceNormalization")
def _instance_norm(node: NodeContext) -> Expr:
    data = node.input(0)
    shape, dtype = node.shape(data), node.dtype(data)
    per_channel = (shape[1],) + (1,) * (len(shape) - 2)
    normalized, _, _ = _normalize_over(
        node, node.expr(data), list(range(2, len(shape))), node.attr("epsilon", 1e-5), dtype
    )
    scale = op.reshape(node.arg(1), per_channel)
    bias = op.reshape(node.arg(2), per_channel)
    return op.add(op.multiply(normalized, scale), bias)


@converter("LayerNormalization", since=17)
def _layer_norm(node: NodeContext):
    data = node.input(0)
    shape, dtype = node.shape(data), node.dtype(data)
    axis = node.attr("axis", -1) % len(shape)
    epsilon = node.attr("epsilon", 1e-5)
    simple = axis == len(shape) - 1 and node.has_input(2) and node.num_outputs == 1
    if simple and len(node.shape(node.input(1))) == 1 and len(node.shape(node.input(2))) == 1:
        return op.nn.layer_norm(node.expr(data), node.arg(1), node.arg(2), axis=-1, epsilon=epsilon)
    normalized, mean, inv_std = _normalize_over(
        node, node.expr(data), list(range(axis, len(shape))), epsilon, dtype
    )
    result = op.multiply(normalized, node.arg(1))
    if node.has_input(2):
        result = op.add(result, node.arg(2))
    return [result, mean, inv_std][: node.num_outputs]


@converter("LRN")
def _lrn(node: NodeContext) -> Expr:
    return extra.lrn(
        node.arg(0),
        node.attr("size"),
        node.attr("alpha", 1e-4),
        node.attr("beta", 0.75),
        node.attr("bias", 1.0),
    )


@converter("Gemm")
def _gemm(node: NodeContext) -> Expr:
    a, b = node.arg(0), node.arg(1)
    dtype = node.dtype(node.input(0))
    if node.attr("transA", 0):
        a = op.transpose(a, (1, 0))
    # dense computes a @ b.T, the common transB=1 layout of fully connected layers
    result = op.nn.dense(a, b) if node.attr("transB", 0) else op.matmul(a, b)
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    if alpha != 1.0:
        result = op.multiply(result, node.expr(np.asarray(alpha, dtype)))
    if node.has_input(2):
        bias = node.arg(2)
        if beta != 1.0:
            bias = op.multiply(bias, node.expr(np.asarray(beta, dtype)))
        result = op.add(result, bias)
    return result


@converter("MatMul")
def _matmul(node: NodeContext) -> Expr:
    return op.matmul(node.arg(0), node.arg(1))


def _flattened_2d(node: NodeContext, make) -> Expr:
    """Softmax-family before opset 13: the input is coerced to 2-D at ``axis``."""
    data = node.input(0)
    shape = node.shape(data)
    axis = node.attr("axis", 1) % max(len(shape), 1)
    outer = int(np.prod(shape[:axis]))
    flat = op.reshape(node.expr(data), (outer, int(math.prod(shape[axis:]))))
    return op.reshape(make(flat, -1), shape)


def _log_softmax(data: Expr, axis: int) -> Expr:
    # x - max - log(sum(exp(x - max))): no overflow, no log(0) for very negative x
    shifted = op.subtract(data, op.max(data, axis=axis, keepdims=True))
    return op.subtract(shifted, op.log(op.sum(op.exp(shifted), axis=axis, keepdims=True)))


def _softmax_family(make):
    def before_13(node: NodeContext) -> Expr:
        return _flattened_2d(node, make)

    def since_13(node: NodeContext) -> Expr:
        return make(node.arg(0), node.attr("axis", -1))

    return before_13, since_13


for _op_type, _make in (("Softmax", lambda x, axis: op.nn.softmax(x, axis)), ("LogSoftmax", _log_softmax)):
    _old, _new = _softmax_family(_make)
    converter(_op_type, since=1)(_old)
    converter(_op_type, since=13)(_new)

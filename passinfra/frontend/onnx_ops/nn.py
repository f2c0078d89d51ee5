"""Neural-network ONNX ops: convolutions, pooling, normalizations, Gemm/MatMul, softmax.

Windows of 1, 2 or 3 spatial axes. 1-D convolutions and pools run as 2-D ones over an
inserted unit height, and the windows a 2-D op cannot express as 3-D ones over unit
axes; both are exact.
"""

from __future__ import annotations

import math

import numpy as np

from passinfra.frontend.onnx_ops.context import NodeContext
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.ir import op
from passinfra.ir.expr import Expr, TupleGetItem
from passinfra.ir.op import _window, extra, lp_pool, max_pool_indices


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


def _lift(data: Expr, shape, rank: int) -> Expr:
    """N, C, *spatial data with unit spatial axes inserted in front up to ``rank`` of them
    (a window of size 1, stride 1, no padding along them is the identity: exact)."""
    added = rank - (len(shape) - 2)
    if added == 0:
        return data
    return op.reshape(data, (*shape[:2], *(1,) * added, *shape[2:]))


def _unlift(result: Expr, added: int) -> Expr:
    return op.squeeze(result, axis=list(range(2, 2 + added))) if added else result


def _filled(values, added: int, fill: int) -> tuple[int, ...]:
    """Per-axis values for the lifted axes (``fill``) followed by the given ones."""
    return (fill,) * added + tuple(int(v) for v in values)


def _spatial_rank(node: NodeContext, shape, kernel_rank: int | None = None) -> int:
    rank = len(shape) - 2
    if rank not in (1, 2, 3) or (kernel_rank is not None and kernel_rank != rank):
        raise node.fail(f"only 1-D, 2-D and 3-D windows are supported, got data of shape {tuple(shape)}")
    return rank


@converter("Conv")
def _conv(node: NodeContext) -> Expr:
    data, weight = node.input(0), node.input(1)
    shape, wshape = node.shape(data), node.shape(weight)
    kernel = list(node.attr("kernel_shape", wshape[2:]))
    rank = _spatial_rank(node, shape, len(kernel))
    strides = list(node.attr("strides", [1] * rank))
    dilations = list(node.attr("dilations", [1] * rank))
    begin, end = _window_padding(node, shape[2:], kernel, strides, dilations)
    groups = node.attr("group", 1)
    if rank == 3:
        result = op.nn.conv3d(node.expr(data), node.expr(weight), strides, (*begin, *end), dilations, groups)
    else:  # 1-D runs as 2-D over a unit height
        added = 2 - rank
        result = op.nn.conv2d(
            _lift(node.expr(data), shape, 2),
            _lift(node.expr(weight), wshape, 2),
            strides=_filled(strides, added, 1),
            padding=_filled(begin, added, 0) + _filled(end, added, 0),
            dilation=_filled(dilations, added, 1),
            groups=groups,
        )
    if node.has_input(2):
        result = op.nn.bias_add(result, node.arg(2), axis=1)
    return _unlift(result, 2 - rank if rank < 3 else 0)


def _transpose_padding(node: NodeContext, shape, kernel, strides, dilations, output_padding):
    """(begin, end, output_padding) of a ConvTranspose from pads, auto_pad or output_shape."""
    rank = len(kernel)
    full = [
        s * (i - 1) + op_ + (k - 1) * d + 1
        for i, k, s, d, op_ in zip(shape[2:], kernel, strides, dilations, output_padding)
    ]
    auto_pad = _text(node.attr("auto_pad", "NOTSET"))
    if "output_shape" in node.attrs:
        wanted = list(node.attr("output_shape"))[-rank:]
        totals = [f - w for f, w in zip(full, wanted)]
        # an output_shape beyond the full output is reached by extra output padding
        output_padding = [p + max(0, -t) for p, t in zip(output_padding, totals)]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        # the target is input * stride; a full output shorter than that stays as it is
        # (onnxruntime)
        totals = [f - i * s for f, i, s in zip(full, shape[2:], strides)]
    else:
        pads = list(node.attr("pads", [0] * (2 * rank)))
        return pads[:rank], pads[rank:], output_padding
    totals = [max(0, t) for t in totals]
    # the spec: SAME_UPPER crops the larger half from the end, anything else from the start
    if auto_pad == "SAME_UPPER":
        return [t // 2 for t in totals], [t - t // 2 for t in totals], output_padding
    return [t - t // 2 for t in totals], [t // 2 for t in totals], output_padding


@converter("ConvTranspose")
def _conv_transpose(node: NodeContext) -> Expr:
    data, weight = node.input(0), node.input(1)
    shape, wshape = node.shape(data), node.shape(weight)
    kernel = list(node.attr("kernel_shape", wshape[2:]))
    rank = _spatial_rank(node, shape, len(kernel))
    strides = list(node.attr("strides", [1] * rank))
    dilations = list(node.attr("dilations", [1] * rank))
    output_padding = list(node.attr("output_padding", [0] * rank))
    begin, end, output_padding = _transpose_padding(node, shape, kernel, strides, dilations, output_padding)
    groups = node.attr("group", 1)
    if rank == 3:
        result = op.nn.conv3d_transpose(node.expr(data), node.expr(weight), strides, (*begin, *end),
                                        output_padding, dilations, groups)
    else:  # 1-D runs as 2-D over a unit height
        added = 2 - rank
        result = extra.conv2d_transpose(
            _lift(node.expr(data), shape, 2),
            _lift(node.expr(weight), wshape, 2),
            strides=_filled(strides, added, 1),
            padding=_filled(begin, added, 0) + _filled(end, added, 0),
            output_padding=_filled(output_padding, added, 0),
            dilation=_filled(dilations, added, 1),
            groups=groups,
        )
    if node.has_input(2):
        result = op.nn.bias_add(result, node.arg(2), axis=1)
    return _unlift(result, 2 - rank if rank < 3 else 0)


def _pool_window(node: NodeContext):
    """A pooling node's (data, shape, kernel, strides, dilations, begin pads, end pads)."""
    data = node.input(0)
    shape = node.shape(data)
    kernel = list(node.attr("kernel_shape"))
    rank = _spatial_rank(node, shape, len(kernel))
    strides = list(node.attr("strides", [1] * rank))
    dilations = list(node.attr("dilations", [1] * rank))
    begin, end = _window_padding(node, shape[2:], kernel, strides, dilations)
    return data, shape, kernel, strides, dilations, begin, end


def _pool(node: NodeContext, kind: str) -> Expr:
    """MaxPool / AveragePool. 1-D and 2-D windows use the 2-D pools, ceil mode as extra
    end padding (exact for a max, and for an average that counts only real cells);
    3-D windows, and the 1-D/2-D averages those cannot express (dilated, or a ceil-mode
    window past the padding whose padding counts), use the 3-D pools over unit axes."""
    data, shape, kernel, strides, dilations, begin, end = _pool_window(node)
    rank = len(kernel)
    ceil_mode = bool(node.attr("ceil_mode", 0))
    include_pad = bool(node.attr("count_include_pad", 0))
    overhang = [0] * rank
    if ceil_mode:
        sizes = zip(shape[2:], kernel, strides, dilations, begin, end)
        overhang = [_window.overhang(n, k, s, d, b, e, _window.window_out_size(n, k, s, d, b, e, True))
                    for n, k, s, d, b, e in sizes]
    undilated = all(d == 1 for d in dilations)
    two_d = rank < 3 and (kind == "max" or (undilated and not (include_pad and any(overhang))))
    if not two_d:
        added = 3 - rank
        make = op.nn.max_pool3d if kind == "max" else op.nn.avg_pool3d
        extra_attrs = {} if kind == "max" else {"count_include_pad": include_pad}
        result = make(_lift(node.expr(data), shape, 3), _filled(kernel, added, 1), _filled(strides, added, 1),
                      _filled(begin, added, 0) + _filled(end, added, 0), _filled(dilations, added, 1),
                      ceil_mode, **extra_attrs)
        return _unlift(result, added)
    added = 2 - rank
    end = [e + x for e, x in zip(end, overhang)]  # keep the ceil-mode windows
    data2d = _lift(node.expr(data), shape, 2)
    window, steps = _filled(kernel, added, 1), _filled(strides, added, 1)
    dilation = _filled(dilations, added, 1)
    padding = _filled(begin, added, 0) + _filled(end, added, 0)
    if kind == "avg":
        result = op.nn.avg_pool2d(data2d, window, steps, padding, count_include_pad=include_pad)
    elif dilation != (1, 1):
        result = extra.max_pool2d_ext(data2d, window, steps, padding, dilation)
    else:
        result = op.nn.max_pool2d(data2d, window, steps, padding)
    return _unlift(result, added)


def _max_pool_indices(node: NodeContext) -> Expr:
    """MaxPool's Indices output: 1-D windows as 2-D ones over a unit height (the flat
    positions do not change), ceil mode and storage order as attributes of the op."""
    data, shape, kernel, strides, dilations, begin, end = _pool_window(node)
    storage_order = node.attr("storage_order", 0)
    if storage_order not in (0, 1):
        raise node.fail(f"storage_order must be 0 or 1, got {storage_order}")
    added = max(2, len(kernel)) - len(kernel)
    result = max_pool_indices.max_pool_indices(
        _lift(node.expr(data), shape, len(kernel) + added), _filled(kernel, added, 1),
        _filled(strides, added, 1),
        _filled(begin, added, 0) + _filled(end, added, 0), _filled(dilations, added, 1),
        bool(node.attr("ceil_mode", 0)), storage_order)
    return _unlift(result, added)


@converter("MaxPool")
def _max_pool(node: NodeContext) -> Expr | list[Expr]:
    values = _pool(node, "max")
    if node.num_outputs < 2 or not node.node.output[1]:
        return values
    # the indices only when the graph asks for them; the values stay on the max-pool path
    return [values, _max_pool_indices(node)]


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
def _batch_norm(node: NodeContext) -> Expr | list[Expr]:
    if node.attr("training_mode", 0) and node.opset >= 14:
        return _batch_norm_training(node)
    if node.num_outputs > 1:
        raise node.fail("the running statistics outputs of BatchNormalization need training_mode=1 "
                        "(opset 14 on)")
    result = op.nn.batch_norm(*(node.arg(i) for i in range(5)), axis=1, epsilon=node.attr("epsilon", 1e-5))
    return TupleGetItem(result, 0)


def _batch_norm_training(node: NodeContext) -> list[Expr]:
    """training_mode=1: normalize with the batch's own mean and biased variance over every
    axis but the channels, and update the running statistics,
    ``running = input * momentum + current * (1 - momentum)`` (the ONNX spec; onnxruntime
    agrees, the variance biased in both the normalization and the update)."""
    data = node.input(0)
    shape, dtype = node.shape(data), node.dtype(data)
    if len(shape) < 2:
        raise node.fail(f"the input needs a channel axis (N, C, ...), got shape {tuple(shape)}")
    x = node.expr(data)
    axes = [0, *range(2, len(shape))]
    per_channel = (1, shape[1]) + (1,) * (len(shape) - 2)
    mean = op.mean(x, axis=axes)
    centered = op.subtract(x, op.reshape(mean, per_channel))
    variance = op.mean(op.multiply(centered, centered), axis=axes)
    normalized = op.nn.batch_norm(x, node.arg(1), node.arg(2), mean, variance, axis=1,
                                  epsilon=node.attr("epsilon", 1e-5))
    outputs = [TupleGetItem(normalized, 0)]
    momentum = node.attr("momentum", 0.9)
    for index, current in ((3, mean), (4, variance)):
        running = node.arg(index)
        stats_dtype = node.dtype(node.input(index))
        if stats_dtype != dtype:  # opset 15 lets the statistics have a type of their own
            current = op.cast(current, stats_dtype)
        keep = node.expr(np.asarray(momentum, stats_dtype))
        take = node.expr(np.asarray(1 - momentum, stats_dtype))
        outputs.append(op.add(op.multiply(running, keep), op.multiply(current, take)))
    return outputs[: node.num_outputs]


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


# --------------------------------------------------------------------------- Lp pooling, Lp normalization


@converter("LpPool")
def _lp_pool(node: NodeContext) -> Expr:
    """LpPool: 2-D and 3-D windows as they are, 1-D ones over a unit height (exact)."""
    data, shape, kernel, strides, dilations, begin, end = _pool_window(node)
    rank = len(kernel)
    p = node.attr("p", 2)
    if p != int(p) or p < 1:  # opset 1 had a float p; the op is only defined for whole p >= 1
        raise node.fail(f"p must be a whole number >= 1, got {p!r}")
    lifted = max(rank, 2)
    added = lifted - rank
    result = lp_pool.lp_pool(_lift(node.expr(data), shape, lifted), lifted, int(p), _filled(kernel, added, 1),
                             _filled(strides, added, 1), _filled(begin, added, 0) + _filled(end, added, 0),
                             _filled(dilations, added, 1), bool(node.attr("ceil_mode", 0)))
    return _unlift(result, added)


@converter("LpNormalization")
def _lp_normalization(node: NodeContext) -> Expr:
    """x / ||x||_p along ``axis`` (p 1 or 2); where the norm is 0 the output is 0, as in
    onnxruntime and the ONNX reference."""
    data = node.input(0)
    x, dtype = node.expr(data), node.dtype(data)
    axis = node.attr("axis", -1)
    p = node.attr("p", 2)
    if p not in (1, 2):
        raise node.fail(f"p must be 1 or 2, got {p!r}")
    if not -len(node.shape(data)) <= axis < len(node.shape(data)):
        raise node.fail(f"axis {axis} is out of range for an input of rank {len(node.shape(data))}")
    if p == 1:
        norm = op.sum(op.abs(x), axis=axis, keepdims=True)
    else:
        norm = op.sqrt(op.sum(op.multiply(x, x), axis=axis, keepdims=True))
    zero = node.expr(np.zeros((), dtype))
    return op.where(op.equal(norm, zero), zero, op.divide(x, norm))

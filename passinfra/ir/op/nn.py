"""Neural-network ops (``op.nn.*``, registered as ``"nn.<name>"``), Relay conventions.

Layouts: convolution and pooling default to NCHW data and OIHW weights, as the design
says; ``data_layout="NHWC"`` / ``kernel_layout="HWIO"`` (and ``layout="NHWC"`` for the
pools) are accepted too, so a layout pass has somewhere to go. The implementation
transposes to NCHW/OIHW, computes there, and transposes back.

Inference semantics throughout: ``batch_norm`` normalizes with the moving statistics
and returns them unchanged as its 2nd and 3rd fields; ``dropout`` is the identity.
``avg_pool2d`` excludes padding from the divisor unless ``count_include_pad=True``
(Relay's default is False).

The 3-D window ops (``conv3d``, ``conv3d_transpose``, ``max_pool3d``, ``avg_pool3d``) are
defined in :mod:`passinfra.ir.op.window` and re-exported here; they and the 2-D ops
share the N-d kernels of :mod:`passinfra.ir.op._window`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRError, IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op import _impl, _window
from passinfra.ir.op._rel import (
    FLOAT_DTYPES,
    NUMERIC_DTYPES,
    REQUIRED,
    expect_dtype,
    expect_ndim,
    expect_same_dtype,
    expect_static_dims,
    expect_tensor,
    expect_vector,
    int_tuple,
    normalize_axis,
    pad_tuple_2d,
    positive_ints,
    register_tensor_op,
    same_dim,
    type_text,
    window_out_size,
)
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.op.window import avg_pool3d, conv3d, conv3d_transpose, max_pool3d
from passinfra.ir.types import TensorType, TupleType, Type

__all__ = [
    "conv2d", "dense", "bias_add", "relu", "softmax", "batch_norm", "dropout",
    "max_pool2d", "avg_pool2d", "global_avg_pool2d", "layer_norm", "gelu",
    "conv3d", "conv3d_transpose", "max_pool3d", "avg_pool3d",
]

_DATA_LAYOUTS = ("NCHW", "NHWC")
_KERNEL_LAYOUTS = ("OIHW", "HWIO")
_CONV2D_DEFAULTS = {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
                    "data_layout": "NCHW", "kernel_layout": "OIHW"}
_POOL_DEFAULTS = {"pool_size": REQUIRED, "strides": (1, 1), "padding": (0, 0, 0, 0), "layout": "NCHW"}


def _to_canonical(layout: str, canonical: str) -> tuple[int, ...]:
    """The axis permutation that turns ``layout`` into ``canonical`` (e.g. NHWC -> NCHW)."""
    return tuple(layout.index(c) for c in canonical)


def _from_canonical(layout: str, canonical: str) -> tuple[int, ...]:
    return tuple(canonical.index(c) for c in layout)


def _permuted(shape: Sequence[int], perm: Sequence[int]) -> tuple[int, ...]:
    return tuple(shape[i] for i in perm)


def _check_layout(layout: str, allowed: Sequence[str], what: str) -> str:
    if layout not in allowed:
        raise IRError(f"{what} {layout!r} is not supported; use one of {', '.join(allowed)}")
    return layout


def _window_attrs(strides: Any, padding: Any, dilation: Any = (1, 1)) -> dict[str, Any]:
    return {
        "strides": positive_ints(int_tuple(strides, 2, "strides"), "strides"),
        "padding": pad_tuple_2d(padding),
        "dilation": positive_ints(int_tuple(dilation, 2, "dilation"), "dilation"),
    }


# --------------------------------------------------------------------------- conv2d, dense


def _static_but_batch(data: TensorType, layout: str, what: str) -> None:
    """Windowed ops take a symbolic batch (N) only: their output sizes come from the
    spatial extents, and their kernels from the channels."""
    if not data.is_static:
        expect_static_dims(data, [layout.index(c) for c in "CHW"], what)


def _conv2d_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data_layout, kernel_layout = attrs["data_layout"], attrs["kernel_layout"]
    data = expect_tensor(arg_types[0], "the data")
    weight = expect_tensor(arg_types[1], "the weight")
    expect_ndim(data, 4, "the data", data_layout)
    expect_ndim(weight, 4, "the weight", kernel_layout)
    expect_same_dtype(data, weight, "the weight", "the data")
    expect_dtype(data, NUMERIC_DTYPES, "the data")
    # a symbolic batch passes through; channels and the window's axes must be static
    _static_but_batch(data, data_layout, "the data")
    expect_static_dims(weight, range(4), "the weight")
    batch, channels, height, width = _permuted(data.shape, _to_canonical(data_layout, "NCHW"))
    out_channels, group_channels, kh, kw = _permuted(weight.shape, _to_canonical(kernel_layout, "OIHW"))
    groups = attrs["groups"]
    if channels % groups or out_channels % groups:
        raise IRTypeError(f"groups={groups} must divide the input channels ({channels}) and the output "
                          f"channels ({out_channels}); data {type_text(data)}, weight {type_text(weight)}")
    if group_channels != channels // groups:
        raise IRTypeError(f"expected the weight to have {channels // groups} input channels "
                          f"(data channels {channels} / groups {groups}), got {type_text(weight)}")
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    top, left, bottom, right = attrs["padding"]
    out_h = window_out_size(height, kh, sh, top, bottom, dh, "height")
    out_w = window_out_size(width, kw, sw, left, right, dw, "width")
    out_shape = _permuted((batch, out_channels, out_h, out_w), _from_canonical(data_layout, "NCHW"))
    return TensorType(out_shape, data.dtype)


def _conv2d_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data_layout = attrs["data_layout"]
    data = np.transpose(args[0], _to_canonical(data_layout, "NCHW"))
    weight = np.transpose(args[1], _to_canonical(attrs["kernel_layout"], "OIHW"))
    out = _window.conv_nd(data, weight, attrs["strides"], attrs["padding"], attrs["dilation"],
                          attrs["groups"])
    return np.ascontiguousarray(np.transpose(out, _from_canonical(data_layout, "NCHW")))


register_tensor_op(
    "nn.conv2d", attrs=_CONV2D_DEFAULTS, num_inputs=2, type_rel=_conv2d_relation, impl=_conv2d_impl,
    pattern=OpPattern.OUT_EWISE_FUSABLE, doc="2-D convolution (NCHW/OIHW), groups, dilation", symbolic=True,
)


def _dense_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    weight = expect_tensor(arg_types[1], "the weight")
    expect_same_dtype(data, weight, "the weight", "the data")
    expect_dtype(data, NUMERIC_DTYPES, "the data")
    expect_ndim(weight, 2, "the weight", "units, in_features")
    if data.ndim == 0 or not same_dim(data.shape[-1], weight.shape[1]):
        raise IRTypeError(f"expected the data's last dimension to be {weight.shape[1]} (the weight's "
                          f"in_features), got data {type_text(data)}, weight {type_text(weight)}")
    return TensorType(data.shape[:-1] + (weight.shape[0],), data.dtype)


def _dense_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data = np.asarray(args[0])
    return np.matmul(data, np.asarray(args[1]).T).astype(data.dtype, copy=False)


register_tensor_op("nn.dense", attrs={}, num_inputs=2, type_rel=_dense_relation, impl=_dense_impl,
            pattern=OpPattern.OUT_EWISE_FUSABLE, doc="data @ weight.T, weight (units, in_features)",
            symbolic=True)


def conv2d(data: Any, weight: Any, strides: Any = (1, 1), padding: Any = (0, 0), dilation: Any = (1, 1),
           groups: int = 1, data_layout: str = "NCHW", kernel_layout: str = "OIHW") -> Call:
    """2-D convolution. ``padding`` is 1, 2 (vertical, horizontal) or 4 ints (top, left,
    bottom, right); it is stored as 4. ``groups`` = channels gives a depthwise conv."""
    if groups < 1:
        raise IRError(f"conv2d needs groups >= 1, got {groups}")
    return call_op("nn.conv2d", data, weight, **_window_attrs(strides, padding, dilation), groups=int(groups),
                   data_layout=_check_layout(data_layout, _DATA_LAYOUTS, "data_layout"),
                   kernel_layout=_check_layout(kernel_layout, _KERNEL_LAYOUTS, "kernel_layout"))


def dense(data: Any, weight: Any) -> Call:
    """``data @ weight.T`` with ``weight`` of shape (units, in_features)."""
    return call_op("nn.dense", data, weight)


# --------------------------------------------------------------------------- elementwise-ish


def _per_channel_shape(ndim: int, axis: int, length: int) -> tuple[int, ...]:
    """Shape that broadcasts a length-C vector along ``axis`` of an ndim tensor."""
    return tuple(length if i == axis else 1 for i in range(ndim))


def _bias_add_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    axis = normalize_axis(attrs["axis"], data.ndim)
    expect_vector(arg_types[1], data.shape[axis], data.dtype, "the bias")
    return data


def _bias_add_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data, bias = np.asarray(args[0]), np.asarray(args[1])
    axis = normalize_axis(attrs["axis"], data.ndim)
    shifted = data + bias.reshape(_per_channel_shape(data.ndim, axis, bias.size))
    return shifted.astype(data.dtype, copy=False)


register_tensor_op(
    "nn.bias_add", attrs={"axis": 1}, num_inputs=2, type_rel=_bias_add_relation, impl=_bias_add_impl,
    pattern=OpPattern.BROADCAST, doc="add a 1-D bias along axis", symbolic=True,
)


def _same_type_relation(allowed: Sequence[str]) -> Callable:
    def relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
        data = expect_tensor(arg_types[0], "the data")
        expect_dtype(data, allowed, "the data")
        if "axis" in attrs:
            normalize_axis(attrs["axis"], data.ndim)
        return data

    return relation


def _relu_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data = np.asarray(args[0])
    return np.maximum(data, np.zeros((), data.dtype))


def _gelu_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data = np.asarray(args[0])
    wide = data.astype(np.float64)
    return (0.5 * wide * (1.0 + _impl.erf(wide / math.sqrt(2.0)))).astype(data.dtype)


def _softmax_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data = np.asarray(args[0])
    axis = normalize_axis(attrs["axis"], data.ndim)
    # subtracting the max keeps exp from overflowing; the result is unchanged. A row whose
    # max is infinite (a fully masked attention row: all -inf) gives NaN, as ONNX's
    # reference does; NumPy's warning about it would only reach the user as noise
    with np.errstate(invalid="ignore"):
        shifted = np.exp(data - data.max(axis=axis, keepdims=True))
    return (shifted / shifted.sum(axis=axis, keepdims=True)).astype(data.dtype, copy=False)


def _dropout_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    return np.asarray(args[0])  # inference: dropout keeps every element, unscaled


register_tensor_op(
    "nn.relu", attrs={}, num_inputs=1, type_rel=_same_type_relation(NUMERIC_DTYPES), impl=_relu_impl,
    pattern=OpPattern.ELEMWISE, doc="max(x, 0)", symbolic=True,
)
register_tensor_op(
    "nn.gelu", attrs={}, num_inputs=1, type_rel=_same_type_relation(FLOAT_DTYPES), impl=_gelu_impl,
    pattern=OpPattern.ELEMWISE, doc="0.5 * x * (1 + erf(x / sqrt(2)))", symbolic=True,
)
register_tensor_op(
    "nn.softmax", attrs={"axis": -1}, num_inputs=1, type_rel=_same_type_relation(FLOAT_DTYPES),
    impl=_softmax_impl, pattern=OpPattern.OPAQUE, doc="softmax along axis", symbolic=True,
)
register_tensor_op(
    "nn.dropout", attrs={"rate": 0.5}, num_inputs=1, type_rel=_same_type_relation(FLOAT_DTYPES),
    impl=_dropout_impl, pattern=OpPattern.OPAQUE, doc="dropout; the identity at inference", symbolic=True,
)


def bias_add(data: Any, bias: Any, axis: int = 1) -> Call:
    """``data + bias`` with the 1-D ``bias`` laid along ``axis``."""
    return call_op("nn.bias_add", data, bias, axis=int(axis))


def relu(data: Any) -> Call:
    """``max(data, 0)``."""
    return call_op("nn.relu", data)


def gelu(data: Any) -> Call:
    """GELU, erf form: ``0.5 * x * (1 + erf(x / sqrt(2)))`` (float dtypes)."""
    return call_op("nn.gelu", data)


def softmax(data: Any, axis: int = -1) -> Call:
    """Softmax along ``axis`` (float dtypes)."""
    return call_op("nn.softmax", data, axis=int(axis))


def dropout(data: Any, rate: float = 0.5) -> Call:
    """Dropout with ``rate``; a single tensor, the identity at inference."""
    if not 0.0 <= rate < 1.0:
        raise IRError(f"dropout rate must be in [0, 1), got {rate}")
    return call_op("nn.dropout", data, rate=float(rate))


# --------------------------------------------------------------------------- normalization


def _batch_norm_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    expect_dtype(data, FLOAT_DTYPES, "the data")
    channels = data.shape[normalize_axis(attrs["axis"], data.ndim)]
    names = ("gamma", "beta", "moving_mean", "moving_var")
    for name, ty in zip(names, arg_types[1:]):
        expect_vector(ty, channels, data.dtype, name)
    stats = TensorType((channels,), data.dtype)
    return TupleType([data, stats, stats])


def _batch_norm_impl(args: Sequence[Any], attrs: Attrs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    data, gamma, beta, mean, var = (np.asarray(a) for a in args)
    axis = normalize_axis(attrs["axis"], data.ndim)
    shape = _per_channel_shape(data.ndim, axis, mean.size)
    scale = gamma / np.sqrt(var + attrs["epsilon"])
    out = (data - mean.reshape(shape)) * scale.reshape(shape) + beta.reshape(shape)
    return out.astype(data.dtype, copy=False), mean, var


def _layer_norm_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    expect_dtype(data, FLOAT_DTYPES, "the data")
    length = data.shape[normalize_axis(attrs["axis"], data.ndim)]
    expect_vector(arg_types[1], length, data.dtype, "gamma")
    expect_vector(arg_types[2], length, data.dtype, "beta")
    return data


def _layer_norm_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data, gamma, beta = (np.asarray(a) for a in args)
    axis = normalize_axis(attrs["axis"], data.ndim)
    shape = _per_channel_shape(data.ndim, axis, gamma.size)
    mean = data.mean(axis=axis, keepdims=True)
    var = ((data - mean) ** 2).mean(axis=axis, keepdims=True)
    out = (data - mean) / np.sqrt(var + attrs["epsilon"]) * gamma.reshape(shape) + beta.reshape(shape)
    return out.astype(data.dtype, copy=False)


register_tensor_op(
    "nn.batch_norm", attrs={"axis": 1, "epsilon": 1e-5}, num_inputs=5, type_rel=_batch_norm_relation,
    impl=_batch_norm_impl, pattern=OpPattern.OPAQUE, doc="batch norm with moving stats; (out, mean, var)",
    symbolic=True,
)
register_tensor_op(
    "nn.layer_norm", attrs={"axis": -1, "epsilon": 1e-5}, num_inputs=3, type_rel=_layer_norm_relation,
    impl=_layer_norm_impl, pattern=OpPattern.OPAQUE, doc="normalize along axis, then scale and shift",
    symbolic=True,
)


def batch_norm(data: Any, gamma: Any, beta: Any, moving_mean: Any, moving_var: Any, axis: int = 1,
               epsilon: float = 1e-5) -> Call:
    """Batch normalization (inference); a 3-tuple (normalized data, mean, var)."""
    return call_op("nn.batch_norm", data, gamma, beta, moving_mean, moving_var, axis=int(axis),
                   epsilon=float(epsilon))


def layer_norm(data: Any, gamma: Any, beta: Any, axis: int = -1, epsilon: float = 1e-5) -> Call:
    """Layer normalization along ``axis``; ``gamma``/``beta`` have that axis' length."""
    return call_op("nn.layer_norm", data, gamma, beta, axis=int(axis), epsilon=float(epsilon))


# --------------------------------------------------------------------------- pooling


def _pool_relation(allowed: Sequence[str]) -> Callable:
    def relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
        layout = attrs["layout"]
        data = expect_tensor(arg_types[0], "the data")
        expect_ndim(data, 4, "the data", layout)
        expect_dtype(data, allowed, "the data")
        _static_but_batch(data, layout, "the data")
        batch, channels, height, width = _permuted(data.shape, _to_canonical(layout, "NCHW"))
        (ph, pw), (sh, sw) = attrs["pool_size"], attrs["strides"]
        top, left, bottom, right = attrs["padding"]
        out_h = window_out_size(height, ph, sh, top, bottom, 1, "height")
        out_w = window_out_size(width, pw, sw, left, right, 1, "width")
        out_shape = _permuted((batch, channels, out_h, out_w), _from_canonical(layout, "NCHW"))
        return TensorType(out_shape, data.dtype)

    return relation


def _in_nchw(kernel: Callable) -> Callable:
    """Run an NCHW kernel on data of the call's ``layout``."""

    def impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
        layout = attrs["layout"]
        data = np.transpose(args[0], _to_canonical(layout, "NCHW"))
        out = kernel(data, attrs)
        return np.ascontiguousarray(np.transpose(out, _from_canonical(layout, "NCHW")))

    return impl


def _max_pool_kernel(data: np.ndarray, attrs: Attrs) -> np.ndarray:
    return _window.pool_nd(data, "max", attrs["pool_size"], attrs["strides"], (1, 1), attrs["padding"])


def _avg_pool_kernel(data: np.ndarray, attrs: Attrs) -> np.ndarray:
    return _window.pool_nd(data, "avg", attrs["pool_size"], attrs["strides"], (1, 1), attrs["padding"],
                           count_include_pad=attrs["count_include_pad"])


def _global_pool_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    layout = attrs["layout"]
    data = expect_tensor(arg_types[0], "the data")
    expect_ndim(data, 4, "the data", layout)
    expect_dtype(data, FLOAT_DTYPES, "the data")
    return TensorType(tuple(1 if c in "HW" else d for c, d in zip(layout, data.shape)), data.dtype)


def _global_pool_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data = np.asarray(args[0])
    spatial = tuple(i for i, c in enumerate(attrs["layout"]) if c in "HW")
    return data.mean(axis=spatial, keepdims=True).astype(data.dtype, copy=False)


register_tensor_op(
    "nn.max_pool2d", attrs=_POOL_DEFAULTS, num_inputs=1, type_rel=_pool_relation(NUMERIC_DTYPES),
    impl=_in_nchw(_max_pool_kernel), pattern=OpPattern.OUT_EWISE_FUSABLE, doc="2-D max pooling",
    symbolic=True,
)
register_tensor_op(
    "nn.avg_pool2d", attrs={**_POOL_DEFAULTS, "count_include_pad": False}, num_inputs=1,
    type_rel=_pool_relation(FLOAT_DTYPES), impl=_in_nchw(_avg_pool_kernel),
    pattern=OpPattern.OUT_EWISE_FUSABLE, doc="2-D average pooling", symbolic=True,
)
register_tensor_op(
    "nn.global_avg_pool2d", attrs={"layout": "NCHW"}, num_inputs=1, type_rel=_global_pool_relation,
    impl=_global_pool_impl, pattern=OpPattern.OUT_EWISE_FUSABLE, doc="mean over H and W, kept as size-1 axes",
    symbolic=True,
)


def _pool_attrs(pool_size: Any, strides: Any, padding: Any, layout: str) -> dict[str, Any]:
    window = _window_attrs(strides, padding)
    return {
        "pool_size": positive_ints(int_tuple(pool_size, 2, "pool_size"), "pool_size"),
        "strides": window["strides"],
        "padding": window["padding"],
        "layout": _check_layout(layout, _DATA_LAYOUTS, "layout"),
    }


def max_pool2d(data: Any, pool_size: Any, strides: Any = (1, 1), padding: Any = (0, 0),
               layout: str = "NCHW") -> Call:
    """2-D max pooling; padded cells never win."""
    return call_op("nn.max_pool2d", data, **_pool_attrs(pool_size, strides, padding, layout))


def avg_pool2d(data: Any, pool_size: Any, strides: Any = (1, 1), padding: Any = (0, 0),
               layout: str = "NCHW", count_include_pad: bool = False) -> Call:
    """2-D average pooling; padding is left out of the divisor unless count_include_pad."""
    return call_op("nn.avg_pool2d", data, **_pool_attrs(pool_size, strides, padding, layout),
                   count_include_pad=bool(count_include_pad))


def global_avg_pool2d(data: Any, layout: str = "NCHW") -> Call:
    """Mean over the spatial axes: (N, C, H, W) -> (N, C, 1, 1)."""
    return call_op("nn.global_avg_pool2d", data, layout=_check_layout(layout, _DATA_LAYOUTS, "layout"))

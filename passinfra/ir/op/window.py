"""Sliding-window ops over any number of spatial axes, channels first (N, C, *spatial).

One type relation and one NumPy kernel (:mod:`passinfra.ir.op._window`) per family,
registered once per spatial rank:

* ``nn.conv3d`` (NCDHW data, OIDHW weight), like ``nn.conv2d`` without the layouts;
* ``nn.conv3d_transpose`` (IODHW weight); ``nn.conv2d_transpose`` (in
  :mod:`passinfra.ir.op.extra`) is the same relation and kernel in 2-D;
* ``nn.max_pool3d`` and ``nn.avg_pool3d`` with ``dilation``, ``ceil_mode`` and, for the
  average, ``count_include_pad``; ``nn.max_pool2d_dilated`` is the 2-D max pool of the
  same family.

``padding`` holds the begin pads of every spatial axis, then the end pads (TVM's
order); builders also take one int (every side) or one per axis (both sides).
Windows in ceil mode follow ONNX: a last, partial window is kept when it starts inside
the input or its begin padding; cells it covers past the end padding are not data and
not padding (they never win a max and are never counted).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRError, IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op import _window
from passinfra.ir.op._rel import (
    FLOAT_DTYPES,
    NUMERIC_DTYPES,
    REQUIRED,
    expect_dtype,
    expect_ndim,
    expect_same_dtype,
    expect_tensor,
    int_tuple,
    positive_ints,
    register_tensor_op,
    type_text,
    window_out_size,
)
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, Type

__all__ = ["conv3d", "conv3d_transpose", "max_pool3d", "avg_pool3d", "pad_tuple_nd",
           "conv_transpose_relation", "conv_transpose_impl", "pool_relation", "pool_impl"]

_AXIS_NAMES = {1: ("width",), 2: ("height", "width"), 3: ("depth", "height", "width")}
_LAYOUTS = {2: ("NCHW", "OIHW", "IOHW"), 3: ("NCDHW", "OIDHW", "IODHW")}


def pad_tuple_nd(padding: Any, rank: int) -> tuple[int, ...]:
    """Padding as ``rank`` begin pads then ``rank`` end pads: one int pads every side,
    ``rank`` ints pad both sides of each axis, ``2 * rank`` are given as is."""
    items = int_tuple(padding, None, "padding")
    if len(items) == 1:
        items = items * (2 * rank)
    elif len(items) == rank:
        items = items * 2
    elif len(items) != 2 * rank:
        raise IRTypeError(f"padding must have 1, {rank} or {2 * rank} ints, got {padding!r}")
    if any(p < 0 for p in items):
        raise IRTypeError(f"padding must be non-negative, got {padding!r}")
    return items


def _spatial_attr(value: Any, rank: int, what: str) -> tuple[int, ...]:
    return positive_ints(int_tuple(value, rank, what), what)


def _check_lengths(attrs: Attrs, rank: int, names: Sequence[str]) -> None:
    """Attributes parsed from text skip the builders' checks: every per-axis tuple must
    have one entry per spatial axis (two for padding)."""
    for name in names:
        expected = 2 * rank if name == "padding" else rank
        value = attrs[name]
        if not isinstance(value, tuple) or len(value) != expected:
            raise IRTypeError(f"{name} must hold {expected} ints for {rank} spatial axes, got {value!r}")


# --------------------------------------------------------------------------- convolution


def _conv_relation(rank: int) -> Callable[[Sequence[Type], Attrs], Type]:
    data_layout, kernel_layout, _ = _LAYOUTS[rank]

    def relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
        data = expect_tensor(arg_types[0], "the data")
        weight = expect_tensor(arg_types[1], "the weight")
        expect_ndim(data, rank + 2, "the data", data_layout)
        expect_ndim(weight, rank + 2, "the weight", kernel_layout)
        expect_same_dtype(data, weight, "the weight", "the data")
        expect_dtype(data, NUMERIC_DTYPES, "the data")
        _check_lengths(attrs, rank, ("strides", "padding", "dilation"))
        groups = attrs["groups"]
        channels, (out_channels, group_channels) = data.shape[1], weight.shape[:2]
        if groups < 1 or channels % groups or out_channels % groups:
            raise IRTypeError(f"groups={groups} must divide the input channels ({channels}) and the output "
                              f"channels ({out_channels}); data {type_text(data)}, "
                              f"weight {type_text(weight)}")
        if group_channels != channels // groups:
            raise IRTypeError(f"expected the weight to have {channels // groups} input channels "
                              f"(data channels {channels} / groups {groups}), got {type_text(weight)}")
        padding = attrs["padding"]
        spatial = tuple(
            window_out_size(size, k, s, b, e, d, name)
            for size, k, s, d, b, e, name in zip(data.shape[2:], weight.shape[2:], attrs["strides"],
                                                  attrs["dilation"], padding[:rank], padding[rank:],
                                                  _AXIS_NAMES[rank]))
        return TensorType((data.shape[0], out_channels, *spatial), data.dtype)

    return relation


def _conv_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    return _window.conv_nd(np.asarray(args[0]), np.asarray(args[1]), attrs["strides"], attrs["padding"],
                           attrs["dilation"], attrs["groups"])


def conv_transpose_relation(rank: int) -> Callable[[Sequence[Type], Attrs], Type]:
    """The relation of a transposed convolution over ``rank`` spatial axes (weight
    (C, O/groups, *kernel); padding cropped off the full output)."""
    data_layout, _, kernel_layout = _LAYOUTS[rank]

    def relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
        data = expect_tensor(arg_types[0], "the data")
        weight = expect_tensor(arg_types[1], "the weight")
        expect_ndim(data, rank + 2, "the data", data_layout)
        expect_ndim(weight, rank + 2, "the weight", kernel_layout)
        expect_same_dtype(data, weight, "the weight", "the data")
        expect_dtype(data, FLOAT_DTYPES, "the data")
        _check_lengths(attrs, rank, ("strides", "padding", "output_padding", "dilation"))
        groups = attrs["groups"]
        if groups < 1 or data.shape[1] != weight.shape[0] or data.shape[1] % groups:
            raise IRTypeError(
                f"expected the weight's first dimension to be the data's channels "
                f"(divisible by groups={groups}), got data {type_text(data)}, weight {type_text(weight)}"
            )
        padding = attrs["padding"]
        spatial = tuple(
            s * (i - 1) + op + (k - 1) * d + 1 - b - e
            for i, k, s, d, op, b, e in zip(data.shape[2:], weight.shape[2:], attrs["strides"],
                                             attrs["dilation"], attrs["output_padding"], padding[:rank],
                                             padding[rank:]))
        if any(n < 1 for n in spatial):
            raise IRTypeError(f"transposed convolution of {type_text(data)} gives an empty output")
        return TensorType((data.shape[0], weight.shape[1] * groups, *spatial), data.dtype)

    return relation


def conv_transpose_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    return _window.conv_transpose_nd(np.asarray(args[0]), np.asarray(args[1]), attrs["strides"],
                                     attrs["padding"], attrs["output_padding"], attrs["dilation"],
                                     attrs["groups"])


_CONV_DEFAULTS = {"strides": (1, 1, 1), "padding": (0,) * 6, "dilation": (1, 1, 1), "groups": 1}
_CONV_T_DEFAULTS = {"strides": (1, 1, 1), "padding": (0,) * 6, "output_padding": (0, 0, 0),
                    "dilation": (1, 1, 1), "groups": 1}

register_tensor_op(
    "nn.conv3d", attrs=_CONV_DEFAULTS, num_inputs=2, type_rel=_conv_relation(3), impl=_conv_impl,
    pattern=OpPattern.OUT_EWISE_FUSABLE, doc="3-D convolution (NCDHW/OIDHW), groups, dilation",
)
register_tensor_op(
    "nn.conv3d_transpose", attrs=_CONV_T_DEFAULTS, num_inputs=2, type_rel=conv_transpose_relation(3),
    impl=conv_transpose_impl, pattern=OpPattern.OPAQUE,
    doc="transposed 3-D convolution, NCDHW data, IODHW weight (ONNX ConvTranspose)",
)


def _conv_attrs(rank: int, strides: Any, padding: Any, dilation: Any, groups: int) -> dict[str, Any]:
    if groups < 1:
        raise IRError(f"a convolution needs groups >= 1, got {groups}")
    return {"strides": _spatial_attr(strides, rank, "strides"), "padding": pad_tuple_nd(padding, rank),
            "dilation": _spatial_attr(dilation, rank, "dilation"), "groups": int(groups)}


def conv3d(data: Any, weight: Any, strides: Any = (1, 1, 1), padding: Any = (0, 0, 0),
           dilation: Any = (1, 1, 1), groups: int = 1) -> Call:
    """3-D convolution, NCDHW data and OIDHW weight. ``padding`` is 1, 3 (both sides of
    each axis) or 6 ints (front, top, left, back, bottom, right)."""
    return call_op("nn.conv3d", data, weight, **_conv_attrs(3, strides, padding, dilation, groups))


def conv3d_transpose(data: Any, weight: Any, strides: Any = (1, 1, 1), padding: Any = (0, 0, 0),
                     output_padding: Any = (0, 0, 0), dilation: Any = (1, 1, 1), groups: int = 1) -> Call:
    """Transposed 3-D convolution, NCDHW data and IODHW weight; ``padding`` is cropped off
    the full output, ``output_padding`` added to its end."""
    attrs = _conv_attrs(3, strides, padding, dilation, groups)
    attrs["output_padding"] = int_tuple(output_padding, 3, "output_padding")
    return call_op("nn.conv3d_transpose", data, weight, **attrs)


# --------------------------------------------------------------------------- pooling


def pool_relation(rank: int, allowed: Sequence[str]) -> Callable[[Sequence[Type], Attrs], Type]:
    """The relation of a pool over ``rank`` spatial axes (``ceil_mode`` optional)."""

    def relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
        data = expect_tensor(arg_types[0], "the data")
        expect_ndim(data, rank + 2, "the data", _LAYOUTS[rank][0])
        expect_dtype(data, allowed, "the data")
        _check_lengths(attrs, rank, ("pool_size", "strides", "dilation", "padding"))
        padding, ceil_mode = attrs["padding"], attrs.get("ceil_mode", False)
        spatial = []
        for size, k, s, d, b, e, name in zip(data.shape[2:], attrs["pool_size"], attrs["strides"],
                                             attrs["dilation"], padding[:rank], padding[rank:],
                                             _AXIS_NAMES[rank]):
            window_out_size(size, k, s, b, e, d, name)  # the window must fit the padded input
            spatial.append(_window.window_out_size(size, k, s, d, b, e, ceil_mode))
        return TensorType((*data.shape[:2], *spatial), data.dtype)

    return relation


def pool_impl(kind: str) -> Callable[[Sequence[Any], Attrs], np.ndarray]:
    def impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
        return _window.pool_nd(np.asarray(args[0]), kind, attrs["pool_size"], attrs["strides"],
                               attrs["dilation"], attrs["padding"], attrs.get("ceil_mode", False),
                               attrs.get("count_include_pad", False))

    return impl


_POOL_DEFAULTS: Mapping[str, Any] = {"pool_size": REQUIRED, "strides": (1, 1, 1), "dilation": (1, 1, 1),
                                     "padding": (0,) * 6, "ceil_mode": False}

register_tensor_op(
    "nn.max_pool3d", attrs=_POOL_DEFAULTS, num_inputs=1, type_rel=pool_relation(3, NUMERIC_DTYPES),
    impl=pool_impl("max"), pattern=OpPattern.OUT_EWISE_FUSABLE,
    doc="3-D max pooling (NCDHW), dilation, ceil mode",
)
register_tensor_op(
    "nn.avg_pool3d", attrs={**_POOL_DEFAULTS, "count_include_pad": False}, num_inputs=1,
    type_rel=pool_relation(3, FLOAT_DTYPES), impl=pool_impl("avg"), pattern=OpPattern.OUT_EWISE_FUSABLE,
    doc="3-D average pooling (NCDHW), dilation, ceil mode, count_include_pad",
)


def _pool_attrs(pool_size: Any, strides: Any, dilation: Any, padding: Any, ceil_mode: bool) -> dict[str, Any]:
    return {"pool_size": _spatial_attr(pool_size, 3, "pool_size"),
            "strides": _spatial_attr(strides, 3, "strides"),
            "dilation": _spatial_attr(dilation, 3, "dilation"),
            "padding": pad_tuple_nd(padding, 3),
            "ceil_mode": bool(ceil_mode)}


def max_pool3d(data: Any, pool_size: Any, strides: Any = (1, 1, 1), padding: Any = (0, 0, 0),
               dilation: Any = (1, 1, 1), ceil_mode: bool = False) -> Call:
    """3-D max pooling (NCDHW); padded cells never win."""
    return call_op("nn.max_pool3d", data, **_pool_attrs(pool_size, strides, dilation, padding, ceil_mode))


def avg_pool3d(data: Any, pool_size: Any, strides: Any = (1, 1, 1), padding: Any = (0, 0, 0),
               dilation: Any = (1, 1, 1), ceil_mode: bool = False, count_include_pad: bool = False) -> Call:
    """3-D average pooling (NCDHW); the divisor counts the window's real cells, or with
    ``count_include_pad`` its cells inside the padded input."""
    return call_op("nn.avg_pool3d", data, **_pool_attrs(pool_size, strides, dilation, padding, ceil_mode),
                   count_include_pad=bool(count_include_pad))

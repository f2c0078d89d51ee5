"""Ops that model importers (ONNX first) need beyond the core tensor and nn sets.

Every op here is registered like the core ones: an attribute schema, a type relation, the
NumPy reference implementation (shared by the interpreter and FoldConstant) and a fusion
pattern. Names follow the builder paths: ``floor``, ``strided_slice``, ``nn.lrn``, ...
Anything an importer can express exactly with existing ops is NOT added here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.dims import Dim, SymDim, bounds, floordiv, prove_le
from passinfra.ir.expr import Call
from passinfra.ir.op._rel import (
    FLOAT_DTYPES,
    NUMERIC_DTYPES,
    REQUIRED,
    expect_dtype,
    expect_tensor,
    int_tuple,
    normalize_axis,
    register_tensor_op,
    type_text,
)
from passinfra.ir.op.registry import DIM_ATTR_CHECK, Op, OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.op.window import conv_transpose_impl, conv_transpose_relation, pool_impl, pool_relation
from passinfra.ir.types import TensorType, Type, normalize_dtype

__all__ = [
    "unary",
    "strided_slice",
    "pad",
    "tile",
    "broadcast_to",
    "arange",
    "dim_tuple",
    "trilu",
    "argmax",
    "argmin",
    "prod",
    "lrn",
    "conv2d_transpose",
    "max_pool2d_ext",
]


def _same_type(allowed: Sequence[str]) -> Callable:
    def relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
        data = expect_tensor(arg_types[0], "the operand")
        expect_dtype(data, allowed, "the operand")
        return data

    return relation


def _elementwise(kernel: Callable) -> Callable:
    def impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
        data = np.asarray(args[0])
        with np.errstate(all="ignore"):  # IEEE results (inf, nan) are the semantics
            return np.asarray(kernel(data, attrs)).astype(data.dtype, copy=False)

    return impl


def _softplus(x: np.ndarray, attrs: Attrs) -> np.ndarray:
    # log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|)
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


# name -> (kernel(x, attrs), attribute schema, allowed dtypes)
_UNARY_OPS: dict[str, tuple[Callable, dict[str, Any], Sequence[str]]] = {
    "floor": (lambda x, a: np.floor(x), {}, FLOAT_DTYPES),
    "ceil": (lambda x, a: np.ceil(x), {}, FLOAT_DTYPES),
    "round": (lambda x, a: np.round(x), {}, FLOAT_DTYPES),  # half to even, as ONNX
    "sign": (lambda x, a: np.sign(x), {}, NUMERIC_DTYPES),
    "reciprocal": (lambda x, a: 1 / x, {}, FLOAT_DTYPES),
    "sin": (lambda x, a: np.sin(x), {}, FLOAT_DTYPES),
    "cos": (lambda x, a: np.cos(x), {}, FLOAT_DTYPES),
    "tan": (lambda x, a: np.tan(x), {}, FLOAT_DTYPES),
    "asin": (lambda x, a: np.arcsin(x), {}, FLOAT_DTYPES),
    "acos": (lambda x, a: np.arccos(x), {}, FLOAT_DTYPES),
    "atan": (lambda x, a: np.arctan(x), {}, FLOAT_DTYPES),
    "sinh": (lambda x, a: np.sinh(x), {}, FLOAT_DTYPES),
    "cosh": (lambda x, a: np.cosh(x), {}, FLOAT_DTYPES),
    "asinh": (lambda x, a: np.arcsinh(x), {}, FLOAT_DTYPES),
    "acosh": (lambda x, a: np.arccosh(x), {}, FLOAT_DTYPES),
    "atanh": (lambda x, a: np.arctanh(x), {}, FLOAT_DTYPES),
    "nn.softplus": (_softplus, {}, FLOAT_DTYPES),
    "nn.softsign": (lambda x, a: x / (1 + np.abs(x)), {}, FLOAT_DTYPES),
    "nn.leaky_relu": (lambda x, a: np.where(x < 0, x * a["alpha"], x), {"alpha": 0.01}, FLOAT_DTYPES),
    "nn.elu": (lambda x, a: np.where(x < 0, a["alpha"] * np.expm1(x), x), {"alpha": 1.0}, FLOAT_DTYPES),
    "nn.selu": (
        lambda x, a: a["gamma"] * np.where(x <= 0, a["alpha"] * np.expm1(x), x),
        {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
        FLOAT_DTYPES,
    ),
    "nn.hard_sigmoid": (
        lambda x, a: np.clip(a["alpha"] * x + a["beta"], 0, 1),
        {"alpha": 0.2, "beta": 0.5},
        FLOAT_DTYPES,
    ),
}

for _name, (_kernel, _schema, _allowed) in _UNARY_OPS.items():
    register_tensor_op(
        _name,
        attrs=_schema,
        num_inputs=1,
        type_rel=_same_type(_allowed),
        impl=_elementwise(_kernel),
        pattern=OpPattern.ELEMWISE,
        doc=f"elementwise {_name}",
        symbolic=True,
    )


def unary(name: str, data: Any, **attrs: Any) -> Call:
    """A call of one of the elementwise ops registered here (``floor``, ``nn.elu``, ...)."""
    if name not in _UNARY_OPS:
        raise IRTypeError(f"{name!r} is not an elementwise op of passinfra.ir.op.extra")
    return call_op(name, data, **{k: float(v) for k, v in attrs.items()})


# --------------------------------------------------------------------------- strided_slice


def _slice_bounds(shape: Sequence[int], attrs: Attrs) -> list[slice]:
    """One Python slice per axis; ``begin``/``end``/``strides`` hold one entry per axis
    already clamped by the builder (``end`` -1 with a negative stride means "through 0")."""
    bounds = [slice(None)] * len(shape)
    for axis, start, stop, step in zip(attrs["axes"], attrs["begin"], attrs["end"], attrs["strides"]):
        bounds[axis] = slice(start, None if stop < 0 else stop, step)
    return bounds


def _strided_slice_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    for axis in attrs["axes"]:
        normalize_axis(axis, data.ndim)
    if attrs.has_dims:
        return TensorType(_dim_bound_slice_shape(data.shape, attrs), data.dtype)
    shape = [
        len(range(extent)[bound]) if type(extent) is int else _symbolic_slice_length(extent, bound, axis)
        for axis, (extent, bound) in enumerate(zip(data.shape, _slice_bounds(data.shape, attrs)))
    ]
    return TensorType(shape, data.dtype)


def _dim_bound_slice_shape(shape: Sequence[Dim], attrs: Attrs) -> list[Dim]:
    """The shape of a slice some of whose begin/end entries are dims (a run-time length).

    Such an axis is stored with 0 <= begin <= end <= size assumed (the builder already
    clamped what the bounds decide): its length is ``end - begin`` (step 1, exact) or
    ``floordiv(end - begin + step - 1, step)`` (exact for end >= begin). What the bounds
    cannot prove, :func:`_check_dim_bound_slice` checks at run time."""
    out = list(shape)
    for axis, start, stop, step in zip(attrs["axes"], attrs["begin"], attrs["end"], attrs["strides"]):
        extent = shape[axis]
        if not isinstance(start, SymDim) and not isinstance(stop, SymDim):
            bound = slice(start, None if stop < 0 else stop, step)  # as _slice_bounds stores it
            out[axis] = len(range(extent)[bound]) if type(extent) is int else _symbolic_slice_length(
                extent, bound, axis)
            continue
        if type(step) is not int or step <= 0:
            raise IRTypeError(f"axis {axis}: a slice with a symbolic begin or end needs a positive "
                              f"int step, got {step}")
        for what, low, high in (("begin", 0, start), ("end", start, stop), ("size", stop, extent)):
            if prove_le(low, high) is False:
                raise IRTypeError(f"axis {axis}: the slice [{start}:{stop}] of size {extent} has its "
                                  f"{what} out of order (0 <= begin <= end <= size is required)")
        length = stop - start
        out[axis] = length if step == 1 else floordiv(length + step - 1, step)
    return out


def _check_dim_bound_slice(args: Sequence[Any], attrs: Attrs, bound: Attrs) -> None:
    """The run-time side of :func:`_dim_bound_slice_shape`'s assumption."""
    shape = np.shape(args[0])
    for index, axis in enumerate(attrs["axes"]):
        if not isinstance(attrs["begin"][index], SymDim) and not isinstance(attrs["end"][index], SymDim):
            continue
        start, stop = bound["begin"][index], bound["end"][index]
        if not 0 <= start <= stop <= shape[axis]:
            raise ValueError(f"axis {axis}: the slice [{start}:{stop}] (begin {attrs['begin'][index]}, end "
                             f"{attrs['end'][index]}) of an axis of size {shape[axis]} breaks 0 <= begin <= "
                             "end <= size, which its symbolic type assumes")


# On a symbolic axis a stop at least this large (ONNX writes INT32_MAX or INT64_MAX for
# "to the end") means the end: symbolic sizes are taken to stay below 2**31 - 1.
SLICE_TO_END = 2**31 - 1


def _symbolic_slice_length(extent: SymDim, bound: slice, axis: int) -> Dim:
    """The length of ``range(extent)[bound]`` for a symbolic ``extent`` and a positive
    step (what the builder stores for a symbolic axis: a start that may count from the
    end, a stop that does not), when the bounds of ``extent`` decide it."""
    step = 1 if bound.step is None else bound.step
    if step < 0:
        raise IRTypeError(f"a negative step on axis {axis}, of symbolic size {extent}, is not supported")
    start = 0 if bound.start is None else bound.start
    begin = extent + start if start < 0 else start
    if bound.stop is None or bound.stop >= SLICE_TO_END:
        end: Dim = extent
    elif prove_le(bound.stop, extent):
        end = bound.stop
    elif prove_le(extent, bound.stop):
        end = extent
    else:
        raise IRTypeError(f"cannot tell whether the stop {bound.stop} on axis {axis} lies within its "
                          f"symbolic size {extent} (bounds {_bounds_text(extent)}); "
                          "give it bounds that decide")
    if prove_le(0, begin) is not True or prove_le(begin, end) is not True:
        if prove_le(end, begin) is True:
            return 0
        raise IRTypeError(f"cannot tell whether the start {start} on axis {axis} lies within [0, {end}] "
                          f"for its symbolic size {extent} (bounds {_bounds_text(extent)}); "
                          "give it bounds that decide")
    return floordiv(end - begin + step - 1, step)


def _bounds_text(extent: SymDim) -> str:
    lo, hi = bounds(extent)
    return f"{'-inf' if lo is None else lo}..{'' if hi is None else hi}"


def _strided_slice_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data = np.asarray(args[0])
    return np.ascontiguousarray(data[tuple(_slice_bounds(data.shape, attrs))])


register_tensor_op(
    "strided_slice",
    attrs={"axes": REQUIRED, "begin": REQUIRED, "end": REQUIRED, "strides": REQUIRED},
    num_inputs=1,
    type_rel=_strided_slice_relation,
    impl=_strided_slice_impl,
    pattern=OpPattern.INJECTIVE,
    doc="data[begin:end:strides] on the listed axes (bounds normalized at build time; a begin or "
        "end may be a symbolic dim, then 0 <= begin <= end <= size is assumed and checked at run time)",
    symbolic=True,
)
Op.get("strided_slice").set_attr(DIM_ATTR_CHECK, _check_dim_bound_slice)


def strided_slice(
    data: Any,
    shape: Sequence[int],
    axes: Sequence[int],
    begin: Sequence[int],
    end: Sequence[int],
    strides: Sequence[int],
) -> Call:
    """Slice ``data`` (of ``shape``) with NumPy/ONNX semantics: out-of-range bounds
    are clamped and negative ones count from the end; the builder stores them normalized.

    On a symbolic axis nothing can be clamped yet: the step must be positive, the start
    is stored as given (negative: from the end) and the stop too (at least
    ``SLICE_TO_END``: to the end); a stop counted from the end is not supported there.

    A begin or end may itself be a dim (``seq``: a constant buffer sliced to the run-time
    length, as ONNX Slice with a computed end). The step must then be a positive int, the
    dims are taken as non-negative (not from the end) and the axis is stored as
    (begin, end) with 0 <= begin <= end <= size assumed: an end the bounds prove to reach
    the size is stored as the size (ONNX's clamp), an int bound is normalized against the
    size; what the bounds leave open the interpreter checks at run time."""
    norm_axes, norm_begin, norm_end, norm_steps = [], [], [], []
    for axis, start, stop, step in zip(axes, begin, end, strides):
        if step == 0:
            raise IRTypeError("strided_slice: a step of 0 is not allowed")
        axis = normalize_axis(int(axis), len(shape))
        extent = shape[axis]
        if isinstance(start, SymDim) or isinstance(stop, SymDim):
            norm_axes.append(axis)
            norm_begin.append(_dim_bound(extent, start))
            norm_end.append(_dim_bound(extent, stop))
            if not isinstance(step, (int, np.integer)) or step < 0:
                raise IRTypeError(f"strided_slice: a slice with a symbolic begin or end needs a positive "
                                  f"int step, got {step}")
            norm_steps.append(int(step))
            continue
        if isinstance(extent, SymDim):
            first, last, stride = _symbolic_slice(extent, start, stop, step)
            norm_axes.append(axis)
            norm_begin.append(first)
            norm_end.append(last)
            norm_steps.append(stride)
            continue
        # clamp huge ONNX sentinels (INT64_MAX) before Python's slice normalization
        start = int(np.clip(start, -extent - 1, extent + 1))
        stop = int(np.clip(stop, -extent - 1, extent + 1))
        lo, hi, st = slice(start, stop, int(step)).indices(extent)
        norm_axes.append(axis)
        norm_begin.append(lo)
        norm_end.append(hi)
        norm_steps.append(st)
    return call_op(
        "strided_slice",
        data,
        axes=tuple(norm_axes),
        begin=tuple(norm_begin),
        end=tuple(norm_end),
        strides=tuple(norm_steps),
    )


def _dim_bound(extent: Dim, value: Dim) -> Dim:
    """One bound of a slice with a symbolic bound, as stored (see strided_slice)."""
    if isinstance(value, SymDim):
        return extent if prove_le(extent, value) is True else value  # ONNX clamps at the size
    value = int(value)
    if value >= SLICE_TO_END:
        return extent
    if value < 0:  # from the end: size + value, clamped at 0 where the size is known
        return max(extent + value, 0) if type(extent) is int else extent + value
    if type(extent) is int or prove_le(extent, value) is True:
        return min(extent, value) if type(extent) is int else extent
    return value


def _symbolic_slice(extent: SymDim, start: int, stop: int, step: int) -> tuple[int, int, int]:
    """(start, stop, step) as stored for a symbolic axis (see strided_slice)."""
    if step < 0 or stop < 0:
        what = "a negative step" if step < 0 else f"the stop {stop}, counted from the end,"
        raise IRTypeError(f"strided_slice: {what} on an axis of symbolic size {extent} is not supported")
    int64_max = 2**63 - 1
    return (int(np.clip(start, -int64_max, int64_max)), int(min(stop, int64_max)), int(step))


# --------------------------------------------------------------------------- pad


def _pad_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    widths = attrs["pad_width"]
    if len(widths) != data.ndim:
        raise IRTypeError(f"pad_width has {len(widths)} pairs for {type_text(data)}")
    shape = [d + before + after for d, (before, after) in zip(data.shape, widths)]
    if any(d < 0 for d in shape):
        raise IRTypeError(f"pad_width {widths} crops {type_text(data)} below zero")
    if attrs["mode"] not in ("constant", "edge", "reflect", "wrap"):
        raise IRTypeError(f"unknown pad mode {attrs['mode']!r}; use constant, edge, reflect or wrap")
    return TensorType(shape, data.dtype)


def _pad_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data = np.asarray(args[0])
    widths = attrs["pad_width"]
    # negative widths crop (ONNX allows them): slice first, then pad the rest
    crop = tuple(slice(max(0, -b), d - max(0, -a)) for d, (b, a) in zip(data.shape, widths))
    data = data[crop]
    positive = [(max(0, b), max(0, a)) for b, a in widths]
    if attrs["mode"] == "constant":
        return np.pad(
            data, positive, mode="constant", constant_values=np.asarray(attrs["pad_value"], data.dtype)
        )
    return np.pad(data, positive, mode=attrs["mode"])


register_tensor_op(
    "pad",
    attrs={"pad_width": REQUIRED, "pad_value": 0.0, "mode": "constant"},
    num_inputs=1,
    type_rel=_pad_relation,
    impl=_pad_impl,
    pattern=OpPattern.INJECTIVE,
    doc="pad (or crop, with negative widths) every axis by (before, after)",
)


def pad(
    data: Any, pad_width: Sequence[Sequence[int]], pad_value: float = 0.0, mode: str = "constant"
) -> Call:
    """Pad ``data``: ``pad_width`` holds one (before, after) pair per axis."""
    widths = tuple(int_tuple(pair, 2, "pad_width pair") for pair in pad_width)
    return call_op("pad", data, pad_width=widths, pad_value=float(pad_value), mode=str(mode))


# --------------------------------------------------------------------------- tile, broadcast_to, trilu


def _tile_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    reps = attrs["reps"]
    if len(reps) != data.ndim:
        raise IRTypeError(f"reps {reps} must have one entry per axis of {type_text(data)}")
    return TensorType([d * r for d, r in zip(data.shape, reps)], data.dtype)


register_tensor_op(
    "tile",
    attrs={"reps": REQUIRED},
    num_inputs=1,
    type_rel=_tile_relation,
    impl=lambda args, attrs: np.tile(np.asarray(args[0]), attrs["reps"]),
    pattern=OpPattern.INJECTIVE,
    doc="repeat the data reps[i] times along axis i",
)


def tile(data: Any, reps: Sequence[int]) -> Call:
    """``numpy.tile`` with one repetition count per axis."""
    return call_op("tile", data, reps=int_tuple(reps, None, "reps"))


def _broadcast_to_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    from passinfra.ir.op._rel import broadcast_shapes

    data = expect_tensor(arg_types[0], "the data")
    return TensorType(broadcast_shapes(data.shape, attrs["shape"]), data.dtype)


register_tensor_op(
    "broadcast_to",
    attrs={"shape": REQUIRED},
    num_inputs=1,
    type_rel=_broadcast_to_relation,
    impl=lambda args, attrs: np.ascontiguousarray(
        np.broadcast_to(args[0], np.broadcast_shapes(np.shape(args[0]), attrs["shape"]))
    ),
    pattern=OpPattern.BROADCAST,
    doc="broadcast the data with a shape (both ways, as ONNX Expand); the shape may hold symbolic dims",
    symbolic=True,
)


def broadcast_to(data: Any, shape: Sequence[Dim]) -> Call:
    """The data broadcast together with ``shape`` (ONNX Expand: the result may be larger
    than ``shape`` where the data's dimension is bigger). An entry of ``shape`` may be a
    symbolic dim (Expand to ``Shape(x)``); the broadcast then follows the symbolic rules
    of :func:`passinfra.ir.op._rel.broadcast_shapes`."""
    if any(isinstance(d, SymDim) for d in shape):
        return call_op("broadcast_to", data, shape=dim_tuple(shape, "shape"))
    return call_op("broadcast_to", data, shape=int_tuple(shape, None, "shape"))


def dim_tuple(values: Sequence[Any], what: str) -> tuple[Dim, ...]:
    """A tuple of ints and symbolic dims (an attribute that may hold run-time sizes)."""
    items = []
    for value in values:
        if isinstance(value, SymDim):
            items.append(value)
        elif isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            items.append(int(value))
        else:
            raise IRTypeError(f"{what} must hold ints or symbolic dims, got {value!r}")
    return tuple(items)


# --------------------------------------------------------------------------- arange


def _range_span(start: Dim, stop: Dim, step: int) -> Dim:
    """How far the range runs in the direction of its step (its length times |step|, up
    to rounding): negative when the range is empty."""
    return stop - start if step > 0 else start - stop


def _arange_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    start, stop, step = attrs["start"], attrs["stop"], attrs["step"]
    for what, value in (("start", start), ("stop", stop), ("step", step)):
        if not isinstance(value, (int, SymDim)) or isinstance(value, bool):
            raise IRTypeError(f"{what} must be an int or a symbolic dim, got {value!r}")
    if type(step) is not int or step == 0:
        raise IRTypeError(f"step must be a nonzero int, got {step}")
    dtype = attrs["dtype"]
    expect_dtype(TensorType((), dtype), ("int32", "int64"), "the dtype")
    if type(start) is int and type(stop) is int:
        return TensorType((len(range(start, stop, step)),), dtype)
    span = _range_span(start, stop, step)
    if prove_le(span, 0) is True:
        return TensorType((0,), dtype)
    # the true length is max(0, ceil(span / |step|)); a symbolic max has no form here, so
    # span >= 0 is assumed (checked at run time), and then ceil is exact as a floordiv
    length = span if abs(step) == 1 else floordiv(span + abs(step) - 1, abs(step))
    return TensorType((length,), dtype)


def _check_arange(args: Sequence[Any], attrs: Attrs, bound: Attrs) -> None:
    span = _range_span(bound["start"], bound["stop"], bound["step"])
    if span < 0 and prove_le(_range_span(attrs["start"], attrs["stop"], attrs["step"]), 0) is not True:
        raise ValueError(f"the range from {bound['start']} to {bound['stop']} by {bound['step']} (start "
                         f"{attrs['start']}, stop {attrs['stop']}) runs backwards; its symbolic type "
                         "assumes it does not")


register_tensor_op(
    "arange",
    attrs={"start": 0, "stop": REQUIRED, "step": 1, "dtype": "int64"},
    num_inputs=0,
    type_rel=_arange_relation,
    impl=lambda args, attrs: np.arange(attrs["start"], attrs["stop"], attrs["step"], dtype=attrs["dtype"]),
    pattern=OpPattern.INJECTIVE,
    doc="numpy.arange(start, stop, step) of ints (ONNX Range); start and stop may be symbolic dims",
    symbolic=True,
)
Op.get("arange").set_attr(DIM_ATTR_CHECK, _check_arange)


def arange(stop: Dim, start: Dim = 0, step: int = 1, dtype: str = "int64") -> Call:
    """``numpy.arange(start, stop, step)`` of ints (ONNX Range), a call with no arguments.

    ``start`` and ``stop`` may be symbolic dims (``arange(past + seq, past)`` are the
    positions of a decoder's new tokens): the length is then ``stop - start`` for a step
    of 1 and ``floordiv(stop - start + step - 1, step)`` for a larger one (``start -
    stop`` and ``|step|`` for a negative step), exact when the range does not run
    backwards, which the type assumes unless the bounds prove otherwise (then the length
    is 0) and the interpreter checks at run time."""
    for value in (start, stop):
        if not isinstance(value, (SymDim, int, np.integer)) or isinstance(value, (bool, np.bool_)):
            raise IRTypeError(f"arange: start and stop must be ints or symbolic dims, got {value!r}")
    bounds_ = [v if isinstance(v, SymDim) else int(v) for v in (start, stop)]
    return call_op("arange", start=bounds_[0], stop=bounds_[1], step=int(step), dtype=normalize_dtype(dtype))


def _trilu_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    if data.ndim < 2:
        raise IRTypeError(f"expected a tensor of rank >= 2, got {type_text(data)}")
    return data


def _trilu_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data = np.asarray(args[0])
    kernel = np.triu if attrs["upper"] else np.tril
    return kernel(data, attrs["k"])


register_tensor_op(
    "trilu",
    attrs={"k": 0, "upper": True},
    num_inputs=1,
    type_rel=_trilu_relation,
    impl=_trilu_impl,
    pattern=OpPattern.INJECTIVE,
    doc="keep the upper (triu) or lower (tril) triangle of the last two axes from diagonal k",
)


def trilu(data: Any, k: int = 0, upper: bool = True) -> Call:
    """Upper or lower triangle of the last two axes, from diagonal ``k``."""
    return call_op("trilu", data, k=int(k), upper=bool(upper))


# --------------------------------------------------------------------------- argmax/argmin, prod


def _arg_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    expect_dtype(data, NUMERIC_DTYPES, "the data")
    axis = normalize_axis(attrs["axis"], data.ndim)
    shape = (
        [1 if i == axis else d for i, d in enumerate(data.shape)]
        if attrs["keepdims"]
        else [d for i, d in enumerate(data.shape) if i != axis]
    )
    return TensorType(shape, "int64")


def _arg_impl(kernel: Callable) -> Callable:
    def impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
        data = np.asarray(args[0])
        axis = normalize_axis(attrs["axis"], data.ndim)
        if attrs["select_last_index"]:  # search the flipped axis, then map back
            flipped = np.flip(data, axis)
            index = data.shape[axis] - 1 - kernel(flipped, axis=axis)
        else:
            index = kernel(data, axis=axis)
        if attrs["keepdims"]:
            index = np.expand_dims(index, axis)
        return np.asarray(index, dtype=np.int64)

    return impl


for _name, _kernel in (("argmax", np.argmax), ("argmin", np.argmin)):
    register_tensor_op(
        _name,
        attrs={"axis": 0, "keepdims": True, "select_last_index": False},
        num_inputs=1,
        type_rel=_arg_relation,
        impl=_arg_impl(_kernel),
        pattern=OpPattern.COMM_REDUCE,
        doc=f"{_name} along axis, int64 indices",
    )


def argmax(data: Any, axis: int = 0, keepdims: bool = True, select_last_index: bool = False) -> Call:
    """Index of the largest element along ``axis`` (int64)."""
    return call_op(
        "argmax", data, axis=int(axis), keepdims=bool(keepdims), select_last_index=bool(select_last_index)
    )


def argmin(data: Any, axis: int = 0, keepdims: bool = True, select_last_index: bool = False) -> Call:
    """Index of the smallest element along ``axis`` (int64)."""
    return call_op(
        "argmin", data, axis=int(axis), keepdims=bool(keepdims), select_last_index=bool(select_last_index)
    )


def _prod_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    from passinfra.ir.op._rel import normalize_axes

    data = expect_tensor(arg_types[0], "the data")
    expect_dtype(data, NUMERIC_DTYPES, "the data")
    axes = normalize_axes(attrs["axis"], data.ndim)
    if attrs["keepdims"]:
        return TensorType([1 if i in axes else d for i, d in enumerate(data.shape)], data.dtype)
    return TensorType([d for i, d in enumerate(data.shape) if i not in axes], data.dtype)


def _prod_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    from passinfra.ir.op._rel import normalize_axes

    data = np.asarray(args[0])
    axes = normalize_axes(attrs["axis"], data.ndim)
    return np.asarray(np.prod(data, axis=axes, keepdims=attrs["keepdims"], dtype=data.dtype))


register_tensor_op(
    "prod",
    attrs={"axis": None, "keepdims": False},
    num_inputs=1,
    type_rel=_prod_relation,
    impl=_prod_impl,
    pattern=OpPattern.COMM_REDUCE,
    doc="product over axis (all when None)",
)


def prod(data: Any, axis: Any = None, keepdims: bool = False) -> Call:
    """Product over ``axis``."""
    return call_op(
        "prod", data, axis=None if axis is None else int_tuple(axis, None, "axis"), keepdims=bool(keepdims)
    )


# --------------------------------------------------------------------------- nn.lrn


def _lrn_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data = np.asarray(args[0])
    size = attrs["size"]
    squared = np.square(data.astype(np.float64))
    # window over channels: [c - floor((size-1)/2), c + ceil((size-1)/2)] (ONNX)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    widths = [(0, 0)] * data.ndim
    widths[1] = (before, after)
    padded = np.pad(squared, widths)
    channels = data.shape[1]
    total = sum(padded[:, i : i + channels] for i in range(size))
    scale = (attrs["bias"] + attrs["alpha"] / size * total) ** attrs["beta"]
    return (data / scale).astype(data.dtype)


def _lrn_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    expect_dtype(data, FLOAT_DTYPES, "the data")
    if data.ndim < 2:
        raise IRTypeError(f"expected data of rank >= 2 (N, C, ...), got {type_text(data)}")
    return data


register_tensor_op(
    "nn.lrn",
    attrs={"size": REQUIRED, "alpha": 1e-4, "beta": 0.75, "bias": 1.0},
    num_inputs=1,
    type_rel=_lrn_relation,
    impl=_lrn_impl,
    pattern=OpPattern.OPAQUE,
    doc="local response normalization across channels (axis 1)",
)


def lrn(data: Any, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> Call:
    """Local response normalization across channels (ONNX LRN)."""
    return call_op("nn.lrn", data, size=int(size), alpha=float(alpha), beta=float(beta), bias=float(bias))


# --------------------------------------------------------------------------- nn.conv2d_transpose


# the relation and kernel are the N-d ones of passinfra.ir.op.window, in 2-D
register_tensor_op(
    "nn.conv2d_transpose",
    attrs={
        "strides": (1, 1),
        "padding": (0, 0, 0, 0),
        "output_padding": (0, 0),
        "dilation": (1, 1),
        "groups": 1,
    },
    num_inputs=2,
    type_rel=conv_transpose_relation(2),
    impl=conv_transpose_impl,
    pattern=OpPattern.OPAQUE,
    doc="transposed 2-D convolution, NCHW data, IOHW weight (ONNX ConvTranspose)",
)


def conv2d_transpose(
    data: Any,
    weight: Any,
    strides: Any = (1, 1),
    padding: Any = (0, 0, 0, 0),
    output_padding: Any = (0, 0),
    dilation: Any = (1, 1),
    groups: int = 1,
) -> Call:
    """Transposed convolution; ``padding`` is (top, left, bottom, right) cropped off the full output."""
    return call_op(
        "nn.conv2d_transpose",
        data,
        weight,
        strides=int_tuple(strides, 2, "strides"),
        padding=int_tuple(padding, 4, "padding"),
        output_padding=int_tuple(output_padding, 2, "output_padding"),
        dilation=int_tuple(dilation, 2, "dilation"),
        groups=int(groups),
    )


# --------------------------------------------------------------------------- max pool with dilation / ceil


register_tensor_op(
    "nn.max_pool2d_dilated",
    attrs={"pool_size": REQUIRED, "strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1)},
    num_inputs=1,
    type_rel=pool_relation(2, NUMERIC_DTYPES),
    impl=pool_impl("max"),
    pattern=OpPattern.OUT_EWISE_FUSABLE,
    doc="2-D max pooling with dilated windows (NCHW)",
)


def max_pool2d_ext(data: Any, pool_size: Any, strides: Any, padding: Any, dilation: Any) -> Call:
    """Max pooling with window dilation (padding (top, left, bottom, right))."""
    return call_op(
        "nn.max_pool2d_dilated",
        data,
        pool_size=int_tuple(pool_size, 2, "pool_size"),
        strides=int_tuple(strides, 2, "strides"),
        padding=int_tuple(padding, 4, "padding"),
        dilation=int_tuple(dilation, 2, "dilation"),
    )

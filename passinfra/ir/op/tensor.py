"""Tensor-level ops: elementwise arithmetic and math, comparisons, layout and shape ops,
reductions, matmul and tensor creation.

Each op is registered once, here, with its type relation, its NumPy reference
implementation, its fusion pattern and its stateful flag; the builders below (exported
through ``passinfra.ir.op``) return ``Call(Op.get(name), args, attrs)``. Conventions
follow Relay: attribute names and defaults match Relay's, NumPy broadcasting applies,
operands of one op share a dtype (no implicit promotion), and Python scalars become
float32 / int32 constants.

Semantics worth knowing:

* ``divide`` on integers truncates toward zero (C and TVM), not NumPy's floor division;
  an integer division by zero is an EvaluationError.
* ``matmul`` follows ``numpy.matmul`` exactly, including 1-D operands (a 1-D left operand
  is a row, a 1-D right operand a column, and the added axis is dropped again).
* Reduction ``axis`` attrs keep the form they were written in (a tuple, possibly with
  negative entries, or None for all axes); relation and implementation normalize them
  with the same helper, so they cannot disagree.
* ``take`` accepts indices in ``[-n, n)`` like NumPy; anything else is an
  EvaluationError at run time (no clipping or wrapping).
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from passinfra.errors import EvaluationError, IRError, IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.dims import Dim, SymDim, exact_div, prove_equal, prove_le
from passinfra.ir.expr import Call, Expr, Tuple, const
from passinfra.ir.op._impl import erf as _erf
from passinfra.ir.op._impl import truncating_divide
from passinfra.ir.op._rel import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    NUMERIC_DTYPES,
    REQUIRED,
    broadcast_shapes,
    expect_dtype,
    expect_same_dtype,
    expect_tensor,
    expect_tuple,
    int_tuple,
    normalize_axes,
    normalize_axis,
    register_tensor_op,
    same_dim,
    shape_text,
    type_text,
)
from passinfra.ir.op.registry import Op, OpPattern
from passinfra.ir.types import DTYPES, TensorType, TupleType, Type, normalize_dtype

__all__ = [
    "as_expr", "call_op",
    # binary elementwise
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or",
    # unary elementwise
    "negative", "abs", "exp", "log", "sqrt", "tanh", "sigmoid", "erf", "logical_not", "clip", "cast",
    # layout and shape
    "reshape", "transpose", "concatenate", "split", "squeeze", "expand_dims", "take", "where",
    # reductions
    "sum", "mean", "max", "min",
    # linear algebra and creation
    "matmul", "full", "zeros", "ones",
]


# --------------------------------------------------------------------------- building calls


def as_expr(value: Any) -> Expr:
    """An expression as is; a Python/NumPy scalar or array as a Constant (Relay defaults:
    a Python float is float32, a Python int int32)."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, (list, tuple)) and builtins.any(isinstance(v, Expr) for v in value):
        raise IRError("a list of expressions is not an expression; wrap it in ir.Tuple")
    return const(value)


def call_op(name: str, *args: Any, **attrs: Any) -> Call:
    """A call of the registered op ``name`` on ``args`` (constants wrapped) with ``attrs``.

    This is how every builder is written, and how a user builds calls of an op they
    registered themselves with :func:`register_op`.
    """
    return Call(Op.get(name), [as_expr(a) for a in args], attrs or None)


def _axes_attr(axis: Any) -> tuple[int, ...] | None:
    return None if axis is None else int_tuple(axis, None, "axis")


def _as_array(value: Any) -> np.ndarray:
    return np.asarray(value)


def _typed(value: Any, dtype: Any) -> np.ndarray:
    """NumPy's result as an array of exactly ``dtype`` (NumPy returns scalars for 0-d
    results and promotes some integer results)."""
    return np.asarray(value).astype(dtype, copy=False)


# --------------------------------------------------------------------------- elementwise


def _binary_relation(allowed: Sequence[str], out_dtype: str | None = None) -> Callable:
    def relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
        lhs = expect_tensor(arg_types[0], "the left operand")
        rhs = expect_tensor(arg_types[1], "the right operand")
        expect_same_dtype(lhs, rhs, "the right operand", "the left operand")
        expect_dtype(lhs, allowed, "operands")
        return TensorType(broadcast_shapes(lhs.shape, rhs.shape), out_dtype or lhs.dtype)

    return relation


def _binary_impl(kernel: Callable, out_dtype: str | None = None) -> Callable:
    def impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
        lhs, rhs = _as_array(args[0]), _as_array(args[1])
        # IEEE results (inf, nan) are the semantics, as in the compiled C code
        with np.errstate(all="ignore"):
            return _typed(kernel(lhs, rhs), out_dtype or lhs.dtype)

    return impl


def _divide_kernel(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    if lhs.dtype.kind in "iu":
        return truncating_divide(lhs, rhs)
    return np.true_divide(lhs, rhs)


def _power_kernel(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    if rhs.dtype.kind in "iu" and np.any(rhs < 0):
        raise EvaluationError("integer power with a negative exponent")
    return np.power(lhs, rhs)


_ARITHMETIC = {
    "add": np.add,
    "subtract": np.subtract,
    "multiply": np.multiply,
    "divide": _divide_kernel,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "power": _power_kernel,
}
_COMPARISONS = {
    "equal": (np.equal, DTYPES),
    "not_equal": (np.not_equal, DTYPES),
    "less": (np.less, NUMERIC_DTYPES),
    "less_equal": (np.less_equal, NUMERIC_DTYPES),
    "greater": (np.greater, NUMERIC_DTYPES),
    "greater_equal": (np.greater_equal, NUMERIC_DTYPES),
}
_LOGICAL = {"logical_and": np.logical_and, "logical_or": np.logical_or}

for _name, _kernel in _ARITHMETIC.items():
    register_tensor_op(_name, attrs={}, num_inputs=2, type_rel=_binary_relation(NUMERIC_DTYPES),
                impl=_binary_impl(_kernel), pattern=OpPattern.BROADCAST,
                doc=f"elementwise {_name} with NumPy broadcasting", symbolic=True)
for _name, (_kernel, _allowed) in _COMPARISONS.items():
    register_tensor_op(_name, attrs={}, num_inputs=2, type_rel=_binary_relation(_allowed, "bool"),
                impl=_binary_impl(_kernel, "bool"), pattern=OpPattern.BROADCAST,
                doc=f"elementwise {_name} comparison, a bool tensor", symbolic=True)
for _name, _kernel in _LOGICAL.items():
    register_tensor_op(_name, attrs={}, num_inputs=2, type_rel=_binary_relation(("bool",)),
                impl=_binary_impl(_kernel), pattern=OpPattern.BROADCAST, doc=f"elementwise {_name}",
                symbolic=True)


def _unary_relation(allowed: Sequence[str]) -> Callable:
    def relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
        data = expect_tensor(arg_types[0], "the operand")
        expect_dtype(data, allowed, "the operand")
        return data

    return relation


def _unary_impl(kernel: Callable) -> Callable:
    def impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
        data = _as_array(args[0])
        with np.errstate(all="ignore"):  # log(-1) is nan, exp(1000) is inf, as in C
            return _typed(kernel(data), data.dtype)

    return impl


def _sigmoid_kernel(data: np.ndarray) -> np.ndarray:
    # exp(-x) overflows to inf for very negative x, and 1 / (1 + inf) is the right 0
    return 1 / (1 + np.exp(-data))


_UNARY = {
    "negative": (np.negative, NUMERIC_DTYPES),
    "abs": (np.abs, NUMERIC_DTYPES),
    "exp": (np.exp, FLOAT_DTYPES),
    "log": (np.log, FLOAT_DTYPES),
    "sqrt": (np.sqrt, FLOAT_DTYPES),
    "tanh": (np.tanh, FLOAT_DTYPES),
    "sigmoid": (_sigmoid_kernel, FLOAT_DTYPES),
    "erf": (_erf, FLOAT_DTYPES),
    "logical_not": (np.logical_not, ("bool",)),
}
for _name, (_kernel, _allowed) in _UNARY.items():
    register_tensor_op(_name, attrs={}, num_inputs=1, type_rel=_unary_relation(_allowed),
                       impl=_unary_impl(_kernel), pattern=OpPattern.ELEMWISE, doc=f"elementwise {_name}",
                       symbolic=True)


def _clip_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data = _as_array(args[0])
    return _typed(np.clip(data, attrs["a_min"], attrs["a_max"]), data.dtype)


register_tensor_op(
    "clip", attrs={"a_min": REQUIRED, "a_max": REQUIRED}, num_inputs=1,
    type_rel=_unary_relation(NUMERIC_DTYPES), impl=_clip_impl, pattern=OpPattern.ELEMWISE,
    doc="clamp every element into [a_min, a_max]", symbolic=True,
)


def _cast_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    return TensorType(expect_tensor(arg_types[0], "the operand").shape, attrs["dtype"])


def _cast_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    with np.errstate(all="ignore"):  # nan/inf to int is unspecified, as in C
        return _as_array(args[0]).astype(attrs["dtype"])


register_tensor_op("cast", attrs={"dtype": REQUIRED}, num_inputs=1, type_rel=_cast_relation, impl=_cast_impl,
            pattern=OpPattern.ELEMWISE, doc="convert every element to attrs dtype", symbolic=True)


def add(lhs: Any, rhs: Any) -> Call:
    """``lhs + rhs`` with broadcasting."""
    return call_op("add", lhs, rhs)


def subtract(lhs: Any, rhs: Any) -> Call:
    """``lhs - rhs`` with broadcasting."""
    return call_op("subtract", lhs, rhs)


def multiply(lhs: Any, rhs: Any) -> Call:
    """``lhs * rhs`` with broadcasting."""
    return call_op("multiply", lhs, rhs)


def divide(lhs: Any, rhs: Any) -> Call:
    """``lhs / rhs`` with broadcasting; integers truncate toward zero (C semantics)."""
    return call_op("divide", lhs, rhs)


def maximum(lhs: Any, rhs: Any) -> Call:
    """Elementwise maximum with broadcasting."""
    return call_op("maximum", lhs, rhs)


def minimum(lhs: Any, rhs: Any) -> Call:
    """Elementwise minimum with broadcasting."""
    return call_op("minimum", lhs, rhs)


def power(lhs: Any, rhs: Any) -> Call:
    """``lhs ** rhs`` with broadcasting."""
    return call_op("power", lhs, rhs)


def equal(lhs: Any, rhs: Any) -> Call:
    """``lhs == rhs`` (bool) with broadcasting."""
    return call_op("equal", lhs, rhs)


def not_equal(lhs: Any, rhs: Any) -> Call:
    """``lhs != rhs`` (bool) with broadcasting."""
    return call_op("not_equal", lhs, rhs)


def less(lhs: Any, rhs: Any) -> Call:
    """``lhs < rhs`` (bool) with broadcasting."""
    return call_op("less", lhs, rhs)


def less_equal(lhs: Any, rhs: Any) -> Call:
    """``lhs <= rhs`` (bool) with broadcasting."""
    return call_op("less_equal", lhs, rhs)


def greater(lhs: Any, rhs: Any) -> Call:
    """``lhs > rhs`` (bool) with broadcasting."""
    return call_op("greater", lhs, rhs)


def greater_equal(lhs: Any, rhs: Any) -> Call:
    """``lhs >= rhs`` (bool) with broadcasting."""
    return call_op("greater_equal", lhs, rhs)


def logical_and(lhs: Any, rhs: Any) -> Call:
    """Elementwise and of bool tensors."""
    return call_op("logical_and", lhs, rhs)


def logical_or(lhs: Any, rhs: Any) -> Call:
    """Elementwise or of bool tensors."""
    return call_op("logical_or", lhs, rhs)


def negative(data: Any) -> Call:
    """``-data``."""
    return call_op("negative", data)


def abs(data: Any) -> Call:
    """``|data|``."""
    return call_op("abs", data)


def exp(data: Any) -> Call:
    """``e ** data`` (float dtypes)."""
    return call_op("exp", data)


def log(data: Any) -> Call:
    """Natural logarithm (float dtypes)."""
    return call_op("log", data)


def sqrt(data: Any) -> Call:
    """Square root (float dtypes)."""
    return call_op("sqrt", data)


def tanh(data: Any) -> Call:
    """Hyperbolic tangent (float dtypes)."""
    return call_op("tanh", data)


def sigmoid(data: Any) -> Call:
    """``1 / (1 + exp(-data))`` (float dtypes)."""
    return call_op("sigmoid", data)


def erf(data: Any) -> Call:
    """The error function (float dtypes)."""
    return call_op("erf", data)


def logical_not(data: Any) -> Call:
    """Elementwise not of a bool tensor."""
    return call_op("logical_not", data)


def clip(data: Any, a_min: float, a_max: float) -> Call:
    """Clamp every element into ``[a_min, a_max]``."""
    if a_min > a_max:
        raise IRError(f"clip needs a_min <= a_max, got a_min={a_min}, a_max={a_max}")
    return call_op("clip", data, a_min=float(a_min), a_max=float(a_max))


def cast(data: Any, dtype: Any) -> Call:
    """``data`` converted to ``dtype``."""
    return call_op("cast", data, dtype=normalize_dtype(dtype))


# --------------------------------------------------------------------------- layout and shape


def reshape_shape(shape: Sequence[Dim], newshape: Sequence[int]) -> tuple[Dim, ...]:
    """The shape ``reshape(x, newshape)`` gives for ``x`` of ``shape`` (Relay rules):
    0 copies the input dimension at that position, one -1 is inferred. With symbolic
    dims the -1 is the element count divided exactly (as polynomials) by the rest, and
    without a -1 the counts must be provably equal."""
    newshape = int_tuple(newshape, None, "newshape")  # text IR may write newshape=(2, 1e308)
    out: list[Dim] = []
    inferred = None
    for position, dim in enumerate(newshape):
        if dim == 0:
            if position >= len(shape):
                raise IRTypeError(f"newshape {tuple(newshape)} copies dimension {position} (0) "
                                  f"but the input {shape_text(shape)} has rank {len(shape)}")
            out.append(shape[position])
        elif dim == -1:
            if inferred is not None:
                raise IRTypeError(f"newshape {tuple(newshape)} has more than one -1")
            inferred = position
            out.append(1)
        elif dim < -1:
            raise IRTypeError(f"newshape {tuple(newshape)} has unsupported entry {dim} (use 0 or -1)")
        else:
            out.append(dim)
    if not builtins.all(type(d) is int for d in (*shape, *out)):
        return _symbolic_reshape(shape, newshape, out, inferred)
    total = int(np.prod(shape, dtype=np.int64))
    known = int(np.prod(out, dtype=np.int64))
    if inferred is not None:
        if known == 0 or total % known:
            raise IRTypeError(f"cannot reshape {tuple(shape)} into {tuple(newshape)}: "
                              f"{total} elements do not fill the -1")
        out[inferred] = total // known
    elif known != total:
        raise IRTypeError(f"cannot reshape {tuple(shape)} ({total} elements) into "
                          f"{tuple(out)} ({known} elements)")
    return tuple(out)


def _symbolic_reshape(shape: Sequence[Dim], newshape: tuple[int, ...], out: list[Dim],
                      inferred: int | None) -> tuple[Dim, ...]:
    total, known = math.prod(shape), math.prod(out)
    if inferred is not None:
        filled = None if known == 0 else exact_div(total, known)
        if filled is None:
            raise IRTypeError(f"cannot reshape {shape_text(shape)} into {tuple(newshape)}: "
                              f"{total} elements are not provably a multiple of {known}, to fill the -1")
        out[inferred] = filled
    elif not same_dim(known, total):
        raise IRTypeError(f"cannot reshape {shape_text(shape)} ({total} elements) into "
                          f"{shape_text(out)} ({known} elements): the counts are not provably equal")
    return tuple(out)


def _reshape_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    return TensorType(reshape_shape(data.shape, attrs["newshape"]), data.dtype)


def _squeeze_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    axes = attrs["axis"]
    if axes is None:
        return TensorType(tuple(d for d in data.shape if not _is_unit(d, data)), data.dtype)
    dropped = normalize_axes(axes, data.ndim)
    for axis in dropped:
        if not same_dim(data.shape[axis], 1):
            raise IRTypeError(f"cannot squeeze axis {axis} of size {data.shape[axis]}; "
                              f"expected size 1 in {type_text(data)}")
    return TensorType(tuple(d for i, d in enumerate(data.shape) if i not in dropped), data.dtype)


def _is_unit(dim: Dim, data: TensorType) -> bool:
    """Whether squeeze(axis=None) drops ``dim``: a symbolic dim must be provably 1 or
    provably not, since the output's rank cannot depend on the binding."""
    if type(dim) is int:
        return dim == 1
    unit = prove_equal(dim, 1)
    if unit is None:
        raise IRTypeError(f"squeeze without axes cannot tell whether the symbolic dimension {dim} of "
                          f"{type_text(data)} is 1; name the axes to squeeze")
    return unit


def _expand_dims_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    axis, count = attrs["axis"], attrs["num_newaxis"]
    if count < 0:
        raise IRTypeError(f"num_newaxis must be non-negative, got {count}")
    if not -data.ndim - 1 <= axis <= data.ndim:
        raise IRTypeError(f"axis {axis} is out of range [{-data.ndim - 1}, {data.ndim}] "
                          f"for {type_text(data)}")
    if axis < 0:
        axis += data.ndim + 1
    return TensorType(data.shape[:axis] + (1,) * count + data.shape[axis:], data.dtype)


def _reshape_like_impl(relation: Callable) -> Callable:
    """Ops that only regroup elements (reshape, squeeze, expand_dims) all run as a NumPy
    reshape to the shape their relation gives, so the two cannot disagree."""

    def impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
        data = _as_array(args[0])
        out_type = relation([TensorType(data.shape, data.dtype.name)], attrs)
        return data.reshape(out_type.shape)

    return impl


for _name, _relation, _schema in (
    ("reshape", _reshape_relation, {"newshape": REQUIRED}),
    ("squeeze", _squeeze_relation, {"axis": None}),
    ("expand_dims", _expand_dims_relation, {"axis": REQUIRED, "num_newaxis": 1}),
):
    register_tensor_op(
        _name, attrs=_schema, num_inputs=1, type_rel=_relation, impl=_reshape_like_impl(_relation),
        pattern=OpPattern.INJECTIVE, doc=f"{_name} (a reshape of the same elements)", symbolic=True,
    )


def _transpose_permutation(axes: Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim - 1, -1, -1))
    perm = tuple(normalize_axis(a, ndim) for a in axes)
    if sorted(perm) != list(range(ndim)):
        raise IRTypeError(f"axes {tuple(axes)} is not a permutation of the {ndim} axes")
    return perm


def _transpose_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    perm = _transpose_permutation(attrs["axes"], data.ndim)
    return TensorType(tuple(data.shape[i] for i in perm), data.dtype)


def _transpose_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data = _as_array(args[0])
    return np.transpose(data, _transpose_permutation(attrs["axes"], data.ndim))


register_tensor_op(
    "transpose", attrs={"axes": None}, num_inputs=1, type_rel=_transpose_relation, impl=_transpose_impl,
    pattern=OpPattern.INJECTIVE, doc="permute axes (reversed when axes is None)", symbolic=True,
)


def _concatenate_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    fields = expect_tuple(arg_types[0], "the concatenated fields").fields
    if not fields:
        raise IRTypeError("expected at least one tensor to concatenate, got an empty tuple")
    first = expect_tensor(fields[0], "field 0")
    axis = normalize_axis(attrs["axis"], first.ndim)
    extent = 0
    for index, field in enumerate(fields):
        tensor = expect_tensor(field, f"field {index}")
        expect_same_dtype(first, tensor, f"field {index}", "field 0")
        if tensor.ndim != first.ndim or builtins.any(
            not same_dim(a, b) for i, (a, b) in enumerate(zip(tensor.shape, first.shape)) if i != axis
        ):
            raise IRTypeError(f"expected field {index} to match field 0 {type_text(first)} except "
                              f"on axis {axis}, got {type_text(tensor)}")
        extent += tensor.shape[axis]
    shape = list(first.shape)
    shape[axis] = extent
    return TensorType(shape, first.dtype)


def _concatenate_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    fields = [_as_array(f) for f in args[0]]
    return np.concatenate(fields, axis=normalize_axis(attrs["axis"], fields[0].ndim))


register_tensor_op(
    "concatenate", attrs={"axis": 0}, num_inputs=1, type_rel=_concatenate_relation, impl=_concatenate_impl,
    pattern=OpPattern.INJECTIVE, doc="join the fields of one tuple argument along axis", symbolic=True,
)


def _split_bounds(extent: int, indices_or_sections: int | tuple[int, ...]) -> list[tuple[int, int]]:
    """The [start, stop) of every piece along the split axis."""
    if isinstance(indices_or_sections, int):
        sections = indices_or_sections
        if sections < 1 or extent % sections:
            raise IRTypeError(f"cannot split an axis of size {extent} into {sections} equal sections")
        step = extent // sections
        return [(i * step, (i + 1) * step) for i in range(sections)]
    cuts = [0, *indices_or_sections, extent]
    if builtins.any(b < a for a, b in zip(cuts, cuts[1:])):
        raise IRTypeError(f"split indices {indices_or_sections} must be ascending within [0, {extent}]")
    return list(zip(cuts, cuts[1:]))


def _split_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    axis = normalize_axis(attrs["axis"], data.ndim)
    extent = data.shape[axis]
    if isinstance(extent, SymDim):
        sizes = _symbolic_split_sizes(extent, attrs["indices_or_sections"])
    else:
        sizes = [stop - start for start, stop in _split_bounds(extent, attrs["indices_or_sections"])]
    pieces = []
    for size in sizes:
        shape = list(data.shape)
        shape[axis] = size
        pieces.append(TensorType(shape, data.dtype))
    return TupleType(pieces)


def _symbolic_split_sizes(extent: SymDim, indices_or_sections: int | tuple[int, ...]) -> list[Dim]:
    """Piece sizes along a symbolic axis: equal sections must divide it provably, and
    the split points must provably lie within it."""
    if isinstance(indices_or_sections, int):
        step = exact_div(extent, indices_or_sections) if indices_or_sections >= 1 else None
        if step is None:
            raise IRTypeError(f"cannot split the symbolic axis of size {extent} into {indices_or_sections} "
                              "equal sections: not provably divisible")
        return [step] * indices_or_sections
    cuts = [0, *indices_or_sections]
    if builtins.any(b < a for a, b in zip(cuts, cuts[1:])) or prove_le(cuts[-1], extent) is not True:
        raise IRTypeError(f"split indices {indices_or_sections} must be ascending and provably within "
                          f"[0, {extent}]")
    return [b - a for a, b in zip(cuts, cuts[1:])] + [extent - cuts[-1]]


def _split_impl(args: Sequence[Any], attrs: Attrs) -> tuple[np.ndarray, ...]:
    data = _as_array(args[0])
    axis = normalize_axis(attrs["axis"], data.ndim)
    bounds = _split_bounds(data.shape[axis], attrs["indices_or_sections"])
    index = [slice(None)] * data.ndim
    pieces = []
    for start, stop in bounds:
        index[axis] = slice(start, stop)
        pieces.append(data[tuple(index)])
    return tuple(pieces)


register_tensor_op(
    "split", attrs={"indices_or_sections": REQUIRED, "axis": 0}, num_inputs=1, type_rel=_split_relation,
    impl=_split_impl, pattern=OpPattern.INJECTIVE, doc="split into a tuple: equal sections or at indices",
    symbolic=True,
)


def _take_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    indices = expect_tensor(arg_types[1], "the indices")
    # (uint8 too: a lookup table of 256 by 8-bit codes, QuantizedLookupTables', reads the
    # codes as they are, a quarter of the bytes of int32 ones)
    expect_dtype(indices, (*INDEX_DTYPES, "uint8"), "the indices")
    if attrs["axis"] is None:
        return TensorType(indices.shape, data.dtype)
    axis = normalize_axis(attrs["axis"], data.ndim)
    return TensorType(data.shape[:axis] + indices.shape + data.shape[axis + 1:], data.dtype)


def _take_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data, indices = _as_array(args[0]), _as_array(args[1])
    axis = attrs["axis"]
    extent = data.size if axis is None else data.shape[normalize_axis(axis, data.ndim)]
    bad = (indices < -extent) | (indices >= extent)
    if np.any(bad):
        first = indices[bad].reshape(-1)[0]
        raise EvaluationError(f"take: index {first} is out of range for an axis of size {extent}")
    return np.take(data, indices, axis=axis)


register_tensor_op("take", attrs={"axis": None}, num_inputs=2, type_rel=_take_relation, impl=_take_impl,
            pattern=OpPattern.INJECTIVE, doc="gather along axis (flattened when axis is None)", symbolic=True)


def _where_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    condition = expect_tensor(arg_types[0], "the condition")
    expect_dtype(condition, ("bool",), "the condition")
    on_true = expect_tensor(arg_types[1], "the true values")
    on_false = expect_tensor(arg_types[2], "the false values")
    expect_same_dtype(on_true, on_false, "the false values", "the true values")
    return TensorType(broadcast_shapes(condition.shape, on_true.shape, on_false.shape), on_true.dtype)


def _where_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    on_true = _as_array(args[1])
    return _typed(np.where(args[0], on_true, args[2]), on_true.dtype)


register_tensor_op("where", attrs={}, num_inputs=3, type_rel=_where_relation, impl=_where_impl,
            pattern=OpPattern.BROADCAST, doc="pick from the true or false values by a bool condition",
            symbolic=True)


def reshape(data: Any, newshape: Any) -> Call:
    """``data`` with shape ``newshape``; 0 copies the input dim, one -1 is inferred."""
    return call_op("reshape", data, newshape=int_tuple(newshape, None, "newshape"))


def transpose(data: Any, axes: Any = None) -> Call:
    """Permute the axes of ``data`` (reverse them when ``axes`` is None)."""
    return call_op("transpose", data, axes=_axes_attr(axes))


def concatenate(fields: Any, axis: int = 0) -> Call:
    """Join tensors along ``axis``; the op takes them as ONE tuple argument (Relay)."""
    if isinstance(fields, Expr):
        tuple_arg = fields
    else:
        tuple_arg = Tuple([as_expr(f) for f in fields])
    return Call(Op.get("concatenate"), [tuple_arg], {"axis": int(axis)})


def split(data: Any, indices_or_sections: Any, axis: int = 0) -> Call:
    """Split ``data`` into a tuple: an int is a count of equal sections, a sequence the
    split points. Use ``ir.TupleGetItem`` to pick a piece."""
    if isinstance(indices_or_sections, (int, np.integer)):
        pieces: Any = int(indices_or_sections)
    else:
        pieces = int_tuple(indices_or_sections, None, "indices_or_sections")
    return call_op("split", data, indices_or_sections=pieces, axis=int(axis))


def squeeze(data: Any, axis: Any = None) -> Call:
    """Remove size-1 axes (all of them when ``axis`` is None)."""
    return call_op("squeeze", data, axis=_axes_attr(axis))


def expand_dims(data: Any, axis: int, num_newaxis: int = 1) -> Call:
    """Insert ``num_newaxis`` size-1 axes at ``axis``."""
    if num_newaxis < 0:
        raise IRError(f"expand_dims needs num_newaxis >= 0, got {num_newaxis}")
    return call_op("expand_dims", data, axis=int(axis), num_newaxis=int(num_newaxis))


def take(data: Any, indices: Any, axis: int | None = None) -> Call:
    """``numpy.take(data, indices, axis)``; out-of-range indices fail at run time."""
    return call_op("take", data, indices, axis=None if axis is None else int(axis))


def where(condition: Any, on_true: Any, on_false: Any) -> Call:
    """Elementwise choice by a bool ``condition``, all three broadcast together."""
    return call_op("where", condition, on_true, on_false)


# --------------------------------------------------------------------------- reductions


def _reduce_relation(allowed: Sequence[str]) -> Callable:
    def relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
        data = expect_tensor(arg_types[0], "the data")
        expect_dtype(data, allowed, "the data")
        axes = normalize_axes(attrs["axis"], data.ndim)
        if attrs["keepdims"]:
            shape = tuple(1 if i in axes else d for i, d in enumerate(data.shape))
        else:
            shape = tuple(d for i, d in enumerate(data.shape) if i not in axes)
        return TensorType(shape, data.dtype)

    return relation


def _reduce_impl(kernel: Callable, name: str) -> Callable:
    def impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
        data = _as_array(args[0])
        axes = normalize_axes(attrs["axis"], data.ndim)
        try:
            result = kernel(data, axis=axes, keepdims=attrs["keepdims"])
        except ValueError as err:  # max of an empty axis has no identity
            raise EvaluationError(f"{name} over an empty axis of shape {data.shape}: {err}") from None
        return _typed(result, data.dtype)

    return impl


def _sum_kernel(data: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    # dtype= keeps int32 sums int32 (NumPy would widen to int64)
    return np.sum(data, axis=axis, keepdims=keepdims, dtype=data.dtype)


def _identity(dtype: np.dtype, lowest: bool) -> Any:
    """The identity of max (``lowest``) or min over ``dtype``: what ONNX gives (and the
    compiled kernels start from) over an empty axis."""
    if dtype == np.bool_:
        return not lowest
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return info.min if lowest else info.max
    return -np.inf if lowest else np.inf


def _max_kernel(data: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.max(data, axis=axis, keepdims=keepdims, initial=_identity(data.dtype, lowest=True))


def _min_kernel(data: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.min(data, axis=axis, keepdims=keepdims, initial=_identity(data.dtype, lowest=False))


_REDUCTIONS = {
    "sum": (_sum_kernel, NUMERIC_DTYPES),
    "mean": (np.mean, FLOAT_DTYPES),
    "max": (_max_kernel, DTYPES),
    "min": (_min_kernel, DTYPES),
}
for _name, (_kernel, _allowed) in _REDUCTIONS.items():
    register_tensor_op(_name, attrs={"axis": None, "keepdims": False}, num_inputs=1,
                       type_rel=_reduce_relation(_allowed), impl=_reduce_impl(_kernel, _name),
                pattern=OpPattern.COMM_REDUCE, doc=f"{_name} over axis (all axes when None)", symbolic=True)


def sum(data: Any, axis: Any = None, keepdims: bool = False) -> Call:
    """Sum over ``axis`` (an int, a tuple, or None for all; negative allowed)."""
    return call_op("sum", data, axis=_axes_attr(axis), keepdims=bool(keepdims))


def mean(data: Any, axis: Any = None, keepdims: bool = False) -> Call:
    """Mean over ``axis`` (float dtypes)."""
    return call_op("mean", data, axis=_axes_attr(axis), keepdims=bool(keepdims))


def max(data: Any, axis: Any = None, keepdims: bool = False) -> Call:
    """Maximum over ``axis``."""
    return call_op("max", data, axis=_axes_attr(axis), keepdims=bool(keepdims))


def min(data: Any, axis: Any = None, keepdims: bool = False) -> Call:
    """Minimum over ``axis``."""
    return call_op("min", data, axis=_axes_attr(axis), keepdims=bool(keepdims))


# --------------------------------------------------------------------------- matmul, creation


def _matmul_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    lhs = expect_tensor(arg_types[0], "the left operand")
    rhs = expect_tensor(arg_types[1], "the right operand")
    expect_same_dtype(lhs, rhs, "the right operand", "the left operand")
    expect_dtype(lhs, NUMERIC_DTYPES, "operands")
    if lhs.ndim == 0 or rhs.ndim == 0:
        raise IRTypeError(f"expected operands of rank >= 1, got {type_text(lhs)} and {type_text(rhs)}")
    # numpy.matmul: a 1-D left operand is a row (1, k), a 1-D right one a column (k, 1)
    lhs_shape = (1, *lhs.shape) if lhs.ndim == 1 else lhs.shape
    rhs_shape = (*rhs.shape, 1) if rhs.ndim == 1 else rhs.shape
    if not same_dim(lhs_shape[-1], rhs_shape[-2]):
        raise IRTypeError(f"inner dimensions differ: {type_text(lhs)} @ {type_text(rhs)} "
                          f"({lhs_shape[-1]} != {rhs_shape[-2]})")
    batch = broadcast_shapes(lhs_shape[:-2], rhs_shape[:-2])
    rows = () if lhs.ndim == 1 else (lhs_shape[-2],)
    cols = () if rhs.ndim == 1 else (rhs_shape[-1],)
    return TensorType(batch + rows + cols, lhs.dtype)


def _matmul_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    lhs = _as_array(args[0])
    return _typed(np.matmul(lhs, args[1]), lhs.dtype)


register_tensor_op("matmul", attrs={}, num_inputs=2, type_rel=_matmul_relation, impl=_matmul_impl,
            pattern=OpPattern.OUT_EWISE_FUSABLE, doc="numpy.matmul, batch dims broadcast", symbolic=True)


def _full_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    fill = expect_tensor(arg_types[0], "the fill value")
    if fill.ndim:
        raise IRTypeError(f"expected a scalar (rank 0) fill value, got {type_text(fill)}")
    return TensorType(attrs["shape"], attrs["dtype"] or fill.dtype)


def _full_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    fill = _as_array(args[0])
    return np.full(attrs["shape"], fill, dtype=attrs["dtype"] or fill.dtype)


def _constant_fill(value: int) -> tuple[Callable, Callable]:
    def relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
        return TensorType(attrs["shape"], attrs["dtype"])

    def impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
        return np.full(attrs["shape"], value, dtype=attrs["dtype"])

    return relation, impl


# the shape of full/zeros/ones may hold symbolic dims (ONNX ConstantOfShape of a computed
# shape): the type is that shape, and the interpreter substitutes the call's sizes
register_tensor_op(
    "full", attrs={"shape": REQUIRED, "dtype": None}, num_inputs=1, type_rel=_full_relation, impl=_full_impl,
    pattern=OpPattern.INJECTIVE, doc="a tensor of shape filled with a scalar expression", symbolic=True,
)
for _name, _value in (("zeros", 0), ("ones", 1)):
    _relation, _impl_fn = _constant_fill(_value)
    register_tensor_op(
        _name, attrs={"shape": REQUIRED, "dtype": "float32"}, num_inputs=0, type_rel=_relation, impl=_impl_fn,
        pattern=OpPattern.INJECTIVE, doc=f"a tensor of {_name} (no arguments)", symbolic=True,
    )


def _shape_attr(shape: Any) -> tuple[Dim, ...]:
    if not isinstance(shape, (int, np.integer)) and builtins.any(isinstance(d, SymDim) for d in shape):
        from passinfra.ir.op.extra import dim_tuple  # extra builds on this module

        return dim_tuple(shape, "shape")
    dims = int_tuple(shape, None, "shape")
    if builtins.any(d < 0 for d in dims):
        raise IRError(f"shape must be non-negative, got {dims}")
    return dims


def matmul(lhs: Any, rhs: Any) -> Call:
    """``numpy.matmul(lhs, rhs)``: batched, batch dims broadcast, 1-D operands as NumPy."""
    return call_op("matmul", lhs, rhs)


def full(fill_value: Any, shape: Any, dtype: Any = None) -> Call:
    """A tensor of ``shape`` filled with the scalar expression ``fill_value``; the dtype
    defaults to the fill value's."""
    return call_op("full", fill_value, shape=_shape_attr(shape),
                   dtype=None if dtype is None else normalize_dtype(dtype))


def zeros(shape: Any, dtype: Any = "float32") -> Call:
    """A tensor of zeros (a call with no arguments)."""
    return call_op("zeros", shape=_shape_attr(shape), dtype=normalize_dtype(dtype))


def ones(shape: Any, dtype: Any = "float32") -> Call:
    """A tensor of ones (a call with no arguments)."""
    return call_op("ones", shape=_shape_attr(shape), dtype=normalize_dtype(dtype))

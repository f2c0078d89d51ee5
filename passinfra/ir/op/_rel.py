"""Shared pieces of op type relations: checks with messages that name the types involved,
NumPy broadcasting of static shapes, axis normalization, window output sizes, and
registration with an attribute schema.

Every check raises :class:`IRTypeError` whose message names what was expected and what
was found; :meth:`Op.infer_type` prefixes the op name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.op.registry import NumpyImpl, Op, OpPattern, TypeRelation, register_op
from passinfra.ir.types import FLOAT_DTYPES, INT_DTYPES, FuncType, TensorType, TupleType, Type

# Which ops accept which dtypes is decided by these sets: float ops (exp, softmax, conv2d,
# mean, ...) take every float type, float16 and bfloat16 included (computed in float32,
# rounded on store); arithmetic, comparisons, min/max/sum reductions, matmul and dense
# take every integer type too, in the integer's own type with wrap-around. Anything else
# is an IRTypeError naming the op, the dtypes it accepts and the type it got.
NUMERIC_DTYPES = FLOAT_DTYPES + INT_DTYPES
# integer types an index tensor (take, gather, ...) may have, as ONNX allows
INDEX_DTYPES = ("int32", "int64")


def type_text(ty: Any) -> str:
    """A type as the text printer shows it, for error messages (kept free of the printer
    so an op's errors never depend on another module working)."""
    if isinstance(ty, TensorType):  # the printer's form: Tensor[(3), float32]
        return f"Tensor[({', '.join(map(str, ty.shape))}), {ty.dtype}]"
    if isinstance(ty, TupleType):
        return "(" + ", ".join(type_text(f) for f in ty.fields) + ("," if len(ty.fields) == 1 else "") + ")"
    if isinstance(ty, FuncType):
        return "fn (" + ", ".join(type_text(a) for a in ty.arg_types) + ") -> " + type_text(ty.ret_type)
    return repr(ty)


def expect_tensor(ty: Type, what: str) -> TensorType:
    """``ty`` as a TensorType, or an error saying ``what`` must be a tensor."""
    if not isinstance(ty, TensorType):
        raise IRTypeError(f"expected a tensor for {what}, got {type_text(ty)}")
    return ty


def expect_tuple(ty: Type, what: str) -> TupleType:
    if not isinstance(ty, TupleType):
        raise IRTypeError(f"expected a tuple of tensors for {what}, got {type_text(ty)}")
    return ty


def expect_dtype(ty: TensorType, allowed: Sequence[str], what: str) -> None:
    """Reject a tensor whose dtype is not among ``allowed`` (e.g. exp of an int tensor)."""
    if ty.dtype not in allowed:
        raise IRTypeError(f"expected {what} of dtype {dtype_choice(allowed)}, got {type_text(ty)}")


def dtype_choice(allowed: Sequence[str]) -> str:
    """``float16, bfloat16, float32 or float64``: the dtypes an error says were allowed."""
    return allowed[0] if len(allowed) == 1 else f"{', '.join(allowed[:-1])} or {allowed[-1]}"


def expect_same_dtype(reference: TensorType, other: TensorType, what: str, reference_what: str) -> None:
    """No implicit promotion: ``other`` must have the dtype of ``reference``."""
    if reference.dtype != other.dtype:
        raise IRTypeError(
            f"expected {what} of dtype {reference.dtype} (the dtype of {reference_what}, "
            f"{type_text(reference)}), got {type_text(other)}"
        )


def expect_vector(ty: Type, length: int, dtype: str, what: str) -> TensorType:
    """A 1-D tensor of ``length`` elements and ``dtype`` (bias, gamma, moving stats...)."""
    expected = TensorType((length,), dtype)
    tensor = expect_tensor(ty, what)
    if tensor != expected:
        raise IRTypeError(f"expected {what} of type {type_text(expected)}, got {type_text(tensor)}")
    return tensor


def expect_ndim(ty: TensorType, ndim: int, what: str, layout: str = "") -> None:
    if ty.ndim != ndim:
        hint = f" ({layout})" if layout else ""
        raise IRTypeError(f"expected {what} of rank {ndim}{hint}, got {type_text(ty)}")


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """The NumPy broadcast of static shapes; a clash names every shape involved."""
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for position in range(-ndim, 0):
        dims = {s[position] for s in shapes if len(s) >= -position}
        non_unit = dims - {1}
        if len(non_unit) > 1:
            shown = ", ".join(str(tuple(s)) for s in shapes)
            raise IRTypeError(f"shapes {shown} cannot be broadcast together (dimension {position})")
        result.append(non_unit.pop() if non_unit else 1)
    return tuple(result)


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """``axis`` in ``[-ndim, ndim)`` as a non-negative int."""
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):  # text IR may say axis=0.5
        raise IRTypeError(f"{what} must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise IRTypeError(f"{what} {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim if ndim else 0


def normalize_axes(axes: Iterable[int] | None, ndim: int) -> tuple[int, ...]:
    """Reduction axes as a sorted tuple of non-negative ints; None means every axis.

    Relations and implementations both call this, so they always agree on which axes a
    call reduces, whatever form (negative, unsorted) the attribute was written in.
    """
    if axes is None:
        return tuple(range(ndim))
    normalized = [normalize_axis(a, ndim) for a in axes]
    if len(set(normalized)) != len(normalized):
        raise IRTypeError(f"axis {tuple(axes)} names a dimension twice")
    return tuple(sorted(normalized))


def window_out_size(size: int, window: int, stride: int, pad_before: int, pad_after: int,
                    dilation: int, what: str) -> int:
    """Output length of a strided, dilated sliding window (convolution, pooling)."""
    span = dilation * (window - 1) + 1
    padded = size + pad_before + pad_after
    if span > padded:
        raise IRTypeError(
            f"{what}: window of extent {span} (size {window}, dilation {dilation}) is larger "
            f"than the padded input extent {padded}"
        )
    return (padded - span) // stride + 1


def int_tuple(value: Any, length: int | None, what: str) -> tuple[int, ...]:
    """An int or a sequence of ints as a tuple; with ``length``, an int is repeated."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return (int(value),) * (1 if length is None else length)
    try:
        items = tuple(value)
    except TypeError:
        raise IRTypeError(f"{what} must be an int or a sequence of ints, got {value!r}") from None
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) for v in items):
        raise IRTypeError(f"{what} must hold ints, got {value!r}")
    items = tuple(int(v) for v in items)
    if length is not None and len(items) != length:
        raise IRTypeError(f"{what} must have {length} ints, got {value!r}")
    return items


def pad_tuple_2d(padding: Any) -> tuple[int, int, int, int]:
    """Padding as (top, left, bottom, right), TVM's order.

    One int pads every side; two ints are (vertical, horizontal); four are given as is.
    """
    items = int_tuple(padding, None, "padding")
    if len(items) == 1:
        items = items * 4
    elif len(items) == 2:
        items = (items[0], items[1], items[0], items[1])
    elif len(items) != 4:
        raise IRTypeError(f"padding must have 1, 2 or 4 ints, got {padding!r}")
    if any(p < 0 for p in items):
        raise IRTypeError(f"padding must be non-negative, got {padding!r}")
    return items  # type: ignore[return-value]


def positive_ints(values: tuple[int, ...], what: str) -> tuple[int, ...]:
    if any(v < 1 for v in values):
        raise IRTypeError(f"{what} must be positive, got {values!r}")
    return values


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()  # an attribute the op has no default for


def register_tensor_op(name: str, *, attrs: Mapping[str, Any], num_inputs: int, type_rel: TypeRelation,
                       impl: NumpyImpl, pattern: OpPattern, stateful: bool = False, doc: str = "") -> Op:
    """:func:`register_op` with an attribute schema (name -> default, or REQUIRED).

    A call built by hand or parsed from text may leave attributes out: the relation and
    the implementation then see the defaults, so they never fail with a bare KeyError. A
    missing required attribute or an unknown one is an IRTypeError naming it. The schema
    is kept on the op as ``op.get_attr("attr_defaults")`` for tools such as the parser.
    """
    schema = dict(attrs)
    complete = _attr_completer(name, schema)
    op = register_op(
        name,
        num_inputs=num_inputs,
        type_rel=lambda arg_types, call_attrs: type_rel(arg_types, complete(call_attrs)),
        impl=lambda args, call_attrs: impl(args, complete(call_attrs)),
        pattern=pattern,
        stateful=stateful,
        doc=doc,
    )
    op.set_attr("attr_defaults", schema)
    return op


def _attr_completer(name: str, schema: dict[str, Any]) -> Callable[[Attrs], Attrs]:
    names = frozenset(schema)

    def complete(attrs: Attrs) -> Attrs:
        if attrs.keys() == names:  # the common case: a call made by a builder
            return attrs
        unknown = sorted(set(attrs) - names)
        if unknown:
            known = ", ".join(schema) or "none"
            raise IRTypeError(f"op {name}: unknown attribute {unknown[0]!r} (known attributes: {known})")
        merged = {key: attrs.get(key, default) for key, default in schema.items()}
        missing = [key for key, value in merged.items() if value is REQUIRED]
        if missing:
            raise IRTypeError(f"op {name}: missing required attribute {missing[0]!r}")
        return Attrs(merged)

    return complete

"""Shared pieces of op type relations: checks with messages that name the types involved,
NumPy broadcasting of shapes, axis normalization, window output sizes, and registration
with an attribute schema.

Every check raises :class:`IRTypeError` whose message names what was expected and what
was found; :meth:`Op.infer_type` prefixes the op name.

Symbolic dimensions (:mod:`passinfra.ir.dims`): an op registered with ``symbolic=True``
has a relation that computes with them (through the helpers here: ``broadcast_shapes``,
``same_dim``, ``expect_static_dims``); every other op is given static shapes only, and
:meth:`Op.infer_type` rejects a symbolic input with an error naming the op, the input
and the dimension before its relation runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.dims import Dim, SymDim, dim_text, prove_equal
from passinfra.ir.op.registry import SYMBOLIC_SHAPES, NumpyImpl, Op, OpPattern, TypeRelation, register_op
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
        return f"Tensor[({', '.join(map(str, ty.shape))}), {ty.dtype}]"  # str of a dim is its text
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


def shape_text(shape: Sequence[Dim]) -> str:
    """A shape for a message: ``(2, 3)`` as Python prints a tuple, dims as their text."""
    items = [dim_text(d) if isinstance(d, SymDim) else str(d) for d in shape]
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"  # () when empty


def broadcast_shapes(*shapes: Sequence[Dim]) -> tuple[Dim, ...]:
    """The NumPy broadcast of shapes; a clash names every shape involved.

    With symbolic dims: a 1 broadcasts; provably equal dims unify; an int other than 1
    against a symbol gives the int (the symbol must be 1 or that int at run time); two
    symbols that are not provably equal are an error naming both, since which of them
    is 1, if either, is only known at run time.
    """
    ndim = max((len(s) for s in shapes), default=0)
    result: list[Dim] = []
    for position in range(-ndim, 0):
        dims = {s[position] for s in shapes if len(s) >= -position}
        non_unit = dims - {1}
        if len(non_unit) <= 1:
            result.append(non_unit.pop() if non_unit else 1)
            continue
        if not any(isinstance(d, SymDim) for d in non_unit):
            raise IRTypeError(f"shapes {_shapes_text(shapes)} cannot be broadcast together "
                              f"(dimension {position})")
        result.append(_broadcast_symbolic([s[position] for s in shapes if len(s) >= -position],
                                          shapes, position))
    return tuple(result)


def _shapes_text(shapes: Sequence[Sequence[Dim]]) -> str:
    return ", ".join(shape_text(s) for s in shapes)


def _broadcast_symbolic(dims: list[Dim], shapes: Sequence[Sequence[Dim]], position: int) -> Dim:
    """One broadcast position where a symbolic dim meets another non-unit dim."""
    statics = {d for d in dims if not isinstance(d, SymDim) and d != 1}
    if len(statics) > 1:
        raise IRTypeError(f"shapes {_shapes_text(shapes)} cannot be broadcast together "
                          f"(dimension {position})")
    symbols = [d for d in dims if isinstance(d, SymDim)]
    if statics:
        size = statics.pop()
        for symbol in symbols:
            # the symbol must be 1 or the int; if its bounds rule out both, say so now
            if prove_equal(symbol, size) is False and prove_equal(symbol, 1) is False:
                raise IRTypeError(f"shapes {_shapes_text(shapes)} cannot be broadcast together "
                                  f"(dimension {position}: {symbol} can be neither 1 nor {size})")
        return size
    first = symbols[0]
    for other in symbols[1:]:
        if prove_equal(first, other) is not True:
            raise IRTypeError(f"shapes {_shapes_text(shapes)} cannot be broadcast together "
                              f"(dimension {position}: {first} and {other} are not provably equal)")
    return first


def same_dim(a: Dim, b: Dim) -> bool:
    """Whether two dims are provably equal (for ints: equal)."""
    if not isinstance(a, SymDim) and not isinstance(b, SymDim):
        return a == b
    return prove_equal(a, b) is True


def expect_static_dims(ty: TensorType, axes: Iterable[int], what: str) -> None:
    """Reject a symbolic dim on ``axes`` of ``ty`` (say, the spatial axes of a
    convolution whose batch may be symbolic), naming the axis and the dim."""
    for axis in axes:
        dim = ty.shape[axis]
        if isinstance(dim, SymDim):
            raise IRTypeError(f"{what} {type_text(ty)} has the symbolic dimension {dim} on axis {axis}, "
                              "where only a static size is supported")


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
                       impl: NumpyImpl, pattern: OpPattern, stateful: bool = False, doc: str = "",
                       symbolic: bool = False) -> Op:
    """:func:`register_op` with an attribute schema (name -> default, or REQUIRED).

    A call built by hand or parsed from text may leave attributes out: the relation and
    the implementation then see the defaults, so they never fail with a bare KeyError. A
    missing required attribute or an unknown one is an IRTypeError naming it. The schema
    is kept on the op as ``op.get_attr("attr_defaults")`` for tools such as the parser.
    ``symbolic=True`` says the relation handles symbolic dimensions (see the module
    docstring); without it the op sees static shapes only.
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
    if symbolic:
        op.set_attr(SYMBOLIC_SHAPES, True)
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

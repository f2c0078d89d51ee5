"""Binding symbolic dimensions to the sizes of the arrays a call receives.

A function whose parameters have symbolic dimensions (``Tensor[(batch, seq, 64)]``) runs
at any sizes that agree: every use of ``batch`` must be the same size, each variable must
lie within its bounds, and a dimension that is an expression (``past + seq``) must equal
the expression's value. :func:`bind_dims` checks the arrays of a call against the
parameter types and returns the binding ``{name: size}``, or raises one
:class:`DimBindingError` naming the argument, the axis and the dimension; :func:`bound_shape`
gives a type's shape under a binding (what a result must have).

The reference interpreter binds at every call; a compiled library will do the same check
before it runs a kernel, so both give the same error for the same wrong input.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from passinfra.errors import EvaluationError
from passinfra.ir.dims import DimVar, SymDim, dim_text, evaluate, free_vars, linear_unknown
from passinfra.ir.types import TensorType, TupleType, Type


class DimBindingError(EvaluationError):
    """The sizes of a call's arguments do not fit the symbolic dimensions of its
    parameters (disagreeing sizes of one dimension, out of bounds, wrong rank)."""


def _tensors(ty: Type | None, value: Any, what: str) -> Iterable[tuple[str, TensorType, Any]]:
    """(what, tensor type, value) for every tensor inside a (possibly tuple) type."""
    if isinstance(ty, TensorType):
        yield what, ty, value
    elif isinstance(ty, TupleType) and isinstance(value, tuple) and len(value) == len(ty.fields):
        for index, (field_type, field) in enumerate(zip(ty.fields, value)):
            yield from _tensors(field_type, field, f"{what}[{index}]")


def bind_dims(params: Sequence[tuple[str, Type | None, Any]],
              fallback: Mapping[str, int] | None = None) -> dict[str, int]:
    """The sizes of the symbolic dimensions in ``params`` ((what, type, value) triples:
    a value is an array, or a tuple of them for a tuple type), checked against every use
    and every bound; {} when the types are static. ``fallback``: sizes by name for the
    variables no argument gives (a primitive function's call: the caller's binding)."""
    found = [entry for what, ty, value in params for entry in _tensors(ty, value, what)
             if not entry[1].is_static]
    binding: dict[str, int] = {}
    seen_at: dict[str, str] = {}
    # variables first, from the dims that are a variable alone; then every other dim is
    # checked against its value under that binding
    for what, ty, value in found:
        shape = _shape_of(value, ty, what)
        for axis, dim in enumerate(ty.shape):
            if type(dim) is not DimVar:
                continue
            size = shape[axis]
            where = f"{what} axis {axis}"
            if dim.name in binding:
                if binding[dim.name] != size:
                    raise DimBindingError(
                        f"{where}: dimension {dim_text(dim)} is {size}, but {seen_at[dim.name]} gave "
                        f"{dim_text(dim)} = {binding[dim.name]}")
                continue
            _check_bounds(dim, size, where)
            binding[dim.name] = size
            seen_at[dim.name] = where
    _solve_linear_dims(found, binding, seen_at)
    if fallback:
        unbound = {var.name for _, ty, _ in found for var in ty.dim_vars} - binding.keys()
        for name in unbound & fallback.keys():
            binding[name] = fallback[name]
            seen_at[name] = "the caller"
        if unbound & fallback.keys():
            _solve_linear_dims(found, binding, seen_at)
    for what, ty, value in found:
        shape = _shape_of(value, ty, what)
        for axis, dim in enumerate(ty.shape):
            if type(dim) is DimVar:
                continue
            where = f"{what} axis {axis}"
            if isinstance(dim, SymDim):
                missing = [var.name for var in free_vars(dim) if var.name not in binding]
                if missing:  # a variable only used inside expressions: nothing gives its size
                    raise DimBindingError(
                        f"{where}: dimension {dim_text(dim)} uses {', '.join(missing)}, which no argument "
                        "gives as a whole dimension")
                expected = evaluate(dim, binding)
            else:
                expected = dim
            if shape[axis] != expected:
                shown = f"{dim_text(dim)} = {expected}" if isinstance(dim, SymDim) else str(expected)
                raise DimBindingError(f"{where}: expected {shown}, got {shape[axis]}")
    return binding


def _solve_linear_dims(found: list[tuple[str, TensorType, Any]], binding: dict[str, int],
                       seen_at: dict[str, str]) -> None:
    """Bind the variables that no argument gives whole but one gives as ``past + seq``
    with the others known (:func:`~passinfra.ir.dims.linear_unknown`), until nothing more
    follows; what they then imply is checked with every other dimension."""
    progress = True
    while progress:
        progress = False
        for what, ty, value in found:
            shape = _shape_of(value, ty, what)
            for axis, dim in enumerate(ty.shape):
                if not isinstance(dim, SymDim) or type(dim) is DimVar:
                    continue
                known = [var for var in free_vars(dim) if var.name in binding]
                solved = linear_unknown(dim, known)
                if solved is None:
                    continue
                var, sign, rest = solved
                size = sign * (shape[axis] - evaluate(rest, binding))
                where = f"{what} axis {axis} ({dim_text(dim)})"
                _check_bounds(var, size, where)
                binding[var.name] = size
                seen_at[var.name] = where
                progress = True


def _shape_of(value: Any, ty: TensorType, what: str) -> tuple[int, ...]:
    shape = getattr(value, "shape", None)
    if not isinstance(shape, tuple):
        raise DimBindingError(f"{what}: expected an array, got a {type(value).__name__}")
    if len(shape) != len(ty.shape):
        raise DimBindingError(f"{what}: expected {len(ty.shape)} dimensions {ty}, got shape {shape}")
    return shape


def _check_bounds(var: DimVar, size: int, where: str) -> None:
    if size < var.lo or (var.hi is not None and size > var.hi):
        upper = "" if var.hi is None else str(var.hi)
        raise DimBindingError(
            f"{where}: dimension {var.name} = {size} is outside its bounds {var.lo}..{upper}")


def bound_shape(ty: TensorType, binding: Mapping[str, int]) -> tuple[int, ...]:
    """``ty``'s shape with every symbolic dimension evaluated under ``binding``."""
    return tuple(evaluate(dim, binding) if isinstance(dim, SymDim) else dim for dim in ty.shape)


def bound_type(ty: Type | None, binding: Mapping[str, int]) -> Type | None:
    """``ty`` with its symbolic dimensions replaced by their sizes (static types as they are)."""
    if ty is None or ty.is_static:
        return ty
    if isinstance(ty, TensorType):
        return TensorType(bound_shape(ty, binding), ty.dtype)
    if isinstance(ty, TupleType):
        return TupleType([bound_type(field, binding) for field in ty.fields])  # type: ignore[misc]
    return ty


__all__ = ["DimBindingError", "bind_dims", "bound_shape", "bound_type"]

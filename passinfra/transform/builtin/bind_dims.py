"""Binding some symbolic dimensions of a function to sizes: the static (or less symbolic)
copy of a function that a specialization compiles.

A primitive function over ``[batch, past, seq]`` bound at ``seq = 1`` is the same function
with every ``seq`` in its parameter types, its return type and its ops' attributes
(``arange(stop=dim(past + seq))``) replaced by 1, and the arithmetic that follows
(``past + 1``) done; the variables not bound stay symbolic. Types inside the body are not
rewritten: they are inferred again from the new parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from passinfra.ir.attrs import Attrs, map_dims
from passinfra.ir.dims import DimVar, SymDim, free_vars, substitute
from passinfra.ir.expr import Call, Function, Var
from passinfra.ir.functor import ExprMutator, iter_post_order
from passinfra.ir.types import TensorType, TupleType, Type


def function_dim_vars(func: Function) -> dict[str, DimVar]:
    """The dimension variables ``func`` depends on, by name: those of its parameters'
    types and of its calls' attributes."""
    found: dict[str, DimVar] = {}
    for param in func.params:
        if param.type_annotation is not None:
            for var in param.type_annotation.dim_vars:
                found.setdefault(var.name, var)
    for node in iter_post_order(func.body):
        if isinstance(node, Call) and node.attrs.has_dims:
            for value in node.attrs.values():
                for var in _attr_vars(value):
                    found.setdefault(var.name, var)
    return found


def _attr_vars(value: Any) -> list[DimVar]:
    if isinstance(value, SymDim):
        return list(free_vars(value))
    if isinstance(value, tuple):
        return [var for item in value for var in _attr_vars(item)]
    return []


def bind_type(ty: Type | None, mapping: Mapping[DimVar, int]) -> Type | None:
    """``ty`` with the variables of ``mapping`` replaced by their sizes."""
    if ty is None or not mapping:
        return ty
    if isinstance(ty, TensorType):
        if ty.is_static:
            return ty
        return TensorType(tuple(substitute(d, mapping) if isinstance(d, SymDim) else d for d in ty.shape),
                          ty.dtype)
    if isinstance(ty, TupleType):
        return TupleType([bind_type(field, mapping) for field in ty.fields])  # type: ignore[misc]
    return ty


class _DimBinder(ExprMutator):
    def __init__(self, mapping: Mapping[DimVar, int]) -> None:
        self.mapping = mapping

    def visit_var(self, var: Var) -> Var:
        bound = bind_type(var.type_annotation, self.mapping)
        return var if bound is var.type_annotation else Var(var.name_hint, bound)

    def visit_call(self, call: Call) -> Call:
        op = self.visit(call.op)
        args = [self.visit(arg) for arg in call.args]
        attrs = call.attrs
        if attrs.has_dims:
            attrs = Attrs({key: map_dims(value, lambda dim: substitute(dim, self.mapping))
                           for key, value in attrs.items()})
        if op is call.op and attrs is call.attrs and all(a is b for a, b in zip(args, call.args)):
            return call
        return Call(op, args, attrs)


def bind_function_dims(func: Function, sizes: Mapping[str, int]) -> Function:
    """``func`` with its dimension variables named in ``sizes`` bound to those sizes (names
    ``func`` does not use are ignored); its attrs are kept. The result's body carries no
    inferred types: run InferType (or :func:`~passinfra.ir.type_infer.infer_type`) on it."""
    mapping = {var: int(sizes[name]) for name, var in function_dim_vars(func).items() if name in sizes}
    if not mapping:
        return func
    binder = _DimBinder(mapping)
    params = [binder.visit(param) for param in func.params]
    return Function(params, binder.visit(func.body), bind_type(func.ret_type, mapping), func.attrs)


__all__ = ["bind_function_dims", "bind_type", "function_dim_vars"]

"""Symbolic sizes in the loop IR: a graph-level dimension (``DimVar`` / ``DimExpr`` of
:mod:`passinfra.ir.dims`) as an int64 index expression over a kernel's size variables.

A kernel compiled for every ``rows`` in its bounds reads ``rows`` from its caller: the
PrimFunc's ``dims`` are int64 :class:`~passinfra.tir.TVar`\\ s, one per graph-level
dimension it depends on, and its buffer shapes and loop extents are expressions over
them. While a :func:`size_scope` is open, :func:`~passinfra.tir.as_prim` (and so every
loop extent, index and buffer shape a compute rule builds) converts a graph-level
dimension through the scope, creating the kernel's size variable at first use; compute
rules keep doing their shape arithmetic on graph-level dimensions, which stay exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from passinfra.errors import DimError, IRError
from passinfra.ir.dims import Dim, DimExpr, DimVar, SymDim, sorted_vars
from passinfra.tir import nodes
from passinfra.tir.functor import iter_expr_post_order
from passinfra.tir.nodes import INDEX_DTYPE, Add, Cast, FloorDiv, FloorMod, IntImm, Mul, PrimExpr, Sub, TVar


class SizeScope:
    """The size variables of one kernel being built: graph DimVar -> its TVar."""

    def __init__(self) -> None:
        self.variables: dict[DimVar, TVar] = {}

    def var(self, dim: DimVar) -> TVar:
        var = self.variables.get(dim)
        if var is None:
            var = self.variables[dim] = TVar(_c_name(dim.name), INDEX_DTYPE)
        return var

    def convert(self, dim: Any) -> PrimExpr | None:
        if not isinstance(dim, SymDim):
            return None
        return dim_to_prim(dim, self.var)

    def dims(self) -> tuple[TVar, ...]:
        """The size variables used, in the canonical order of their dimensions."""
        return tuple(self.variables[d] for d in sorted_vars(self.variables))

    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in sorted_vars(self.variables))


def _c_name(name: str) -> str:
    ident = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name) or "dim"
    return f"d_{ident}" if ident[0].isdigit() else ident


def dim_to_prim(dim: Any, var_of: Any) -> PrimExpr:
    """``dim`` (an int or a graph-level dimension) as an int64 expression, each DimVar
    replaced by ``var_of(dim_var)``."""
    if type(dim) is int:
        return IntImm(dim, INDEX_DTYPE)
    if type(dim) is DimVar:
        return var_of(dim)
    if not isinstance(dim, DimExpr):
        raise IRError(f"cannot use {dim!r} as a size")
    total: PrimExpr | None = None
    for mono, coeff in dim.terms:
        term: PrimExpr | None = None
        for atom, exp in mono:
            factor = _atom_to_prim(atom, var_of)
            for _ in range(exp):
                term = factor if term is None else term * factor
        if term is None:
            term = IntImm(coeff, INDEX_DTYPE)
        elif coeff != 1:
            term = term * coeff
        total = term if total is None else total + term
    return total if total is not None else IntImm(0, INDEX_DTYPE)


def _atom_to_prim(atom: Any, var_of: Any) -> PrimExpr:
    if type(atom) is DimVar:
        return var_of(atom)
    num = dim_to_prim(atom.num, var_of)
    den = IntImm(atom.den, INDEX_DTYPE)
    return FloorDiv(num, den) if type(atom).__name__ == "_FloorDiv" else FloorMod(num, den)


def prim_to_dim(expr: PrimExpr, dim_of_var: Callable[[TVar], Dim | None]) -> Dim | None:
    """An int64 index expression as a graph-level dimension (the inverse of
    :func:`dim_to_prim`), each variable given by ``dim_of_var`` (None: unknown); None for
    anything that is not integer arithmetic of the kinds dimensions have."""
    values: dict[int, Dim | None] = {}
    for node in iter_expr_post_order(expr):
        values[id(node)] = _node_dim(node, values, dim_of_var)
    return values[id(expr)]


def _node_dim(node: PrimExpr, values: dict[int, Dim | None],
              dim_of_var: Callable[[TVar], Dim | None]) -> Dim | None:
    if isinstance(node, IntImm):
        return int(node.value)
    if isinstance(node, TVar):
        return dim_of_var(node)
    if isinstance(node, Cast):
        inner = values[id(node.value)]
        return inner if node.dtype.startswith("int") and node.value.dtype.startswith("int") else None
    if not isinstance(node, (Add, Sub, Mul, FloorDiv, FloorMod)):
        return None
    a, b = values[id(node.a)], values[id(node.b)]
    if a is None or b is None:
        return None
    try:
        if isinstance(node, Add):
            return a + b
        if isinstance(node, Sub):
            return a - b
        if isinstance(node, Mul):
            return a * b
        if type(b) is not int or b <= 0:
            return None
        return a // b if isinstance(node, FloorDiv) else a % b
    except DimError:
        return None


@contextmanager
def size_scope(scope: SizeScope | None = None) -> Iterator[SizeScope]:
    """While open, graph-level dimensions given to ``as_prim`` (and to Buffer shapes)
    become expressions over ``scope``'s size variables."""
    scope = scope or SizeScope()
    token = nodes._symbolic_converter.set(scope.convert)
    try:
        yield scope
    finally:
        nodes._symbolic_converter.reset(token)


def is_static_extent(extent: Any) -> bool:
    """Whether a loop extent or buffer size is a known int: an int (NumPy's too) or an
    IntImm, not a graph-level dimension or an index expression."""
    if isinstance(extent, IntImm):
        return True
    return isinstance(extent, (int, np.integer)) and not isinstance(extent, (bool, np.bool_))


__all__ = ["SizeScope", "size_scope", "dim_to_prim", "prim_to_dim", "is_static_extent"]

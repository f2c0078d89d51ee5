"""Integer range analysis and affine decomposition of loop-level expressions, shared by
the loop passes, the lowering's loop tiling and the C renderer's block-copy matcher."""

from __future__ import annotations

from typing import Any

from passinfra.tir.functor import expr_children, iter_expr_post_order
from passinfra.tir.nodes import (
    Add,
    Cast,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mul,
    PrimExpr,
    Select,
    Sub,
    TVar,
)

Range = tuple[int, int]  # inclusive bounds


def is_int_dtype(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def const_int(expr: PrimExpr) -> int | None:
    """The value of an integer immediate, else None."""
    return expr.value if type(expr) is IntImm and is_int_dtype(expr.dtype) else None


def constant_range(start: PrimExpr, extent: PrimExpr) -> Range | None:
    """The inclusive range of a loop variable whose loop bounds are constant and
    non-empty, else None."""
    low, count = const_int(start), const_int(extent)
    if low is None or count is None or count <= 0:
        return None
    return (low, low + count - 1)


class RangeAnalyzer:
    """Bounds of integer expressions given bounds of variables (``var_ranges``).

    Results are cached per node; :meth:`reset` forgets them when a variable's range
    changes (entering or leaving a loop).
    """

    def __init__(self, var_ranges: dict[TVar, Range] | None = None) -> None:
        self.var_ranges: dict[TVar, Range] = dict(var_ranges or {})
        self._cache: dict[int, tuple[Any, Range | None]] = {}

    def reset(self) -> None:
        self._cache.clear()

    def bound(self, expr: PrimExpr) -> Range | None:
        cached = self._cache.get(id(expr))
        if cached is not None:
            return cached[1]
        for node in iter_expr_post_order(expr):
            if id(node) not in self._cache:
                self._cache[id(node)] = (node, self._node_bound(node))
        return self._cache[id(expr)][1]

    def _child_bounds(self, node: PrimExpr) -> list[Range | None]:
        return [self._cache[id(c)][1] for c in expr_children(node)]

    def _node_bound(self, node: Any) -> Range | None:
        kind = type(node)
        if not is_int_dtype(node.dtype):
            return None
        if kind is IntImm:
            return (node.value, node.value)
        if kind is TVar:
            return self.var_ranges.get(node)
        if kind is Cast:
            return self._cache[id(node.value)][1] if is_int_dtype(node.value.dtype) else None
        bounds = self._child_bounds(node)
        if kind is Select:  # the condition is a bool: only the two values matter
            if bounds[1] is None or bounds[2] is None:
                return None
            (t0, t1), (f0, f1) = bounds[1:]
            return (min(t0, f0), max(t1, f1))
        if any(b is None for b in bounds):
            return None
        if kind is Add:
            (a0, a1), (b0, b1) = bounds
            return (a0 + b0, a1 + b1)
        if kind is Sub:
            (a0, a1), (b0, b1) = bounds
            return (a0 - b1, a1 - b0)
        if kind is Mul:
            (a0, a1), (b0, b1) = bounds
            corners = (a0 * b0, a0 * b1, a1 * b0, a1 * b1)
            return (min(corners), max(corners))
        if kind is Min or kind is Max:
            (a0, a1), (b0, b1) = bounds
            pick = min if kind is Min else max
            return (pick(a0, b0), pick(a1, b1))
        if kind is FloorDiv:
            (a0, a1), (b0, b1) = bounds
            if b0 == b1 and b0 > 0:
                return (a0 // b0, a1 // b0)
            return None
        if kind is FloorMod:
            (a0, a1), (b0, b1) = bounds
            if b0 == b1 and b0 > 0:
                if 0 <= a0 and a1 < b0:
                    return (a0, a1)
                return (0, b0 - 1)
            return None
        return None


def add_terms(expr: PrimExpr) -> list[PrimExpr]:
    """The summands of a chain of Adds (``a + b + c`` -> [a, b, c]), left to right."""
    terms: list[PrimExpr] = []
    stack = [expr]
    while stack:
        node = stack.pop()
        if type(node) is Add:
            stack.append(node.b)
            stack.append(node.a)
        else:
            terms.append(node)
    return terms


def sum_terms(terms: list[PrimExpr], dtype: str) -> PrimExpr:
    """``terms[0] + terms[1] + ...``; 0 when there are none."""
    if not terms:
        return IntImm(0, dtype)
    result = terms[0]
    for term in terms[1:]:
        result = Add(result, term)
    return result


def split_multiples(expr: PrimExpr, divisor: int) -> tuple[list[PrimExpr], list[PrimExpr]] | None:
    """Split ``expr`` as ``divisor * quotient + remainder``: the quotient terms (each a
    summand divided exactly by ``divisor``) and the remainder terms. None when no summand
    is a multiple of ``divisor`` (nothing to gain)."""
    dtype = expr.dtype
    quotient: list[PrimExpr] = []
    remainder: list[PrimExpr] = []
    for term in add_terms(expr):
        value = const_int(term)
        if value is not None:
            if value // divisor:
                quotient.append(IntImm(value // divisor, dtype))
            if value % divisor:
                remainder.append(IntImm(value % divisor, dtype))
            continue
        if type(term) is Mul:
            factor = const_int(term.b)
            if factor is not None and factor % divisor == 0:
                scaled = factor // divisor
                quotient.append(term.a if scaled == 1 else Mul(term.a, IntImm(scaled, dtype)))
                continue
        remainder.append(term)
    if not quotient:
        return None
    return quotient, remainder


_NOT_AFFINE = object()


def affine_coefficient(expr: PrimExpr, var: TVar) -> int | None:
    """The constant ``c`` with ``expr = c * var + (terms free of var)``, or None when
    ``expr`` is not affine in ``var``."""
    coefficient: dict[int, Any] = {}  # id(node) -> coefficient or _NOT_AFFINE
    for node in iter_expr_post_order(expr):
        kind = type(node)
        if kind is TVar:
            result: Any = 1 if node is var else 0
        elif kind is IntImm or not _mentions(node, coefficient):
            result = 0
        elif kind is Add or kind is Sub:
            a, b = coefficient[id(node.a)], coefficient[id(node.b)]
            if a is _NOT_AFFINE or b is _NOT_AFFINE:
                result = _NOT_AFFINE
            else:
                result = a + b if kind is Add else a - b
        elif kind is Mul:
            a, b = coefficient[id(node.a)], coefficient[id(node.b)]
            if a is _NOT_AFFINE or b is _NOT_AFFINE:
                result = _NOT_AFFINE
            elif b == 0 and const_int(node.b) is not None:
                result = a * const_int(node.b)
            elif a == 0 and const_int(node.a) is not None:
                result = b * const_int(node.a)
            else:
                result = _NOT_AFFINE
        elif kind is Cast and node.dtype.startswith("int") and node.value.dtype.startswith("int"):
            result = coefficient[id(node.value)]
        else:
            result = _NOT_AFFINE
        coefficient[id(node)] = result
    final = coefficient[id(expr)]
    return None if final is _NOT_AFFINE else final


def _mentions(node: Any, coefficient: dict[int, Any]) -> bool:
    """Whether a child of ``node`` involves the variable (non-zero or non-affine)."""
    return any(coefficient[id(child)] != 0 for child in expr_children(node))


__all__ = ["RangeAnalyzer", "const_int", "constant_range", "is_int_dtype", "add_terms", "sum_terms",
           "split_multiples", "affine_coefficient"]

"""Simplify: index arithmetic clean-up after lowering and flattening.

Rewrites, bottom-up:

* constant folding of arithmetic, comparisons, logic, casts and selects, with the
  TIR interpreter's own scalar semantics (so folding cannot change a result);
* identities: ``x * 1``, and on integers ``x + 0``, ``x - 0``, ``x * 0``, ``x - x``;
  constants move right and merge: ``(x * c1) * c2 -> x * (c1*c2)``, ``(x + c1) + c2``;
* ``x // 1 -> x``, ``x % 1 -> 0``; ``(x // c1) // c2 -> x // (c1*c2)``;
  ``(x % c1) % c2 -> x % c2`` when c2 divides c1; and with the ranges of the enclosing
  loops, ``(a*c + r) // d -> a*(c/d)`` and ``(a*c + r) % d -> r`` when d divides c and
  ``0 <= r < d`` is proven (``(i*4 + j) // 4 -> i`` for ``j`` in ``[0, 4)``), and
  ``(x*c + r) // (c*k) -> x // k``, ``(x*c + r) % (c*k) -> (x % k)*c + r`` when
  ``0 <= r < c`` is proven;
* ``min``/``max`` and comparisons decided by the operands' ranges;
* a loop of extent 1 becomes its body with the loop variable replaced by the start.

Float identities that could change a value (``x + 0.0`` on ``-0.0``, ``x * 0.0`` on NaN)
are not applied.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from passinfra import tir
from passinfra.codegen.prim_func_pass import create_prim_func_pass
from passinfra.tir.arith import (
    Range,
    RangeAnalyzer,
    const_int,
    constant_range,
    is_int_dtype,
    split_multiples,
    sum_terms,
)
from passinfra.tir.evaluator import BINARY_OPS
from passinfra.tir.functor import StmtExprMutator, same_expr, substitute
from passinfra.tir.nodes import PrimExpr, PrimFunc, Stmt, TVar
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass


def _const_value(expr: PrimExpr) -> Any:
    """The NumPy scalar of an immediate, else None."""
    if type(expr) is tir.IntImm or type(expr) is tir.FloatImm:
        return np.dtype(expr.dtype).type(expr.value)
    return None


def _immediate(value: Any, dtype: str) -> PrimExpr:
    if dtype == "bool":
        return tir.IntImm(int(bool(value)), "bool")
    if is_int_dtype(dtype):
        return tir.IntImm(int(value), dtype)
    return tir.FloatImm(float(np.dtype(dtype).type(value)), dtype)


def _bool(value: bool) -> PrimExpr:
    return tir.IntImm(int(value), "bool")


class Simplifier(StmtExprMutator):
    """The rewriter behind the Simplify pass; usable on any statement or expression."""

    def __init__(self, var_ranges: dict[TVar, Range] | None = None) -> None:
        # ``var_ranges``: ranges of variables bound outside what is simplified (the
        # enclosing loops of a statement simplified on its own)
        self.ranges = RangeAnalyzer(var_ranges)

    # -- scopes: a loop or let gives its variable a range

    def visit_for(self, stmt: tir.For) -> Stmt:
        start, extent = self.visit_expr(stmt.start), self.visit_expr(stmt.extent)
        if const_int(extent) == 1:
            return self.visit_stmt(substitute(stmt.body, {stmt.loop_var: start}))
        body = self._with_range(stmt.loop_var, constant_range(start, extent), stmt.body)
        if start is stmt.start and extent is stmt.extent and body is stmt.body:
            return stmt
        return tir.For(stmt.loop_var, start, extent, stmt.kind, body)

    def visit_let_stmt(self, stmt: tir.LetStmt) -> Stmt:
        value = self.visit_expr(stmt.value)
        body = self._with_range(stmt.var, self.ranges.bound(value), stmt.body)
        if value is stmt.value and body is stmt.body:
            return stmt
        return tir.LetStmt(stmt.var, value, body)

    def _with_range(self, var: Any, bound: Any, body: Stmt) -> Stmt:
        ranges = self.ranges
        previous = ranges.var_ranges.get(var)
        if bound is not None:
            ranges.var_ranges[var] = bound
            ranges.reset()
        try:
            return self.visit_stmt(body)
        finally:
            if bound is not None:
                if previous is None:
                    del ranges.var_ranges[var]
                else:
                    ranges.var_ranges[var] = previous
                ranges.reset()

    # -- expressions, post-order

    def _fold(self, node: Any) -> PrimExpr | None:
        a, b = _const_value(node.a), _const_value(node.b)
        if a is None or b is None:
            return None
        if is_int_dtype(node.a.dtype) and type(node) in (tir.FloorDiv, tir.FloorMod) and b == 0:
            return None  # leave the division by zero for the program to meet
        try:
            with np.errstate(all="ignore"):
                value = BINARY_OPS[type(node)](a, b)
        except (ZeroDivisionError, OverflowError):
            return None
        return _immediate(value, node.dtype)

    def rewrite_add(self, node: tir.Add) -> PrimExpr:
        folded = self._fold(node)
        if folded is not None:
            return folded
        a, b = node.a, node.b
        if not is_int_dtype(node.dtype):
            return node
        if const_int(a) is not None:  # constants to the right
            a, b = b, a
        cb = const_int(b)
        if cb == 0:
            return a
        if cb is not None and type(a) is tir.Add and const_int(a.b) is not None:
            return self.rewrite_add(tir.Add(a.a, tir.IntImm(const_int(a.b) + cb, node.dtype)))
        if cb is not None and type(a) is tir.Sub and const_int(a.b) is not None:
            return self.rewrite_add(tir.Add(a.a, tir.IntImm(cb - const_int(a.b), node.dtype)))
        return node if a is node.a else tir.Add(a, b)

    def rewrite_sub(self, node: tir.Sub) -> PrimExpr:
        folded = self._fold(node)
        if folded is not None:
            return folded
        if not is_int_dtype(node.dtype):
            return node
        cb = const_int(node.b)
        if cb == 0:
            return node.a
        if same_expr(node.a, node.b):
            return tir.IntImm(0, node.dtype)
        if cb is not None:
            return self.rewrite_add(tir.Add(node.a, tir.IntImm(-cb, node.dtype)))
        return node

    def rewrite_mul(self, node: tir.Mul) -> PrimExpr:
        folded = self._fold(node)
        if folded is not None:
            return folded
        a, b = node.a, node.b
        if _const_value(a) is not None:
            a, b = b, a
        one = _const_value(b)
        if one is not None and one == 1:
            return a
        if not is_int_dtype(node.dtype):
            return node if a is node.a else tir.Mul(a, b)
        cb = const_int(b)
        if cb == 0:
            return tir.IntImm(0, node.dtype)
        if cb is not None and type(a) is tir.Mul and const_int(a.b) is not None:
            return self.rewrite_mul(tir.Mul(a.a, tir.IntImm(const_int(a.b) * cb, node.dtype)))
        return node if a is node.a else tir.Mul(a, b)

    def rewrite_floor_div(self, node: tir.FloorDiv) -> PrimExpr:
        folded = self._fold(node)
        if folded is not None:
            return folded
        divisor = const_int(node.b)
        if divisor is None or divisor <= 0:
            return node
        if divisor == 1:
            return node.a
        a = node.a
        if type(a) is tir.FloorDiv and (inner := const_int(a.b)) is not None and inner > 0:
            return self.rewrite_floor_div(tir.FloorDiv(a.a, tir.IntImm(inner * divisor, node.dtype)))
        bound = self.ranges.bound(a)
        if bound is not None and 0 <= bound[0] and bound[1] < divisor:
            return tir.IntImm(0, node.dtype)
        split = split_multiples(a, divisor)
        if split is not None:
            quotient, remainder = split
            rest = sum_terms(remainder, node.dtype)
            rest_bound = self.ranges.bound(rest)
            if rest_bound is not None and 0 <= rest_bound[0] and rest_bound[1] < divisor:
                return self.visit_expr(sum_terms(quotient, node.dtype))
            # (d*q + r) // d == q + r // d for any integers: a reshape's flat index
            # divided by a factor of its strides keeps its outer terms linear
            rest_div = self.rewrite_floor_div(tir.FloorDiv(rest, node.b))
            return self.rewrite_add(tir.Add(self.visit_expr(sum_terms(quotient, node.dtype)), rest_div))
        scaled = self._scaled_term(a, divisor)
        if scaled is not None:  # (x*c + r) // (c*k) -> x // k when 0 <= r < c
            x, factor = scaled
            return self.rewrite_floor_div(tir.FloorDiv(x, tir.IntImm(divisor // factor, node.dtype)))
        return node

    def _scaled_term(self, expr: PrimExpr, divisor: int) -> tuple[PrimExpr, int] | None:
        """``(x, c)`` when ``expr`` is ``x*c + r`` with ``c`` dividing ``divisor`` and
        ``0 <= r < c`` proven (r may be absent)."""
        head, rest = (expr.a, expr.b) if type(expr) is tir.Add else (expr, None)
        factor = const_int(head.b) if type(head) is tir.Mul else None
        if factor is None or factor <= 1 or divisor % factor:
            return None
        if rest is not None:
            bound = self.ranges.bound(rest)
            if bound is None or bound[0] < 0 or bound[1] >= factor:
                return None
        return head.a, factor

    def rewrite_floor_mod(self, node: tir.FloorMod) -> PrimExpr:
        folded = self._fold(node)
        if folded is not None:
            return folded
        divisor = const_int(node.b)
        if divisor is None or divisor <= 0:
            return node
        if divisor == 1:
            return tir.IntImm(0, node.dtype)
        a = node.a
        inner = const_int(a.b) if type(a) is tir.FloorMod else None
        if inner is not None and inner > 0 and inner % divisor == 0:
            return self.rewrite_floor_mod(tir.FloorMod(a.a, node.b))
        bound = self.ranges.bound(a)
        if bound is not None and 0 <= bound[0] and bound[1] < divisor:
            return a
        split = split_multiples(a, divisor)
        if split is not None:
            rest = sum_terms(split[1], node.dtype)
            rest_bound = self.ranges.bound(rest)
            if rest_bound is not None and 0 <= rest_bound[0] and rest_bound[1] < divisor:
                return rest
            return self.rewrite_floor_mod(tir.FloorMod(rest, node.b))
        scaled = self._scaled_term(a, divisor)
        if scaled is not None and type(a) is tir.Add:  # (x*c + r) % (c*k) -> (x % k)*c + r
            x, factor = scaled
            inner = self.rewrite_floor_mod(tir.FloorMod(x, tir.IntImm(divisor // factor, node.dtype)))
            scaled_inner = self.rewrite_mul(tir.Mul(inner, tir.IntImm(factor, node.dtype)))
            return self.rewrite_add(tir.Add(scaled_inner, a.b))
        return node

    def _min_max(self, node: tir.Min | tir.Max) -> PrimExpr:
        folded = self._fold(node)
        if folded is not None:
            return folded
        if same_expr(node.a, node.b):
            return node.a
        if not is_int_dtype(node.dtype):
            return node
        bound_a, bound_b = self.ranges.bound(node.a), self.ranges.bound(node.b)
        if bound_a is None or bound_b is None:
            return node
        a_below = bound_a[1] <= bound_b[0]
        b_below = bound_b[1] <= bound_a[0]
        if type(node) is tir.Min:
            return node.a if a_below else node.b if b_below else node
        return node.b if a_below else node.a if b_below else node

    rewrite_min = _min_max
    rewrite_max = _min_max

    def _compare(self, node: Any) -> PrimExpr:
        folded = self._fold(node)
        if folded is not None:
            return folded
        if not is_int_dtype(node.a.dtype):
            return node
        decided = self._decide(type(node), self.ranges.bound(node.a), self.ranges.bound(node.b))
        if decided is None and same_expr(node.a, node.b):
            decided = type(node) in (tir.EQ, tir.LE, tir.GE)
        return node if decided is None else _bool(decided)

    @staticmethod
    def _decide(kind: type, a: Any, b: Any) -> bool | None:
        if a is None or b is None:
            return None
        if kind is tir.LT:
            return True if a[1] < b[0] else False if a[0] >= b[1] else None
        if kind is tir.LE:
            return True if a[1] <= b[0] else False if a[0] > b[1] else None
        if kind is tir.GT:
            return True if a[0] > b[1] else False if a[1] <= b[0] else None
        if kind is tir.GE:
            return True if a[0] >= b[1] else False if a[1] < b[0] else None
        disjoint = a[1] < b[0] or b[1] < a[0]
        same_point = a[0] == a[1] == b[0] == b[1]
        if kind is tir.EQ:
            return False if disjoint else True if same_point else None
        return True if disjoint else False if same_point else None  # NE

    rewrite_eq = rewrite_ne = rewrite_lt = rewrite_le = rewrite_gt = rewrite_ge = _compare

    def rewrite_and(self, node: tir.And) -> PrimExpr:
        a, b = _bool_const(node.a), _bool_const(node.b)
        if a is False or b is False:
            return _bool(False)
        if a is True:
            return node.b
        return node.a if b is True else node

    def rewrite_or(self, node: tir.Or) -> PrimExpr:
        a, b = _bool_const(node.a), _bool_const(node.b)
        if a is True or b is True:
            return _bool(True)
        if a is False:
            return node.b
        return node.a if b is False else node

    def rewrite_not(self, node: tir.Not) -> PrimExpr:
        a = _bool_const(node.a)
        if a is not None:
            return _bool(not a)
        return node.a.a if type(node.a) is tir.Not else node

    def rewrite_select(self, node: tir.Select) -> PrimExpr:
        cond = _bool_const(node.cond)
        if cond is not None:
            return node.true_value if cond else node.false_value
        return node

    def rewrite_cast(self, node: tir.Cast) -> PrimExpr:
        if node.value.dtype == node.dtype:
            return node.value
        value = _const_value(node.value)
        if value is None:
            return node
        with np.errstate(all="ignore"):
            return _immediate(np.dtype(node.dtype).type(value), node.dtype)


def _bool_const(expr: PrimExpr) -> bool | None:
    return bool(expr.value) if type(expr) is tir.IntImm and expr.dtype == "bool" else None


def simplify_prim_func(func: PrimFunc) -> PrimFunc:
    body = Simplifier().visit_stmt(func.body)
    return func if body is func.body else func.with_body(body)


@register_pass("Simplify")
def Simplify() -> FunctionPass:
    """Simplify index arithmetic of every PrimFunc (see the module docstring)."""
    return create_prim_func_pass(lambda func, mod, ctx: simplify_prim_func(func), opt_level=0,
                                 name="Simplify", reads_module=False)


__all__ = ["Simplify", "Simplifier", "simplify_prim_func"]

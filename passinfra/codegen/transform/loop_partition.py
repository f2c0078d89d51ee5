"""LoopPartition: split a loop where a condition on its variable changes value.

Padding makes conditions: a pooling window or a padded read is a Select whose condition
(``2*i - 1 >= 0``) and clamped index (``max(2*i - 1, 0)``) depend on an output loop's
variable, and hold everywhere except at a border. Evaluated at every step, they keep the
compiler from vectorizing the inner loop (GCC's if-conversion gives up on a pooling
window of nine such taps), although a border is a row or two. This pass cuts a loop
with constant bounds at each point where such a condition (or clamp) changes, into
consecutive loops over the pieces, and simplifies each piece with its range known, so
inside a piece the conditions and clamps fold away: the interior of a 3x3 max pooling
is nine plain loads.

A condition qualifies when it compares an affine function of the loop variable alone
with a constant (``a*v + b`` against ``c``; the same for the argument of a Min or Max
with a constant): it changes value at most once over the loop. Loops are partitioned
innermost first, so an outer loop sees the conditions its inner pieces still hold. A
loop is left whole when it would need more than :data:`MAX_PIECES` pieces (code size).
Results are unchanged: every piece runs the same statements over its own part of the
range, in order.
"""

from __future__ import annotations

from typing import Any

from passinfra.codegen.prim_func_pass import create_prim_func_pass
from passinfra.codegen.transform.simplify import Simplifier
from passinfra.tir import (
    GE,
    GT,
    LE,
    LT,
    For,
    ForKind,
    IntImm,
    Max,
    Min,
    PrimExpr,
    PrimFunc,
    SeqStmt,
    Stmt,
    TVar,
)
from passinfra.tir.arith import Range, RangeAnalyzer, affine_coefficient, const_int, constant_range
from passinfra.tir.functor import StmtExprMutator, StmtExprVisitor, substitute
from passinfra.transform.context import PassContext
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

# a loop is cut into at most this many pieces (a window padded on both sides needs 3)
MAX_PIECES = 5
_PARTITIONED_KINDS = (ForKind.SERIAL, ForKind.PARALLEL)
_COMPARISONS = {LT: lambda x, y: x < y, LE: lambda x, y: x <= y,
                GT: lambda x, y: x > y, GE: lambda x, y: x >= y}


def affine_in(expr: PrimExpr, var: TVar) -> tuple[int, int] | None:
    """``(a, b)`` with ``expr == a*var + b`` when ``expr`` is affine in ``var`` and mentions
    no other variable; None otherwise."""
    slope = affine_coefficient(expr, var)
    if slope is None:
        return None
    # the value at var = 0 is b; a range that is not one point means another variable
    at_zero = RangeAnalyzer({var: (0, 0)}).bound(expr)
    if at_zero is None or at_zero[0] != at_zero[1]:
        return None
    return (slope, at_zero[0])


class _CutFinder(StmtExprVisitor):
    """The values of ``var`` in ``(low, high]`` at which a qualifying comparison or
    clamp in the visited statements changes value."""

    def __init__(self, var: TVar, low: int, high: int) -> None:
        self.var, self.low, self.high = var, low, high
        self.cuts: set[int] = set()

    def _compare(self, node: Any) -> None:
        self._add(node.a, node.b, _COMPARISONS[type(node)])

    visit_lt = visit_le = visit_gt = visit_ge = _compare

    def _clamp(self, node: Min | Max) -> None:
        # min(x, c) picks x while x <= c; max(x, c) while x >= c. A clamp into a range is
        # max(min(x, high), low): the outer one is decided where x crosses low, so look
        # through inner clamps to their argument (a cut is always safe, only code size
        # limits them)
        test = (lambda x, y: x <= y) if type(node) is Min else (lambda x, y: x >= y)
        argument = node.a
        while type(argument) in (Min, Max) and const_int(argument.b) is not None:
            argument = argument.a
        self._add(argument, node.b, test)

    visit_min = visit_max = _clamp

    def _add(self, lhs: PrimExpr, rhs: PrimExpr, test: Any) -> None:
        left, right = affine_in(lhs, self.var), affine_in(rhs, self.var)
        if left is None or right is None or left[0] == right[0]:
            return
        slope, offset = left[0] - right[0], left[1] - right[1]

        def holds(value: int) -> bool:
            return test(slope * value + offset, 0)

        # the truth is monotone in the variable: it changes at most once; find where
        first = holds(self.low)
        if holds(self.high) == first:
            return
        low, high = self.low, self.high  # holds(low) == first != holds(high)
        while high - low > 1:
            middle = (low + high) // 2
            if holds(middle) == first:
                low = middle
            else:
                high = middle
        self.cuts.add(high)


def _cuts(body: Stmt, var: TVar, low: int, high: int) -> list[int]:
    finder = _CutFinder(var, low, high)
    finder.visit_stmt(body)
    return sorted(finder.cuts)


class _Partitioner(StmtExprMutator):
    def __init__(self) -> None:
        # ranges of the enclosing loops: a piece is simplified knowing them too
        self.outer_ranges: dict[TVar, Range] = {}

    def visit_for(self, stmt: For) -> Stmt:
        bound = constant_range(stmt.start, stmt.extent)
        if bound is None or bound[0] == bound[1]:
            return super().visit_for(stmt)
        self.outer_ranges[stmt.loop_var] = bound
        try:
            loop = super().visit_for(stmt)
        finally:
            del self.outer_ranges[stmt.loop_var]
        if loop.kind not in _PARTITIONED_KINDS:
            return loop
        cuts = _cuts(loop.body, loop.loop_var, *bound)
        if not cuts or len(cuts) + 1 > MAX_PIECES:
            return loop
        bounds = [bound[0], *cuts, bound[1] + 1]
        pieces = []
        dtype = loop.loop_var.dtype
        for index, (low, end) in enumerate(zip(bounds, bounds[1:])):
            piece = For(loop.loop_var, IntImm(low, dtype), IntImm(end - low, dtype), loop.kind, loop.body)
            if index:
                # later copies get fresh binders (their loop variable and the ones inside):
                # no variable is bound twice
                piece = substitute(piece, {}, fresh_binders=True)
            pieces.append(Simplifier(self.outer_ranges).visit_stmt(piece))
        return SeqStmt(tuple(pieces))


def partition_prim_func(func: PrimFunc) -> PrimFunc:
    body = _Partitioner().visit_stmt(func.body)
    return func if body is func.body else func.with_body(body)


def _run(func: PrimFunc, mod: Any, ctx: PassContext) -> PrimFunc:
    return partition_prim_func(func)


@register_pass("LoopPartition")
def LoopPartition() -> FunctionPass:  # noqa: N802 - pass factories are named like classes
    """Split loops where a condition on their variable changes (see the module docstring)."""
    return create_prim_func_pass(_run, opt_level=2, name="LoopPartition", reads_module=False)


__all__ = ["LoopPartition", "MAX_PIECES", "affine_in", "partition_prim_func"]

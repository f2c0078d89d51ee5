"""Visitors and mutators over the loop-level IR (:mod:`passinfra.tir`).

Statements nest only as deep as the loop nest, so statement visits recurse (one frame
per scope). Expressions can be deep (a fused kernel's value expression has a few levels
per fused op, up to FuseOps' 256-op groups), so every expression walk here is iterative.

Dispatch is by class through tables, never isinstance chains:

* :class:`StmtExprVisitor`: ``visit_stmt(stmt)`` calls ``visit_<kind>`` (``visit_for``,
  ``visit_buffer_store``, ...), whose default visits the children; ``visit_expr(expr)``
  walks the expression pre-order and calls ``visit_<kind>`` (``visit_add``,
  ``visit_buffer_load``, ...) on every node, its children then follow automatically.
* :class:`StmtExprMutator`: statement hooks as above return the new statement (the
  defaults rebuild a statement from its visited children); expression hooks
  ``rewrite_<kind>(node)`` run post-order: ``node`` already has its rewritten children,
  and the hook returns its replacement. Unchanged nodes come back as the same object.

Expression nodes are frozen dataclasses whose ``==`` and ``hash`` are structural and
recursive, so this module keys its memo tables by ``id`` and compares with
:func:`same_expr`, never ``==``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from passinfra.tir.nodes import (
    EQ,
    GE,
    GT,
    LE,
    LT,
    NE,
    Add,
    Allocate,
    And,
    Buffer,
    BufferLoad,
    BufferStore,
    Cast,
    Div,
    Evaluate,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    IfThenElse,
    IntImm,
    Intrinsic,
    LetStmt,
    Max,
    Min,
    Mul,
    Not,
    Or,
    PrimExpr,
    Select,
    SeqStmt,
    Stmt,
    Sub,
    TVar,
)

BINARY_CLASSES = (Add, Sub, Mul, Div, FloorDiv, FloorMod, Min, Max)
COMPARE_CLASSES = (EQ, NE, LT, LE, GT, GE, And, Or)

# Each expression class: (hook suffix, children(node), rebuild(node, new_children)).
_ExprSpec = tuple[str, Callable[[Any], tuple], Callable[[Any, list], PrimExpr]]


def _no_children(node: Any) -> tuple:
    return ()


def _binary_spec(name: str) -> _ExprSpec:
    return (name, lambda e: (e.a, e.b), lambda e, c: type(e)(c[0], c[1]))


EXPR_SPECS: dict[type, _ExprSpec] = {
    IntImm: ("int_imm", _no_children, lambda e, c: e),
    FloatImm: ("float_imm", _no_children, lambda e, c: e),
    TVar: ("tvar", _no_children, lambda e, c: e),
    Add: _binary_spec("add"),
    Sub: _binary_spec("sub"),
    Mul: _binary_spec("mul"),
    Div: _binary_spec("div"),
    FloorDiv: _binary_spec("floor_div"),
    FloorMod: _binary_spec("floor_mod"),
    Min: _binary_spec("min"),
    Max: _binary_spec("max"),
    EQ: _binary_spec("eq"),
    NE: _binary_spec("ne"),
    LT: _binary_spec("lt"),
    LE: _binary_spec("le"),
    GT: _binary_spec("gt"),
    GE: _binary_spec("ge"),
    And: _binary_spec("and"),
    Or: _binary_spec("or"),
    Not: ("not", lambda e: (e.a,), lambda e, c: Not(c[0], e.dtype)),
    Select: (
        "select",
        lambda e: (e.cond, e.true_value, e.false_value),
        lambda e, c: Select(c[0], c[1], c[2]),
    ),
    Cast: ("cast", lambda e: (e.value,), lambda e, c: Cast(e.dtype, c[0])),
    Intrinsic: ("intrinsic", lambda e: e.args, lambda e, c: Intrinsic(e.name, tuple(c), e.dtype)),
    BufferLoad: ("buffer_load", lambda e: e.indices, lambda e, c: BufferLoad(e.buffer, tuple(c))),
}

STMT_HOOKS: dict[type, str] = {
    For: "visit_for",
    SeqStmt: "visit_seq_stmt",
    BufferStore: "visit_buffer_store",
    Allocate: "visit_allocate",
    IfThenElse: "visit_if_then_else",
    LetStmt: "visit_let_stmt",
    Evaluate: "visit_evaluate",
}


def _expr_spec(node: Any) -> _ExprSpec:
    spec = EXPR_SPECS.get(type(node))
    if spec is None:
        from passinfra.errors import IRError

        raise IRError(f"not a loop-level expression: {type(node).__name__} ({node!r:.80})")
    return spec


def expr_children(expr: PrimExpr) -> tuple:
    """The sub-expressions of ``expr``, in field order."""
    return _expr_spec(expr)[1](expr)


def stmt_children(stmt: Stmt) -> tuple[Stmt, ...]:
    """The statements directly inside ``stmt`` (a loop's body, a sequence's statements,
    both branches of an if, the body of an allocation or a let); none for the others."""
    if isinstance(stmt, SeqStmt):
        return tuple(stmt.stmts)
    if isinstance(stmt, IfThenElse):
        return (stmt.then_case,) if stmt.else_case is None else (stmt.then_case, stmt.else_case)
    if isinstance(stmt, (For, Allocate, LetStmt)):
        return (stmt.body,)
    return ()


def iter_expr_post_order(expr: PrimExpr):
    """Every distinct node of ``expr`` (by identity), children before parents."""
    seen: set[int] = set()
    stack: list[tuple[Any, bool]] = [(expr, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            yield node
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(expr_children(node)) if id(child) not in seen)


def same_expr(a: PrimExpr, b: PrimExpr) -> bool:
    """Structural equality of two expressions of one function (variables and buffers by
    identity), without recursion."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        if type(x) is not type(y):
            return False
        kind = type(x)
        if kind is TVar:
            return False  # distinct objects: different variables
        if kind in (IntImm, FloatImm):
            if x.dtype != y.dtype or not _same_number(x.value, y.value):
                return False
            continue
        if kind is Cast or kind is Not:
            if x.dtype != y.dtype:
                return False
        elif kind is Intrinsic:
            if (x.name, x.dtype, len(x.args)) != (y.name, y.dtype, len(y.args)):
                return False
        elif kind is BufferLoad:
            if x.buffer is not y.buffer or len(x.indices) != len(y.indices):
                return False
        stack.extend(zip(expr_children(x), expr_children(y)))
    return True


def _same_number(x: Any, y: Any) -> bool:
    # bitwise for floats: NaN equals NaN, 0.0 differs from -0.0
    if isinstance(x, float) or isinstance(y, float):
        return float(x).hex() == float(y).hex()
    return x == y


# ------------------------------------------------------------------------------ visitor


class StmtExprVisitor:
    """Read-only walk over statements (recursive per scope) and expressions (iterative)."""

    def visit_stmt(self, stmt: Stmt) -> None:
        hook = STMT_HOOKS.get(type(stmt))
        if hook is None:
            from passinfra.errors import IRError

            raise IRError(f"not a loop-level statement: {type(stmt).__name__}")
        getattr(self, hook)(stmt)

    def visit_expr(self, expr: PrimExpr) -> None:
        """Call ``visit_<kind>`` on every node of ``expr``, parents before children
        (a shared node is visited at each use)."""
        stack = [expr]
        while stack:
            node = stack.pop()
            name, children, _ = _expr_spec(node)
            getattr(self, "visit_" + name, _ignore)(node)
            stack.extend(reversed(children(node)))

    # statement defaults: visit the children in order
    def visit_for(self, stmt: For) -> None:
        self.visit_expr(stmt.start)
        self.visit_expr(stmt.extent)
        self.visit_stmt(stmt.body)

    def visit_seq_stmt(self, stmt: SeqStmt) -> None:
        for child in stmt.stmts:
            self.visit_stmt(child)

    def visit_buffer_store(self, stmt: BufferStore) -> None:
        self.visit_expr(stmt.value)
        for index in stmt.indices:
            self.visit_expr(index)

    def visit_allocate(self, stmt: Allocate) -> None:
        self.visit_stmt(stmt.body)

    def visit_if_then_else(self, stmt: IfThenElse) -> None:
        self.visit_expr(stmt.cond)
        self.visit_stmt(stmt.then_case)
        if stmt.else_case is not None:
            self.visit_stmt(stmt.else_case)

    def visit_let_stmt(self, stmt: LetStmt) -> None:
        self.visit_expr(stmt.value)
        self.visit_stmt(stmt.body)

    def visit_evaluate(self, stmt: Evaluate) -> None:
        self.visit_expr(stmt.value)


def _ignore(node: Any) -> None:
    return None


# ------------------------------------------------------------------------------ mutator


class StmtExprMutator:
    """Functional rewrite of statements and expressions (see the module docstring).

    Subclasses override statement hooks ``visit_<kind>(stmt) -> Stmt`` (pre-order: they
    decide when to visit children, e.g. to record a loop's range first) and expression
    hooks ``rewrite_<kind>(node) -> PrimExpr`` (post-order). ``map_buffer(buffer)``
    lets a subclass replace buffers wherever they appear.
    """

    def visit_stmt(self, stmt: Stmt) -> Stmt:
        hook = STMT_HOOKS.get(type(stmt))
        if hook is None:
            from passinfra.errors import IRError

            raise IRError(f"not a loop-level statement: {type(stmt).__name__}")
        return getattr(self, hook)(stmt)

    def map_buffer(self, buffer: Buffer) -> Buffer:
        return buffer

    def visit_expr(self, expr: PrimExpr) -> PrimExpr:
        """Rewrite ``expr`` bottom-up; each distinct node is rewritten once."""
        done: dict[int, PrimExpr] = {}
        stack: list[tuple[Any, bool]] = [(expr, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in done:
                continue
            name, children, rebuild = _expr_spec(node)
            kids = children(node)
            if not expanded:
                stack.append((node, True))
                stack.extend((kid, False) for kid in reversed(kids) if id(kid) not in done)
                continue
            new_kids = [done[id(kid)] for kid in kids]
            changed = any(new is not old for new, old in zip(new_kids, kids))
            new_node = rebuild(node, new_kids) if changed else node
            if type(new_node) is BufferLoad:
                buffer = self.map_buffer(new_node.buffer)
                if buffer is not new_node.buffer:
                    new_node = BufferLoad(buffer, new_node.indices)
            hook = getattr(self, "rewrite_" + name, None)
            done[id(node)] = hook(new_node) if hook is not None else new_node
        return done[id(expr)]

    def visit_exprs(self, exprs: tuple[PrimExpr, ...]) -> tuple[PrimExpr, ...]:
        """``exprs`` rewritten; the same tuple when none changed."""
        new = tuple(self.visit_expr(e) for e in exprs)
        return exprs if all(n is o for n, o in zip(new, exprs)) else new

    # statement defaults: rebuild from visited children, same object when unchanged
    def visit_for(self, stmt: For) -> Stmt:
        start, extent = self.visit_expr(stmt.start), self.visit_expr(stmt.extent)
        body = self.visit_stmt(stmt.body)
        if start is stmt.start and extent is stmt.extent and body is stmt.body:
            return stmt
        return For(stmt.loop_var, start, extent, stmt.kind, body)

    def visit_seq_stmt(self, stmt: SeqStmt) -> Stmt:
        stmts = tuple(self.visit_stmt(s) for s in stmt.stmts)
        if all(n is o for n, o in zip(stmts, stmt.stmts)):
            return stmt
        return SeqStmt(stmts)

    def visit_buffer_store(self, stmt: BufferStore) -> Stmt:
        value = self.visit_expr(stmt.value)
        indices = self.visit_exprs(stmt.indices)
        buffer = self.map_buffer(stmt.buffer)
        if value is stmt.value and indices is stmt.indices and buffer is stmt.buffer:
            return stmt
        return BufferStore(buffer, value, indices)

    def visit_allocate(self, stmt: Allocate) -> Stmt:
        buffer = self.map_buffer(stmt.buffer)
        body = self.visit_stmt(stmt.body)
        if buffer is stmt.buffer and body is stmt.body:
            return stmt
        return Allocate(buffer, body)

    def visit_if_then_else(self, stmt: IfThenElse) -> Stmt:
        cond = self.visit_expr(stmt.cond)
        then_case = self.visit_stmt(stmt.then_case)
        else_case = None if stmt.else_case is None else self.visit_stmt(stmt.else_case)
        if cond is stmt.cond and then_case is stmt.then_case and else_case is stmt.else_case:
            return stmt
        return IfThenElse(cond, then_case, else_case)

    def visit_let_stmt(self, stmt: LetStmt) -> Stmt:
        value = self.visit_expr(stmt.value)
        body = self.visit_stmt(stmt.body)
        if value is stmt.value and body is stmt.body:
            return stmt
        return LetStmt(stmt.var, value, body)

    def visit_evaluate(self, stmt: Evaluate) -> Stmt:
        value = self.visit_expr(stmt.value)
        return stmt if value is stmt.value else Evaluate(value)


# ------------------------------------------------------------------------- substitution


class _Substituter(StmtExprMutator):
    """Replaces variables; with ``fresh_binders`` every For/LetStmt variable inside gets
    a new TVar, so copies of a body (loop unrolling) never bind one variable twice."""

    def __init__(self, mapping: Mapping[TVar, PrimExpr], fresh_binders: bool) -> None:
        self.mapping: dict[TVar, PrimExpr] = dict(mapping)
        self.fresh_binders = fresh_binders

    def rewrite_tvar(self, var: TVar) -> PrimExpr:
        return self.mapping.get(var, var)

    def _rebind(self, var: TVar) -> TVar:
        if not self.fresh_binders:
            return var
        fresh = TVar(var.name, var.dtype)
        self.mapping[var] = fresh
        return fresh

    def visit_for(self, stmt: For) -> Stmt:
        start, extent = self.visit_expr(stmt.start), self.visit_expr(stmt.extent)
        loop_var = self._rebind(stmt.loop_var)
        body = self.visit_stmt(stmt.body)
        if loop_var is stmt.loop_var and start is stmt.start and extent is stmt.extent and body is stmt.body:
            return stmt
        return For(loop_var, start, extent, stmt.kind, body)

    def visit_let_stmt(self, stmt: LetStmt) -> Stmt:
        value = self.visit_expr(stmt.value)
        var = self._rebind(stmt.var)
        body = self.visit_stmt(stmt.body)
        if var is stmt.var and value is stmt.value and body is stmt.body:
            return stmt
        return LetStmt(var, value, body)


def substitute(node: Stmt | PrimExpr, mapping: Mapping[TVar, PrimExpr], fresh_binders: bool = False) -> Any:
    """``node`` with each variable in ``mapping`` replaced by its expression."""
    substituter = _Substituter(mapping, fresh_binders)
    if isinstance(node, Stmt):
        return substituter.visit_stmt(node)
    return substituter.visit_expr(node)


__all__ = [
    "StmtExprVisitor", "StmtExprMutator", "EXPR_SPECS", "STMT_HOOKS", "expr_children",
    "iter_expr_post_order", "same_expr", "stmt_children", "substitute", "BINARY_CLASSES", "COMPARE_CLASSES",
]

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

Every table here derives from the nodes' declarations (:mod:`passinfra.tir.schema`):
children, rebuilding, the hook names, the statement defaults (visit or rebuild from the
fields, binders kept), so a node kind declared elsewhere is walked and rewritten too.
Memo tables are keyed by ``id`` (``==`` is identity; structure is :func:`same_expr`).
:func:`iter_stmts` / :func:`any_stmt` / :func:`iter_exprs` / :func:`any_expr` are the
walks everything else uses instead of a hand-written stack.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from passinfra.errors import IRError
from passinfra.tir import nodes
from passinfra.tir.nodes import PrimExpr, Stmt, TVar
from passinfra.tir.schema import TirSchema, node_kinds, schema_of

BINARY_CLASSES = (nodes.Add, nodes.Sub, nodes.Mul, nodes.Div, nodes.FloorDiv, nodes.FloorMod, nodes.Min,
                  nodes.Max)
COMPARE_CLASSES = (nodes.EQ, nodes.NE, nodes.LT, nodes.LE, nodes.GT, nodes.GE, nodes.And, nodes.Or)


class _KindTable(dict):
    """``class -> schema`` of the expression (or statement) kinds, filled on first use:
    after that a walk's lookup is one dict subscript, no call (walks are the hot loops of
    codegen); a class of the other sort, or no node kind at all, is an IRError."""

    def __init__(self, statements: bool) -> None:
        super().__init__()
        self.statements = statements

    def __missing__(self, cls: type) -> TirSchema:
        schema = schema_of(cls)
        if schema.is_stmt != self.statements:
            what = "statement" if self.statements else "expression"
            raise IRError(f"not a loop-level {what}: {cls.__name__}")
        self[cls] = schema
        return schema


_EXPRS = _KindTable(statements=False)
_STMTS = _KindTable(statements=True)


def _expr_schema(node: Any) -> TirSchema:
    return _EXPRS[type(node)]


def _stmt_schema(node: Any) -> TirSchema:
    return _STMTS[type(node)]


def expr_children(expr: PrimExpr) -> tuple:
    """The sub-expressions of ``expr``, in field order."""
    return _EXPRS[type(expr)].children(expr)


def stmt_children(stmt: Stmt) -> tuple[Stmt, ...]:
    """The statements directly inside ``stmt`` (a loop's body, a sequence's statements,
    both branches of an if, the body of an allocation or a let); none for the others."""
    return _stmt_schema(stmt).stmts(stmt)


def stmt_exprs(stmt: Stmt) -> tuple[PrimExpr, ...]:
    """The operand expressions of ``stmt`` itself (a loop's bounds, a store's value and
    indices, a branch's condition), not those of statements inside it."""
    return _stmt_schema(stmt).exprs(stmt)


# ------------------------------------------------------------------------------- walks


def iter_stmts(root: Stmt, enter: Callable[[Stmt], bool] | None = None) -> Iterator[Stmt]:
    """Every statement of ``root``, ``root`` first, parents before children, in program
    order. ``enter(stmt)`` false: ``stmt`` is yielded but the walk does not go inside it
    (e.g. skip what a parallel loop holds)."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        if enter is None or enter(node):
            stack.extend(reversed(stmt_children(node)))


def any_stmt(root: Stmt, predicate: Callable[[Stmt], bool],
             enter: Callable[[Stmt], bool] | None = None) -> bool:
    """Whether a statement of ``root`` (see :func:`iter_stmts`) satisfies ``predicate``."""
    return any(map(predicate, iter_stmts(root, enter)))


def iter_exprs(root: PrimExpr) -> Iterator[PrimExpr]:
    """Every distinct node of ``root`` (by identity), parents before children."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(reversed(_EXPRS[type(node)].children(node)))


def any_expr(root: PrimExpr, predicate: Callable[[PrimExpr], bool]) -> bool:
    """Whether a node of ``root`` satisfies ``predicate``."""
    return any(map(predicate, iter_exprs(root)))


def iter_expr_tree(root: PrimExpr, enter: Callable[[PrimExpr], bool] | None = None) -> Iterator[PrimExpr]:
    """The nodes of ``root`` counted as a tree (a shared node once per use), parents
    first; ``enter(node)`` false: its children are skipped. What size estimates count:
    which subexpressions are shared objects differs between a function and its copy on a
    worker, a tree count does not."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        if enter is None or enter(node):
            stack.extend(reversed(_EXPRS[type(node)].children(node)))


def fold_expr(root: PrimExpr, combine: Callable[[PrimExpr, list], Any]) -> Any:
    """``combine(node, [results of its children])`` for each distinct node of ``root``,
    children first (each computed once); the root's result. A printer's or renderer's
    text, an evaluator's value."""
    done: dict[int, Any] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in done:
            continue
        kids = _EXPRS[type(node)].children(node)
        if expanded or not kids:
            done[id(node)] = combine(node, [done[id(kid)] for kid in kids])
            continue
        stack.append((node, True))
        stack.extend((kid, False) for kid in reversed(kids) if id(kid) not in done)
    return done[id(root)]


def iter_expr_post_order(expr: PrimExpr) -> Iterator[PrimExpr]:
    """Every distinct node of ``expr`` (by identity), children before parents."""
    # (written for speed: a kernel's lowering asks this of ~150,000 mostly tiny
    # expressions; a leaf is yielded without a trip through the stack)
    seen: set[int] = set()
    stack: list[tuple[Any, bool]] = [(expr, False)]
    pop, push = stack.pop, stack.append
    while stack:
        node, expanded = pop()
        if expanded:
            yield node
            continue
        key = id(node)
        if key in seen:
            continue
        seen.add(key)
        kids = _EXPRS[type(node)].children(node)
        if not kids:
            yield node
            continue
        push((node, True))
        for child in reversed(kids):
            if id(child) not in seen:
                push((child, False))


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
        schema = _EXPRS[type(x)]
        if schema.variable or schema.key(x) != schema.key(y):
            return False  # distinct variables, or different values, buffers or arity
        stack.extend(zip(schema.children(x), schema.children(y)))
    return True


# ------------------------------------------------------------------------------ visitor


def _method_names(prefix: str) -> dict[type, str]:
    """``class -> prefix + hook`` for every declared kind, filled in on first use (a kind
    declared later, in a plugin or a test, is found too)."""

    class Names(dict):
        def __missing__(self, cls: type) -> str:
            name = self[cls] = prefix + schema_of(cls).hook
            return name

    return Names()


_VISIT = _method_names("visit_")
_REWRITE = _method_names("rewrite_")


class StmtExprVisitor:
    """Read-only walk over statements (recursive per scope) and expressions (iterative)."""

    def visit_stmt(self, stmt: Stmt) -> None:
        _stmt_schema(stmt)
        getattr(self, _VISIT[type(stmt)], self.visit_children)(stmt)

    def visit_children(self, stmt: Stmt) -> None:
        """The default of every statement hook: visit its expressions and statements, in
        field order (a binder is not visited)."""
        for child in schema_of(type(stmt)).operands(stmt):
            if isinstance(child, Stmt):
                self.visit_stmt(child)
            else:
                self.visit_expr(child)

    def visit_expr(self, expr: PrimExpr) -> None:
        """Call ``visit_<kind>`` on every node of ``expr``, parents before children
        (a shared node is visited at each use)."""
        stack = [expr]
        while stack:
            node = stack.pop()
            schema = _EXPRS[type(node)]
            getattr(self, _VISIT[type(node)], _ignore)(node)
            stack.extend(reversed(schema.children(node)))


def _ignore(node: Any) -> None:
    return None


# ------------------------------------------------------------------------------ mutator


def _same(node: Any) -> Any:
    return node


_NO_EXPRESSION_HOOKS: dict[type, bool] = {}  # mutator class -> it rewrites no expression


def _rewrites_nothing(mutator: StmtExprMutator) -> bool:
    """Whether ``mutator`` leaves every expression as it is: no ``rewrite_<kind>`` hook
    (on its class or the object) and the default ``map_buffer``."""
    cls = type(mutator)
    known = _NO_EXPRESSION_HOOKS.get(cls)
    if known is None:
        known = _NO_EXPRESSION_HOOKS[cls] = (
            cls.map_buffer is StmtExprMutator.map_buffer
            and not any(name.startswith("rewrite_") for name in dir(cls)))
    return known and not any(name.startswith("rewrite_") or name == "map_buffer"
                             for name in getattr(mutator, "__dict__", ()))


class StmtExprMutator:
    """Functional rewrite of statements and expressions (see the module docstring).

    Subclasses override statement hooks ``visit_<kind>(stmt) -> Stmt`` (pre-order: they
    decide when to visit children, e.g. to record a loop's range first) and expression
    hooks ``rewrite_<kind>(node) -> PrimExpr`` (post-order). ``map_buffer(buffer)``
    lets a subclass replace buffers wherever they appear.
    """

    def visit_stmt(self, stmt: Stmt) -> Stmt:
        _stmt_schema(stmt)
        return getattr(self, _VISIT[type(stmt)], self.visit_children)(stmt)

    def visit_children(self, stmt: Stmt) -> Stmt:
        """The default of every statement hook: ``stmt`` rebuilt from its visited
        expressions and statements and mapped buffers (in field order; binders kept),
        the same object when none changed."""
        return schema_of(type(stmt)).map_fields(stmt, self.visit_expr, self.visit_stmt, self.map_buffer)

    def map_buffer(self, buffer: nodes.Buffer) -> nodes.Buffer:
        return buffer

    def visit_expr(self, expr: PrimExpr) -> PrimExpr:
        """Rewrite ``expr`` bottom-up; each distinct node is rewritten once."""
        # (written for speed: the lowering passes call this ~14,000 times per DenseNet-121
        # build; a mutator with no expression hook and no buffer map returns the
        # expression as it is, unwalked; a leaf is rewritten without a trip through the
        # stack, and each kind's hook is looked up once per call)
        if _rewrites_nothing(self):
            return expr
        done: dict[int, PrimExpr] = {}
        hooks: dict[type, Any] = {}
        stack: list[tuple[Any, bool]] = [(expr, False)]
        pop, push = stack.pop, stack.append
        while stack:
            node, expanded = pop()
            key = id(node)
            if key in done:
                continue
            kind = type(node)
            schema = _EXPRS[kind]
            kids = schema.children(node)
            if kids and not expanded:
                push((node, True))
                for kid in reversed(kids):
                    if id(kid) not in done:
                        push((kid, False))
                continue
            new_node = node
            if kids:
                new_kids = [done[id(kid)] for kid in kids]
                for new, old in zip(new_kids, kids):
                    if new is not old:
                        new_node = schema.rebuild(node, new_kids)
                        break
            if schema.has_buffers:
                new_node = schema.map_fields(new_node, _same, _same, self.map_buffer)
            hook = hooks.get(kind, _same)
            if hook is _same:
                hook = hooks[kind] = getattr(self, _REWRITE[kind], None)
            done[key] = hook(new_node) if hook is not None else new_node
        return done[id(expr)]

    def visit_exprs(self, exprs: tuple[PrimExpr, ...]) -> tuple[PrimExpr, ...]:
        """``exprs`` rewritten; the same tuple when none changed."""
        new = tuple(self.visit_expr(e) for e in exprs)
        return exprs if all(n is o for n, o in zip(new, exprs)) else new


def _install_statement_defaults() -> None:
    """``visit_for``, ``visit_seq_stmt``, ... on both bases, as the generic default, so a
    subclass hook can call ``super().visit_for(stmt)``."""
    for cls in node_kinds():
        schema = schema_of(cls)
        if schema.is_stmt:
            setattr(StmtExprVisitor, "visit_" + schema.hook, StmtExprVisitor.visit_children)
            setattr(StmtExprMutator, "visit_" + schema.hook, StmtExprMutator.visit_children)


_install_statement_defaults()


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

    def visit_for(self, stmt: nodes.For) -> Stmt:
        start, extent = self.visit_expr(stmt.start), self.visit_expr(stmt.extent)
        loop_var = self._rebind(stmt.loop_var)
        body = self.visit_stmt(stmt.body)
        if loop_var is stmt.loop_var and start is stmt.start and extent is stmt.extent and body is stmt.body:
            return stmt
        return nodes.For(loop_var, start, extent, stmt.kind, body)

    def visit_let_stmt(self, stmt: nodes.LetStmt) -> Stmt:
        value = self.visit_expr(stmt.value)
        var = self._rebind(stmt.var)
        body = self.visit_stmt(stmt.body)
        if var is stmt.var and value is stmt.value and body is stmt.body:
            return stmt
        return nodes.LetStmt(var, value, body)


def substitute(node: Stmt | PrimExpr, mapping: Mapping[TVar, PrimExpr], fresh_binders: bool = False) -> Any:
    """``node`` with each variable in ``mapping`` replaced by its expression."""
    substituter = _Substituter(mapping, fresh_binders)
    if isinstance(node, Stmt):
        return substituter.visit_stmt(node)
    return substituter.visit_expr(node)


__all__ = [
    "StmtExprVisitor", "StmtExprMutator", "expr_children", "stmt_children", "stmt_exprs", "iter_stmts",
    "any_stmt", "iter_exprs", "any_expr", "iter_expr_tree", "fold_expr", "iter_expr_post_order", "same_expr",
    "substitute", "BINARY_CLASSES", "COMPARE_CLASSES",
]

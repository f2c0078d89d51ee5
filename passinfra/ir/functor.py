"""Expression functors: dispatch through a type table, memoized, never recursion-bound.

``ExprVisitor`` and ``ExprMutator`` follow TVM's MixedModeVisitor idea: before a
dataflow node (Call, Tuple, TupleGetItem) is visited, its not-yet-visited dataflow
descendants are visited in post-order with an explicit stack, so when a ``visit_call``
(the default or a user's override) calls ``self.visit(arg)``, the answer is already in
the memo and the Python stack stays one frame deep. Let chains are walked with a loop.
The depth of the Python stack is therefore bounded by how often dataflow and
Let/If/Function scopes alternate, not by the size of the program.

Everything per node kind here comes from the kinds' schemas (:mod:`passinfra.ir.schema`):
the method each kind dispatches to, its children, which kinds are dataflow nodes, and the
default ``visit_*`` methods of ExprVisitor (visit the children in declaration order) and
ExprMutator (rebuild from the visited children, the same object when none changed), which
are generated for every declared kind. The one hand-written default is ``visit_let``: it
walks Let chains with a loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from passinfra.ir.expr import Expr, Let
from passinfra.ir.op.registry import Op
from passinfra.ir.schema import KindTable, NodeSchema, declare, on_node_kind, value

# Op is defined with the op registry (passinfra/ir/op/registry.py); its declaration lives
# here, the first IR module that imports both. It is a leaf known by its name, rebuilt
# (unpickled) by looking the name up in the registry.
declare(Op, NodeSchema(value("name", label="op"), method="visit_op", make=Op.get))

# the dataflow node kinds (Call, Tuple, TupleGetItem), kept up to date by on_node_kind
DATAFLOW_TYPES: set[type] = set()
_METHOD_NAMES = KindTable(lambda schema: schema.method)
_CHILDREN = KindTable(lambda schema: schema.children)


def expr_children(expr: Expr) -> tuple:
    """The direct sub-expressions of ``expr`` in evaluation order (its schema's child
    fields in declaration order; Let: var, value, body; Function: params, body)."""
    try:
        return _CHILDREN[type(expr)](expr)
    except KeyError:
        raise TypeError(f"not an IR expression: {type(expr).__name__}") from None


def iter_nodes(root: Expr, children: Callable[[Expr], tuple] = expr_children) -> Iterator[Expr]:
    """Yield every node reachable from ``root`` through ``children`` once, parents before
    children (an analysis that walks a scope only passes the children it enters)."""
    seen: set = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(reversed(children(node)))


def iter_post_order(root: Expr) -> Iterator[Expr]:
    """Yield every node reachable from ``root`` once, children before parents.

    Iterative; shared nodes are yielded once. The order is deterministic: left-to-right
    over :func:`expr_children`.
    """
    seen: set = set()
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            yield node
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        children = expr_children(node)
        for child in reversed(children):
            if child not in seen:
                stack.append((child, False))


def post_order_visit(root: Expr, fvisit: Callable[[Expr], Any]) -> None:
    """Call ``fvisit`` on every node reachable from ``root``, children first, once each."""
    for node in iter_post_order(root):
        fvisit(node)


class ExprFunctor:
    """Dispatch ``visit(expr)`` to ``visit_<kind>`` through a type table; no memo.

    Subclasses implement the ``visit_*`` methods they need; a missing one raises
    NotImplementedError naming the node kind.
    """

    def visit(self, expr: Expr) -> Any:
        return self._dispatch(expr)

    def _dispatch(self, expr: Expr) -> Any:
        try:
            name = _METHOD_NAMES[type(expr)]
        except KeyError:
            raise TypeError(f"{type(self).__name__} cannot visit {type(expr).__name__}") from None
        return getattr(self, name)(expr)

    def _missing(self, expr: Expr) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not handle {type(expr).__name__}")

    # visit_var, visit_call, ...: ``_missing`` for every declared kind (see _install below)


def _expand_dataflow(functor: Any, root: Expr, done: Any, finish: Callable[[Expr], None]) -> None:
    """Post-order over the dataflow nodes under ``root`` not yet in ``done``; ``finish``
    visits one node after its dataflow children."""
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if node in done:
            continue
        if expanded:
            finish(node)
            continue
        stack.append((node, True))
        for child in reversed(_CHILDREN[type(node)](node)):
            if type(child) in DATAFLOW_TYPES and child not in done:
                stack.append((child, False))


class ExprVisitor(ExprFunctor):
    """Visits every reachable node once (shared nodes once), children first by default.

    The default ``visit_<kind>`` of each node kind visits its children in declaration
    order (generated from the kind's schema); ``visit_let`` is written out below.
    """

    @property
    def _visited(self) -> set:
        visited = self.__dict__.get("_visited_set")
        if visited is None:
            visited = self.__dict__["_visited_set"] = set()
        return visited

    def visit(self, expr: Expr) -> None:
        visited = self._visited
        if expr in visited:
            return
        if type(expr) in DATAFLOW_TYPES:
            def finish(node: Expr) -> None:
                visited.add(node)
                self._dispatch(node)

            _expand_dataflow(self, expr, visited, finish)
        else:
            visited.add(expr)
            self._dispatch(expr)

    def visit_let(self, let: Let) -> None:
        """Visit the binding, then the body.

        Let chains are walked by a loop: when this Let is the body of the Let whose
        walk is under way, its own body is handed back to that walk instead of being
        visited here. So an override of ``visit_let`` that calls ``super()`` is called
        for every Let of a 100,000-long chain at a constant stack depth; the one
        difference it can see is that, for a Let in the body position of another Let,
        the code after its ``super()`` call runs before its body is visited.
        """
        self.visit(let.var)
        self.visit(let.value)
        state = self.__dict__
        if state.get("_chain_next") is let:
            state["_chain_deferred"] = let.body
            return
        saved = (state.get("_chain_next"), state.get("_chain_deferred"))
        body: Expr | None = let.body
        try:
            while body is not None:
                state["_chain_next"], state["_chain_deferred"] = body, None
                self.visit(body)
                body = state["_chain_deferred"]
        finally:
            state["_chain_next"], state["_chain_deferred"] = saved


class ExprMutator(ExprFunctor):
    """Functional rewriting with a memo: each node is rewritten once, and a node whose
    children did not change is returned as the same object.

    The default ``visit_<kind>`` of each node kind visits its children in declaration
    order and rebuilds the node from the results (generated from the kind's schema: for
    Call, ``Call(visit(op), [visit(a) for a in args], call.attrs)``); ``visit_let`` is
    written out below.
    """

    @property
    def memo(self) -> dict:
        memo = self.__dict__.get("_memo")
        if memo is None:
            memo = self.__dict__["_memo"] = {}
        return memo

    def visit(self, expr: Expr) -> Expr:
        memo = self.memo
        hit = memo.get(expr)
        if hit is not None:
            return hit
        if type(expr) in DATAFLOW_TYPES:
            def finish(node: Expr) -> None:
                memo[node] = self._dispatch(node)

            _expand_dataflow(self, expr, memo, finish)
            return memo[expr]
        result = self._dispatch(expr)
        memo[expr] = result
        return result

    def visit_let(self, let: Let) -> Expr:
        """Rewrite a Let chain with a loop (bindings outer to inner, then the body).

        Passes customise Lets through two hooks instead of overriding this method:
        ``on_let_binding`` sees each rewritten binding before the body is visited (e.g.
        to map the var to a constant in ``self.memo``) and ``rewrite_let`` builds the
        result (e.g. drops a dead binding). Overriding ``visit_let`` itself still works,
        but then each inner Let is reached by recursion.
        """
        memo = self.memo
        default = type(self).visit_let is ExprMutator.visit_let
        chain: list[tuple[Let, Expr, Expr]] = []
        node: Expr = let
        while True:
            new_var, new_value = self.visit(node.var), self.visit(node.value)
            self.on_let_binding(node, new_var, new_value)
            chain.append((node, new_var, new_value))
            body = node.body
            if default and type(body) is Let and body not in memo:
                node = body
                continue
            result = self.visit(body)
            break
        # rebuild from the innermost binding outwards, sharing what did not change
        for old, new_var, new_value in reversed(chain):
            result = self.rewrite_let(old, new_var, new_value, result)
            memo[old] = result
        return result

    def on_let_binding(self, let: Let, new_var: Expr, new_value: Expr) -> None:
        """Called for each binding of a Let chain after its value is rewritten."""

    def rewrite_let(self, let: Let, new_var: Expr, new_value: Expr, new_body: Expr) -> Expr:
        """Build the rewritten Let; the original when nothing changed."""
        if new_var is let.var and new_value is let.value and new_body is let.body:
            return let
        return Let(new_var, new_value, new_body)


def _install(cls: type, schema: NodeSchema) -> None:
    """Give the functors their entries for a declared node kind: its dataflow flag and
    the default ``visit_<kind>`` methods (a hand-written one in a class body wins)."""
    if schema.dataflow:
        DATAFLOW_TYPES.add(cls)
    for functor, default in (
        (ExprFunctor, ExprFunctor._missing),
        (ExprVisitor, schema.visit_default),
        (ExprMutator, schema.mutate_default),
    ):
        if schema.method not in functor.__dict__:
            setattr(functor, schema.method, default)


on_node_kind(_install)

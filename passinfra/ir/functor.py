"""Expression functors: dispatch through a type table, memoized, never recursion-bound.

``ExprVisitor`` and ``ExprMutator`` follow TVM's MixedModeVisitor idea: before a
dataflow node (Call, Tuple, TupleGetItem) is visited, its not-yet-visited dataflow
descendants are visited in post-order with an explicit stack, so when a ``visit_call``
(the default or a user's override) calls ``self.visit(arg)``, the answer is already in
the memo and the Python stack stays one frame deep. Let chains are walked with a loop.
The depth of the Python stack is therefore bounded by how often dataflow and
Let/If/Function scopes alternate, not by the size of the program.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from passinfra.ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Tuple,
    TupleGetItem,
    Var,
)
from passinfra.ir.op.registry import Op

DATAFLOW_TYPES = (Call, Tuple, TupleGetItem)

_METHOD_NAMES: dict[type, str] = {
    Var: "visit_var",
    GlobalVar: "visit_global_var",
    Constant: "visit_constant",
    Call: "visit_call",
    Tuple: "visit_tuple",
    TupleGetItem: "visit_tuple_getitem",
    Let: "visit_let",
    If: "visit_if",
    Function: "visit_function",
    Op: "visit_op",
}


def _children_call(e: Call) -> tuple:
    return (e.op, *e.args)


_CHILDREN: dict[type, Callable[[Any], tuple]] = {
    Var: lambda e: (),
    GlobalVar: lambda e: (),
    Constant: lambda e: (),
    Op: lambda e: (),
    Call: _children_call,
    Tuple: lambda e: e.fields,
    TupleGetItem: lambda e: (e.tuple_value,),
    Let: lambda e: (e.var, e.value, e.body),
    If: lambda e: (e.cond, e.true_branch, e.false_branch),
    Function: lambda e: (*e.params, e.body),
}


def expr_children(expr: Expr) -> tuple:
    """The direct sub-expressions of ``expr`` in evaluation order (Function: params, body)."""
    try:
        return _CHILDREN[type(expr)](expr)
    except KeyError:
        for base in type(expr).__mro__[1:]:
            if base in _CHILDREN:
                return _CHILDREN[base](expr)
        raise TypeError(f"not an IR expression: {type(expr).__name__}") from None


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
        name = _METHOD_NAMES.get(type(expr))
        if name is None:
            for base in type(expr).__mro__[1:]:
                name = _METHOD_NAMES.get(base)
                if name:
                    break
            else:
                raise TypeError(f"{type(self).__name__} cannot visit {type(expr).__name__}")
        return getattr(self, name)(expr)

    def _missing(self, expr: Expr) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not handle {type(expr).__name__}")

    visit_var = visit_global_var = visit_constant = visit_call = _missing
    visit_tuple = visit_tuple_getitem = visit_let = visit_if = visit_function = visit_op = _missing


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
    """Visits every reachable node once (shared nodes once), children first by default."""

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

    def visit_var(self, var: Var) -> None:
        pass

    def visit_global_var(self, gv: GlobalVar) -> None:
        pass

    def visit_constant(self, const: Constant) -> None:
        pass

    def visit_op(self, op: Op) -> None:
        pass

    def visit_call(self, call: Call) -> None:
        self.visit(call.op)
        for arg in call.args:
            self.visit(arg)

    def visit_tuple(self, tup: Tuple) -> None:
        for field in tup.fields:
            self.visit(field)

    def visit_tuple_getitem(self, tgi: TupleGetItem) -> None:
        self.visit(tgi.tuple_value)

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

    def visit_if(self, node: If) -> None:
        self.visit(node.cond)
        self.visit(node.true_branch)
        self.visit(node.false_branch)

    def visit_function(self, func: Function) -> None:
        for param in func.params:
            self.visit(param)
        self.visit(func.body)


class ExprMutator(ExprFunctor):
    """Functional rewriting with a memo: each node is rewritten once, and a node whose
    children did not change is returned as the same object."""

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

    def visit_var(self, var: Var) -> Expr:
        return var

    def visit_global_var(self, gv: GlobalVar) -> Expr:
        return gv

    def visit_constant(self, const: Constant) -> Expr:
        return const

    def visit_op(self, op: Op) -> Expr:
        return op

    def visit_call(self, call: Call) -> Expr:
        new_op = self.visit(call.op)
        new_args = [self.visit(arg) for arg in call.args]
        if new_op is call.op and all(a is b for a, b in zip(new_args, call.args)):
            return call
        return Call(new_op, new_args, call.attrs)

    def visit_tuple(self, tup: Tuple) -> Expr:
        fields = [self.visit(f) for f in tup.fields]
        if all(a is b for a, b in zip(fields, tup.fields)):
            return tup
        return Tuple(fields)

    def visit_tuple_getitem(self, tgi: TupleGetItem) -> Expr:
        value = self.visit(tgi.tuple_value)
        return tgi if value is tgi.tuple_value else TupleGetItem(value, tgi.index)

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

    def visit_if(self, node: If) -> Expr:
        cond = self.visit(node.cond)
        true_branch = self.visit(node.true_branch)
        false_branch = self.visit(node.false_branch)
        if cond is node.cond and true_branch is node.true_branch and false_branch is node.false_branch:
            return node
        return If(cond, true_branch, false_branch)

    def visit_function(self, func: Function) -> Expr:
        params = [self.visit(p) for p in func.params]
        body = self.visit(func.body)
        if body is func.body and all(a is b for a, b in zip(params, func.params)):
            return func
        return Function(params, body, func.ret_type, func.attrs)

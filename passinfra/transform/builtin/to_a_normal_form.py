"""ToANormalForm: bind every non-atomic subexpression to a variable, in evaluation order.

After the pass, the arguments of every Call, the fields of every Tuple, the operand of a
TupleGetItem and the condition of an If are atoms (Var, GlobalVar, Constant, Op); Calls,
Tuples, TupleGetItems, Ifs and Function literals appear only as Let values, and each
scope (function body, If branch) is a Let chain ending in an atom.

Where a node is bound (TVM's dependency-graph scopes, simplified): the scopes form a tree
(a function body; each If branch and Function literal body opens a child scope). A node
is bound once, in the innermost scope that encloses all its uses, i.e. the lowest common
ancestor of the scopes of its parents. So a node shared by both branches of an If is
computed once before the If, and a node used in one branch only stays inside it.

An original ``let x = value`` keeps its var: when ``value`` is used nowhere else, ``x``
is bound directly to its A-normal form instead of through a fresh temporary.

Everything is iterative (one explicit stack for the whole function, nested scopes
included), so 100,000-node dataflow chains and Let chains need no recursion.
"""

from __future__ import annotations

from collections.abc import Callable

from passinfra.ir.expr import Call, Constant, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem, Var
from passinfra.ir.functor import expr_children, iter_post_order
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import function_pass
from passinfra.transform.passes import Pass
from passinfra.transform.registry import register_pass

__all__ = ["ToANormalForm", "to_a_normal_form", "is_atom"]

ATOM_TYPES = (Var, GlobalVar, Constant, Op)


def is_atom(expr: Expr) -> bool:
    """Var, GlobalVar, Constant or Op: what ANF allows as an operand."""
    return isinstance(expr, ATOM_TYPES)


class _Scope:
    """A node of the scope tree, collecting the bindings placed in it."""

    __slots__ = ("parent", "depth", "bindings")

    def __init__(self, parent: _Scope | None) -> None:
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.bindings: list[tuple[Var, Expr]] = []


def _common_scope(a: _Scope | None, b: _Scope) -> _Scope:
    if a is None:
        return b
    while a.depth > b.depth:
        a = a.parent  # type: ignore[assignment]
    while b.depth > a.depth:
        b = b.parent  # type: ignore[assignment]
    while a is not b:
        a, b = a.parent, b.parent  # type: ignore[assignment]
    return a


class _Placement:
    """Scope of every non-atomic node (reverse post-order: all parents before a child)."""

    def __init__(self, func: Function, root: _Scope) -> None:
        self.scope_of: dict[Expr, _Scope] = {func.body: root}
        self.child_scopes: dict[tuple[Expr, int], _Scope] = {}
        self.parents: dict[Expr, int] = {}
        for node in reversed(list(iter_post_order(func.body))):
            if is_atom(node):
                continue
            scope = self.scope_of[node]
            for position, child in self._uses(node):
                if is_atom(child):
                    continue
                self.parents[child] = self.parents.get(child, 0) + 1
                use_scope = scope
                if isinstance(node, Function) or (type(node) is If and position > 0):
                    use_scope = self.child_scopes.setdefault((node, position), _Scope(scope))
                self.scope_of[child] = _common_scope(self.scope_of.get(child), use_scope)

    @staticmethod
    def _uses(node: Expr) -> list[tuple[int, Expr]]:
        if isinstance(node, Function):
            return [(0, node.body)]
        if type(node) is Let:
            return [(0, node.value), (1, node.body)]
        return list(enumerate(expr_children(node)))


class _Converter:
    """Walks one function in evaluation order and emits the bindings into scopes."""

    def __init__(self, func: Function) -> None:
        self.root = _Scope(None)
        self.placement = _Placement(func, self.root)
        self.atom: dict[Expr, Expr] = {}
        self.original_let: dict[Var, Let] = {}
        self.counter = 0
        # a Let value used by that Let only: the Let's var names it directly
        self.named_value: dict[Expr, Var] = {}

    def fresh_var(self) -> Var:
        self.counter += 1
        return Var(f"anf{self.counter}")

    def atom_of(self, expr: Expr) -> Expr:
        return expr if is_atom(expr) else self.atom[expr]

    def bind(self, node: Expr, value: Expr) -> None:
        var = self.named_value.get(node) or self.fresh_var()
        self.placement.scope_of[node].bindings.append((var, value))
        self.atom[node] = var

    def wrap(self, scope: _Scope, result: Expr) -> Expr:
        """The scope's bindings as a Let chain ending in ``result``; reuses original Lets."""
        body = result
        for var, value in reversed(scope.bindings):
            old = self.original_let.get(var)
            if old is not None and old.value is value and old.body is body:
                body = old
            else:
                body = Let(var, value, body)
        return body

    def convert(self, func: Function) -> Function:
        stack: list[tuple[Callable[..., None], tuple]] = [(self._enter, (func.body,))]
        while stack:
            step, args = stack.pop()
            step(stack, *args)
        body = self.wrap(self.root, self.atom_of(func.body))
        if body is func.body:
            return func
        return Function(func.params, body, func.ret_type, func.attrs)

    # -- steps; each may push more steps onto the stack ------------------------------

    def _enter(self, stack: list, node: Expr) -> None:
        if is_atom(node) or node in self.atom:
            return
        kind = type(node)
        if kind is Let:
            self.original_let[node.var] = node
            if not is_atom(node.value) and self.placement.parents.get(node.value) == 1:
                self.named_value[node.value] = node.var
            stack.append((self._finish_let, (node,)))
            stack.append((self._enter, (node.body,)))
            stack.append((self._bind_let, (node,)))
            stack.append((self._enter, (node.value,)))
        elif kind is If:
            stack.append((self._finish_if, (node,)))
            stack.append((self._enter, (node.false_branch,)))
            stack.append((self._enter, (node.true_branch,)))
            stack.append((self._enter, (node.cond,)))
        elif isinstance(node, Function):
            stack.append((self._finish_function, (node,)))
            stack.append((self._enter, (node.body,)))
        else:
            stack.append((self._finish_dataflow, (node,)))
            for child in reversed(expr_children(node)):
                stack.append((self._enter, (child,)))

    def _bind_let(self, stack: list, let: Let) -> None:
        value = let.value
        if self.named_value.get(value) is not let.var:
            scope = self.placement.scope_of[let]
            scope.bindings.append((let.var, self.atom_of(value)))

    def _finish_let(self, stack: list, let: Let) -> None:
        self.atom[let] = self.atom_of(let.body)

    def _finish_if(self, stack: list, node: If) -> None:
        branches = []
        for position, branch in ((1, node.true_branch), (2, node.false_branch)):
            scope = self.placement.child_scopes.get((node, position))
            branches.append(branch if scope is None else self.wrap(scope, self.atom_of(branch)))
        cond = self.atom_of(node.cond)
        if cond is node.cond and branches[0] is node.true_branch and branches[1] is node.false_branch:
            self.bind(node, node)
        else:
            self.bind(node, If(cond, branches[0], branches[1]))

    def _finish_function(self, stack: list, func: Function) -> None:
        scope = self.placement.child_scopes.get((func, 0))
        body = func.body if scope is None else self.wrap(scope, self.atom_of(func.body))
        new = func if body is func.body else Function(func.params, body, func.ret_type, func.attrs)
        self.bind(func, new)

    def _finish_dataflow(self, stack: list, node: Expr) -> None:
        kind = type(node)
        if kind is Call:
            op, args = self.atom_of(node.op), [self.atom_of(arg) for arg in node.args]
            same = op is node.op and all(a is b for a, b in zip(args, node.args))
            self.bind(node, node if same else Call(op, args, node.attrs))
        elif kind is Tuple:
            fields = [self.atom_of(field) for field in node.fields]
            same = all(a is b for a, b in zip(fields, node.fields))
            self.bind(node, node if same else Tuple(fields))
        elif kind is TupleGetItem:
            value = self.atom_of(node.tuple_value)
            self.bind(node, node if value is node.tuple_value else TupleGetItem(value, node.index))
        else:
            raise TypeError(f"ToANormalForm cannot convert a {kind.__name__} node")


def to_a_normal_form(func: Function) -> Function:
    """``func`` in A-normal form (the same object if it already is)."""
    return _Converter(func).convert(func)


@register_pass("ToANormalForm")
def ToANormalForm() -> Pass:
    """A function pass (opt_level 1) converting every function to A-normal form."""

    def transform(func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return to_a_normal_form(func)

    # reads nothing but the function: the scheduler may batch it with its neighbours
    return function_pass(transform, opt_level=1, name="ToANormalForm", reads_module=False)

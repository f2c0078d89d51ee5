"""Purity: the effect analysis shared by the passes that remove, merge or move code
(DeadCodeElimination, EliminateCommonSubexpr, FoldConstant, ToGraphNormalForm).

An analysis, not a pass. Given a module, a call of another global function is judged
by that function's body. Without one (``Purity(None, func)``) such a call counts as
possibly stateful: always safe (it can only keep code that could have gone), and what
those passes do by default, so that they read nothing but the function they are given
and a parallel scheduler can batch them (see ``FunctionPass.reads_module``). Their
``interprocedural=True`` option hands the module in instead.

Also here: :func:`count_var_uses`, the use counts those passes need, and
:class:`ReadsModuleWhenInterprocedural`, what that option means to a scheduler.
"""

from __future__ import annotations

from collections.abc import Iterator

from passinfra.ir.expr import Call, Expr, Function, GlobalVar, Let, Var
from passinfra.ir.functor import expr_children, iter_nodes
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op

__all__ = ["Purity", "ReadsModuleWhenInterprocedural", "count_var_uses", "use_children"]


def _children_in_scope(node: Expr) -> tuple:
    """Children evaluated when ``node`` is evaluated: a Function literal's body is not
    (it runs when the function is called), and binders are not uses."""
    kind = type(node)
    if kind is Let:
        return (node.value, node.body)
    if isinstance(node, Function):
        return ()
    return expr_children(node)


class Purity:
    """Which expressions may be removed, merged or moved without changing results.

    An expression is impure when evaluating it may call a stateful op: directly, or
    through a call of a global function, a function literal, or a Let-bound function
    whose body (transitively) does. A call of any other callee (a parameter, a value
    computed at run time) is assumed impure, since its body is unknown; so is a call of a
    global function when no module was given. Defining a
    Function literal is pure; calling it is what counts.

    Results are memoized per node; the analysis is iterative (explicit stacks), and
    global functions' effects are found with a fixpoint over the call graph, so
    recursion between functions is handled.
    """

    def __init__(self, mod: IRModule | None = None, scope: Expr | None = None) -> None:
        self._mod = mod
        self._node_pure: dict[Expr, bool] = {}
        # function bodies ("units") -> whether calling them is pure
        self._unit_pure: dict[Function, bool] = {}
        self._let_functions: dict[Var, Function] = {}
        self._scanned_globals: set[GlobalVar] = set()
        if scope is not None:
            self.add_scope(scope)

    def add_scope(self, expr: Expr) -> None:
        """Record the Let-bound function literals of ``expr`` so calls through their vars
        can be analysed (vars are unique objects, so the binding is their only value)."""
        for node in iter_nodes(expr):
            if type(node) is Let and isinstance(node.value, Function):
                self._let_functions[node.var] = node.value

    def is_pure(self, expr: Expr) -> bool:
        """True if evaluating ``expr`` cannot call a stateful op."""
        memo = self._node_pure
        if expr in memo:
            return memo[expr]
        stack: list[tuple[Expr, bool]] = [(expr, False)]
        while stack:
            node, expanded = stack.pop()
            if node in memo:
                continue
            children = _children_in_scope(node)
            if not expanded:
                stack.append((node, True))
                stack.extend((child, False) for child in children if child not in memo)
                continue
            pure = all(memo[child] for child in children)
            if pure and type(node) is Call:
                pure = self.call_is_pure(node)
            memo[node] = pure
        return memo[expr]

    def call_is_pure(self, call: Call) -> bool:
        """True if this call itself (not its arguments) cannot call a stateful op."""
        unit = self._callee_unit(call.op)
        if isinstance(unit, bool):
            return unit
        return self._unit_is_pure(unit)

    def _callee_unit(self, callee: Expr) -> Function | bool:
        """The function body a call runs, or a bool when known without one."""
        if isinstance(callee, Op):
            return not callee.stateful
        if isinstance(callee, Function):
            return callee
        if type(callee) is Var:
            return self._let_functions.get(callee, False)
        if type(callee) is GlobalVar:
            func = self._mod.functions.get(callee) if self._mod is not None else None
            if not isinstance(func, Function):
                return False
            if callee not in self._scanned_globals:
                self._scanned_globals.add(callee)
                self.add_scope(func)
            return func
        return False

    def _unit_is_pure(self, unit: Function) -> bool:
        if unit in self._unit_pure:
            return self._unit_pure[unit]
        # collect the units reachable from this one, with their direct effects
        callees: dict[Function, list[Function]] = {}
        impure: list[Function] = []
        stack = [unit]
        while stack:
            current = stack.pop()
            if current in callees or current in self._unit_pure:
                continue
            direct_impure, reached = self._scan_unit(current)
            callees[current] = reached
            if direct_impure:
                impure.append(current)
            stack.extend(reached)
        # impurity flows from callees to callers; what it never reaches is pure
        callers: dict[Function, list[Function]] = {u: [] for u in callees}
        for caller, reached in callees.items():
            for callee in reached:
                if callee in callers:
                    callers[callee].append(caller)
                elif not self._unit_pure[callee]:
                    impure.append(caller)
        bad: set[Function] = set()
        while impure:
            current = impure.pop()
            if current in bad:
                continue
            bad.add(current)
            impure.extend(callers[current])
        for current in callees:
            self._unit_pure[current] = current not in bad
        return self._unit_pure[unit]

    def _scan_unit(self, unit: Function) -> tuple[bool, list[Function]]:
        """(calls an impure callee directly, the function bodies it calls)."""
        reached: list[Function] = []
        direct_impure = False
        for node in _nodes_in_scope(unit.body):
            if type(node) is Call:
                target = self._callee_unit(node.op)
                if target is False:
                    direct_impure = True
                elif isinstance(target, Function):
                    reached.append(target)
        return direct_impure, reached


def _nodes_in_scope(root: Expr) -> Iterator[Expr]:
    """Every node evaluated with ``root`` (not descending into Function literals)."""
    return iter_nodes(root, _children_in_scope)


def count_var_uses(root: Expr) -> dict[Var, int]:
    """For every var used in ``root``: the number of distinct nodes referring to it
    (binders are not uses)."""
    uses: dict[Var, int] = {}
    for node in iter_nodes(root, use_children):
        for child in use_children(node):
            if type(child) is Var:
                uses[child] = uses.get(child, 0) + 1
    return uses


def use_children(node: Expr) -> tuple:
    """The children of ``node`` that can refer to a var (a Let's binder is not a use)."""
    if type(node) is Let:
        return (node.value, node.body)
    if isinstance(node, Function):
        return (node.body,)
    return expr_children(node)


class ReadsModuleWhenInterprocedural:
    """Mixin of the function passes with an ``interprocedural`` option: only then do they
    read other functions of the module (judging calls of them by their bodies); otherwise
    they promise ``reads_module=False`` and the scheduler may batch them."""

    interprocedural: bool

    @property
    def reads_module(self) -> bool:
        return bool(self.interprocedural)

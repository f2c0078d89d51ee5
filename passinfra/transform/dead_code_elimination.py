"""DeadCodeElimination: drop Let bindings nobody uses (and, optionally, inline the ones
used once).

In dataflow (graph) form there is nothing to do: an expression that no path from the
function body reaches is simply not part of the function any more. Dead code only
survives through Let bindings, whose value is evaluated even when the var is unused.
A binding is removed when its var is not live and its value is pure (see
:class:`Purity`): removing a stateful op (``random.uniform``) would change what the
program draws, so such bindings stay.

Liveness is computed from the body outwards with a worklist (``_Liveness``): the value
of a pure binding is only looked at once its var turns out to be used, so a chain of
bindings that only feed each other disappears in one run.

This module also holds :class:`Purity`, the effect analysis shared by the passes that
move or merge code (CSE, ToGraphNormalForm, Inline).
"""

from __future__ import annotations

from collections.abc import Iterator

from passinfra.ir.expr import Call, Expr, Function, GlobalVar, Let, Var
from passinfra.ir.functor import ExprMutator, expr_children
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import function_pass
from passinfra.transform.passes import Pass
from passinfra.transform.registry import register_pass

__all__ = ["DeadCodeElimination", "Purity", "count_var_uses"]


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
    computed at run time) is assumed impure, since its body is unknown. Defining a
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
        stack, seen = [expr], set()
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if type(node) is Let and isinstance(node.value, Function):
                self._let_functions[node.var] = node.value
            stack.extend(expr_children(node))

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
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(_children_in_scope(node))


class _Liveness:
    """Live Let vars of a function, and how many live nodes use each var.

    Worklist from the body: a Let's body is always live; its value is live at once if
    impure, otherwise parked until its var is first used. Nodes are processed once, so
    ``uses[v]`` counts distinct live parent nodes referring to ``v``.
    """

    def __init__(self, root: Expr, purity: Purity) -> None:
        self.uses: dict[Var, int] = {}
        pending: dict[Var, Expr] = {}
        seen: set[Expr] = set()
        stack = [root]
        while stack:
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            if type(node) is Var:
                parked = pending.pop(node, None)
                if parked is not None:
                    self._count(parked)
                    stack.append(parked)
                continue
            if type(node) is Let:
                if purity.is_pure(node.value):
                    pending[node.var] = node.value
                else:
                    self._count(node.value)
                    stack.append(node.value)
                self._count(node.body)
                stack.append(node.body)
                continue
            for child in _use_children(node):
                self._count(child)
                stack.append(child)

    def _count(self, child: Expr) -> None:
        if type(child) is Var:
            self.uses[child] = self.uses.get(child, 0) + 1

    def is_live(self, var: Var) -> bool:
        return var in self.uses


def count_var_uses(root: Expr) -> dict[Var, int]:
    """For every var used in ``root``: the number of distinct nodes referring to it
    (binders are not uses)."""
    uses: dict[Var, int] = {}
    stack, seen = [root], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        for child in _use_children(node):
            if type(child) is Var:
                uses[child] = uses.get(child, 0) + 1
            stack.append(child)
    return uses


def _use_children(node: Expr) -> tuple:
    if type(node) is Let:
        return (node.value, node.body)
    if isinstance(node, Function):
        return (node.body,)
    return expr_children(node)


class _Eliminator(ExprMutator):
    """Drops dead pure bindings; with ``inline_once``, substitutes pure values of vars
    used exactly once."""

    def __init__(self, liveness: _Liveness, purity: Purity, inline_once: bool) -> None:
        self._liveness = liveness
        self._purity = purity
        self._inline_once = inline_once
        self._inlined: set[Var] = set()

    def _removable(self, let: Let) -> bool:
        return not self._liveness.is_live(let.var) and self._purity.is_pure(let.value)

    def on_let_binding(self, let: Let, new_var: Expr, new_value: Expr) -> None:
        if (
            self._inline_once
            and self._liveness.uses.get(let.var) == 1
            and self._purity.is_pure(let.value)
            and not _uses_itself(let)
        ):
            self.memo[let.var] = new_value
            self._inlined.add(let.var)

    def rewrite_let(self, let: Let, new_var: Expr, new_value: Expr, new_body: Expr) -> Expr:
        if let.var in self._inlined or self._removable(let):
            return new_body
        return super().rewrite_let(let, new_var, new_value, new_body)


def _uses_itself(let: Let) -> bool:
    """A recursive let-bound function refers to its own var and cannot be inlined."""
    if not isinstance(let.value, Function):
        return False
    return let.var in count_var_uses(let.value)


def eliminate_dead_code(func: Function, mod: IRModule | None = None, inline_once: bool = False) -> Function:
    """``func`` without dead pure Let bindings (the same object if there are none)."""
    purity = Purity(mod, func)
    liveness = _Liveness(func.body, purity)
    return _Eliminator(liveness, purity, inline_once).visit(func)


@register_pass("DeadCodeElimination")
def DeadCodeElimination(inline_once: bool = False) -> Pass:
    """A function pass (opt_level 1) removing unused pure Let bindings; with
    ``inline_once=True`` a pure binding used exactly once is inlined into its use."""

    def transform(func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return eliminate_dead_code(func, mod, inline_once)

    return function_pass(transform, opt_level=1, name="DeadCodeElimination")


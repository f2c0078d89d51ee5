"""LambdaLift: turn nested Function literals into global functions.

For every Function literal inside a global function (innermost first):

* a closed literal (no free variables, apart from its own let-bound name when it is
  recursive) becomes a global ``<global>_lifted_<k>``; the literal is replaced by that
  GlobalVar everywhere (a GlobalVar is a function value too, so this covers literals
  that escape as values);
* a literal with free variables becomes a global taking the captured variables as extra
  leading parameters, when every use of it is as a callee: ``(fn(p) {..})(a)`` and
  ``let f = fn(p) {..}; f(a)`` become ``@g(captured.., a)`` (the binding is dropped);
* a literal with free variables that escapes as a value (returned, stored in a tuple,
  passed as an argument) stays a closure: lifting it would need a closure-building
  construct the IR does not have. Its body is still processed.

Captured variables become fresh, type-annotated parameters of the lifted global (types
come from type inference, which the pass runs first), and the vars bound inside the
lifted body are fresh too (the body may share nodes with the function it leaves), so no
var is bound in two functions. Names are deterministic: ``<global>_lifted_<k>``, numbered in post-order per
global function, skipping names the module already uses.
"""

from __future__ import annotations

from dataclasses import dataclass

from passinfra.errors import IRError
from passinfra.ir.analysis import free_vars
from passinfra.ir.expr import Call, Expr, Function, GlobalVar, Let, Var
from passinfra.ir.functor import ExprMutator, expr_children, iter_post_order
from passinfra.ir.module import IRModule
from passinfra.ir.type_infer import infer_module
from passinfra.ir.types import Type
from passinfra.transform.builtin.inline import substitute
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import module_pass
from passinfra.transform.passes import Pass
from passinfra.transform.registry import register_pass

__all__ = ["LambdaLift", "lambda_lift"]


@dataclass
class _Lift:
    """The decision for one literal: the global it becomes and what it captures."""

    gv: GlobalVar
    captured: list[Var]
    self_var: Var | None  # the let var naming the literal, if any
    ret_type: Type | None


def _type_of(var: Var) -> Type | None:
    return var.type_annotation or var._checked_type


def _uses(root: Expr) -> tuple[dict[Expr, int], dict[Expr, int]]:
    """For each node: how often it is used as a callee, and how often at all."""
    as_callee: dict[Expr, int] = {}
    total: dict[Expr, int] = {}
    for node in iter_post_order(root):
        if type(node) is Let:
            children: tuple = (node.value, node.body)
        elif isinstance(node, Function):
            children = (node.body,)
        else:
            children = expr_children(node)
        for child in children:
            total[child] = total.get(child, 0) + 1
        if type(node) is Call:
            as_callee[node.op] = as_callee.get(node.op, 0) + 1
    return as_callee, total


class _Lifter(ExprMutator):
    """Rewrites one global function; lifted globals are collected in ``self.lifted``."""

    def __init__(self, name: str, func: Function, taken: set[str]) -> None:
        self._name = name
        self._taken = taken
        self.lifted: list[tuple[GlobalVar, Function]] = []
        self._plan: dict[Expr, _Lift] = {}  # literal -> decision
        self._by_var: dict[Var, _Lift] = {}  # let var of a lifted literal -> decision
        self._counter = 0
        self._plan_lifts(func)

    def _next_name(self) -> GlobalVar:
        while f"{self._name}_lifted_{self._counter}" in self._taken:
            self._counter += 1
        name = f"{self._name}_lifted_{self._counter}"
        self._taken.add(name)
        return GlobalVar(name)

    def _plan_lifts(self, func: Function) -> None:
        as_callee, total = _uses(func.body)
        let_of: dict[Expr, Var] = {}
        for node in iter_post_order(func.body):
            if type(node) is Let and isinstance(node.value, Function) and total.get(node.value) == 1:
                let_of[node.value] = node.var
        undecided = set(let_of.values())
        # post-order: a literal is planned after the literals nested in it and after
        # the let-bound literals whose vars it uses (their bindings come first)
        for node in iter_post_order(func.body):
            if not isinstance(node, Function):
                continue
            self_var = let_of.get(node)
            undecided.discard(self_var)
            captured = self._captured(node, self_var, undecided)
            if captured is None:
                continue  # uses an enclosing recursive function not planned yet
            if captured:
                handle = self_var if self_var is not None else node
                if as_callee.get(handle, 0) != total.get(handle, 0):
                    continue  # escapes as a value: stays a closure
            ret_type = node._checked_type.ret_type if node._checked_type is not None else None
            decision = _Lift(self._next_name(), captured, self_var, node.ret_type or ret_type)
            self._plan[node] = decision
            if self_var is not None:
                self._by_var[self_var] = decision

    def _captured(self, literal: Function, self_var: Var | None, undecided: set[Var]) -> list[Var] | None:
        """The vars the lifted literal must receive: its free vars, where a lifted
        function it calls contributes that function's captured vars instead."""
        captured: dict[Var, None] = {}
        for var in free_vars(literal):
            if var is self_var:
                continue
            if var in undecided:
                return None
            decision = self._by_var.get(var)
            captured.update(dict.fromkeys(decision.captured if decision else [var]))
        return list(captured)

    def visit_var(self, var: Var) -> Expr:
        decision = self._by_var.get(var)
        if decision is not None and not decision.captured:
            return decision.gv  # a closed let-bound function is its global
        return var

    def visit_call(self, call: Call) -> Expr:
        decision = self._plan.get(call.op)
        if decision is None and type(call.op) is Var:
            decision = self._by_var.get(call.op)
        if decision is None or not decision.captured:
            return super().visit_call(call)
        # the literal itself is visited (and lifted) even though the call no longer uses it
        self.visit(call.op)
        args = [self.visit(arg) for arg in [*decision.captured, *call.args]]
        return Call(decision.gv, args, call.attrs)

    def visit_function(self, func: Function) -> Expr:
        new = super().visit_function(func)
        decision = self._plan.get(func)
        if decision is None:
            return new
        self.lifted.append((decision.gv, self._make_global(new, decision)))
        return decision.gv

    def rewrite_let(self, let: Let, new_var: Expr, new_value: Expr, new_body: Expr) -> Expr:
        if let.var in self._by_var:
            return new_body  # every use now names the global
        return super().rewrite_let(let, new_var, new_value, new_body)

    def _make_global(self, func: Function, decision: _Lift) -> Function:
        mapping: dict[Var, Expr] = {}
        params: list[Var] = []
        for var in [*decision.captured, *func.params]:
            ty = _type_of(var)
            if ty is None:
                raise IRError(
                    f"LambdaLift: cannot lift a function literal in @{self._name}: the type of "
                    f"%{var.name_hint} is unknown (run InferType first)"
                )
            fresh = Var(var.name_hint, ty)
            mapping[var] = fresh
            params.append(fresh)
        if decision.self_var is not None:
            mapping[decision.self_var] = decision.gv
        # fresh binders too: the literal's body may share a subexpression with the
        # function it came from (a DAG), and a let bound there must not be bound again here
        body = substitute(func.body, mapping, rename_bound=True)
        return Function(params, body, decision.ret_type, func.attrs)


def lambda_lift(mod: IRModule) -> IRModule:
    """Lift the nested functions of ``mod`` (updated in place and returned)."""
    infer_module(mod)
    taken = {gv.name_hint for gv in mod.functions}
    for gv, func in list(mod.items()):
        if not isinstance(func, Function):
            continue
        lifter = _Lifter(gv.name_hint, func, taken)
        new = lifter.visit(func)
        if new is not func:
            mod[gv] = new
        for lifted_gv, lifted in lifter.lifted:
            mod[lifted_gv] = lifted
    return mod


@register_pass("LambdaLift")
def LambdaLift() -> Pass:
    """A module pass (opt_level 0) lifting nested Function literals to global functions."""

    def transform(mod: IRModule, ctx: PassContext) -> IRModule:
        return lambda_lift(mod)

    return module_pass(transform, opt_level=0, name="LambdaLift", required=["InferType"])

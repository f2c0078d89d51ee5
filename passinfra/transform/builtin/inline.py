"""Inline: replace calls of global functions marked ``Inline`` by their bodies.

A call ``@f(args)`` of a function whose attrs have a truthy ``Inline`` becomes f's body
with the parameters bound to the arguments: an atomic argument (Var, GlobalVar,
Constant) is substituted; any other is bound by a Let placed before the body, so it is
still evaluated exactly once, before the body, as the call would have done (an argument
that is itself a short Let chain has its bindings floated out first). Every var
the body binds is renamed on each inlining, so inlining a function twice never binds a
var twice. Inline functions are processed callees first, so nested Inline calls
disappear entirely; recursion among Inline functions is an error naming the cycle.

An Inline function no longer referenced after inlining is removed (``main`` is kept).
A GlobalVar of an Inline function used as a value (not called) keeps it referenced.
"""

from __future__ import annotations

from collections.abc import Mapping

import networkx as nx

from passinfra.errors import IRError
from passinfra.ir.analysis import bound_vars, use_counts
from passinfra.ir.expr import Call, Constant, Expr, Function, GlobalVar, Let, Var
from passinfra.ir.functor import ExprMutator
from passinfra.ir.module import IRModule
from passinfra.transform.builtin.remove_unused_functions import referenced_globals
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import module_pass
from passinfra.transform.passes import Pass
from passinfra.transform.registry import register_pass

__all__ = ["Inline", "inline_functions", "substitute", "InlineCycleError"]

ENTRY_FUNCTION = "main"
FLOAT_LIMIT = 64  # longest Let chain of an argument that is floated out of the call


class InlineCycleError(IRError):
    """Functions marked Inline call each other in a cycle."""


class _Substituter(ExprMutator):
    """Replace vars by expressions; optionally give every binder a fresh Var."""

    def __init__(self, mapping: Mapping[Var, Expr], rename_binders: frozenset | set = frozenset()) -> None:
        self._mapping = dict(mapping)
        self._rename = rename_binders

    def visit_var(self, var: Var) -> Expr:
        hit = self._mapping.get(var)
        if hit is not None:
            return hit
        if var in self._rename:
            fresh = Var(var.name_hint, var.type_annotation)
            self._mapping[var] = fresh
            return fresh
        return var


def substitute(expr: Expr, mapping: Mapping[Var, Expr], rename_bound: bool = False) -> Expr:
    """``expr`` with each var in ``mapping`` replaced; with ``rename_bound`` every var
    bound inside ``expr`` (Let vars, literal parameters) gets a fresh Var."""
    renamed = set(bound_vars(expr)) if rename_bound else frozenset()
    return _Substituter(mapping, renamed).visit(expr)


def _is_inline(func: object) -> bool:
    return isinstance(func, Function) and bool(func.attrs.get("Inline", False))


class _CallInliner(ExprMutator):
    def __init__(self, bodies: Mapping[GlobalVar, Function], func: Function) -> None:
        self._bodies = bodies
        self._uses = use_counts(func)
        # the Let chains floated out of an argument so far, by identity (kept alive here):
        # a chain shared by two calls binds its vars at the first, fresh ones at the others;
        # and the chains an inlined call became that more than one node reads (floated out
        # of one argument, still read in place by another: never floated with own vars)
        self._floated: dict[int, Expr] = {}

    def visit_call(self, call: Call) -> Expr:
        new = super().visit_call(call)
        callee = self._bodies.get(new.op) if type(new.op) is GlobalVar else None
        if callee is None:
            return new
        inlined = _inline_call(callee, new.args, self._floated)
        if self._uses[call] > 1:
            self._floated[id(inlined)] = inlined
        return inlined


def _inline_call(callee: Function, args: tuple, floated: dict[int, Expr]) -> Expr:
    if len(args) != len(callee.params):
        raise IRError(
            f"Inline: a call passes {len(args)} arguments to a function of {len(callee.params)} parameters"
        )
    mapping: dict[Var, Expr] = {}
    bindings: list[tuple[Var, Expr]] = []
    bound_here: dict[int, Var] = {}  # an argument passed twice to this call is bound once
    for param, arg in zip(callee.params, args):
        if isinstance(arg, (Var, GlobalVar, Constant)):
            mapping[param] = arg
        elif id(arg) in bound_here:
            mapping[param] = bound_here[id(arg)]
        else:
            fresh = bound_here[id(arg)] = Var(param.name_hint, param.type_annotation)
            mapping[param] = fresh
            # float the bindings of an argument that is itself a Let out in front; only
            # when short, since the chain is rebuilt: floating every level of a deep nest
            # of inlined calls would be quadratic
            if _let_chain_length(arg, FLOAT_LIMIT) < FLOAT_LIMIT:
                arg = _float_chain(arg, bindings, floated)
            bindings.append((fresh, arg))
    body = substitute(callee.body, mapping, rename_bound=True)
    for var, value in reversed(bindings):
        body = Let(var, value, body)
    return body


def _float_chain(chain: Expr, bindings: list[tuple[Var, Expr]], floated: dict[int, Expr]) -> Expr:
    """Append the bindings of the Let chain ``chain`` to ``bindings``; returns its body.
    The first call site a chain is floated to binds its own vars (unique: nothing is
    captured); a chain in ``floated`` binds fresh vars, since its own are bound elsewhere
    too: floated at another call site (a shared argument), or read in place by another
    node (``@f(g(%3), %3)`` with ``%3`` an inlined call)."""
    renamed: dict[Var, Expr] | None = {} if id(chain) in floated else None
    floated[id(chain)] = chain
    while type(chain) is Let:
        var, value = chain.var, chain.value
        if renamed is not None:
            value = substitute(value, renamed, rename_bound=True)
            renamed[var] = var = Var(var.name_hint, var.type_annotation)
        bindings.append((var, value))
        chain = chain.body
    return substitute(chain, renamed, rename_bound=True) if renamed else chain


def _let_chain_length(expr: Expr, limit: int) -> int:
    count = 0
    while type(expr) is Let and count < limit:
        expr, count = expr.body, count + 1
    return count


def _inline_order(mod: IRModule, inline: list[GlobalVar]) -> list[GlobalVar]:
    """Inline functions, callees first; raises InlineCycleError naming a cycle."""
    graph = nx.DiGraph()
    graph.add_nodes_from(gv.name_hint for gv in inline)
    inline_set = set(inline)
    for gv in inline:
        for callee in referenced_globals(mod[gv]):
            if callee in inline_set:
                graph.add_edge(gv.name_hint, callee.name_hint)
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        order = list(reversed(list(nx.topological_sort(graph))))
        return [GlobalVar(name) for name in order]
    names = " -> ".join([edge[0] for edge in cycle] + [cycle[0][0]])
    raise InlineCycleError(f"Inline: functions marked Inline are recursive: {names}")


def inline_functions(mod: IRModule) -> IRModule:
    """Inline every call of an Inline function in ``mod`` (updated in place and returned)."""
    inline = [gv for gv, func in mod.items() if _is_inline(func)]
    if not inline:
        return mod
    bodies: dict[GlobalVar, Function] = {}
    for gv in _inline_order(mod, inline):
        bodies[gv] = _CallInliner(bodies, mod[gv]).visit(mod[gv])
    for gv, func in list(mod.items()):
        if isinstance(func, Function):
            mod[gv] = bodies[gv] if gv in bodies else _CallInliner(bodies, func).visit(func)
    still_used = {ref for func in mod.functions.values() for ref in referenced_globals(func)}
    for gv in inline:
        if gv not in still_used and gv.name_hint != ENTRY_FUNCTION:
            del mod[gv]
    return mod


@register_pass("Inline")
def Inline() -> Pass:
    """A module pass (opt_level 1) inlining calls of functions marked ``Inline``."""

    def transform(mod: IRModule, ctx: PassContext) -> IRModule:
        return inline_functions(mod)

    return module_pass(transform, opt_level=1, name="Inline")

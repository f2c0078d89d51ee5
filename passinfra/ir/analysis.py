"""Small whole-expression analyses (iterative): free and bound variables, use counts."""

from __future__ import annotations

from collections import Counter

from passinfra.ir.expr import Call, Expr, Function, Var
from passinfra.ir.functor import expr_children, iter_post_order
from passinfra.ir.schema import KindTable

# the variables a node binds: its schema's binder fields (Let: var; Function: params)
_BINDERS = KindTable(lambda schema: schema.binders)


def bound_vars(expr: Expr) -> list[Var]:
    """Variables bound by a Let or as a Function parameter inside ``expr``, in order."""
    bound: list[Var] = []
    for node in iter_post_order(expr):
        bound.extend(_BINDERS[type(node)](node))
    return bound


def free_vars(expr: Expr) -> list[Var]:
    """Variables used in ``expr`` but bound nowhere inside it, in order of first use."""
    bound = set(bound_vars(expr))
    return [node for node in iter_post_order(expr) if type(node) is Var and node not in bound]


def all_vars(expr: Expr) -> list[Var]:
    """Every variable in ``expr`` (bound or free), in post-order."""
    return [node for node in iter_post_order(expr) if type(node) is Var]


def use_counts(func: Function) -> Counter:
    """How many times each node of ``func``'s body is read (the body itself once more): a
    rewrite of a producer into its one consumer must know it has no other."""
    uses: Counter = Counter()
    uses[func.body] += 1
    for node in iter_post_order(func.body):
        for child in node.args if isinstance(node, Call) else expr_children(node):
            uses[child] += 1
    return uses

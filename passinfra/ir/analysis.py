"""Small whole-expression analyses (iterative): free and bound variables."""

from __future__ import annotations

from passinfra.ir.expr import Expr, Var
from passinfra.ir.functor import iter_post_order
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

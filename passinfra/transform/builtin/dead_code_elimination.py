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

Calls of other global functions count as impure unless ``interprocedural=True`` (see
:mod:`passinfra.transform.builtin.purity`): by default the pass reads only the function it is
given, so the scheduler can batch it with its neighbours.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from passinfra.ir.expr import Expr, Function, Let, Var
from passinfra.ir.functor import ExprMutator
from passinfra.ir.module import IRModule
from passinfra.transform.builtin.purity import (
    Purity,
    ReadsModuleWhenInterprocedural,
    count_var_uses,
    use_children,
)
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

__all__ = ["DeadCodeElimination", "eliminate_dead_code"]


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
            for child in use_children(node):
                self._count(child)
                stack.append(child)

    def _count(self, child: Expr) -> None:
        if type(child) is Var:
            self.uses[child] = self.uses.get(child, 0) + 1

    def is_live(self, var: Var) -> bool:
        return var in self.uses


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
@dataclass(frozen=True)
class DeadCodeElimination(ReadsModuleWhenInterprocedural, FunctionPass):
    """A function pass (opt_level 1) removing unused pure Let bindings; with
    ``inline_once=True`` a pure binding used exactly once is inlined into its use.

    With ``interprocedural=False`` (the default) the pass reads nothing but the function
    it is given (``reads_module=False``, so the scheduler batches it) and treats calls of
    other global functions as possibly stateful; ``True`` judges them by their bodies,
    reading the module.
    """

    inline_once: bool = False
    interprocedural: bool = False
    info: ClassVar[PassInfo] = PassInfo(1, "DeadCodeElimination")

    def pass_func(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return eliminate_dead_code(func, mod if self.interprocedural else None, self.inline_once)

"""ToGraphNormalForm: the inverse of ToANormalForm for the dataflow parts of a program.

A Let whose value is pure is dropped and its var replaced by the (rewritten) value; a
var used several times thus becomes a node shared by its users, which is how graph form
expresses reuse. Bindings whose value is impure (may call a stateful op) stay, since
their position fixes when and whether the effect happens (a call of another global
function counts as impure unless ``interprocedural=True``). A let-bound function that
calls itself stays too (its var would otherwise be left unbound).

Note: a pure value bound outside a Function literal and used inside it is substituted
into the literal's body; that is what graph form means, and it is correct for pure
values, but the value is then computed on each call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from passinfra.ir.expr import Expr, Function, Let
from passinfra.ir.functor import ExprMutator
from passinfra.ir.module import IRModule
from passinfra.transform.builtin.purity import Purity, ReadsModuleWhenInterprocedural, count_var_uses
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

__all__ = ["ToGraphNormalForm", "to_graph_normal_form"]


class _LetInliner(ExprMutator):
    def __init__(self, purity: Purity) -> None:
        self._purity = purity
        self._inlined: set[Expr] = set()

    def _inlinable(self, let: Let) -> bool:
        if not self._purity.is_pure(let.value):
            return False
        return not (isinstance(let.value, Function) and let.var in count_var_uses(let.value))

    def on_let_binding(self, let: Let, new_var: Expr, new_value: Expr) -> None:
        if self._inlinable(let):
            self.memo[let.var] = new_value
            self._inlined.add(let.var)

    def rewrite_let(self, let: Let, new_var: Expr, new_value: Expr, new_body: Expr) -> Expr:
        if let.var in self._inlined:
            return new_body
        return super().rewrite_let(let, new_var, new_value, new_body)


def to_graph_normal_form(func: Function, mod: IRModule | None = None) -> Function:
    """``func`` with its pure Let bindings inlined (the same object if it has none)."""
    return _LetInliner(Purity(mod, func)).visit(func)


@register_pass("ToGraphNormalForm")
@dataclass(frozen=True)
class ToGraphNormalForm(ReadsModuleWhenInterprocedural, FunctionPass):
    """A function pass (opt_level 1) turning pure Let bindings back into shared nodes.

    With ``interprocedural=False`` (the default) the pass reads nothing but the function
    it is given (``reads_module=False``, so the scheduler batches it) and treats calls of
    other global functions as possibly stateful; ``True`` judges them by their bodies,
    reading the module.
    """

    interprocedural: bool = False
    info: ClassVar[PassInfo] = PassInfo(1, "ToGraphNormalForm")

    def pass_func(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return to_graph_normal_form(func, mod if self.interprocedural else None)

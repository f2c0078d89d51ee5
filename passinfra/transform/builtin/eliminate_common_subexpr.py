"""EliminateCommonSubexpr: merge equal pure computations into their first occurrence.

TVM's scheme: after a node's arguments have been rewritten, it is looked up by a key of
(callee, attrs, identities of the rewritten arguments); an equal earlier node replaces
it. Because arguments are compared by identity after rewriting, equality propagates
bottom-up in one pass. Small constants are first merged by value (dtype, shape, bytes),
so ``add(x, 1f)`` twice with two separate ``1f`` literals merges too.

Never merged: calls that may call a stateful op (see ``Purity``; a call of another
global function counts as one unless ``interprocedural=True``). Scoping: each If
branch and Function body has its own table on top of the enclosing ones, so a node
first seen inside a branch is never reused outside it or in the other branch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from passinfra.ir.expr import Call, Constant, Expr, Function, If, Tuple, TupleGetItem
from passinfra.ir.functor import ExprMutator
from passinfra.ir.module import IRModule
from passinfra.transform.builtin.purity import Purity, ReadsModuleWhenInterprocedural
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

__all__ = ["EliminateCommonSubexpr", "eliminate_common_subexpr"]

# constants up to this many bytes are merged by value; bigger ones are left alone, since
# hashing their bytes costs more than merging is likely to save
SMALL_CONSTANT_BYTES = 1024


class _CommonSubexprEliminator(ExprMutator):
    def __init__(self, purity: Purity) -> None:
        self._purity = purity
        self._scopes: list[dict[Any, Expr]] = [{}]
        self._constants: dict[tuple, Constant] = {}

    def _lookup(self, key: Any, node: Expr) -> Expr:
        for table in reversed(self._scopes):
            hit = table.get(key)
            if hit is not None:
                return hit
        self._scopes[-1][key] = node
        return node

    def _in_new_scope(self, expr: Expr) -> Expr:
        self._scopes.append({})
        try:
            return self.visit(expr)
        finally:
            self._scopes.pop()

    def visit_constant(self, const: Constant) -> Expr:
        data = const.data
        if data.nbytes > SMALL_CONSTANT_BYTES:
            return const
        key = (data.dtype.str, data.shape, data.tobytes())
        return self._constants.setdefault(key, const)

    def visit_call(self, call: Call) -> Expr:
        new = super().visit_call(call)
        if not self._purity.call_is_pure(new):
            return new
        key = ("call", new.op, new.attrs, tuple(id(arg) for arg in new.args))
        return self._lookup(key, new)

    def visit_tuple(self, tup: Tuple) -> Expr:
        new = super().visit_tuple(tup)
        return self._lookup(("tuple", tuple(id(field) for field in new.fields)), new)

    def visit_tuple_getitem(self, tgi: TupleGetItem) -> Expr:
        new = super().visit_tuple_getitem(tgi)
        return self._lookup(("getitem", id(new.tuple_value), new.index), new)

    def visit_if(self, node: If) -> Expr:
        cond = self.visit(node.cond)
        true_branch = self._in_new_scope(node.true_branch)
        false_branch = self._in_new_scope(node.false_branch)
        if cond is node.cond and true_branch is node.true_branch and false_branch is node.false_branch:
            return node
        return If(cond, true_branch, false_branch)

    def visit_function(self, func: Function) -> Expr:
        body = self._in_new_scope(func.body)
        if body is func.body:
            return func
        return Function(func.params, body, func.ret_type, func.attrs)


def eliminate_common_subexpr(func: Function, mod: IRModule | None = None) -> Function:
    """``func`` with equal pure subexpressions merged (the same object if none are)."""
    return _CommonSubexprEliminator(Purity(mod, func)).visit(func)


@register_pass("EliminateCommonSubexpr")
@dataclass(frozen=True)
class EliminateCommonSubexpr(ReadsModuleWhenInterprocedural, FunctionPass):
    """A function pass (opt_level 3) merging common pure subexpressions.

    With ``interprocedural=False`` (the default) the pass reads nothing but the function
    it is given (``reads_module=False``, so the scheduler batches it) and treats calls of
    other global functions as possibly stateful; ``True`` judges them by their bodies,
    reading the module.
    """

    interprocedural: bool = False
    info: ClassVar[PassInfo] = PassInfo(3, "EliminateCommonSubexpr")

    def pass_func(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return eliminate_common_subexpr(func, mod if self.interprocedural else None)

"""FoldConstant: evaluate at compile time what only depends on constants.

As in TVM's "Adding a Compiler Pass to Relay" tutorial:

* a Let whose (folded) value is constant is dropped and the constant propagated into
  its body;
* ``TupleGetItem`` of a tuple literal becomes the field (when the dropped fields are
  pure, so no stateful call disappears);
* a call of an op whose arguments are all constant is evaluated with the op's NumPy
  implementation (``compute_op``, the one the interpreter runs: one semantics; float16
  and bfloat16 computed in float32 and rounded) and
  replaced by a Constant, or by a Tuple of Constants for a tuple-valued op.

Not folded: calls with no arguments (``zeros``/``ones`` would only turn a cheap call
into a big literal), stateful ops, and calls whose NumPy implementation raises (the
program keeps the call, so the error, if that code runs at all, happens at run time as
it would have). Like TVM, the size of a folded result is not limited.

Purity (for the TupleGetItem rule) is judged within the function unless
``interprocedural=True``: a call of another global function counts as possibly stateful.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from passinfra.file_pages import release_file_pages
from passinfra.ir.expr import Call, Constant, Expr, Function, Let, Tuple, TupleGetItem
from passinfra.ir.functor import ExprMutator
from passinfra.ir.module import IRModule
from passinfra.ir.op.precision import compute_op
from passinfra.ir.op.registry import Op
from passinfra.transform.builtin.purity import Purity, ReadsModuleWhenInterprocedural
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

__all__ = ["FoldConstant", "ConstantChecker", "ConstantFolder", "fold_constant"]


class ConstantChecker:
    """Is an expression a compile-time value: a Constant, or a Tuple of such (memoized)."""

    def __init__(self) -> None:
        self._memo: dict[Expr, bool] = {}

    def check(self, expr: Expr) -> bool:
        if type(expr) is Constant:
            return True
        if type(expr) is not Tuple:
            return False
        hit = self._memo.get(expr)
        if hit is None:
            # nested tuple literals are shallow in practice; tuple fields are not chains
            hit = self._memo[expr] = all(self.check(field) for field in expr.fields)
        return hit


def _to_value(expr: Expr) -> Any:
    """The NumPy value of a constant expression (arrays and nested tuples)."""
    if type(expr) is Constant:
        return expr.data
    return tuple(_to_value(field) for field in expr.fields)


def _to_expr(value: Any) -> Expr | None:
    """An op's result as an expression, or None when it is not a value the IR holds."""
    if isinstance(value, (np.ndarray, np.generic)):
        return Constant.owning(value)  # the op's fresh result: not copied again
    if isinstance(value, (tuple, list)):
        fields = [_to_expr(field) for field in value]
        return None if any(field is None for field in fields) else Tuple(fields)
    return None


class ConstantFolder(ExprMutator):
    """The rewriting half of FoldConstant (see the module docstring)."""

    def __init__(self, purity: Purity | None = None) -> None:
        self._checker = ConstantChecker()
        self._purity = purity or Purity()

    def on_let_binding(self, let: Let, new_var: Expr, new_value: Expr) -> None:
        if self._checker.check(new_value):
            self.memo[let.var] = new_value  # uses of the var now see the constant

    def rewrite_let(self, let: Let, new_var: Expr, new_value: Expr, new_body: Expr) -> Expr:
        if self._checker.check(new_value):
            return new_body
        return super().rewrite_let(let, new_var, new_value, new_body)

    def visit_tuple_getitem(self, tgi: TupleGetItem) -> Expr:
        new = super().visit_tuple_getitem(tgi)
        value = new.tuple_value
        if type(value) is not Tuple or new.index >= len(value.fields):
            return new
        dropped = (f for i, f in enumerate(value.fields) if i != new.index)
        if all(self._purity.is_pure(field) for field in dropped):
            return value.fields[new.index]
        return new

    def visit_call(self, call: Call) -> Expr:
        new = super().visit_call(call)
        op = new.op
        # attrs holding dims (a slice to a run-time length) have no value until a call binds them
        if not isinstance(op, Op) or op.stateful or not new.args or new.attrs.has_dims:
            return new
        if not all(self._checker.check(arg) for arg in new.args):
            return new
        folded = self._evaluate(op, new)
        return new if folded is None else folded

    def _evaluate(self, op: Op, call: Call) -> Expr | None:
        args = [_to_value(arg) for arg in call.args]
        try:
            # the interpreter would emit the same warnings (e.g. log of a negative
            # constant gives nan); at compile time they are noise
            with np.errstate(all="ignore"):
                result = compute_op(op, args, call.attrs)
        except Exception:
            return None  # leave the call; it fails at run time, if it ever runs
        folded = _to_expr(result)  # (a result that views an argument is copied here)
        # a weight mapped from the model's file (a transposed or reshaped initializer) was
        # read whole: its pages need not stay in this process next to the folded result
        for arg in call.args:
            if type(arg) is Constant:
                release_file_pages(arg.data)
        return folded


def fold_constant(func: Function, mod: IRModule | None = None) -> Function:
    """``func`` with its constant subexpressions folded (same object if none)."""
    return ConstantFolder(Purity(mod, func)).visit(func)


@register_pass("FoldConstant")
@dataclass(frozen=True)
class FoldConstant(ReadsModuleWhenInterprocedural, FunctionPass):
    """A function pass (opt_level 2) folding constant subexpressions.

    With ``interprocedural=False`` (the default) the pass reads nothing but the function
    it is given (``reads_module=False``, so the scheduler batches it) and treats calls of
    other global functions as possibly stateful; ``True`` judges them by their bodies,
    reading the module.
    """

    interprocedural: bool = False
    info: ClassVar[PassInfo] = PassInfo(2, "FoldConstant")

    def pass_func(self, func: Function, mod: IRModule, ctx: PassContext) -> Function:
        return fold_constant(func, mod if self.interprocedural else None)

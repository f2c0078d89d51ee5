"""RemoveNoOp: drop statements that do nothing.

Removed: loops of constant extent <= 0, stores of a load from the same location
(``A[i] = A[i]``), ``Evaluate`` of a constant or variable (an intrinsic call may be kept
for its effect), empty SeqStmts; an IfThenElse with a
constant condition becomes the branch taken. Then, bottom-up, a loop, let, allocation or
branch whose body became empty goes too (an IfThenElse with only an else branch left
becomes ``if not cond``), a SeqStmt is flattened into its parent, and a SeqStmt of one
statement becomes that statement. A body that is entirely removed is an
empty ``SeqStmt(())``.
"""

from __future__ import annotations

from passinfra.codegen.prim_func_pass import create_prim_func_pass
from passinfra.tir import (
    Allocate,
    BufferLoad,
    BufferStore,
    Evaluate,
    FloatImm,
    For,
    IfThenElse,
    IntImm,
    LetStmt,
    Not,
    PrimExpr,
    PrimFunc,
    SeqStmt,
    Stmt,
    TVar,
)
from passinfra.tir.arith import const_int
from passinfra.tir.functor import StmtExprMutator, same_expr
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

NO_OP = SeqStmt(())


def is_no_op(stmt: Stmt) -> bool:
    return type(stmt) is SeqStmt and not stmt.stmts


def _bool_const(expr: PrimExpr) -> bool | None:
    if type(expr) is IntImm:
        return bool(expr.value)
    return None


class _NoOpRemover(StmtExprMutator):
    def visit_expr(self, expr: PrimExpr) -> PrimExpr:
        return expr  # expressions are never changed here

    def visit_for(self, stmt: For) -> Stmt:
        extent = const_int(stmt.extent)
        if extent is not None and extent <= 0:
            return NO_OP
        new = super().visit_for(stmt)
        return NO_OP if is_no_op(new.body) else new

    def visit_seq_stmt(self, stmt: SeqStmt) -> Stmt:
        flat: list[Stmt] = []
        changed = False
        for child in stmt.stmts:
            new = self.visit_stmt(child)
            if type(new) is SeqStmt:  # flatten (an empty one disappears)
                flat.extend(new.stmts)
                changed = True
            else:
                flat.append(new)
                changed = changed or new is not child
        if len(flat) == 1:
            return flat[0]
        return SeqStmt(tuple(flat)) if changed else stmt

    def visit_buffer_store(self, stmt: BufferStore) -> Stmt:
        value = stmt.value
        same_place = (type(value) is BufferLoad and value.buffer is stmt.buffer
                      and len(value.indices) == len(stmt.indices)
                      and all(same_expr(a, b) for a, b in zip(value.indices, stmt.indices)))
        if same_place:
            return NO_OP
        return stmt

    def visit_allocate(self, stmt: Allocate) -> Stmt:
        new = super().visit_allocate(stmt)
        return NO_OP if is_no_op(new.body) else new

    def visit_let_stmt(self, stmt: LetStmt) -> Stmt:
        new = super().visit_let_stmt(stmt)
        return NO_OP if is_no_op(new.body) else new

    def visit_if_then_else(self, stmt: IfThenElse) -> Stmt:
        cond = _bool_const(stmt.cond)
        if cond is True:
            return self.visit_stmt(stmt.then_case)
        if cond is False:
            return NO_OP if stmt.else_case is None else self.visit_stmt(stmt.else_case)
        then_case = self.visit_stmt(stmt.then_case)
        else_case = None if stmt.else_case is None else self.visit_stmt(stmt.else_case)
        if else_case is not None and is_no_op(else_case):
            else_case = None
        if is_no_op(then_case):
            if else_case is None:
                return NO_OP
            return IfThenElse(Not(stmt.cond), else_case, None)
        if then_case is stmt.then_case and else_case is stmt.else_case:
            return stmt
        return IfThenElse(stmt.cond, then_case, else_case)

    def visit_evaluate(self, stmt: Evaluate) -> Stmt:
        # only constants: an Evaluate of an intrinsic may be a call kept for its effect
        return NO_OP if type(stmt.value) in (IntImm, FloatImm, TVar) else stmt


def remove_no_op_prim_func(func: PrimFunc) -> PrimFunc:
    body = _NoOpRemover().visit_stmt(func.body)
    return func if body is func.body else func.with_body(body)


@register_pass("RemoveNoOp")
def RemoveNoOp() -> FunctionPass:
    """Remove no-op statements from every PrimFunc (see the module docstring)."""
    return create_prim_func_pass(lambda func, mod, ctx: remove_no_op_prim_func(func), opt_level=0,
                                 name="RemoveNoOp", reads_module=False)


__all__ = ["RemoveNoOp", "remove_no_op_prim_func", "is_no_op"]

"""VectorizeLoop: mark innermost loops that are safe to run as SIMD lanes.

A serial loop is marked ``ForKind.VECTORIZED`` (the C renderer emits
``#pragma omp simd`` / ``#pragma GCC ivdep``) when:

* its start and extent are constants and the extent is at least 2;
* its body is straight-line: one BufferStore or a SeqStmt of them, no loops, branches,
  lets or allocations;
* every index (of stores and loads) is affine in the loop variable with a constant
  coefficient (no ``//``, ``%``, min/max, select or load of the loop variable in an
  index), and values use only elementwise math;
* there is no dependence between iterations: each store's index moves with the loop
  variable, no two stores write one buffer at different indices, and every load of a
  buffer the body stores to reads exactly the stored location (``C[i] = C[i] + 1`` is
  fine, ``A[i + 1] = A[i]`` and ``s[0] = s[0] + x[i]`` are not).
"""

from __future__ import annotations

from passinfra.codegen.prim_func_pass import create_prim_func_pass
from passinfra.tir import (
    Buffer,
    BufferLoad,
    BufferStore,
    For,
    ForKind,
    PrimExpr,
    PrimFunc,
    SeqStmt,
    Stmt,
)
from passinfra.tir.arith import affine_coefficient, const_int
from passinfra.tir.functor import StmtExprMutator, iter_expr_post_order, same_expr
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass


def _straight_line_stores(body: Stmt) -> list[BufferStore] | None:
    if type(body) is BufferStore:
        return [body]
    if type(body) is SeqStmt and body.stmts and all(type(s) is BufferStore for s in body.stmts):
        return list(body.stmts)
    return None


def _loads(expr: PrimExpr) -> list[BufferLoad]:
    return [node for node in iter_expr_post_order(expr) if type(node) is BufferLoad]


def _same_indices(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(same_expr(x, y) for x, y in zip(a, b))


def is_vectorizable(loop: For) -> bool:
    """Whether ``loop`` satisfies every condition of the module docstring."""
    if loop.kind is not ForKind.SERIAL:
        return False
    extent = const_int(loop.extent)
    if const_int(loop.start) is None or extent is None or extent < 2:
        return False
    stores = _straight_line_stores(loop.body)
    if stores is None:
        return False
    var = loop.loop_var
    stored: dict[Buffer, tuple] = {}
    loads: list[BufferLoad] = []
    for store in stores:
        coefficients = [affine_coefficient(index, var) for index in store.indices]
        if any(c is None for c in coefficients) or not any(coefficients):
            return False  # not affine, or every iteration writes the same place
        previous = stored.get(store.buffer)
        if previous is not None and not _same_indices(previous, store.indices):
            return False
        stored[store.buffer] = store.indices
        loads += _loads(store.value)
        for index in store.indices:
            loads += _loads(index)
    for load in loads:
        if any(affine_coefficient(index, var) is None for index in load.indices):
            return False
        target = stored.get(load.buffer)
        if target is not None and not _same_indices(target, load.indices):
            return False
    return True


class _Vectorizer(StmtExprMutator):
    def visit_for(self, stmt: For) -> Stmt:
        loop = super().visit_for(stmt)
        if isinstance(loop, For) and is_vectorizable(loop):
            return For(loop.loop_var, loop.start, loop.extent, ForKind.VECTORIZED, loop.body)
        return loop

    def visit_expr(self, expr: PrimExpr) -> PrimExpr:
        return expr  # only loops change


def vectorize_prim_func(func: PrimFunc) -> PrimFunc:
    body = _Vectorizer().visit_stmt(func.body)
    return func if body is func.body else func.with_body(body)


@register_pass("VectorizeLoop")
def VectorizeLoop() -> FunctionPass:
    """Mark safe innermost loops of every PrimFunc VECTORIZED (see the module docstring)."""
    return create_prim_func_pass(lambda func, mod, ctx: vectorize_prim_func(func), opt_level=1,
                                 name="VectorizeLoop", reads_module=False)


__all__ = ["VectorizeLoop", "vectorize_prim_func", "is_vectorizable", "affine_coefficient"]

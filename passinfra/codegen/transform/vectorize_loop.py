"""VectorizeLoop: mark innermost loops that are safe to run as SIMD lanes.

A serial loop is marked ``ForKind.VECTORIZED`` (the C renderer emits
``#pragma omp simd`` / ``#pragma GCC ivdep``) when:

* its start and extent are constants and the extent is at least 2 (a loop over a size
  known at run time becomes a main loop of constant-extent VECTORIZED blocks and a
  remainder, which GCC's -O2 vectorizer takes);
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
    Add,
    Buffer,
    BufferLoad,
    BufferStore,
    FloorDiv,
    For,
    ForKind,
    IntImm,
    Mul,
    PrimExpr,
    PrimFunc,
    SeqStmt,
    Stmt,
    Sub,
    TVar,
)
from passinfra.tir.arith import affine_coefficient, const_int
from passinfra.tir.functor import StmtExprMutator, iter_expr_post_order, same_expr, substitute
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

# a loop over a size known at run time is vectorized in blocks of this many bytes of its
# stores (16 float32: one AVX-512 vector, two AVX2 ones; the C renderer's lanes)
VECTOR_BYTES = 64


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


def is_vectorizable(loop: For, symbolic: bool = False) -> bool:
    """Whether ``loop`` satisfies every condition of the module docstring (``symbolic``:
    its extent may be an expression over the kernel's sizes)."""
    if loop.kind is not ForKind.SERIAL:
        return False
    extent = const_int(loop.extent)
    if const_int(loop.start) is None:
        return False
    if (extent is None and not symbolic) or (extent is not None and extent < 2):
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
        if (isinstance(loop, For) and loop.kind is ForKind.SERIAL and const_int(loop.extent) is None
                and const_int(loop.start) is not None and _straight_line_stores(loop.body) is not None):
            return _main_and_remainder(loop, is_vectorizable(loop, symbolic=True))
        return loop


def _main_and_remainder(loop: For, independent: bool) -> Stmt:
    """A loop of a size known at run time as a main loop of whole blocks of ``lanes``
    iterations, each block a loop of constant extent (what GCC's -O2 vectorizer takes:
    VECTORIZED when the iterations are ``independent``, else serial, where it still
    vectorizes a max or min reduction), then the remaining iterations one by one. The
    iterations run in their original order."""
    lanes = max(VECTOR_BYTES // max(_element_bytes(loop.body), 1), 2)
    var, start = loop.loop_var, loop.start
    blocks = FloorDiv(loop.extent, IntImm(lanes, loop.extent.dtype))
    block, lane = TVar(f"{var.name}_b", var.dtype), TVar(f"{var.name}_l", var.dtype)
    at = Add(Add(start, Mul(block, IntImm(lanes, var.dtype))), lane)
    main = For(block, IntImm(0, var.dtype), blocks, ForKind.SERIAL,
               For(lane, IntImm(0, var.dtype), IntImm(lanes, var.dtype),
                   ForKind.VECTORIZED if independent else ForKind.SERIAL, substitute(loop.body, {var: at})))
    done = Mul(blocks, IntImm(lanes, var.dtype))
    rest = For(var, Add(start, done), Sub(loop.extent, done), ForKind.SERIAL, loop.body)
    return SeqStmt((main, rest))


def _element_bytes(body: Stmt) -> int:
    """The widest element the body stores (bits in the dtype's name; bool: one byte)."""
    widths = [int("".join(ch for ch in store.buffer.dtype if ch.isdigit()) or 8) // 8
              for store in _straight_line_stores(body) or []]
    return max(widths, default=4)

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

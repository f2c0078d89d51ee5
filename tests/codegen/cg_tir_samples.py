"""Hand-written PrimFuncs shared by the TIR tests (not a test module)."""

from __future__ import annotations

from passinfra.tir import (
    Allocate,
    Buffer,
    BufferStore,
    FloatImm,
    For,
    ForKind,
    IntImm,
    PrimFunc,
    SeqStmt,
    TVar,
)


def loop(var: TVar, extent: int, body, kind: ForKind = ForKind.SERIAL) -> For:
    return For(var, IntImm(0), IntImm(extent), kind, body)


def vector_add(n: int = 8) -> PrimFunc:
    a, b, c = Buffer("A", (n,), "float32"), Buffer("B", (n,), "float32"), Buffer("C", (n,), "float32")
    i = TVar("i")
    body = loop(i, n, BufferStore(c, a.load(i) + b.load(i), (i,)))
    return PrimFunc([a, b, c], body, {"num_inputs": 2, "global_symbol": "vector_add"})


def row_sum(rows: int = 3, cols: int = 4) -> PrimFunc:
    """out[r] = sum_c x[r, c], accumulated in an allocated 0-d scratch buffer."""
    x, out = Buffer("x", (rows, cols), "float32"), Buffer("out", (rows,), "float32")
    acc = Buffer("acc", (), "float32")
    r, k = TVar("r"), TVar("k")
    body = loop(r, rows, Allocate(acc, SeqStmt((
        BufferStore(acc, FloatImm(0.0), ()),
        loop(k, cols, BufferStore(acc, acc.load() + x.load(r, k), ())),
        BufferStore(out, acc.load(), (r,)),
    ))))
    return PrimFunc([x, out], body, {"num_inputs": 1, "global_symbol": "row_sum"})


def transpose(rows: int = 3, cols: int = 4) -> PrimFunc:
    x, y = Buffer("x", (rows, cols), "float32"), Buffer("y", (cols, rows), "float32")
    i, j = TVar("i"), TVar("j")
    body = loop(i, cols, loop(j, rows, BufferStore(y, x.load(j, i), (i, j))))
    return PrimFunc([x, y], body, {"num_inputs": 1, "global_symbol": "transpose"})

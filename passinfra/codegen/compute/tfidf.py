"""Compute rule of ``tfidf_vectorizer`` (:mod:`passinfra.ir.op.tfidf`): an :class:`ExternOp`.

The pool is an attribute, so each (skip distance, n-gram length) scan of a row is a loop
over the start positions that fit, whose body tests every pooled n-gram of that length
(tokens compared as int64 constants) and counts a match into the row's integer counts;
the counts are then weighted by ``mode`` into the float32 output, one store per output
index. The code grows with the pool times the skip distances, not with the data.
"""

from __future__ import annotations

from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import ExternOp, TensorHandle, imm, output_shape, register_compute, seq
from passinfra.ir.attrs import Attrs
from passinfra.ir.op.tfidf import scans
from passinfra.ir.types import Type

Expr = tir.PrimExpr


@register_compute("tfidf_vectorizer")
def _rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    (x,) = inputs
    shape = output_shape(out_type)
    size, batched = attrs["output_size"], len(x.shape) == 2
    row = x.shape[-1]
    weights = attrs["weights"] or (1.0,) * size

    def token(n: Expr, at: Expr) -> Expr:
        value = x.load(n, at) if batched else x.load(at)
        return value if value.dtype == "int64" else tir.Cast("int64", value)

    def scan(counts: tir.Buffer, n: Expr, distance: int, length: int, starts: int) -> tir.Stmt:
        s = tir.TVar("s")
        tests = []
        for gram, index in zip(attrs["ngrams"], attrs["indexes"]):
            if len(gram) != length:
                continue
            match: Expr | None = None
            for j, value in enumerate(gram):
                equal = tir.EQ(token(n, s + tir.IntImm(j * distance)), tir.IntImm(value, "int64"))
                match = equal if match is None else tir.And(match, equal)
            at = (tir.IntImm(index),)
            counted = tir.BufferStore(counts, counts.load(*at) + tir.IntImm(1, "int64"), at)
            tests.append(tir.IfThenElse(match, counted))
        return tir.For(s, tir.IntImm(0), tir.IntImm(starts), tir.ForKind.SERIAL, seq(*tests))

    def output(counts: tir.Buffer, out_buffer: tir.Buffer, n: Expr) -> tir.Stmt:
        # one store per output index, its weight a constant
        stores = []
        for k in range(size):
            count, weight = counts.load(tir.IntImm(k)), imm(weights[k], "float32")
            if attrs["mode"] == "TF":
                value = tir.Cast("float32", count)
            elif attrs["mode"] == "IDF":
                value = tir.Select(tir.GT(count, tir.IntImm(0, "int64")), weight, imm(0, "float32"))
            else:
                value = weight * tir.Cast("float32", count)
            at = (n, tir.IntImm(k)) if batched else (tir.IntImm(k),)
            stores.append(tir.BufferStore(out_buffer, value, at))
        return seq(*stores)

    def per_row(out_buffer: tir.Buffer, n: Expr) -> tir.Stmt:
        counts = tir.Buffer("tfidf_counts", (size,), "int64")
        k = tir.TVar("k")
        clear = tir.For(k, tir.IntImm(0), tir.IntImm(size), tir.ForKind.SERIAL,
                        tir.BufferStore(counts, tir.IntImm(0, "int64"), (k,)))
        body = [scan(counts, n, *found) for found in scans(attrs, row)]
        return tir.Allocate(counts, seq(clear, *body, output(counts, out_buffer, n)))

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (out_buffer,) = outputs
        if not batched:
            return per_row(out_buffer, tir.IntImm(0))
        n = tir.TVar("n")
        return tir.For(n, tir.IntImm(0), tir.IntImm(shape[0]), tir.ForKind.SERIAL, per_row(out_buffer, n))

    return ExternOp("tfidf_vectorizer", ((shape, "float32"),), build)

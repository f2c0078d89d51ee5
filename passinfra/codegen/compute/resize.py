"""Compute rule of ``resize``: an :class:`ExternOp` in two parts.

1. Per resampled axis, a table filled by a loop over the axis' output positions: the
   input index and weight of each tap, and whether the position is outside the input
   (``tf_crop_and_resize``). The formulas are those of the NumPy reference
   (:mod:`passinfra.ir.op._resample`, evaluated here in the loop-level IR through
   :class:`TirArith`), float32 in onnxruntime's order: the kernel samples the cells the
   interpreter samples. A table costs one pass over one axis, not one per element.
2. One loop nest over the output: per element, the sum over the taps of every resampled
   axis (nested loops of a few steps) of the product of their weights times the input at
   their indices; nearest reads the one cell. The extrapolation value replaces the
   elements outside the input.

A call whose output shape is the input shape is a copy (a :class:`ComputeOp`), as in
the reference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from passinfra import tir
from passinfra.codegen.compute.base import (
    ComputeOp,
    ExternOp,
    Indices,
    TensorHandle,
    imm,
    local_scalar,
    loop_nest,
    register_compute,
    seq,
)
from passinfra.ir.attrs import Attrs
from passinfra.ir.op import _resample
from passinfra.ir.op.resize import axes_of, compute_dtype, method_of
from passinfra.ir.types import TensorType, Type

Expr = tir.PrimExpr


class TirArith:
    """:class:`passinfra.ir.op._resample.Arith` over loop-level expressions; ``bind``
    names a value with a LetStmt (:meth:`wrap` puts them around a statement)."""

    def __init__(self) -> None:
        self.bindings: list[tuple[tir.TVar, Expr]] = []

    def f32(self, value: float) -> Expr:
        return tir.FloatImm(_resample.f32(value), "float32")

    def f64(self, value: float) -> Expr:
        return tir.FloatImm(float(value), "float64")

    def i64(self, value: int) -> Expr:
        return tir.IntImm(int(value), "int64")

    def _cast(self, x: Expr, dtype: str) -> Expr:
        return x if x.dtype == dtype else tir.Cast(dtype, x)

    def to_f32(self, x: Expr) -> Expr:
        return self._cast(x, "float32")

    def to_f64(self, x: Expr) -> Expr:
        return self._cast(x, "float64")

    def to_i64(self, x: Expr) -> Expr:
        return self._cast(x, "int64")

    def _math(self, name: str, x: Expr) -> Expr:
        return tir.Intrinsic(name, (x,), x.dtype)

    def floor(self, x: Expr) -> Expr:
        return self._math("floor", x)

    def ceil(self, x: Expr) -> Expr:
        return self._math("ceil", x)

    def fabs(self, x: Expr) -> Expr:
        return self._math("fabs", x)

    def select(self, cond: Expr, a: Expr, b: Expr) -> Expr:
        return tir.Select(cond, a, b)

    def lt(self, a: Expr, b: Expr) -> Expr:
        return tir.LT(a, b)

    def ge(self, a: Expr, b: Expr) -> Expr:
        return tir.GE(a, b)

    def eq(self, a: Expr, b: Expr) -> Expr:
        return tir.EQ(a, b)

    def either(self, a: Expr, b: Expr) -> Expr:
        return tir.Or(a, b)

    def minimum(self, a: Expr, b: Expr) -> Expr:
        return tir.Min(a, b)

    def maximum(self, a: Expr, b: Expr) -> Expr:
        return tir.Max(a, b)

    def bind(self, x: Expr, name: str) -> Expr:
        if isinstance(x, (tir.IntImm, tir.FloatImm, tir.TVar)):
            return x
        var = tir.TVar(name, x.dtype)
        self.bindings.append((var, x))
        return var

    def wrap(self, stmt: tir.Stmt) -> tir.Stmt:
        for var, value in reversed(self.bindings):
            stmt = tir.LetStmt(var, value, stmt)
        return stmt


class _AxisTable:
    """The buffers of one resampled axis and the loop that fills them."""

    def __init__(self, position: int, axis: _resample.Axis, method: _resample.Method):
        self.position, self.axis, self.method = position, axis, method
        self.taps = _resample.taps(axis, method)
        shape = (axis.out_len, self.taps)
        self.indices = tir.Buffer(f"resize_index{position}", shape, "int64")
        self.weights = tir.Buffer(f"resize_weight{position}", shape, "float32") \
            if method.mode != "nearest" else None
        self.outside = tir.Buffer(f"resize_outside{position}", (axis.out_len,), "bool") \
            if method.extrapolates else None

    def buffers(self) -> list[tir.Buffer]:
        return [b for b in (self.indices, self.weights, self.outside) if b is not None]

    def fill(self) -> tir.Stmt:
        x = tir.TVar(f"x{self.position}")
        m = TirArith()
        sampling = _resample.sample(m, x, self.axis, self.method)
        stores = [tir.BufferStore(self.indices, index, (x, tir.IntImm(t)))
                  for t, index in enumerate(sampling.indices)]
        if self.outside is not None:
            stores.append(tir.BufferStore(self.outside, sampling.outside, (x,)))
        if self.weights is not None:
            stores += [tir.BufferStore(self.weights, weight, (x, tir.IntImm(t)))
                       for t, weight in enumerate(sampling.weights)]
        body = m.wrap(seq(*stores))
        if self.weights is not None and sampling.normalize is not None:
            # the raw weights are in the table: normalize them in place
            n = TirArith()
            raw = [self.weights.load(x, tir.IntImm(t)) for t in range(self.taps)]
            final = _resample.normalized(raw, sampling.normalize, n)
            body = seq(body, n.wrap(seq(*(tir.BufferStore(self.weights, w, (x, tir.IntImm(t)))
                                          for t, w in enumerate(final)))))
        return tir.For(x, tir.IntImm(0), tir.IntImm(self.axis.out_len), tir.ForKind.SERIAL, body)


Term = Callable[[list[Expr], Expr], Expr]  # (indices of the taps, their weight) -> addend


def _sum_over_taps(tables: Sequence[_AxisTable], out: Indices, term: Term, acc: tir.Buffer) -> tir.Stmt:
    """``acc += term(indices, weight)`` for every combination of the tables' taps."""
    taps = [tir.TVar(f"t{table.position}") for table in tables]
    indices, weight = [], None
    for table, t in zip(tables, taps):
        indices.append(table.indices.load(out[table.position], t))
        w = table.weights.load(out[table.position], t)
        weight = w if weight is None else weight * w
    stmt = tir.BufferStore(acc, acc.load() + term(indices, weight), ())
    for table, t in zip(reversed(tables), reversed(taps)):
        stmt = tir.For(t, tir.IntImm(0), tir.IntImm(table.taps), tir.ForKind.SERIAL, stmt)
    return stmt


@register_compute("resize")
def _resize(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp | ExternOp:
    (data,) = inputs
    assert isinstance(out_type, TensorType)
    shape, dtype = out_type.shape, out_type.dtype
    if tuple(data.shape) == tuple(shape):
        return ComputeOp("resize", shape, dtype, lambda idx: data.load(*idx))
    method = method_of(attrs)
    tables = [_AxisTable(i, axis, method) for i, axis in enumerate(axes_of(data.shape, attrs))
              if axis.resampled(method)]
    by_axis = {table.position: table for table in tables}
    work = compute_dtype(dtype)
    fill = imm(attrs["extrapolation_value"], dtype)

    def as_work(x: Expr) -> Expr:
        return x if x.dtype == work else tir.Cast(work, x)

    def source(out: Indices, picked: dict[int, Expr]) -> Expr:
        return data.load(*(picked.get(i, index) for i, index in enumerate(out)))

    def element(out_buffer: tir.Buffer, out: Indices) -> tir.Stmt:
        if method.mode == "nearest":
            value = source(out, {t.position: t.indices.load(out[t.position], tir.IntImm(0)) for t in tables})
            body: list[tir.Stmt] = []
        else:
            acc = local_scalar("resize_acc", work)

            def term(indices: list[Expr], weight: Expr) -> Expr:
                picked = dict(zip(by_axis, indices))
                return as_work(weight) * as_work(source(out, picked))

            body = [tir.BufferStore(acc, imm(0, work), ()), _sum_over_taps(tables, out, term, acc)]
            value = acc.load()
            if work != dtype:
                value = tir.Cast(dtype, value)
        flags = [t.outside.load(out[t.position]) for t in tables if t.outside is not None]
        if flags:
            outside = flags[0]
            for flag in flags[1:]:
                outside = tir.Or(outside, flag)
            value = tir.Select(outside, fill, value)
        store = seq(*body, tir.BufferStore(out_buffer, value, out))
        return store if method.mode == "nearest" else tir.Allocate(acc, store)

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (out_buffer,) = outputs
        stmt = seq(*(t.fill() for t in tables), loop_nest(shape, lambda out: element(out_buffer, out)))
        for table in tables:
            for buffer in table.buffers():
                stmt = tir.Allocate(buffer, stmt)
        return stmt

    return ExternOp("resize", ((shape, dtype),), build)

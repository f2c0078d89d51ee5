"""Compute rule of ``grid_sample`` (:mod:`passinfra.ir.op.grid_sample`): an
:class:`ExternOp` with one loop nest over the batch and the output locations. Per
location the grid vector is read once and every axis' taps (indices, weights, validity)
are computed in LetStmts, by the formulas of the NumPy reference
(:mod:`passinfra.ir.op._grid_sample`, evaluated here in the loop-level IR); an inner
loop over the channels then stores the weighted sum of the taps. Indices are clamped, so
a load never leaves its buffer; a ``zeros`` tap outside the input is a Select to 0.

Arithmetic is in float64 for float64 data, else in float32 (half-precision data is
widened on load and rounded once on store, as onnxruntime on CPU).
"""

from __future__ import annotations

from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import ExternOp, TensorHandle, loop_nest, output_shape, register_compute
from passinfra.codegen.compute.resize import TirArith
from passinfra.ir.attrs import Attrs
from passinfra.ir.op import _grid_sample
from passinfra.ir.op.grid_sample import method_of
from passinfra.ir.types import Type

Expr = tir.PrimExpr


class GridArith(TirArith):
    """:class:`passinfra.ir.op._grid_sample.Arith` in the loop-level IR; ``real`` (and
    ``f32``) constants are of the working dtype."""

    def __init__(self, dtype: str) -> None:
        super().__init__()
        self.dtype = dtype

    def real(self, value: float) -> Expr:
        return tir.FloatImm(float(value), self.dtype)

    f32 = real

    def to_real(self, x: Expr) -> Expr:
        return self._cast(x, self.dtype)

    def rint(self, x: Expr) -> Expr:
        return self._math("nearbyint", x)

    def both(self, a: Expr, b: Expr) -> Expr:
        return tir.And(a, b)


def working_dtype(dtype: str) -> str:
    return "float64" if dtype == "float64" else "float32"


@register_compute("grid_sample")
def _rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    data, grid = inputs
    shape, dtype = output_shape(out_type), data.dtype
    work, method, rank = working_dtype(dtype), method_of(attrs), len(data.shape) - 2

    def location(out_buffer: tir.Buffer, where: tuple[Expr, ...]) -> tir.Stmt:
        n, *positions = where
        m = GridArith(work)
        axes = [_grid_sample.axis_taps(m, m.to_real(grid.load(n, *positions, tir.IntImm(rank - 1 - a))),
                                       data.shape[2 + a], method, f"a{a}") for a in range(rank)]
        c = tir.TVar("c")
        value = _grid_sample.interpolate(m, axes, lambda indices: m.to_real(data.load(n, c, *indices)))
        if value.dtype != dtype:
            value = tir.Cast(dtype, value)
        store = tir.BufferStore(out_buffer, value, (n, c, *positions))
        channels = tir.For(c, tir.IntImm(0), tir.IntImm(shape[1]), tir.ForKind.SERIAL, store)
        return m.wrap(channels)

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (out_buffer,) = outputs
        return loop_nest((shape[0], *shape[2:]), lambda where: location(out_buffer, where), prefix="g")

    return ExternOp("grid_sample", ((shape, dtype),), build)

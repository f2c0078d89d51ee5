"""Compute rule of ``qgemm_panels.unpack`` (:mod:`passinfra.ir.op.qgemm_panels`): an
index map into the panels. The integer GEMM never runs it: the lowering hands it the
panels themselves (``_Tensor.qgemm_panels`` in :mod:`passinfra.codegen.lower`)."""

from __future__ import annotations

from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import ComputeOp, TensorHandle, output_shape, register_compute
from passinfra.ir.attrs import Attrs
from passinfra.ir.op.qgemm_panels import COLUMNS, DEPTH, OP_NAME
from passinfra.ir.types import Type


@register_compute(OP_NAME)
def _unpack(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (panels,) = inputs
    shape = output_shape(out_type)
    dtype = attrs["dtype"]
    columns, depth = tir.IntImm(COLUMNS), tir.IntImm(DEPTH)

    def value(idx: Sequence[tir.PrimExpr]) -> tir.PrimExpr:
        k, n = idx
        stored = panels.load(tir.FloorDiv(n, columns), tir.FloorDiv(k, depth), tir.FloorMod(n, columns),
                             tir.FloorMod(k, depth))
        if dtype == "int8":
            return stored
        # a uint8 weight is stored minus 128
        return tir.Cast("uint8", tir.Cast("int32", stored) + tir.IntImm(128, "int32"))

    return ComputeOp(OP_NAME, shape, dtype, value)

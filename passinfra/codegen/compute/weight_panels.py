"""Compute rule of ``weight_panels.unpack`` (:mod:`passinfra.ir.op.weight_panels`): an
index map into the panels. The convolution microkernels never run it: the lowering hands
them the panels themselves (``_Tensor.panels`` in :mod:`passinfra.codegen.lower`)."""

from __future__ import annotations

from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import ComputeOp, TensorHandle, output_shape, ravel, register_compute
from passinfra.ir.attrs import Attrs
from passinfra.ir.op.weight_panels import OP_NAME
from passinfra.ir.types import Type


@register_compute(OP_NAME)
def _unpack(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (panels,) = inputs
    shape = output_shape(out_type)
    width = tir.IntImm(int(panels.shape[2]))

    def value(idx: Sequence[tir.PrimExpr]) -> tir.PrimExpr:
        channel = idx[-1]
        return panels.load(tir.FloorDiv(channel, width), ravel(idx[:-1], shape[:-1]),
                           tir.FloorMod(channel, width))
    return ComputeOp(OP_NAME, shape, panels.dtype, value)

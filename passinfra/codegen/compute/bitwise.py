"""Compute rules of the bitwise ops of :mod:`passinfra.ir.op.bitwise`: one bitwise
intrinsic of the loop-level IR per element (:func:`passinfra.tir.intrinsics.bitwise`),
reading each input at the broadcast index."""

from __future__ import annotations

from collections.abc import Sequence

from passinfra.codegen.compute.base import (
    ComputeOp,
    TensorHandle,
    load_broadcast,
    output_shape,
    register_compute,
)
from passinfra.ir.attrs import Attrs
from passinfra.ir.types import Type
from passinfra.tir.intrinsics import BITWISE_INTRINSICS, bitwise


def _rule(name: str) -> None:
    @register_compute(name)
    def rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
        shape = output_shape(out_type)
        return ComputeOp(name, shape, out_type.dtype,
                         lambda idx: bitwise(name, *(load_broadcast(x, idx, shape) for x in inputs)))


for _name in BITWISE_INTRINSICS:  # the IR ops carry the intrinsics' names
    _rule(_name)

"""Compute rule of ``bitcast`` (:mod:`passinfra.ir.op.bitcast`): one ``reinterpret``
intrinsic per element (:func:`passinfra.tir.intrinsics.reinterpret`)."""

from __future__ import annotations

from collections.abc import Sequence

from passinfra.codegen.compute.base import ComputeOp, TensorHandle, output_shape, register_compute
from passinfra.ir.attrs import Attrs
from passinfra.ir.types import Type
from passinfra.tir.intrinsics import reinterpret


@register_compute("bitcast")
def _bitcast(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (data,) = inputs
    return ComputeOp("bitcast", output_shape(out_type), attrs["dtype"],
                     lambda idx: reinterpret(data.load(*idx), attrs["dtype"]))

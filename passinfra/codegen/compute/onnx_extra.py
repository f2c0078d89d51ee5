"""Compute rule of ``nn.lrn`` (an op of :mod:`passinfra.ir.op.extra`): a
:class:`ReduceOp` summing the squares over a window of channels, then dividing the input
by ``(bias + alpha / size * sum) ** beta`` in the finalize step. An out-of-window read is
a Select around a load at a clamped index, so a load never leaves its buffer.

The rules of the other window ops of that module (``nn.conv2d_transpose``,
``nn.max_pool2d_dilated``) are the N-d ones of :mod:`passinfra.codegen.compute.window`.
"""

from __future__ import annotations

from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import (
    Indices,
    ReduceOp,
    TensorHandle,
    clamp,
    imm,
    in_range,
    intrinsic,
    output_shape,
    register_compute,
)
from passinfra.ir.attrs import Attrs
from passinfra.ir.types import Type


@register_compute("nn.lrn")
def _lrn(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
    (data,) = inputs
    size, dtype = attrs["size"], data.dtype
    channels = data.shape[1]
    before = (size - 1) // 2  # the ONNX window: [c - floor((size-1)/2), c + ceil((size-1)/2)]

    def body(out: Indices, red: Indices) -> tir.PrimExpr:
        channel = out[1] - tir.IntImm(before) + red[0] if before else out[1] + red[0]
        value = data.load(out[0], clamp(channel, 0, channels - 1), *out[2:])
        return tir.Select(in_range(channel, channels), value * value, imm(0, dtype))

    def finalize(acc: tir.PrimExpr, out: Indices) -> tir.PrimExpr:
        base = imm(attrs["bias"], dtype) + imm(attrs["alpha"] / size, dtype) * acc
        return data.load(*out) / intrinsic("pow", base, imm(attrs["beta"], dtype))

    return ReduceOp("nn.lrn", output_shape(out_type), dtype, (size,), "sum", body, finalize)

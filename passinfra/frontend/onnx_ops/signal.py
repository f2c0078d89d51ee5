"""ONNX DFT (opsets 17 and 20) and STFT (opset 17), on :func:`passinfra.ir.op.signal.dft`.

The transform's length, the axis (an input from opset 20 on) and STFT's frame step and
frame length decide output shapes, so they must be known at import time. STFT is a
gather of the frames (``take`` with a constant index table), the window multiplied in,
then a DFT along the frame axis.
"""

from __future__ import annotations

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.frontend.onnx_ops.context import NodeContext
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.ir import op
from passinfra.ir.expr import Expr
from passinfra.ir.op.signal import dft, dft_plan


def _scalar_int(node: NodeContext, index: int, what: str) -> int:
    values = node.known_ints(index, what)
    if len(values) != 1:
        raise node.fail(f"{what} (input {index}) must be a scalar, got {len(values)} values")
    return values[0]


def _dft(node: NodeContext, axis: int) -> Expr:
    data = node.arg(0)
    shape, dtype = node.shape(data), node.dtype(data)
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    if len(shape) < 2:
        raise node.fail(f"the input must have rank >= 2 ([..., N, ..., C]), got shape {shape}")
    if not -len(shape) <= axis <= len(shape) - 2 or axis == -1:
        raise node.fail(f"axis {axis} is out of range for rank {len(shape)} (the last axis holds the parts)")
    axis %= len(shape)
    if onesided and not inverse and shape[-1] != 1:  # the spec: no onesided output of complex data
        raise node.fail(f"a onesided DFT needs real input (last dimension 1), got shape {shape}")
    if node.has_input(1):
        length = _scalar_int(node, 1, "dft_length")
    else:  # the irfft's default output length is even, as the reference's
        length = 2 * (shape[axis] - 1) if inverse and onesided else shape[axis]
    attrs = {"axis": axis, "inverse": inverse, "onesided": onesided, "length": length}
    try:
        dft_plan(shape, attrs)
    except IRTypeError as err:
        raise node.fail(str(err)) from None
    return dft(data, length, dtype, axis=axis, inverse=inverse, onesided=onesided)


@converter("DFT", since=17)
def _dft_17(node: NodeContext) -> Expr:
    return _dft(node, int(node.attr("axis", 1)))


@converter("DFT", since=20)
def _dft_20(node: NodeContext) -> Expr:
    return _dft(node, _scalar_int(node, 2, "axis") if node.has_input(2) else -2)


@converter("STFT", since=17)
def _stft(node: NodeContext) -> Expr:
    signal = node.arg(0)
    shape, dtype = node.shape(signal), node.dtype(signal)
    if len(shape) != 3 or shape[-1] not in (1, 2):
        raise node.fail(f"the signal must be [batch, length, 1 or 2], got shape {shape}")
    step = _scalar_int(node, 1, "frame_step")
    window = node.input(2)
    width = None if window is None else node.shape(window)
    if width is not None and len(width) != 1:
        raise node.fail(f"the window must be 1-D, got shape {width}")
    if node.has_input(3):
        length = _scalar_int(node, 3, "frame_length")
    else:
        length = shape[1] if width is None else width[0]
    if width is not None and width[0] != length:
        raise node.fail(f"the window has {width[0]} values but frame_length is {length}")
    if step < 1 or not 1 <= length <= shape[1]:
        raise node.fail(f"frame_step {step} must be >= 1 and frame_length {length} in [1, {shape[1]}]")
    frames = 1 + (shape[1] - length) // step
    starts = np.arange(frames, dtype=np.int64)[:, None] * step
    framed = op.take(signal, starts + np.arange(length, dtype=np.int64), axis=1)
    if window is not None:  # [length] as [1, 1, length, 1]: weights per frame position
        framed = op.multiply(framed, op.reshape(node.expr(window), (1, 1, length, 1)))
    return dft(framed, length, dtype, axis=2, onesided=bool(node.attr("onesided", 1)))

"""``weight_panels.unpack``: a weight stored in panels of output channels, read back in
its own layout.

A weight whose last axis is its output channels (an HWIO convolution weight, a
matmul's ``[k, n]`` right operand) is ``R`` rows of ``N`` channels. In panels of ``B``
channels it is ``[ceil(N/B), R, B]``: panel ``j`` holds channels ``j*B .. j*B+B`` of every
row, contiguously, zeros past ``N`` (:func:`to_panels`). A kernel that computes ``B``
output channels at a time (the convolution microkernels) then reads one contiguous run
of memory per block instead of ``R`` short rows ``N`` floats apart, which the hardware
prefetcher streams from memory; onnxruntime reorders its filters the same way, once, at
load time. We do it at compile time: the :class:`~passinfra.codegen.passes.panel_weights.
PanelWeights` pass stores such constants in panels and reads them through this op, so
the graph means what it meant (the interpreter computes :func:`from_panels`), and the
lowering hands the panels to the microkernels as they are (its compute rule, an index
map, serves any other consumer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op._rel import REQUIRED, expect_tensor, register_tensor_op
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, Type

__all__ = ["OP_NAME", "from_panels", "panel_count", "to_panels", "unpack"]

OP_NAME = "weight_panels.unpack"


def panel_count(channels: int, width: int) -> int:
    """Panels of ``width`` channels that hold ``channels`` of them."""
    return -(-channels // width)


def to_panels(weight: np.ndarray, width: int) -> np.ndarray:
    """``weight`` (``[..., N]``) as ``[ceil(N/width), R, width]`` panels (``R`` the product
    of the other axes), zeros past ``N``."""
    channels = weight.shape[-1]
    rows = math.prod(weight.shape[:-1])
    blocks = panel_count(channels, width)
    flat = weight.reshape(rows, channels)
    # one pass over the weight, written once (a large model's weights are most of what a
    # compile moves: a padded copy first and a transposed copy of it took three passes)
    panels = np.empty((blocks, rows, width), dtype=weight.dtype)
    full = channels // width
    if full:
        panels[:full] = flat[:, :full * width].reshape(rows, full, width).transpose(1, 0, 2)
    if full < blocks:
        rest = channels - full * width
        panels[full, :, :rest] = flat[:, full * width:]
        panels[full, :, rest:] = 0
    return panels


def from_panels(panels: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """The weight of ``shape`` that :func:`to_panels` stored as ``panels``."""
    blocks, rows, width = panels.shape
    flat = panels.transpose(1, 0, 2).reshape(rows, blocks * width)[:, :shape[-1]]
    return np.ascontiguousarray(flat.reshape(tuple(shape)))


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    panels = expect_tensor(arg_types[0], "the panels")
    shape = tuple(int(n) for n in attrs["shape"])
    if len(panels.shape) != 3:
        raise IRTypeError(f"{OP_NAME}: the panels must be [blocks, rows, width], got shape "
                          f"{list(panels.shape)}")
    blocks, rows, width = panels.shape
    if not shape or math.prod(shape[:-1]) != rows or panel_count(shape[-1], width) != blocks:
        raise IRTypeError(f"{OP_NAME}: panels of shape {list(panels.shape)} do not hold a weight of shape "
                          f"{list(shape)} ({rows} rows, {blocks} panels of {width} channels)")
    return TensorType(shape, panels.dtype)


register_tensor_op(OP_NAME, attrs={"shape": REQUIRED}, num_inputs=1, type_rel=_relation,
                   impl=lambda args, attrs: from_panels(np.asarray(args[0]), attrs["shape"]),
                   pattern=OpPattern.INJECTIVE,
                   doc="a weight stored in panels of output channels, in its own layout")


def unpack(panels: Any, shape: Sequence[int]) -> Call:
    """The weight of ``shape`` stored as ``panels`` (:func:`to_panels`)."""
    return call_op(OP_NAME, panels, shape=tuple(int(n) for n in shape))

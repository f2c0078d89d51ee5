"""``winograd_weights.unpack``: a 3x3 convolution weight stored as its Winograd F(2x2, 3x3)
transform, read back in its own layout.

Winograd's minimal filtering (Lavin and Gray, "Fast Algorithms for Convolutional Neural
Networks", 2016) computes a 2x2 block of a stride-1 3x3 convolution's outputs from a 4x4
patch of its input with 16 multiplications per channel pair instead of 36:
``Y = A^T [(G g G^T) * (B^T d B)] A``, summed over the input channels. ``G g G^T`` (4x4 per
input/output channel pair) depends on the weight only, so it is computed once, at compile
time, in float64 and rounded once (:func:`to_winograd`); the kernel
(:mod:`passinfra.codegen.compute.conv_winograd`) computes the data transform and sums 16
GEMMs of the transformed operands.

Stored as 16 weights of ``[C, OC]`` (one per point ``(a, b)`` of the 4x4 transform, row ``(a
* 4 + b) * C + c``) in panels of :data:`PANEL_WIDTH` output channels, ``[ceil(OC/32), 16 * C,
32]`` (zeros past ``OC``), the layout the convolution microkernels' pointwise tiles read
(:mod:`passinfra.ir.op.weight_panels`). The graph keeps its meaning: the interpreter
computes the weight back from its transform (:func:`from_winograd`: ``G`` has the left
inverse ``L`` with entries 0 and 1 below, so the weight is ``L U L^T``, within a rounding
of the transform of each element).
"""

from __future__ import annotations

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

__all__ = ["A_T", "B_T", "G", "LEFT_INVERSE", "OP_NAME", "PANEL_WIDTH", "POINTS", "from_winograd",
           "to_winograd", "unpack", "winograd_shape"]

OP_NAME = "winograd_weights.unpack"
PANEL_WIDTH = 32
POINTS = 16  # the 4x4 points of the transform
# F(2x2, 3x3) over the interpolation points 0, 1, -1 (and infinity)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])
B_T = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
A_T = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)
LEFT_INVERSE = np.array([[1, 0, 0, 0], [0, 1, -1, 0], [0, 0, 0, 1]], dtype=np.float64)  # L @ G = I


def winograd_shape(channels: int, out_channels: int) -> tuple[int, int, int]:
    """The stored transform of a ``[3, 3, channels, out_channels]`` weight."""
    return (-(-out_channels // PANEL_WIDTH), POINTS * channels, PANEL_WIDTH)


def to_winograd(weight: np.ndarray) -> np.ndarray:
    """``G g G^T`` of an HWIO ``[3, 3, C, OC]`` float32 weight, in panels (module docstring)."""
    _, _, channels, out_channels = weight.shape
    transformed = np.einsum("ai,ijco,bj->abco", G, weight.astype(np.float64), G).astype(weight.dtype)
    flat = transformed.reshape(POINTS * channels, out_channels)
    blocks, rows, width = winograd_shape(channels, out_channels)
    panels = np.zeros((blocks, rows, width), dtype=weight.dtype)
    for block in range(blocks):
        columns = flat[:, block * width:(block + 1) * width]
        panels[block, :, :columns.shape[1]] = columns
    return panels


def from_winograd(panels: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """The HWIO weight of ``shape`` whose transform :func:`to_winograd` stored as ``panels``."""
    _, _, channels, out_channels = (int(n) for n in shape)
    blocks, rows, width = panels.shape
    flat = panels.transpose(1, 0, 2).reshape(rows, blocks * width)[:, :out_channels]
    transformed = flat.reshape(4, 4, channels, out_channels).astype(np.float64)
    weight = np.einsum("ia,abco,jb->ijco", LEFT_INVERSE, transformed, LEFT_INVERSE)
    return np.ascontiguousarray(weight.astype(panels.dtype))


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    panels = expect_tensor(arg_types[0], "the transformed weight")
    shape = tuple(int(n) for n in attrs["shape"])
    if len(shape) != 4 or shape[:2] != (3, 3):
        raise IRTypeError(f"{OP_NAME}: the weight must be HWIO [3, 3, C, OC], got shape {list(shape)}")
    expected = winograd_shape(shape[2], shape[3])
    if tuple(panels.shape) != expected:
        raise IRTypeError(f"{OP_NAME}: a weight of shape {list(shape)} is stored as {list(expected)}, got "
                          f"{list(panels.shape)}")
    return TensorType(shape, panels.dtype)


register_tensor_op(OP_NAME, attrs={"shape": REQUIRED}, num_inputs=1, type_rel=_relation,
                   impl=lambda args, attrs: from_winograd(np.asarray(args[0]), attrs["shape"]),
                   pattern=OpPattern.INJECTIVE,
                   doc="a 3x3 convolution weight stored as its Winograd F(2x2, 3x3) transform")


def unpack(panels: Any, shape: Sequence[int]) -> Call:
    """The HWIO weight of ``shape`` stored as ``panels`` (:func:`to_winograd`)."""
    return call_op(OP_NAME, panels, shape=tuple(int(n) for n in shape))

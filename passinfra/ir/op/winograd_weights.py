"""``winograd_weights.unpack``: a 3x3 convolution weight stored as its Winograd transform,
read back in its own layout.

Winograd's minimal filtering (Lavin and Gray, "Fast Algorithms for Convolutional Neural
Networks", 2016) computes an m x m block of a stride-1 3x3 convolution's outputs from an
(m + 2)-square patch of its input with (m + 2)^2 multiplications per channel pair instead
of 9 m^2: ``Y = A^T [(G g G^T) * (B^T d B)] A``, summed over the input channels; F(2x2, 3x3)
16 instead of 36, F(4x4, 3x3) 36 instead of 144 (:data:`TILES`). ``G g G^T`` depends on the
weight only, so it is computed once, at compile time, in float64 and rounded once
(:func:`to_winograd`); the kernel (:mod:`passinfra.codegen.compute.conv_winograd`) computes
the data transform and sums one GEMM per point of the transformed operands.

Stored as one weight of ``[C, OC]`` per point ``(a, b)`` of the transform (row ``(a * (m + 2)
+ b) * C + c``) in panels of :data:`PANEL_WIDTH` output channels, ``[ceil(OC/32), (m + 2)^2 *
C, 32]`` (zeros past ``OC``): 16/9 of the weight's bytes for F(2x2, 3x3), 4x for F(4x4, 3x3);
the layout the convolution microkernels' pointwise tiles read
(:mod:`passinfra.ir.op.weight_panels`). The graph keeps its meaning: the interpreter
computes the weight back from its transform (:func:`from_winograd`: ``G`` has a left
inverse ``L`` whose rows pick one or two of its rows, so the weight is ``L U L^T``, within a
few roundings of each element).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op._rel import REQUIRED, expect_tensor, register_tensor_op
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, Type

__all__ = ["OP_NAME", "PANEL_WIDTH", "TILES", "Transform", "from_winograd", "points", "to_winograd",
           "transform", "unpack", "winograd_shape"]

OP_NAME = "winograd_weights.unpack"
PANEL_WIDTH = 32


@dataclass(frozen=True)
class Transform:
    """F(m x m, 3x3): ``Y = A^T [(G g G^T) * (B^T d B)] A`` over an ``(m + 2)``-square patch;
    ``left_inverse`` L has ``L G = I`` (the weight back from its transform)."""

    g: np.ndarray
    b_t: np.ndarray
    a_t: np.ndarray
    left_inverse: np.ndarray


# F(2x2, 3x3) over the interpolation points 0, 1, -1 (and infinity): adds only on the data;
# F(4x4, 3x3) over 0, 1, -1, 2, -2 (Lavin and Gray's matrices)
TILES = {
    2: Transform(np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]),
                 np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64),
                 np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64),
                 np.array([[1, 0, 0, 0], [0, 1, -1, 0], [0, 0, 0, 1]], dtype=np.float64)),
    4: Transform(np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                           [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
                 np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                           [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
                          dtype=np.float64),
                 np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                           [0, 1, -1, 8, -8, 1]], dtype=np.float64),
                 np.array([[4, 0, 0, 0, 0, 0], [0, -3, 3, 0, 0, 0], [0, 0, 0, 0, 0, 1]], dtype=np.float64)),
}


def transform(tile: int) -> Transform:
    """The matrices of F(``tile`` x ``tile``, 3x3) (IRTypeError for a tile without them)."""
    found = TILES.get(int(tile))
    if found is None:
        raise IRTypeError(f"{OP_NAME}: no Winograd transform for tiles of {tile}; known: "
                          f"{', '.join(map(str, TILES))}")
    return found


def points(tile: int) -> int:
    """The points of the transform: ``(tile + 2)^2``."""
    return (int(tile) + 2) ** 2


def winograd_shape(channels: int, out_channels: int, tile: int = 2) -> tuple[int, int, int]:
    """The stored transform of a ``[3, 3, channels, out_channels]`` weight."""
    return (-(-out_channels // PANEL_WIDTH), points(tile) * channels, PANEL_WIDTH)


def to_winograd(weight: np.ndarray, tile: int = 2) -> np.ndarray:
    """``G g G^T`` of an HWIO ``[3, 3, C, OC]`` float32 weight, in panels (module docstring)."""
    _, _, channels, out_channels = weight.shape
    g = transform(tile).g
    transformed = np.einsum("ai,ijco,bj->abco", g, weight.astype(np.float64), g).astype(weight.dtype)
    flat = transformed.reshape(points(tile) * channels, out_channels)
    blocks, rows, width = winograd_shape(channels, out_channels, tile)
    panels = np.zeros((blocks, rows, width), dtype=weight.dtype)
    for block in range(blocks):
        columns = flat[:, block * width:(block + 1) * width]
        panels[block, :, :columns.shape[1]] = columns
    return panels


def from_winograd(panels: np.ndarray, shape: Sequence[int], tile: int = 2) -> np.ndarray:
    """The HWIO weight of ``shape`` whose transform :func:`to_winograd` stored as ``panels``."""
    _, _, channels, out_channels = (int(n) for n in shape)
    blocks, rows, width = panels.shape
    alpha = int(tile) + 2
    flat = panels.transpose(1, 0, 2).reshape(rows, blocks * width)[:, :out_channels]
    transformed = flat.reshape(alpha, alpha, channels, out_channels).astype(np.float64)
    left = transform(tile).left_inverse
    weight = np.einsum("ia,abco,jb->ijco", left, transformed, left)
    return np.ascontiguousarray(weight.astype(panels.dtype))


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    panels = expect_tensor(arg_types[0], "the transformed weight")
    shape = tuple(int(n) for n in attrs["shape"])
    if len(shape) != 4 or shape[:2] != (3, 3):
        raise IRTypeError(f"{OP_NAME}: the weight must be HWIO [3, 3, C, OC], got shape {list(shape)}")
    transform(attrs["tile"])
    expected = winograd_shape(shape[2], shape[3], attrs["tile"])
    if tuple(panels.shape) != expected:
        raise IRTypeError(f"{OP_NAME}: a weight of shape {list(shape)} is stored as {list(expected)}, got "
                          f"{list(panels.shape)}")
    return TensorType(shape, panels.dtype)


register_tensor_op(OP_NAME, attrs={"shape": REQUIRED, "tile": 2}, num_inputs=1, type_rel=_relation,
                   impl=lambda args, attrs: from_winograd(np.asarray(args[0]), attrs["shape"], attrs["tile"]),
                   pattern=OpPattern.INJECTIVE,
                   doc="a 3x3 convolution weight stored as its Winograd F(m x m, 3x3) transform")


def unpack(panels: Any, shape: Sequence[int], tile: int = 2) -> Call:
    """The HWIO weight of ``shape`` stored as ``panels`` (:func:`to_winograd` of ``tile``)."""
    return call_op(OP_NAME, panels, shape=tuple(int(n) for n in shape), tile=int(tile))

"""``qgemm_panels.unpack``: an 8-bit matmul weight stored in the integer GEMM's panels,
read back in its own layout.

The runtime's integer GEMM (``passinfra/codegen/c/qgemm.c``) multiplies unsigned bytes of
the data by signed bytes of the weight, four ``k`` at a time per output column (VPDPBUSD's
operands; AMX's TDPBUSD reads a tile of 16 such groups). A ``[k, n]`` weight ``B`` (int8,
or uint8) is stored for it as ``[ceil(n/32), ceil(k/4) + 1, 32, 4]`` int8 panels
(:func:`to_panels`): panel ``j`` holds columns ``32j .. 32j+31``, and for each group of
four ``k`` the column's four values side by side; a uint8 weight is stored minus 128 (``B ^
0x80``, so every stored byte is signed; the GEMM moves its zero point by 128 too); zeros
past ``n`` and past ``k`` (the GEMM's AMX body reads a last step of fewer than 64 ``k``
from a zero-padded copy of its own); and two more groups: the columns' sums of the stored
bytes, int32 little-endian (the GEMM removes the zero points with them), and a flag, its
first byte 1 where every pair of stored bytes of a column (``k = 2j, 2j + 1``, all
panels, all groups) has ``|b0 + b1| <= 128`` (:func:`pairs_fit`), else 0, the rest zeros:
then the AVX2 body multiplies by VPMADDUBSW, whose 16-bit pair sums cannot saturate (a
7-bit weight); the GEMM reads it from the first panel, where a check of every panel on
every call cost 11% of a 32-row layer of 2048 x 5632 (its weight read twice from memory).
The flag is data, not a constant of the kernel: layers of one shape share one kernel. A weight of at
most 16 columns (a grouped convolution's 16 outputs a group, as RegNet's) has panels of 16
(:func:`panel_width`): a panel of 32 would be half zeros, and the AMX body multiplies one
tile of 16 columns then. onnxruntime packs its quantized weights in the same spirit at
session load; we do it at compile time (the
:class:`~passinfra.codegen.passes.panel_weights.PanelWeights` pass), so the library's
weights file holds one byte per weight, and a call reads them in the order it uses them.

The interpreter computes :func:`from_panels`, so the graph means what it meant; the
lowering hands the panels to the GEMM as they are (the op's compute rule, an index map,
serves any other consumer).
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

__all__ = ["COLUMNS", "DEPTH", "K_MULTIPLE", "NARROW_COLUMNS", "OP_NAME", "flat_shape", "from_panels",
           "pairs_fit", "panel_width", "panels_shape", "to_panels", "unpack"]

OP_NAME = "qgemm_panels.unpack"
# output columns per panel, k per group (RP_QGEMM_COLUMNS in c/qgemm.c; VPDPBUSD's 4), and
# the k of one step of the GEMM's AMX body (RP_QGEMM_DEPTH: an AMX tile's 64 bytes a row)
COLUMNS, DEPTH, K_MULTIPLE = 32, 4, 64
# the columns of a narrow panel: a weight (a group) of at most this many is stored so
# (RP_QGEMM_NARROW in c/qgemm.c, which derives the width from n the same way)
NARROW_COLUMNS = 16
_DTYPES = ("int8", "uint8")


def panel_width(n: int) -> int:
    """The columns of each panel of a weight (or group) of ``n`` columns."""
    return NARROW_COLUMNS if n <= NARROW_COLUMNS else COLUMNS


def panels_shape(k: int, n: int, groups: int = 1) -> tuple[int, int, int, int]:
    """The panels' shape for a ``[k, n]`` weight; with ``groups``, for ``groups`` weights of
    ``[k, n / groups]`` (a grouped convolution's), one after the other."""
    per_group = n // groups
    width = panel_width(per_group)
    quads = -(-k // DEPTH) + 2  # groups of 4 k, then the columns' sums and the flag
    return (groups * -(-per_group // width), quads, width, DEPTH)


def flat_shape(shape: Sequence[int]) -> tuple[int, int]:
    """``[k, n]`` of a weight of ``shape``: its leading axes flatten into ``k`` (an HWIO
    convolution weight is the ``[KH * KW * I, O]`` matrix of its im2col GEMM)."""
    return int(np.prod([int(d) for d in shape[:-1]], dtype=np.int64)), int(shape[-1])


def _stored(weight: np.ndarray) -> np.ndarray:
    """The signed bytes the panels store for an int8 or uint8 ``weight`` (uint8 minus 128)."""
    return weight.view(np.int8) if weight.dtype == np.int8 else (weight ^ np.uint8(0x80)).view(np.int8)


def pairs_fit(weight: np.ndarray) -> bool:
    """Whether every pair of stored bytes of a column of the ``[k, n]`` ``weight`` (rows
    ``2j`` and ``2j + 1``, a zero past an odd ``k``) has ``|b0 + b1| <= 128``: then no
    product pair of VPMADDUBSW (u8 x s8, summed in 16 bits) saturates."""
    values = _stored(weight).astype(np.int16)
    if len(values) % 2:
        values = np.concatenate([values, np.zeros((1, values.shape[1]), np.int16)])
    return bool(np.abs(values[0::2] + values[1::2]).max(initial=0) <= 128)


def _matrix_panels(weight: np.ndarray, fits: bool) -> np.ndarray:
    k, n = weight.shape
    tiles, quads, width, _ = panels_shape(k, n)
    quads -= 2  # the last two hold the columns' sums and the flag
    padded = np.zeros((quads * DEPTH, tiles * width), np.int8)
    padded[:k, :n] = _stored(weight)
    # [quads, 4, tiles, width] -> [tiles, quads, width, 4]
    values = padded.reshape(quads, DEPTH, tiles, width).transpose(2, 0, 3, 1)
    sums = padded.astype(np.int32).sum(axis=0).astype("<i4").reshape(tiles, 1, width, 1).view(np.int8)
    flag = np.zeros((tiles, 1, width, DEPTH), np.int8)
    flag[:, 0, 0, 0] = fits
    return np.concatenate([values, sums, flag], axis=1)


def to_panels(weight: np.ndarray, groups: int = 1) -> np.ndarray:
    """``weight`` (``[k, n]`` int8 or uint8, or of higher rank: :func:`flat_shape`) as the
    GEMM's panels (module docstring); with ``groups``, the panels of each group's
    ``n / groups`` columns, one group after the other."""
    k, n = flat_shape(weight.shape)
    matrix = weight.reshape(k, n)
    per_group = n // groups
    fits = pairs_fit(matrix)  # a column's pairs are its group's: one flag for the whole weight
    parts = [_matrix_panels(matrix[:, g * per_group:(g + 1) * per_group], fits) for g in range(groups)]
    return np.ascontiguousarray(np.concatenate(parts, axis=0))


def _matrix_from_panels(panels: np.ndarray, k: int, n: int) -> np.ndarray:
    tiles, quads, columns, depth = panels.shape
    values = panels[:, :quads - 2]  # the last two: the columns' sums and the flag
    return values.transpose(1, 3, 0, 2).reshape((quads - 2) * depth, tiles * columns)[:k, :n]


def from_panels(panels: np.ndarray, shape: Sequence[int], dtype: str, groups: int = 1) -> np.ndarray:
    """The weight of ``shape`` and ``dtype`` that :func:`to_panels` stored as ``panels``."""
    k, n = flat_shape(shape)
    panels = np.asarray(panels)
    per_group = n // groups
    tiles = panels.shape[0] // groups
    flat = np.concatenate([_matrix_from_panels(panels[g * tiles:(g + 1) * tiles], k, per_group)
                           for g in range(groups)], axis=1)
    flat = np.ascontiguousarray(flat).view(np.int8)
    weight = flat.copy() if dtype == "int8" else flat.view(np.uint8) ^ np.uint8(0x80)
    return weight.reshape(tuple(int(d) for d in shape))


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    panels = expect_tensor(arg_types[0], "the panels")
    shape, dtype, groups = tuple(int(d) for d in attrs["shape"]), attrs["dtype"], attrs["groups"]
    if dtype not in _DTYPES:
        raise IRTypeError(f"{OP_NAME}: the weight must be int8 or uint8, got {dtype}")
    if len(shape) < 2:
        raise IRTypeError(f"{OP_NAME}: the weight must have rank >= 2 ([k, n]), got shape {list(shape)}")
    if not isinstance(groups, int) or groups < 1 or shape[-1] % groups:
        raise IRTypeError(f"{OP_NAME}: groups={groups!r} must divide the weight's columns ({shape[-1]})")
    expected = panels_shape(*flat_shape(shape), groups)
    if panels.dtype != "int8" or tuple(panels.shape) != expected:
        raise IRTypeError(f"{OP_NAME}: int8 panels of shape {list(expected)} hold a weight of shape "
                          f"{list(shape)}, got {panels.dtype} panels of shape {list(panels.shape)}")
    return TensorType(shape, dtype)


register_tensor_op(OP_NAME, attrs={"shape": REQUIRED, "dtype": REQUIRED, "groups": 1}, num_inputs=1,
                   type_rel=_relation,
                   impl=lambda args, attrs: from_panels(np.asarray(args[0]), attrs["shape"], attrs["dtype"],
                                                        attrs["groups"]),
                   pattern=OpPattern.INJECTIVE,
                   doc="an 8-bit [k, n] weight stored in the integer GEMM's panels, in its own layout")


def unpack(panels: Any, shape: Sequence[int], dtype: str, groups: int = 1) -> Call:
    """The weight of ``shape`` (``[k, n]``, or of higher rank: :func:`flat_shape`) and
    ``dtype`` stored as ``panels`` (:func:`to_panels`, with ``groups``)."""
    return call_op(OP_NAME, panels, shape=tuple(int(d) for d in shape), dtype=str(dtype), groups=int(groups))

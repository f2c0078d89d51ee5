"""``qgemm_panels.unpack``: an 8-bit matmul weight stored in the integer GEMM's panels,
read back in its own layout.

The runtime's integer GEMM (``passinfra/codegen/c/qgemm.c``) multiplies unsigned bytes of
the data by signed bytes of the weight, four ``k`` at a time per output column (VPDPBUSD's
operands; AMX's TDPBUSD reads a tile of 16 such groups). A ``[k, n]`` weight ``B`` (int8,
or uint8) is stored for it as ``[ceil(n/32), 16 * ceil(k/64) + 1, 32, 4]`` int8 panels
(:func:`to_panels`): panel ``j`` holds columns ``32j .. 32j+31``, and for each group of
four ``k`` the column's four values side by side; a uint8 weight is stored minus 128 (``B ^
0x80``, so every stored byte is signed; the GEMM moves its zero point by 128 too); zeros
past ``n``, and past ``k`` up to a multiple of 64 (a whole AMX tile of groups); and one more
group: the 32 columns' sums of the stored bytes, int32 little-endian (the GEMM removes the
zero points with them). onnxruntime packs
its quantized weights in the same spirit at session load; we do it at compile time (the
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

__all__ = ["COLUMNS", "DEPTH", "K_MULTIPLE", "OP_NAME", "from_panels", "panels_shape", "to_panels", "unpack"]

OP_NAME = "qgemm_panels.unpack"
# output columns per panel, k per group (RP_QGEMM_COLUMNS in c/qgemm.c; VPDPBUSD's 4), and
# the multiple of k a panel holds (RP_QGEMM_DEPTH: an AMX tile's 64 bytes a row)
COLUMNS, DEPTH, K_MULTIPLE = 32, 4, 64
_DTYPES = ("int8", "uint8")


def panels_shape(k: int, n: int) -> tuple[int, int, int, int]:
    """The panels' shape for a ``[k, n]`` weight."""
    return (-(-n // COLUMNS), -(-k // K_MULTIPLE) * (K_MULTIPLE // DEPTH) + 1, COLUMNS, DEPTH)


def to_panels(weight: np.ndarray) -> np.ndarray:
    """``weight`` (``[k, n]`` int8 or uint8) as the GEMM's panels (module docstring)."""
    k, n = weight.shape
    tiles, groups, _, _ = panels_shape(k, n)
    groups -= 1  # the last holds the columns' sums
    signed = weight.view(np.int8) if weight.dtype == np.int8 else (weight ^ np.uint8(0x80)).view(np.int8)
    padded = np.zeros((groups * DEPTH, tiles * COLUMNS), np.int8)
    padded[:k, :n] = signed
    # [groups, 4, tiles, 32] -> [tiles, groups, 32, 4]
    values = padded.reshape(groups, DEPTH, tiles, COLUMNS).transpose(2, 0, 3, 1)
    sums = padded.astype(np.int32).sum(axis=0).astype("<i4").reshape(tiles, 1, COLUMNS, 1).view(np.int8)
    return np.ascontiguousarray(np.concatenate([values, sums], axis=1))


def from_panels(panels: np.ndarray, shape: Sequence[int], dtype: str) -> np.ndarray:
    """The ``[k, n]`` weight of ``dtype`` that :func:`to_panels` stored as ``panels``."""
    k, n = (int(d) for d in shape)
    tiles, groups, columns, depth = panels.shape
    values = np.asarray(panels)[:, :groups - 1]  # the last group: the columns' sums
    flat = values.transpose(1, 3, 0, 2).reshape((groups - 1) * depth, tiles * columns)[:k, :n]
    flat = np.ascontiguousarray(flat).view(np.int8)
    return flat.copy() if dtype == "int8" else flat.view(np.uint8) ^ np.uint8(0x80)


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    panels = expect_tensor(arg_types[0], "the panels")
    shape, dtype = tuple(int(d) for d in attrs["shape"]), attrs["dtype"]
    if dtype not in _DTYPES:
        raise IRTypeError(f"{OP_NAME}: the weight must be int8 or uint8, got {dtype}")
    if len(shape) != 2:
        raise IRTypeError(f"{OP_NAME}: the weight must be [k, n], got shape {list(shape)}")
    if panels.dtype != "int8" or tuple(panels.shape) != panels_shape(*shape):
        raise IRTypeError(f"{OP_NAME}: int8 panels of shape {list(panels_shape(*shape))} hold a weight of "
                          f"shape {list(shape)}, got {panels.dtype} panels of shape {list(panels.shape)}")
    return TensorType(shape, dtype)


register_tensor_op(OP_NAME, attrs={"shape": REQUIRED, "dtype": REQUIRED}, num_inputs=1, type_rel=_relation,
                   impl=lambda args, attrs: from_panels(np.asarray(args[0]), attrs["shape"], attrs["dtype"]),
                   pattern=OpPattern.INJECTIVE,
                   doc="an 8-bit [k, n] weight stored in the integer GEMM's panels, in its own layout")


def unpack(panels: Any, shape: Sequence[int], dtype: str) -> Call:
    """The ``[k, n]`` weight of ``dtype`` stored as ``panels`` (:func:`to_panels`)."""
    return call_op(OP_NAME, panels, shape=tuple(int(d) for d in shape), dtype=str(dtype))

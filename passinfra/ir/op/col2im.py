"""``col2im``: ONNX Col2Im, the inverse of im2col: column blocks summed back into an image.

``data`` (N, C * prod(block_shape), L) holds, per column ``l``, the ``block_shape`` cells
of the sliding block at position ``l`` (row-major over the block positions of the padded
image, stepped by ``strides``, cells spread by ``dilations``). The output
(N, C, *image_shape) is the sum, per image cell, of every block cell that lands on it,
in row-major order of the block cells (as the compute rule's reduction); ``pads`` (begin
pads, then end pads) are cropped away. ``image_shape`` and ``block_shape`` are
attributes here: the output shape must be static.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op._rel import (
    NUMERIC_DTYPES,
    REQUIRED,
    expect_dtype,
    expect_tensor,
    register_tensor_op,
    type_text,
)
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, Type

__all__ = ["col2im", "block_counts", "filled"]


def block_counts(attrs: Attrs) -> list[int]:
    """How many block positions fit along each image axis (IRTypeError if none)."""
    image, block = attrs["image_shape"], attrs["block_shape"]
    rank = len(image)
    for name in ("block_shape", "dilations", "strides"):
        if len(attrs[name]) != rank or any(v < 1 for v in attrs[name]):
            raise IRTypeError(f"{name} must hold {rank} positive ints (one per axis), got {attrs[name]!r}")
    pads = attrs["pads"]
    if len(pads) != 2 * rank or any(p < 0 for p in pads):
        raise IRTypeError(f"pads must hold {2 * rank} non-negative ints (begins, then ends), got {pads!r}")
    counts = []
    for i in range(rank):
        span = attrs["dilations"][i] * (block[i] - 1) + 1
        padded = image[i] + pads[i] + pads[rank + i]
        if span > padded:
            raise IRTypeError(f"a block of extent {span} does not fit axis {i} of padded length {padded}")
        counts.append((padded - span) // attrs["strides"][i] + 1)
    return counts


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    expect_dtype(data, NUMERIC_DTYPES, "the data")
    image = attrs["image_shape"]
    if not image or any(not isinstance(v, int) or v < 1 for v in image):
        raise IRTypeError(f"image_shape must hold positive ints, got {image!r}")
    counts = block_counts(attrs)
    cells = math.prod(attrs["block_shape"])
    if data.ndim != 3 or data.shape[1] % cells or data.shape[2] != math.prod(counts):
        raise IRTypeError(
            f"expected data of shape (N, C * {cells}, {math.prod(counts)}) for blocks of shape "
            f"{tuple(attrs['block_shape'])} over an image of shape {tuple(image)}, got {type_text(data)}")
    return TensorType((data.shape[0], data.shape[1] // cells, *image), data.dtype)


def _impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data = np.asarray(args[0])
    image, block = attrs["image_shape"], attrs["block_shape"]
    rank, counts, pads = len(image), block_counts(attrs), attrs["pads"]
    n, channels = data.shape[0], data.shape[1] // math.prod(block)
    columns = data.reshape(n, channels, math.prod(block), *counts)
    padded = np.zeros((n, channels, *(image[i] + pads[i] + pads[rank + i] for i in range(rank))), data.dtype)
    for k, cell in enumerate(itertools.product(*(range(b) for b in block))):  # row-major, as the rule
        where = tuple(slice(c * d, c * d + s * (m - 1) + 1, s)
                      for c, d, s, m in zip(cell, attrs["dilations"], attrs["strides"], counts))
        padded[(slice(None), slice(None), *where)] += columns[:, :, k]
    crop = tuple(slice(pads[i], pads[i] + image[i]) for i in range(rank))
    return np.ascontiguousarray(padded[(slice(None), slice(None), *crop)])


register_tensor_op(
    "col2im", attrs={"image_shape": REQUIRED, "block_shape": REQUIRED, "dilations": None, "pads": None,
                     "strides": None},
    num_inputs=1, type_rel=lambda types, attrs: _relation(types, filled(attrs)),
    impl=lambda args, attrs: _impl(args, filled(attrs)), pattern=OpPattern.OPAQUE,
    doc="ONNX Col2Im: sliding-block columns summed back into an image",
)


def filled(attrs: Attrs) -> dict[str, Any]:
    """The attrs with the defaults that depend on the rank (ones, zero pads)."""
    rank = len(attrs["image_shape"])
    return {**attrs, "dilations": attrs["dilations"] or (1,) * rank,
            "strides": attrs["strides"] or (1,) * rank, "pads": attrs["pads"] or (0,) * (2 * rank)}


def col2im(data: Any, image_shape: Sequence[int], block_shape: Sequence[int],
           dilations: Sequence[int] | None = None, pads: Sequence[int] | None = None,
           strides: Sequence[int] | None = None) -> Call:
    """Sum the column blocks of ``data`` back into images of ``image_shape``."""
    rank = len(image_shape)
    return call_op("col2im", data, image_shape=tuple(int(v) for v in image_shape),
                   block_shape=tuple(int(v) for v in block_shape),
                   dilations=tuple(int(v) for v in dilations or (1,) * rank),
                   pads=tuple(int(v) for v in pads or (0,) * (2 * rank)),
                   strides=tuple(int(v) for v in strides or (1,) * rank))

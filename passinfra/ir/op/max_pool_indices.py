"""``nn.max_pool_indices``: where each max of a max pool is (ONNX MaxPool's ``Indices``).

Channels-first data of 2 or 3 spatial axes (N, C, *spatial; a 1-D pool is a 2-D one over
a unit height, which changes no index). The attributes are those of the other pools
(:func:`passinfra.ir.op.window.pool_relation`): ``pool_size``, ``strides``, ``dilation``,
``padding`` (begin pads, then end pads), ``ceil_mode``, plus ``storage_order``.

The output (int64, the pooled shape) is the flat position of the window's max in the
whole input: ``(n * C + c) * prod(spatial) + s``, where ``s`` ravels the spatial position
row-major (``storage_order=0``) or column-major (``storage_order=1``, the first spatial
axis varying fastest); the batch and channel part stays row-major in both, as ONNX's
reference and onnxruntime compute it. Windows are scanned in row-major tap order and a
cell wins only when it is greater than the best so far, so on ties the first max wins;
padded cells, and those a ceil-mode window runs past the padding, never win. The values
of the pool are the ordinary max pools' (this op only locates them).
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
from passinfra.ir.op import _window
from passinfra.ir.op._rel import (
    NUMERIC_DTYPES,
    REQUIRED,
    expect_tensor,
    int_tuple,
    positive_ints,
    register_tensor_op,
)
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.op.window import pad_tuple_nd, pool_relation
from passinfra.ir.types import TensorType, Type

__all__ = ["max_pool_indices", "spatial_strides"]

_RELATIONS = {rank: pool_relation(rank, NUMERIC_DTYPES) for rank in (2, 3)}


def spatial_strides(sizes: Sequence[int], storage_order: int) -> tuple[int, ...]:
    """How far one step along each spatial axis moves the flat index: row-major for
    ``storage_order`` 0, column-major (the first axis fastest) for 1."""
    if storage_order == 0:
        return tuple(math.prod(sizes[axis + 1:]) for axis in range(len(sizes)))
    return tuple(math.prod(sizes[:axis]) for axis in range(len(sizes)))


def _checked_storage_order(attrs: Attrs) -> int:
    order = attrs["storage_order"]
    if order not in (0, 1) or isinstance(order, bool):
        raise IRTypeError(f"storage_order must be 0 (row-major) or 1 (column-major), got {order!r}")
    return int(order)


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    rank = data.ndim - 2
    if rank not in _RELATIONS:
        raise IRTypeError(f"expected data of 2 or 3 spatial axes (NCHW or NCDHW), got {data.ndim} dimensions")
    _checked_storage_order(attrs)
    pooled = _RELATIONS[rank](arg_types, attrs)
    assert isinstance(pooled, TensorType)
    return TensorType(pooled.shape, "int64")


def _impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data = np.asarray(args[0])
    order = _checked_storage_order(attrs)
    window, strides, dilation = attrs["pool_size"], attrs["strides"], attrs["dilation"]
    rank = len(window)
    begins, ends = attrs["padding"][:rank], attrs["padding"][rank:]
    sizes = data.shape[2:]
    out = [_window.window_out_size(n, k, s, d, b, e, attrs["ceil_mode"])
           for n, k, s, d, b, e in zip(sizes, window, strides, dilation, begins, ends)]
    steps = spatial_strides(sizes, order)
    best = np.zeros((*data.shape[:2], *out), dtype=data.dtype)
    where = np.full(best.shape, -1, dtype=np.int64)
    grid = [np.arange(o, dtype=np.int64) for o in out]
    # one whole-image gather per kernel tap, taps in row-major order (the scan order)
    for tap in itertools.product(*(range(k) for k in window)):
        positions = [o * s + t * d - b for o, s, t, d, b in zip(grid, strides, tap, dilation, begins)]
        inside = np.ones(out, dtype=bool)
        flat = np.zeros(out, dtype=np.int64)
        for axis, (position, size, step) in enumerate(zip(positions, sizes, steps)):
            shape = [1] * rank
            shape[axis] = -1
            inside = inside & ((position >= 0) & (position < size)).reshape(shape)
            flat = flat + (position * step).reshape(shape)
        clipped = [np.clip(p, 0, n - 1) for p, n in zip(positions, sizes)]
        cells = data[(slice(None), slice(None), *np.ix_(*clipped))]
        with np.errstate(invalid="ignore"):  # NaN compares false: it never beats a number
            wins = inside & ((where < 0) | (cells > best))
        best = np.where(wins, cells, best)
        where = np.where(wins, flat, where)
    planes = np.arange(data.shape[0] * data.shape[1], dtype=np.int64).reshape(*data.shape[:2], *(1,) * rank)
    offset = planes * math.prod(sizes)
    return np.where(where < 0, where, where + offset)


register_tensor_op(
    "nn.max_pool_indices",
    attrs={"pool_size": REQUIRED, "strides": REQUIRED, "dilation": REQUIRED, "padding": REQUIRED,
           "ceil_mode": False, "storage_order": 0},
    num_inputs=1, type_rel=_relation, impl=_impl, pattern=OpPattern.OPAQUE,
    doc="flat int64 position of each max of a 2-D/3-D max pool (ONNX MaxPool Indices), "
        "row- or column-major",
)


def max_pool_indices(data: Any, pool_size: Any, strides: Any, padding: Any, dilation: Any,
                     ceil_mode: bool = False, storage_order: int = 0) -> Call:
    """Flat positions (int64) of the maxima of a max pool over the trailing 2 or 3 axes
    of ``data``; the window attributes as for ``nn.max_pool3d`` (one int or one per axis
    allowed), ``storage_order`` 0 (row-major) or 1 (column-major)."""
    rank = len(int_tuple(pool_size, None, "pool_size"))
    if rank not in (2, 3):
        raise IRTypeError(f"max_pool_indices pools 2 or 3 spatial axes, got a pool_size of {rank}")
    return call_op(
        "nn.max_pool_indices", data,
        pool_size=positive_ints(int_tuple(pool_size, rank, "pool_size"), "pool_size"),
        strides=positive_ints(int_tuple(strides, rank, "strides"), "strides"),
        dilation=positive_ints(int_tuple(dilation, rank, "dilation"), "dilation"),
        padding=pad_tuple_nd(padding, rank), ceil_mode=bool(ceil_mode), storage_order=int(storage_order),
    )

"""Compute rule of ``nn.max_pool_indices`` (:mod:`passinfra.ir.op.max_pool_indices`).

An :class:`ExternOp`, as ``argmax``'s: per output position a serial scan of the window's
taps in row-major order keeps the best value and its flat position, and a cell replaces
them only when it lies in the data and is greater than the best (or is the window's
first real cell), so the first max wins ties exactly as in the NumPy reference. Reads
outside the data are loads at a clamped position under the validity test, so no load
leaves the buffer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import (
    ExternOp,
    Indices,
    TensorHandle,
    clamp,
    in_range,
    local_scalar,
    loop_nest,
    output_shape,
    register_compute,
    seq,
)
from passinfra.codegen.compute.window import _all, _scaled, _window_position
from passinfra.ir.attrs import Attrs
from passinfra.ir.op.max_pool_indices import spatial_strides
from passinfra.ir.types import Type


def _max_pool_indices(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    (data,) = inputs
    rank = len(data.shape) - 2
    channels, sizes = data.shape[1], data.shape[2:]
    window, strides, dilation = attrs["pool_size"], attrs["strides"], attrs["dilation"]
    begins = attrs["padding"][:rank]
    steps = spatial_strides(sizes, attrs["storage_order"])
    plane = math.prod(sizes)
    out_shape = output_shape(out_type)

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (result,) = outputs

        def position(out_index: Indices) -> tir.Stmt:
            n, c, *positions = out_index
            best, where = local_scalar("best", data.dtype), local_scalar("best_index", "int64")
            taps = tuple(tir.TVar(f"k{axis}") for axis in range(rank))
            reads = [_window_position(o, s, t, d, b)
                     for o, s, t, d, b in zip(positions, strides, taps, dilation, begins)]
            inside = _all([in_range(r, n_) for r, n_ in zip(reads, sizes)])
            x = data.load(n, c, *(clamp(r, 0, n_ - 1) for r, n_ in zip(reads, sizes)))
            flat = _scaled(n * tir.IntImm(channels) + c, plane)
            for r, step in zip(reads, steps):
                flat = flat + _scaled(r, step)
            # decided once, before either store changes what it reads
            wins = tir.TVar("wins", "bool")
            scan: tir.Stmt = tir.LetStmt(
                wins, tir.And(inside, tir.Or(tir.LT(where.load(), tir.IntImm(0)), tir.GT(x, best.load()))),
                seq(tir.BufferStore(best, tir.Select(wins, x, best.load()), ()),
                    tir.BufferStore(where, tir.Select(wins, flat, where.load()), ())))
            for tap, extent in zip(reversed(taps), reversed(tuple(window))):
                scan = tir.For(tap, tir.IntImm(0), tir.IntImm(extent), tir.ForKind.SERIAL, scan)
            # the first real cell replaces any start value (where < 0); best starts as a
            # data cell only so that it is never read uninitialized
            body = seq(tir.BufferStore(best, data.load(n, c, *(tir.IntImm(0),) * rank), ()),
                       tir.BufferStore(where, tir.IntImm(-1), ()), scan,
                       tir.BufferStore(result, where.load(), tuple(out_index)))
            return tir.Allocate(best, tir.Allocate(where, body))

        return loop_nest(out_shape, position)

    return ExternOp("nn.max_pool_indices", ((out_shape, "int64"),), build)


register_compute("nn.max_pool_indices")(_max_pool_indices)

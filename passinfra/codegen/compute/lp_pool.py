"""Compute rule of ``nn.lp_pool2d`` / ``nn.lp_pool3d`` (:mod:`passinfra.ir.op.lp_pool`): a
:class:`ReduceOp` summing ``|x|^p`` over the window taps, finalized by the p-th root.

Cells outside the data (padding, or past it in a ceil-mode window) read 0, through the
same clamped reader as the other pools (:mod:`passinfra.codegen.compute.window`), so a
load never leaves its buffer. The powers and the root follow the reference exactly in
form: ``|x|``, ``x * x`` or ``pow(|x|, p)``; the identity, ``sqrt`` or ``pow(s, 1/p)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import (
    Indices,
    ReduceOp,
    TensorHandle,
    imm,
    intrinsic,
    output_shape,
    register_compute,
)
from passinfra.codegen.compute.window import _Padded, _window_position
from passinfra.ir.attrs import Attrs
from passinfra.ir.op import _window
from passinfra.ir.types import Type


def _power(x: tir.PrimExpr, p: int) -> tir.PrimExpr:
    if p == 1:
        return intrinsic("fabs", x)
    if p == 2:
        return x * x
    return intrinsic("pow", intrinsic("fabs", x), imm(p, x.dtype))


def _root(s: tir.PrimExpr, p: int) -> tir.PrimExpr:
    if p == 1:
        return s
    if p == 2:
        return intrinsic("sqrt", s)
    return intrinsic("pow", s, imm(1.0 / p, s.dtype))


def _lp_pool(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
    (data,) = inputs
    rank, p = len(data.shape) - 2, attrs["p"]
    sizes, out_shape = data.shape[2:], output_shape(out_type)
    window, strides, dilation = attrs["pool_size"], attrs["strides"], attrs["dilation"]
    begins, ends = attrs["padding"][:rank], attrs["padding"][rank:]
    extra = [_window.overhang(n, k, s, d, b, e, o) for n, k, s, d, b, e, o
             in zip(sizes, window, strides, dilation, begins, ends, out_shape[2:])]
    reader = _Padded(data, imm(0, data.dtype), [bool(b or e or x) for b, e, x in zip(begins, ends, extra)])

    def body(out: Indices, red: Indices) -> tir.PrimExpr:
        n, c, *positions = out
        where = [_window_position(o, s, t, d, b)
                 for o, s, t, d, b in zip(positions, strides, red, dilation, begins)]
        return _power(reader.read(n, c, where), p)

    return ReduceOp(f"nn.lp_pool{rank}d", out_shape, data.dtype, tuple(window), "sum", body,
                    lambda acc, out: _root(acc, p))


register_compute("nn.lp_pool2d", "nn.lp_pool3d")(_lp_pool)

"""Lp pooling (ONNX LpPool): ``(sum over the window of |x|^p) ^ (1/p)``, channels first.

``nn.lp_pool2d`` (NCHW) and ``nn.lp_pool3d`` (NCDHW) share the other pools' relation
(:func:`passinfra.ir.op.window.pool_relation`): ``pool_size``, ``strides``, ``dilation``,
``padding`` (begin pads, then end pads) and ``ceil_mode``, plus the integer ``p >= 1``.
Padded cells, and the cells a ceil-mode window runs past the padding, add nothing to the
sum. 1-D windows are 2-D ones over a unit height (exact).

``|x|^p`` is ``|x|`` for p = 1, ``x * x`` for p = 2 and ``pow(|x|, p)`` otherwise; the
root is the identity, ``sqrt`` or ``pow(s, 1/p)``. The sum is in the data's precision
(float32 for float16 and bfloat16), as the compute rule
(:mod:`passinfra.codegen.compute.lp_pool`) does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op import _window
from passinfra.ir.op._rel import FLOAT_DTYPES, REQUIRED, int_tuple, positive_ints, register_tensor_op
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.op.window import pad_tuple_nd, pool_relation
from passinfra.ir.types import Type

__all__ = ["lp_pool", "lp_power", "lp_root"]


def _checked_p(attrs: Attrs) -> int:
    p = attrs["p"]
    if not isinstance(p, int) or isinstance(p, bool) or p < 1:
        raise IRTypeError(f"p must be an int >= 1, got {p!r}")
    return p


def lp_power(x: np.ndarray, p: int) -> np.ndarray:
    """``|x|^p``, as the compute rule writes it for each p."""
    if p == 1:
        return np.abs(x)
    if p == 2:
        return x * x
    return np.power(np.abs(x), x.dtype.type(p))


def lp_root(s: np.ndarray, p: int) -> np.ndarray:
    """``s^(1/p)``, as the compute rule writes it for each p."""
    if p == 1:
        return s
    if p == 2:
        return np.sqrt(s)
    return np.power(s, s.dtype.type(1.0 / p))


def _relation(rank: int):
    pooled = pool_relation(rank, FLOAT_DTYPES)

    def relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
        _checked_p(attrs)
        return pooled(arg_types, attrs)

    return relation


def _impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data = np.asarray(args[0])
    p = _checked_p(attrs)
    window, strides, dilation = attrs["pool_size"], attrs["strides"], attrs["dilation"]
    padding, rank = attrs["padding"], len(attrs["pool_size"])
    work = data.astype(np.float64 if data.dtype == np.float64 else np.float32)
    sizes = data.shape[2:]
    out = [_window.window_out_size(n, k, s, d, b, e, attrs["ceil_mode"])
           for n, k, s, d, b, e in zip(sizes, window, strides, dilation, padding[:rank], padding[rank:])]
    extra = [_window.overhang(n, k, s, d, b, e, o) for n, k, s, d, b, e, o
             in zip(sizes, window, strides, dilation, padding[:rank], padding[rank:], out)]
    with np.errstate(all="ignore"):  # IEEE results (inf, nan) are the semantics, as in C
        powered = _window.pad_spatial(lp_power(work, p), padding, 0, extra)
        sums = _window._reduce_windows(powered, window, strides, dilation, out, np.add)
        return lp_root(sums, p).astype(data.dtype)


_DEFAULTS = {"p": 2, "pool_size": REQUIRED, "ceil_mode": False}
for _rank in (2, 3):
    register_tensor_op(
        f"nn.lp_pool{_rank}d",
        attrs={**_DEFAULTS, "strides": (1,) * _rank, "dilation": (1,) * _rank, "padding": (0,) * (2 * _rank)},
        num_inputs=1, type_rel=_relation(_rank), impl=_impl, pattern=OpPattern.OUT_EWISE_FUSABLE,
        doc=f"{_rank}-D Lp pooling: (sum |x|^p over the window)^(1/p); dilation, ceil mode",
    )


def lp_pool(data: Any, rank: int, p: int, pool_size: Any, strides: Any, padding: Any, dilation: Any,
            ceil_mode: bool = False) -> Call:
    """Lp pooling over ``rank`` (2 or 3) spatial axes; ``padding`` as for the other pools
    (one int, one per axis, or begin pads then end pads)."""
    if rank not in (2, 3):
        raise IRTypeError(f"lp_pool pools 2 or 3 spatial axes, got rank {rank}")
    return call_op(
        f"nn.lp_pool{rank}d", data, p=int(p),
        pool_size=positive_ints(int_tuple(pool_size, rank, "pool_size"), "pool_size"),
        strides=positive_ints(int_tuple(strides, rank, "strides"), "strides"),
        dilation=positive_ints(int_tuple(dilation, rank, "dilation"), "dilation"),
        padding=pad_tuple_nd(padding, rank), ceil_mode=bool(ceil_mode),
    )

"""Contiguous copy and zero-fill loops, recognized so the C renderer can emit them as
``memcpy`` / ``memset``.

gcc's -O2 leaves a loop like ``for (c...) im2col[base + c] = data[start + c];`` scalar
(one float per iteration), and the im2col of a convolution is made of such loops; the
C library's ``memcpy`` / ``memset`` move the same bytes with the widest vector moves the
CPU has, and gcc expands a short constant-size one inline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from passinfra import tir
from passinfra.tir.arith import affine_coefficient
from passinfra.tir.functor import substitute


@dataclass(frozen=True)
class BlockCopy:
    """``count`` elements from ``source`` at ``source_start`` (or zeros when ``source``
    is None) to ``target`` at ``target_start`` (flat, 1-d element indices)."""

    target: tir.Buffer
    target_start: tir.PrimExpr
    source: tir.Buffer | None
    source_start: tir.PrimExpr | None
    count: int


def match_block_copy(loop: tir.For) -> BlockCopy | None:
    """The copy or zero fill a loop performs, if its body is one store of consecutive
    elements (flattened buffers) of either another buffer's consecutive elements of the
    same dtype, or the constant zero; else None.

    A perfect nest is one block too when each step of a loop moves both sides on by
    exactly the block of the loops inside it (a convolution window's row of taps times
    its channels, channels-last)."""
    if loop.kind not in (tir.ForKind.SERIAL, tir.ForKind.VECTORIZED):
        return None
    if not (isinstance(loop.extent, tir.IntImm) and isinstance(loop.start, tir.IntImm)
            and loop.extent.value >= 2):
        return None
    if isinstance(loop.body, tir.For):
        return _match_nest(loop)
    store = loop.body
    if not (isinstance(store, tir.BufferStore) and len(store.indices) == 1):
        return None
    var = loop.loop_var
    if affine_coefficient(store.indices[0], var) != 1:
        return None
    target_start = _at_start(store.indices[0], loop)
    value = store.value
    if isinstance(value, tir.BufferLoad):
        if (value.buffer is store.buffer or value.buffer.dtype != store.buffer.dtype
                or len(value.indices) != 1 or affine_coefficient(value.indices[0], var) != 1):
            return None
        return BlockCopy(store.buffer, target_start, value.buffer, _at_start(value.indices[0], loop),
                         loop.extent.value)
    if _is_positive_zero(value, store.buffer.dtype):
        return BlockCopy(store.buffer, target_start, None, None, loop.extent.value)
    return None


def _match_nest(loop: tir.For) -> BlockCopy | None:
    inner = match_block_copy(loop.body)
    if inner is None:
        return None
    var = loop.loop_var
    if affine_coefficient(inner.target_start, var) != inner.count:
        return None
    if inner.source is not None and affine_coefficient(inner.source_start, var) != inner.count:
        return None
    source_start = None if inner.source_start is None else _at_start(inner.source_start, loop)
    return BlockCopy(inner.target, _at_start(inner.target_start, loop), inner.source, source_start,
                     inner.count * loop.extent.value)


def _at_start(index: tir.PrimExpr, loop: tir.For) -> tir.PrimExpr:
    return substitute(index, {loop.loop_var: loop.start})


def _is_positive_zero(value: tir.PrimExpr, dtype: str) -> bool:
    """All-zero bytes: +0.0 (not -0.0) or integer 0, of the stored dtype."""
    if isinstance(value, tir.FloatImm):
        return value.dtype == dtype and value.value == 0.0 and math.copysign(1.0, value.value) > 0
    if isinstance(value, tir.IntImm):
        return value.dtype == dtype and value.value == 0
    return False


__all__ = ["BlockCopy", "match_block_copy"]

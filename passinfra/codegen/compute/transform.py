"""Compute rules of the injective layout and creation ops: reshape, squeeze, expand_dims,
transpose, concatenate, split, take, where, full, zeros and ones.

They only move elements, so each is an index mapping from the output index to an input
index. Reads that a Select may skip (concatenate's other fields, take's gathered index)
are clamped into their buffer: the loop-level IR allows both sides of a Select to be
evaluated, and an out-of-bounds read must never happen, whatever is selected.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra import tir
from passinfra.codegen.compute.base import (
    ComputeOp,
    ExternOp,
    Indices,
    TensorHandle,
    clamp,
    imm,
    load_broadcast,
    output_shape,
    ravel,
    register_compute,
    unravel,
)
from passinfra.ir.attrs import Attrs
from passinfra.ir.dims import is_static
from passinfra.ir.op._rel import normalize_axis
from passinfra.ir.op.tensor import _split_bounds, _transpose_permutation
from passinfra.ir.types import TupleType, Type
from passinfra.tir.intrinsics import LOOKUP_INTRINSIC


@register_compute("reshape")
def _reshape(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (data,) = inputs
    out_shape = output_shape(out_type)
    if tuple(data.shape) == out_shape:
        return ComputeOp("reshape", out_shape, data.dtype, lambda idx: data.load(*idx))
    in_shape = tuple(data.shape)
    if not (all(map(is_static, in_shape)) and all(map(is_static, out_shape))):
        # symbolic sizes: axes the two shapes share at the front and back keep their
        # indices, so only the middle is raveled: index arithmetic over a size known at run
        # time does not simplify away (a division by seq * 64 per element otherwise)
        front = 0
        while front < min(len(in_shape), len(out_shape)) and in_shape[front] == out_shape[front]:
            front += 1
        back = 0
        while (back < min(len(in_shape), len(out_shape)) - front
               and in_shape[-1 - back] == out_shape[-1 - back]):
            back += 1
        in_middle = in_shape[front:len(in_shape) - back]
        out_middle = out_shape[front:len(out_shape) - back]

        def value(idx: Indices) -> tir.PrimExpr:
            middle = idx[front:len(idx) - back]
            moved = unravel(ravel(middle, out_middle), in_middle) if in_middle else ()
            return data.load(*idx[:front], *moved, *idx[len(idx) - back:])

        return ComputeOp("reshape", out_shape, data.dtype, value)
    return ComputeOp("reshape", out_shape, data.dtype,
                     lambda idx: data.load(*unravel(ravel(idx, out_shape), data.shape)))



@register_compute("squeeze")
def _squeeze(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (data,) = inputs
    out_shape = output_shape(out_type)
    if attrs["axis"] is None:
        dropped = {i for i, d in enumerate(data.shape) if d == 1}
    else:
        dropped = {normalize_axis(a, len(data.shape)) for a in attrs["axis"]}

    def value(idx: Indices) -> tir.PrimExpr:
        kept = iter(idx)
        return data.load(*(tir.IntImm(0) if axis in dropped else next(kept)
                           for axis in range(len(data.shape))))

    return ComputeOp("squeeze", out_shape, data.dtype, value)


@register_compute("expand_dims")
def _expand_dims(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (data,) = inputs
    axis = attrs["axis"]
    if axis < 0:
        axis += len(data.shape) + 1
    count = attrs["num_newaxis"]
    return ComputeOp("expand_dims", output_shape(out_type), data.dtype,
                     lambda idx: data.load(*idx[:axis], *idx[axis + count:]))


@register_compute("transpose")
def _transpose(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (data,) = inputs
    perm = _transpose_permutation(attrs["axes"], len(data.shape))

    def value(idx: Indices) -> tir.PrimExpr:
        source: list[tir.PrimExpr] = [tir.IntImm(0)] * len(perm)
        for out_axis, in_axis in enumerate(perm):
            source[in_axis] = idx[out_axis]
        return data.load(*source)

    return ComputeOp("transpose", output_shape(out_type), data.dtype, value)


@register_compute("concatenate")
def _concatenate(inputs: Sequence, attrs: Attrs, out_type: Type) -> ComputeOp:
    (fields,) = inputs
    fields = tuple(fields)
    out_shape = output_shape(out_type)
    axis = normalize_axis(attrs["axis"], len(out_shape))
    offsets = [0]
    for field in fields:
        offsets.append(offsets[-1] + field.shape[axis])

    def value(idx: Indices) -> tir.PrimExpr:
        position = idx[axis]
        result: tir.PrimExpr | None = None
        # build the Select chain from the last field backwards
        for k in range(len(fields) - 1, -1, -1):
            field, start = fields[k], offsets[k]
            extent = field.shape[axis]
            if extent == 0:
                continue
            local = position - tir.IntImm(start) if not (is_static(start) and start == 0) else position
            if len(fields) > 1:  # every field but a lone one is read under a Select
                local = clamp(local, 0, extent - 1)
            read = field.load(*idx[:axis], local, *idx[axis + 1:])
            result = read if result is None else tir.Select(tir.LT(position, tir.IntImm(offsets[k + 1])),
                                                            read, result)
        assert result is not None, "concatenate of empty fields has no elements to compute"
        return result

    return ComputeOp("concatenate", out_shape, out_type.dtype, value)


@register_compute("split")
def _split(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> tuple[ComputeOp, ...]:
    (data,) = inputs
    assert isinstance(out_type, TupleType)
    axis = normalize_axis(attrs["axis"], len(data.shape))
    pieces = []
    for (start, _stop), piece_type in zip(_split_bounds(data.shape[axis], attrs["indices_or_sections"]),
                                          out_type.fields):
        def value(idx: Indices, start: int = start) -> tir.PrimExpr:
            shifted = idx[axis] + tir.IntImm(start) if start else idx[axis]
            return data.load(*idx[:axis], shifted, *idx[axis + 1:])

        pieces.append(ComputeOp("split", output_shape(piece_type), data.dtype, value))
    return tuple(pieces)


def _integer_range(expr: tir.PrimExpr) -> tuple[int, int] | None:
    """The values ``expr`` can take by its type: that of the narrowest integer type it was
    widened from (a uint8 code cast to int32 is in [0, 255]); None for a float."""
    def info(dtype: str):
        return np.iinfo(dtype) if dtype.startswith(("int", "uint")) else None

    outer = info(expr.dtype)
    if outer is None:
        return None
    while isinstance(expr, tir.Cast):
        inner = info(expr.value.dtype)
        if inner is None or inner.min < outer.min or inner.max > outer.max:  # not a widening
            break
        expr, outer = expr.value, inner
    return int(outer.min), int(outer.max)


def _wrapped_index(index: tir.PrimExpr, extent: int) -> tir.PrimExpr:
    """A take index in [-extent, extent) as a position in [0, extent); an index out of
    range (an error in the reference) is clamped, so the read stays in bounds. What the
    index's type rules out is not tested (a table of 256 looked up by 8-bit codes: the code
    itself, not three copies of its expression under a Select and a clamp)."""
    known = _integer_range(index)
    index = index if index.dtype == tir.INDEX_DTYPE else tir.Cast(tir.INDEX_DTYPE, index)
    if known is not None and 0 <= known[0] and known[1] < extent:
        return index
    wrapped = tir.Select(tir.LT(index, tir.IntImm(0)), index + tir.IntImm(extent), index)
    return clamp(wrapped, 0, max(extent - 1, 0))


# a table of this many bytes indexed by uint8 values is one call of the runtime's lookup
BYTE_TABLE = 256


def _byte_lookup(data: TensorHandle, indices: TensorHandle, out_shape: tuple) -> ExternOp:
    """``take`` of a table of 256 bytes by uint8 indices (QuantizedLookupTables' tables):
    one call of the runtime's ``rp_lookup_u8``, 32 values a step (no loop nest vectorizes
    a byte gather: a MobileNetV3-like model's first hard-swish, 200704 values, ran 113 us
    as the loop nest)."""
    count = math.prod(int(d) for d in out_shape)

    def first(handle: Any) -> tir.PrimExpr:
        return handle.load(*(tir.IntImm(0, tir.INDEX_DTYPE) for _ in handle.shape))

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (out,) = outputs
        return tir.Evaluate(tir.Intrinsic(LOOKUP_INTRINSIC, (
            first(data), first(indices), first(out), tir.IntImm(count, tir.INDEX_DTYPE)), "int32"))

    return ExternOp("take", ((out_shape, data.dtype),), build)


@register_compute("take")
def _take(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp | ExternOp:
    data, indices = inputs
    out_shape = output_shape(out_type)
    byte_table = (len(data.shape) == 1 and is_static(data.shape[0]) and int(data.shape[0]) == BYTE_TABLE
                  and data.dtype in ("uint8", "int8") and indices.dtype == "uint8"
                  and attrs["axis"] is not None and normalize_axis(attrs["axis"], 1) == 0
                  and all(is_static(d) for d in out_shape))
    if byte_table:
        return _byte_lookup(data, indices, out_shape)
    rank = len(indices.shape)
    if attrs["axis"] is None:
        size = 1
        for extent in data.shape:
            size *= extent

        def flat_value(idx: Indices) -> tir.PrimExpr:
            position = _wrapped_index(indices.load(*idx), size)
            return data.load(*unravel(position, data.shape))

        return ComputeOp("take", out_shape, data.dtype, flat_value)
    axis = normalize_axis(attrs["axis"], len(data.shape))

    def value(idx: Indices) -> tir.PrimExpr:
        position = _wrapped_index(indices.load(*idx[axis:axis + rank]), data.shape[axis])
        return data.load(*idx[:axis], position, *idx[axis + rank:])

    return ComputeOp("take", out_shape, data.dtype, value)


@register_compute("where")
def _where(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    condition, on_true, on_false = inputs
    shape = output_shape(out_type)
    return ComputeOp("where", shape, out_type.dtype, lambda idx: tir.Select(
        load_broadcast(condition, idx, shape), load_broadcast(on_true, idx, shape),
        load_broadcast(on_false, idx, shape)))


@register_compute("full")
def _full(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (fill,) = inputs
    dtype = out_type.dtype

    def value(idx: Indices) -> tir.PrimExpr:
        scalar = fill.load()
        return scalar if scalar.dtype == dtype else tir.Cast(dtype, scalar)

    return ComputeOp("full", output_shape(out_type), dtype, value)


def _constant_fill(name: str, fill: int) -> None:
    @register_compute(name)
    def rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
        return ComputeOp(name, output_shape(out_type), out_type.dtype, lambda idx: imm(fill, out_type.dtype))


_constant_fill("zeros", 0)
_constant_fill("ones", 1)


@register_compute("arange")
def _arange(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    # static attrs only: a symbolic main never reaches codegen yet (build rejects it), and
    # FoldConstant leaves no-argument calls, so a hand-built static arange lands here
    dtype = out_type.dtype

    def value(idx: Indices) -> tir.PrimExpr:
        position = idx[0] if idx[0].dtype == dtype else tir.Cast(dtype, idx[0])
        return imm(attrs["start"], dtype) + position * imm(attrs["step"], dtype)

    return ComputeOp("arange", output_shape(out_type), dtype, value)

"""Compute rules of the ops of :mod:`passinfra.ir.op.indexing`.

* ``gather_elements``, ``gather_nd``: :class:`ComputeOp` index mappings (injective, so
  they inline into their consumers).
* ``scatter_elements``, ``scatter_nd``: an :class:`ExternOp` that copies the data into
  the output, then walks the updates in row-major order and writes (or combines) each at
  its target, so duplicates behave exactly as in the reference.
* ``topk``: an :class:`ExternOp` per row along the axis: k selection scans, each picking
  the best element that comes after the previous pick in the total order (value, then
  index; NaN above every number). No scratch buffer, O(k * n) per row.
* ``cumsum``, ``cumprod``: an :class:`ExternOp` with one running accumulator per row,
  in order (from the end with ``reverse``), so float results equal the reference's.
* ``mod``, ``floor_mod``: C ``fmod`` for floats (with NumPy's sign fix-up and signed zero
  for ``floor_mod``), truncating or floor integer division for integers.
* ``left_shift``, ``right_shift``: the loop-level IR has no bitwise nodes, so shifts are
  written as exact integer arithmetic by powers of two (2^e as a product of at most six
  selected constants), arranged so that no intermediate overflows: a signed right
  shift is a floor division; a signed left shift multiplies the low bits that survive,
  taken as a signed value, so the product lands in range. When the loop-level IR gains
  shift nodes, these become one ``<<`` / ``>>``.

Indices are wrapped (negative ones count from the end) and clamped into range, so no
load or store leaves its buffer (the reference raises on an out-of-range index).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from passinfra import tir
from passinfra.codegen.compute.base import (
    ComputeOp,
    ExternOp,
    Indices,
    TensorHandle,
    imm,
    intrinsic,
    load_broadcast,
    local_scalar,
    loop_nest,
    output_shape,
    register_compute,
    seq,
)
from passinfra.ir.attrs import Attrs
from passinfra.ir.op._rel import normalize_axis
from passinfra.ir.types import TupleType, Type

Scalar = tir.PrimExpr

_COMBINE: dict[str, Callable[[Scalar, Scalar], Scalar]] = {
    "add": tir.Add,
    "mul": tir.Mul,
    "max": tir.Max,
    "min": tir.Min,
}


def _index(value: int) -> Scalar:
    return tir.IntImm(value)


def _position(index: Scalar, extent: int) -> Scalar:
    """An index in ``[-extent, extent)`` as a position in ``[0, extent)``; anything else
    is clamped (an error in the reference), so the access stays in its buffer."""
    index = index if index.dtype == tir.INDEX_DTYPE else tir.Cast(tir.INDEX_DTYPE, index)
    wrapped = tir.Select(tir.LT(index, _index(0)), index + _index(extent), index)
    return tir.Max(tir.Min(wrapped, _index(max(extent - 1, 0))), _index(0))


def _all(*conditions: Scalar) -> Scalar:
    result = conditions[0]
    for condition in conditions[1:]:
        result = tir.And(result, condition)
    return result


def _for(var: tir.TVar, start: int, stop: int, body: tir.Stmt) -> tir.Stmt:
    return tir.For(var, _index(start), _index(stop - start), tir.ForKind.SERIAL, body)


def _along_axis(shape: Sequence[int], axis: int, build_row: Callable[[Callable], tir.Stmt]) -> tir.Stmt:
    """Loops over every axis but ``axis``; ``build_row(at)`` gets ``at(k)``, the full
    index of element k along ``axis`` in the current row."""
    outer = [extent for i, extent in enumerate(shape) if i != axis]

    def body(outer_vars: Indices) -> tir.Stmt:
        return build_row(lambda k: (*outer_vars[:axis], k, *outer_vars[axis:]))

    return loop_nest(outer, body, prefix="i")


# --------------------------------------------------------------------------- gathers


@register_compute("gather_elements")
def _gather_elements(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    data, indices = inputs
    axis = normalize_axis(attrs["axis"], len(data.shape))
    extent = data.shape[axis]

    def value(idx: Indices) -> Scalar:
        picked = _position(indices.load(*idx), extent)
        return data.load(*idx[:axis], picked, *idx[axis + 1:])

    return ComputeOp("gather_elements", output_shape(out_type), data.dtype, value)


@register_compute("gather_nd")
def _gather_nd(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    data, indices = inputs
    batch, depth = attrs["batch_dims"], indices.shape[-1]
    lead = len(indices.shape) - 1  # output axes that walk the index tuples

    def value(idx: Indices) -> Scalar:
        picks = [_position(indices.load(*idx[:lead], _index(j)), data.shape[batch + j]) for j in range(depth)]
        return data.load(*idx[:batch], *picks, *idx[lead:])

    return ComputeOp("gather_nd", output_shape(out_type), data.dtype, value)


# --------------------------------------------------------------------------- scatters


def _store_update(out: tir.Buffer, target: Indices, update: Scalar, reduction: str) -> tir.Stmt:
    if reduction != "none":
        update = _COMBINE[reduction](out.load(*target), update)
    return tir.BufferStore(out, update, target)


def _copy(data: TensorHandle, out: tir.Buffer) -> tir.Stmt:
    return loop_nest(data.shape, lambda idx: tir.BufferStore(out, data.load(*idx), idx), prefix="c")


@register_compute("scatter_elements")
def _scatter_elements(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    data, indices, updates = inputs
    axis = normalize_axis(attrs["axis"], len(data.shape))
    extent, reduction = data.shape[axis], attrs["reduction"]

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (out,) = outputs

        def scatter(idx: Indices) -> tir.Stmt:
            target = (*idx[:axis], _position(indices.load(*idx), extent), *idx[axis + 1:])
            return _store_update(out, target, updates.load(*idx), reduction)

        return seq(_copy(data, out), loop_nest(indices.shape, scatter, prefix="u"))

    return ExternOp("scatter_elements", ((output_shape(out_type), data.dtype),), build)


@register_compute("scatter_nd")
def _scatter_nd(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    data, indices, updates = inputs
    depth, reduction = indices.shape[-1], attrs["reduction"]
    lead = len(indices.shape) - 1  # update axes that walk the index tuples

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (out,) = outputs

        def scatter(idx: Indices) -> tir.Stmt:
            picks = [_position(indices.load(*idx[:lead], _index(j)), data.shape[j]) for j in range(depth)]
            return _store_update(out, (*picks, *idx[lead:]), updates.load(*idx), reduction)

        return seq(_copy(data, out), loop_nest(updates.shape, scatter, prefix="u"))

    return ExternOp("scatter_nd", ((output_shape(out_type), data.dtype),), build)


# --------------------------------------------------------------------------- topk


def _is_nan(x: Scalar) -> Scalar:
    return tir.NE(x, x)


def _order(dtype: str, largest: bool) -> Callable[[Scalar, Scalar, Scalar, Scalar], Scalar]:
    """``before(a, ia, b, ib)``: element a (at index ia) comes before b in the output."""
    floats = dtype.startswith("float") or dtype == "bfloat16"

    def better(a: Scalar, b: Scalar) -> Scalar:
        plain = tir.GT(a, b) if largest else tir.LT(a, b)
        if not floats:
            return plain
        nan_first = tir.And(_is_nan(a), tir.Not(_is_nan(b))) if largest else \
            tir.And(tir.Not(_is_nan(a)), _is_nan(b))
        return tir.Or(plain, nan_first)

    def same(a: Scalar, b: Scalar) -> Scalar:
        return tir.Or(tir.EQ(a, b), tir.And(_is_nan(a), _is_nan(b))) if floats else tir.EQ(a, b)

    def before(a: Scalar, ia: Scalar, b: Scalar, ib: Scalar) -> Scalar:
        return tir.Or(better(a, b), tir.And(same(a, b), tir.LT(ia, ib)))

    return before


@register_compute("topk")
def _topk(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    (data,) = inputs
    assert isinstance(out_type, TupleType)
    axis = normalize_axis(attrs["axis"], len(data.shape))
    extent, k, dtype = data.shape[axis], attrs["k"], data.dtype
    before = _order(dtype, attrs["largest"])
    out_shape = output_shape(out_type.fields[0])

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        values, positions = outputs

        def row(at: Callable) -> tir.Stmt:
            best, best_at = local_scalar("best", dtype), local_scalar("best_index", "int64")
            last, last_at = local_scalar("last", dtype), local_scalar("last_index", "int64")
            take = local_scalar("take", "bool")
            rank, i = tir.TVar("r"), tir.TVar("k")
            x = data.load(*at(i))
            # a candidate comes after the previous pick (none before rank 0) and before
            # the best one so far (none yet: best_index < 0)
            wins = tir.And(
                tir.Or(tir.EQ(rank, _index(0)), before(last.load(), last_at.load(), x, i)),
                tir.Or(tir.LT(best_at.load(), _index(0)), before(x, i, best.load(), best_at.load())))
            scan = _for(i, 0, extent, seq(
                tir.BufferStore(take, wins, ()),  # once: both stores below change its inputs
                tir.BufferStore(best, tir.Select(take.load(), x, best.load()), ()),
                tir.BufferStore(best_at, tir.Select(take.load(), i, best_at.load()), ())))
            pick = _for(rank, 0, k, seq(
                tir.BufferStore(best, data.load(*at(_index(0))), ()),  # any value: never compared
                tir.BufferStore(best_at, _index(-1), ()),
                scan,
                tir.BufferStore(values, best.load(), at(rank)),
                tir.BufferStore(positions, best_at.load(), at(rank)),
                tir.BufferStore(last, best.load(), ()),
                tir.BufferStore(last_at, best_at.load(), ())))
            init = seq(tir.BufferStore(last, data.load(*at(_index(0))), ()),
                       tir.BufferStore(last_at, _index(0), ()))
            body = seq(init, pick)
            for scalar in (take, last_at, last, best_at, best):
                body = tir.Allocate(scalar, body)
            return body

        return _along_axis(data.shape, axis, row)

    return ExternOp("topk", ((out_shape, dtype), (out_shape, "int64")), build)


# --------------------------------------------------------------------------- cumsum / cumprod


def _scan_rule(name: str, combine: Callable[[Scalar, Scalar], Scalar], identity: int) -> None:
    @register_compute(name)
    def rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
        (data,) = inputs
        axis = normalize_axis(attrs["axis"], len(data.shape))
        extent, dtype = data.shape[axis], data.dtype
        exclusive, reverse = attrs["exclusive"], attrs["reverse"]

        def place(step: Scalar) -> Scalar:  # the element the step-th accumulation reads
            return _index(extent - 1) - step if reverse else step

        def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
            (out,) = outputs

            def row(at: Callable) -> tir.Stmt:
                acc, step = local_scalar("acc", dtype), tir.TVar("k")
                here = at(place(step))
                # the first element starts the accumulator as is (no 0 + x: keeps -0.0)
                first = at(place(_index(0)))
                head = seq(tir.BufferStore(acc, data.load(*first), ()),
                           tir.BufferStore(out, imm(identity, dtype) if exclusive else acc.load(), first))
                add = tir.BufferStore(acc, combine(acc.load(), data.load(*here)), ())
                store = tir.BufferStore(out, acc.load(), here)
                rest = _for(step, 1, extent, seq(store, add) if exclusive else seq(add, store))
                return tir.Allocate(acc, seq(head, rest) if extent > 1 else head)

            return _along_axis(data.shape, axis, row)

        return ExternOp(name, ((output_shape(out_type), dtype),), build)


_scan_rule("cumsum", tir.Add, 0)
_scan_rule("cumprod", tir.Mul, 1)


# --------------------------------------------------------------------------- mod, floor_mod


def _binary(name: str, scalar: Callable[[Scalar, Scalar], Scalar]) -> None:
    @register_compute(name)
    def rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
        lhs, rhs = inputs
        shape = output_shape(out_type)
        return ComputeOp(name, shape, out_type.dtype,
                         lambda idx: scalar(load_broadcast(lhs, idx, shape), load_broadcast(rhs, idx, shape)))


def _is_int(dtype: str) -> bool:
    return np.dtype(dtype).kind in "iu"


def _trunc_mod(a: Scalar, b: Scalar) -> Scalar:
    if _is_int(a.dtype):
        return a - tir.Div(a, b) * b  # tir.Div truncates on integers: C's %
    return intrinsic("fmod", a, b)


def _floor_mod(a: Scalar, b: Scalar) -> Scalar:
    if _is_int(a.dtype):
        return tir.FloorMod(a, b)
    # NumPy's float remainder: fmod (exact), moved into the divisor's sign; a zero result
    # takes the divisor's sign (ONNX Mod fmod=0)
    zero = imm(0, a.dtype)
    rest = intrinsic("fmod", a, b)
    moved = tir.Select(_all(tir.NE(rest, zero), tir.NE(tir.LT(rest, zero), tir.LT(b, zero))), rest + b, rest)
    signed_zero = tir.Select(tir.LT(b, zero), tir.FloatImm(-0.0, a.dtype), zero)
    return tir.Select(tir.EQ(rest, zero), signed_zero, moved)


_binary("mod", _trunc_mod)
_binary("floor_mod", _floor_mod)


# --------------------------------------------------------------------------- shifts


def _bits(dtype: str) -> tuple[int, bool]:
    """(bit width, signed) of an integer dtype."""
    info = np.dtype(dtype)
    return info.itemsize * 8, info.kind == "i"


def _power_of_two(exponent: Scalar, largest: int) -> Scalar:
    """2^exponent for an exponent in [0, largest], exactly: the product of 2^(2^j) over
    the set bits j of the exponent (every partial product is at most 2^exponent).

    Each factor is ``1 + bit * (2^(2^j) - 1)`` rather than a select of two constants: the
    C renderer writes small int64 immediates as plain int literals, so a product of
    constant-only selects would be computed in 32-bit int; ``bit`` carries the dtype."""
    dtype = exponent.dtype
    result: Scalar | None = None
    for j in range(max(largest, 1).bit_length()):
        bit = tir.FloorMod(exponent if j == 0 else tir.FloorDiv(exponent, imm(1 << j, dtype)), imm(2, dtype))
        factor = imm(1, dtype) + bit * imm((1 << (1 << j)) - 1, dtype)
        result = factor if result is None else result * factor
    assert result is not None
    return result


def _clamp(value: Scalar, low: int, high: int) -> Scalar:
    return tir.Max(tir.Min(value, imm(high, value.dtype)), imm(low, value.dtype))


def _left_shift(a: Scalar, b: Scalar) -> Scalar:
    width, signed = _bits(a.dtype)
    zero = imm(0, a.dtype)
    if not signed:  # unsigned arithmetic wraps by definition
        product = tir.Cast(a.dtype, a * _power_of_two(tir.Min(b, imm(width - 1, b.dtype)), width - 1))
        return tir.Select(tir.LT(b, imm(width, b.dtype)), product, zero)
    # a << s keeps the low width - s bits of a as the result's top bits. Take those bits
    # as a signed value t in [-h, h) with h = 2^(width-1-s): the low width-1-s bits plus
    # the next bit with a negative weight. Then t * 2^s is in range, computed as
    # (t * 2^(s-1)) * 2 so that 2^s itself never has to fit.
    shift = _clamp(b, 1, width - 1)
    half = _power_of_two(imm(width - 1, b.dtype) - shift, width - 2)
    low = tir.FloorMod(a, half)
    sign_bit = tir.FloorMod(tir.FloorDiv(a, half), imm(2, a.dtype))
    signed_low = low - sign_bit * half
    shifted = signed_low * _power_of_two(shift - imm(1, b.dtype), width - 2) * imm(2, a.dtype)
    in_range = _all(tir.GE(b, imm(1, b.dtype)), tir.LT(b, imm(width, b.dtype)))
    return tir.Select(tir.EQ(b, imm(0, b.dtype)), a, tir.Select(in_range, shifted, zero))


def _right_shift(a: Scalar, b: Scalar) -> Scalar:
    width, signed = _bits(a.dtype)
    zero = imm(0, a.dtype)
    if not signed:
        quotient = tir.Div(a, _power_of_two(tir.Min(b, imm(width - 1, b.dtype)), width - 1))
        return tir.Select(tir.LT(b, imm(width, b.dtype)), quotient, zero)
    # an arithmetic shift is a floor division; from width-1 on only the sign fill is left
    quotient = tir.FloorDiv(a, _power_of_two(_clamp(b, 0, width - 2), width - 2))
    fill = tir.Select(tir.LT(a, zero), imm(-1, a.dtype), zero)
    in_range = _all(tir.GE(b, imm(0, b.dtype)), tir.LT(b, imm(width - 1, b.dtype)))
    return tir.Select(in_range, quotient, fill)


_binary("left_shift", _left_shift)
_binary("right_shift", _right_shift)

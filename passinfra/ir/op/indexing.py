"""Indexing, scan and integer-arithmetic ops that ONNX models use (issue 17).

* ``gather_elements`` / ``scatter_elements``: element-wise gather and scatter along one
  axis (ONNX GatherElements / ScatterElements, torch ``gather`` / ``scatter``).
* ``gather_nd`` / ``scatter_nd``: gather and scatter of index tuples (ONNX GatherND /
  ScatterND).
* ``topk``: the k largest or smallest elements along an axis and their int64 indices.
* ``cumsum`` / ``cumprod``: running sum or product along an axis, optionally exclusive
  and/or reversed.
* ``mod`` (C ``fmod`` semantics: the sign of the dividend) and ``floor_mod`` (the sign of
  the divisor), Relay's names.
* ``left_shift`` / ``right_shift`` on integer tensors.

Semantics where the ONNX spec leaves a choice, shared by the NumPy reference (interpreter
and FoldConstant) and the compute rules (:mod:`passinfra.codegen.compute.indexing`):

* Indices may be negative (counted from the end). An index out of range is an
  EvaluationError in the reference; compiled code clamps it, so it never reads or writes
  outside a buffer.
* Scatters apply their updates in row-major order of the update tensor: with duplicate
  indices, reduction ``none`` keeps the last update and ``add``/``mul``/``max``/``min``
  combine them in that order (so float sums are reproducible, not merely close).
* ``topk`` orders by value and then by index (a tie goes to the lower index, as ONNX
  says); NaN counts as larger than every number. The result is always sorted (ONNX
  leaves the order of ``sorted=0`` undefined, so sorted is a valid answer).
* Integer division by zero (``mod``, ``floor_mod``) is an EvaluationError, as for
  ``divide``: in C it is undefined behaviour, so no value could match compiled code.
* Shifts follow ONNX BitShift (opset 28) and NumPy: a signed right shift is arithmetic;
  a shift by a negative amount or by at least the bit width gives what the sign fill
  alone gives (-1 for a right shift of a negative value, 0 otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from passinfra.errors import EvaluationError, IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op._rel import (
    INT_DTYPES,
    NUMERIC_DTYPES,
    REQUIRED,
    broadcast_shapes,
    expect_dtype,
    expect_same_dtype,
    expect_tensor,
    normalize_axis,
    register_tensor_op,
    type_text,
)
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, TupleType, Type

__all__ = [
    "gather_elements",
    "scatter_elements",
    "gather_nd",
    "scatter_nd",
    "topk",
    "cumsum",
    "cumprod",
    "mod",
    "floor_mod",
    "left_shift",
    "right_shift",
    "SCATTER_REDUCTIONS",
]

SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")
# index tensors are int32 or int64, as ONNX allows for every op here
INDEX_DTYPES = ("int32", "int64")


# --------------------------------------------------------------------------- shared checks


def _expect_rank_at_least(ty: TensorType, rank: int, what: str) -> None:
    if ty.ndim < rank:
        raise IRTypeError(f"expected {what} of rank >= {rank}, got {type_text(ty)}")


def _expect_within(indices: TensorType, data: TensorType, axis: int, what: str) -> None:
    """Every axis but ``axis`` of ``indices`` must fit in ``data``: that is where the
    element-wise gather/scatter reads or writes the data at the indices' own position."""
    if indices.ndim != data.ndim:
        raise IRTypeError(f"expected {what} of the data's rank {data.ndim}, got {type_text(indices)} "
                          f"for data {type_text(data)}")
    for dim, (size, limit) in enumerate(zip(indices.shape, data.shape)):
        if dim != axis and size > limit:
            raise IRTypeError(f"{what} {type_text(indices)} is larger than the data {type_text(data)} "
                              f"along axis {dim}")


def _reduction_kind(attrs: Attrs) -> str:
    reduction = attrs["reduction"]
    if reduction not in SCATTER_REDUCTIONS:
        raise IRTypeError(f"unknown reduction {reduction!r}; use one of {', '.join(SCATTER_REDUCTIONS)}")
    return reduction


def _checked_positions(indices: np.ndarray, extent: int | np.ndarray, op_name: str) -> np.ndarray:
    """Indices in ``[-extent, extent)`` as positions in ``[0, extent)`` (int64); anything
    else is an EvaluationError naming the first bad index."""
    indices = np.asarray(indices).astype(np.int64, copy=False)
    bad = (indices < -extent) | (indices >= extent)
    if np.any(bad):
        first = indices[bad].reshape(-1)[0]
        sizes = np.broadcast_to(extent, indices.shape)[bad].reshape(-1)[0]
        raise EvaluationError(f"{op_name}: index {first} is out of range for an axis of size {sizes}")
    return np.where(indices < 0, indices + extent, indices)


def _scatter_rows(target: np.ndarray, rows: np.ndarray, values: np.ndarray, reduction: str) -> None:
    """Update ``target[rows[i]]`` with ``values[i]`` for each i in order (in place)."""
    if reduction == "none":
        # the last update of each row wins: keep only the last occurrence of every row
        count = rows.shape[0]
        _, last_reversed = np.unique(rows[::-1], return_index=True)
        keep = count - 1 - last_reversed
        target[rows[keep]] = values[keep]
        return
    ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduction]
    with np.errstate(all="ignore"):  # IEEE results (inf, nan) are the semantics
        ufunc.at(target, rows, values)  # unbuffered, in order: duplicates combine in sequence


# --------------------------------------------------------------------------- gather_elements


def _gather_elements_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    indices = expect_tensor(arg_types[1], "the indices")
    expect_dtype(indices, INDEX_DTYPES, "the indices")
    _expect_rank_at_least(data, 1, "the data")
    axis = normalize_axis(attrs["axis"], data.ndim)
    _expect_within(indices, data, axis, "the indices")
    return TensorType(indices.shape, data.dtype)


def _gather_elements_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data, indices = np.asarray(args[0]), np.asarray(args[1])
    axis = normalize_axis(attrs["axis"], data.ndim)
    positions = _checked_positions(indices, data.shape[axis], "gather_elements")
    # the data's part that the indices' other axes cover (they may be shorter)
    window = tuple(slice(None) if d == axis else slice(0, n) for d, n in enumerate(indices.shape))
    return np.ascontiguousarray(np.take_along_axis(data[window], positions, axis=axis))


register_tensor_op(
    "gather_elements",
    attrs={"axis": 0},
    num_inputs=2,
    type_rel=_gather_elements_relation,
    impl=_gather_elements_impl,
    pattern=OpPattern.INJECTIVE,
    doc="out[i..] = data[i.. with axis replaced by indices[i..]] (ONNX GatherElements)",
)


def gather_elements(data: Any, indices: Any, axis: int = 0) -> Call:
    """``out[..., i, ...] = data[..., indices[..., i, ...], ...]`` along ``axis``; the
    output has the shape of ``indices``."""
    return call_op("gather_elements", data, indices, axis=int(axis))


# --------------------------------------------------------------------------- scatter_elements


def _scatter_elements_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    indices = expect_tensor(arg_types[1], "the indices")
    updates = expect_tensor(arg_types[2], "the updates")
    expect_dtype(indices, INDEX_DTYPES, "the indices")
    expect_same_dtype(data, updates, "the updates", "the data")
    if _reduction_kind(attrs) != "none":
        expect_dtype(data, NUMERIC_DTYPES, "the data of a reducing scatter")
    _expect_rank_at_least(data, 1, "the data")
    axis = normalize_axis(attrs["axis"], data.ndim)
    if indices.shape != updates.shape:
        raise IRTypeError(f"expected updates of the indices' shape, got indices {type_text(indices)} "
                          f"and updates {type_text(updates)}")
    _expect_within(indices, data, axis, "the indices")
    return data


def _scatter_elements_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data, indices, updates = (np.asarray(a) for a in args)
    axis = normalize_axis(attrs["axis"], data.ndim)
    out = np.array(data, copy=True, order="C")
    positions = _checked_positions(indices, data.shape[axis], "scatter_elements")
    target = list(np.indices(indices.shape, sparse=True))
    target[axis] = positions
    flat = np.ravel_multi_index(tuple(np.broadcast_arrays(*target)), data.shape).reshape(-1)
    _scatter_rows(out.reshape(-1), flat, updates.reshape(-1), attrs["reduction"])
    return out


register_tensor_op(
    "scatter_elements",
    attrs={"axis": 0, "reduction": "none"},
    num_inputs=3,
    type_rel=_scatter_elements_relation,
    impl=_scatter_elements_impl,
    pattern=OpPattern.OPAQUE,
    doc="a copy of data with updates written (or combined) at indices along axis (ONNX ScatterElements)",
)


def scatter_elements(data: Any, indices: Any, updates: Any, axis: int = 0, reduction: str = "none") -> Call:
    """A copy of ``data`` where ``updates[..., i, ...]`` goes to ``[..., indices[..., i, ...], ...]``
    along ``axis``; ``reduction`` (none, add, mul, max, min) says how it combines."""
    return call_op("scatter_elements", data, indices, updates, axis=int(axis), reduction=str(reduction))


# --------------------------------------------------------------------------- gather_nd / scatter_nd


def _index_depth(indices: TensorType, available: int, what: str) -> int:
    """``indices.shape[-1]``: how many leading data axes one index tuple addresses."""
    _expect_rank_at_least(indices, 1, "the indices")
    depth = indices.shape[-1]
    if not 1 <= depth <= available:
        raise IRTypeError(f"the last dimension of the indices {type_text(indices)} must be in "
                          f"[1, {available}] ({what})")
    return depth


def _gather_nd_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    indices = expect_tensor(arg_types[1], "the indices")
    expect_dtype(indices, INDEX_DTYPES, "the indices")
    batch = attrs["batch_dims"]
    if not isinstance(batch, int) or batch < 0 or batch >= min(data.ndim, indices.ndim):
        raise IRTypeError(f"batch_dims {batch!r} must be an int in [0, min(data rank, indices rank)) "
                          f"for data {type_text(data)} and indices {type_text(indices)}")
    if data.shape[:batch] != indices.shape[:batch]:
        raise IRTypeError(f"the first {batch} dimensions of data {type_text(data)} and indices "
                          f"{type_text(indices)} must be equal (batch_dims)")
    depth = _index_depth(indices, data.ndim - batch, "the data's rank minus batch_dims")
    return TensorType(indices.shape[:-1] + data.shape[batch + depth:], data.dtype)


def _gather_nd_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data, indices = np.asarray(args[0]), np.asarray(args[1])
    batch, depth = attrs["batch_dims"], indices.shape[-1]
    batches = int(np.prod(data.shape[:batch], dtype=np.int64))
    grouped = data.reshape((batches,) + data.shape[batch:])
    tuples = indices.reshape(batches, -1, depth)
    extents = np.asarray(data.shape[batch:batch + depth], dtype=np.int64)
    positions = _checked_positions(tuples, extents, "gather_nd")
    picked = grouped[(np.arange(batches)[:, None], *np.moveaxis(positions, -1, 0))]
    return np.ascontiguousarray(picked.reshape(indices.shape[:-1] + data.shape[batch + depth:]))


register_tensor_op(
    "gather_nd",
    attrs={"batch_dims": 0},
    num_inputs=2,
    type_rel=_gather_nd_relation,
    impl=_gather_nd_impl,
    pattern=OpPattern.INJECTIVE,
    doc="gather the slices the index tuples in the last axis of indices address (ONNX GatherND)",
)


def gather_nd(data: Any, indices: Any, batch_dims: int = 0) -> Call:
    """Slices of ``data`` addressed by the index tuples along the last axis of
    ``indices``; the first ``batch_dims`` axes of both are matched, not indexed."""
    return call_op("gather_nd", data, indices, batch_dims=int(batch_dims))


def _scatter_nd_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    indices = expect_tensor(arg_types[1], "the indices")
    updates = expect_tensor(arg_types[2], "the updates")
    expect_dtype(indices, INDEX_DTYPES, "the indices")
    expect_same_dtype(data, updates, "the updates", "the data")
    if _reduction_kind(attrs) != "none":
        expect_dtype(data, NUMERIC_DTYPES, "the data of a reducing scatter")
    depth = _index_depth(indices, data.ndim, "the data's rank")
    expected = indices.shape[:-1] + data.shape[depth:]
    if updates.shape != expected:
        raise IRTypeError(f"expected updates of shape {expected} (indices.shape[:-1] + "
                          f"data.shape[{depth}:]), got {type_text(updates)}")
    return data


def _scatter_nd_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data, indices, updates = (np.asarray(a) for a in args)
    depth = indices.shape[-1]
    lead, rest = data.shape[:depth], data.shape[depth:]
    out = np.array(data, copy=True, order="C")
    rows = out.reshape((int(np.prod(lead, dtype=np.int64)),) + rest)
    tuples = _checked_positions(indices.reshape(-1, depth), np.asarray(lead, dtype=np.int64), "scatter_nd")
    flat = np.ravel_multi_index(tuple(tuples.T), lead)
    _scatter_rows(rows, flat, updates.reshape((-1,) + rest), attrs["reduction"])
    return out


register_tensor_op(
    "scatter_nd",
    attrs={"reduction": "none"},
    num_inputs=3,
    type_rel=_scatter_nd_relation,
    impl=_scatter_nd_impl,
    pattern=OpPattern.OPAQUE,
    doc="a copy of data with slices written (or combined) at index tuples (ONNX ScatterND)",
)


def scatter_nd(data: Any, indices: Any, updates: Any, reduction: str = "none") -> Call:
    """A copy of ``data`` where each index tuple (last axis of ``indices``) receives its
    slice of ``updates``; ``reduction`` (none, add, mul, max, min) says how it combines."""
    return call_op("scatter_nd", data, indices, updates, reduction=str(reduction))


# --------------------------------------------------------------------------- topk


def _topk_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    expect_dtype(data, NUMERIC_DTYPES, "the data")
    _expect_rank_at_least(data, 1, "the data")
    axis = normalize_axis(attrs["axis"], data.ndim)
    k = attrs["k"]
    if not isinstance(k, int) or not 1 <= k <= data.shape[axis]:
        raise IRTypeError(f"k={k!r} must be an int in [1, {data.shape[axis]}] (axis {axis} of "
                          f"{type_text(data)})")
    shape = data.shape[:axis] + (k,) + data.shape[axis + 1:]
    return TupleType([TensorType(shape, data.dtype), TensorType(shape, "int64")])


def _topk_impl(args: Sequence[Any], attrs: Attrs) -> tuple[np.ndarray, np.ndarray]:
    data = np.asarray(args[0])
    axis = normalize_axis(attrs["axis"], data.ndim)
    rows = np.moveaxis(data, axis, -1)
    # the order: value, then index; NaN above every number. lexsort is stable (ties keep
    # index order) and sorts by its last key first.
    nan = np.isnan(rows) if rows.dtype.kind == "f" else np.zeros(rows.shape, dtype=bool)
    if attrs["largest"]:
        descending = -rows if rows.dtype.kind == "f" else ~rows  # ~x reverses ints without overflow
        order = np.lexsort((descending, ~nan), axis=-1)
    else:
        order = np.lexsort((rows, nan), axis=-1)
    order = order[..., : attrs["k"]]
    values = np.take_along_axis(rows, order, axis=-1)
    return (np.ascontiguousarray(np.moveaxis(values, -1, axis)),
            np.ascontiguousarray(np.moveaxis(order, -1, axis)).astype(np.int64, copy=False))


register_tensor_op(
    "topk",
    attrs={"k": REQUIRED, "axis": -1, "largest": True},
    num_inputs=1,
    type_rel=_topk_relation,
    impl=_topk_impl,
    pattern=OpPattern.OPAQUE,
    doc="(values, int64 indices) of the k largest or smallest along axis, sorted; ties: lower index first",
)


def topk(data: Any, k: int, axis: int = -1, largest: bool = True) -> Call:
    """A 2-tuple: the ``k`` largest (or smallest) values along ``axis``, best first, and
    their int64 indices. Equal values come in index order; NaN is above every number."""
    return call_op("topk", data, k=int(k), axis=int(axis), largest=bool(largest))


# --------------------------------------------------------------------------- cumsum / cumprod


def _scan_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    expect_dtype(data, NUMERIC_DTYPES, "the data")
    _expect_rank_at_least(data, 1, "the data")
    normalize_axis(attrs["axis"], data.ndim)
    return data


def _scan_impl(accumulate: Callable, identity: int) -> Callable:
    def impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
        data = np.asarray(args[0])
        axis = normalize_axis(attrs["axis"], data.ndim)
        work = np.flip(data, axis) if attrs["reverse"] else data
        with np.errstate(all="ignore"):  # a sequential accumulation in the data's dtype, as C
            result = accumulate(work, axis=axis, dtype=data.dtype)
        if attrs["exclusive"]:  # element j gets the accumulation of the elements before it
            head = np.full_like(np.take(result, [0], axis=axis), identity)
            result = np.concatenate([head, np.delete(result, -1, axis=axis)], axis=axis)
        return np.ascontiguousarray(np.flip(result, axis) if attrs["reverse"] else result)

    return impl


for _name, _accumulate, _identity in (("cumsum", np.cumsum, 0), ("cumprod", np.cumprod, 1)):
    register_tensor_op(
        _name,
        attrs={"axis": 0, "exclusive": False, "reverse": False},
        num_inputs=1,
        type_rel=_scan_relation,
        impl=_scan_impl(_accumulate, _identity),
        pattern=OpPattern.OPAQUE,
        doc=f"running {'sum' if _name == 'cumsum' else 'product'} along axis (exclusive: without the "
            f"element itself; reverse: from the end)",
    )


def cumsum(data: Any, axis: int = 0, exclusive: bool = False, reverse: bool = False) -> Call:
    """Running sum along ``axis``, accumulated in order (from the end with ``reverse``);
    ``exclusive`` leaves each element out of its own sum."""
    return call_op("cumsum", data, axis=int(axis), exclusive=bool(exclusive), reverse=bool(reverse))


def cumprod(data: Any, axis: int = 0, exclusive: bool = False, reverse: bool = False) -> Call:
    """Running product along ``axis`` (see :func:`cumsum`)."""
    return call_op("cumprod", data, axis=int(axis), exclusive=bool(exclusive), reverse=bool(reverse))


# --------------------------------------------------------------------------- mod, floor_mod, shifts


def _binary_relation(allowed: Sequence[str]) -> Callable:
    def relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
        lhs = expect_tensor(arg_types[0], "the left operand")
        rhs = expect_tensor(arg_types[1], "the right operand")
        expect_same_dtype(lhs, rhs, "the right operand", "the left operand")
        expect_dtype(lhs, allowed, "operands")
        return TensorType(broadcast_shapes(lhs.shape, rhs.shape), lhs.dtype)

    return relation


def _remainder(kernel: Callable, name: str) -> Callable:
    def impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
        lhs, rhs = np.asarray(args[0]), np.asarray(args[1])
        if lhs.dtype.kind in "iu" and np.any(rhs == 0):
            raise EvaluationError(f"{name}: integer division by zero")
        with np.errstate(all="ignore"):  # IEEE results (nan for a zero divisor) are the semantics
            return np.asarray(kernel(lhs, rhs)).astype(lhs.dtype, copy=False)

    return impl


def _shift(kernel: Callable) -> Callable:
    def impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
        lhs, rhs = np.asarray(args[0]), np.asarray(args[1])
        # NumPy's out-of-range shifts are exactly ONNX's (sign fill), see the module doc
        return np.asarray(kernel(lhs, rhs)).astype(lhs.dtype, copy=False)

    return impl


# name -> (kernel, allowed dtypes, doc)
_BINARY: dict[str, tuple[Callable, Sequence[str], str]] = {
    "mod": (_remainder(np.fmod, "mod"), NUMERIC_DTYPES,
            "remainder of truncating division, the sign of the dividend (C fmod, ONNX Mod fmod=1)"),
    "floor_mod": (_remainder(np.mod, "floor_mod"), NUMERIC_DTYPES,
                  "remainder of floor division, the sign of the divisor (ONNX Mod fmod=0)"),
    "left_shift": (_shift(np.left_shift), INT_DTYPES, "lhs << rhs; bits past the top are dropped"),
    "right_shift": (_shift(np.right_shift), INT_DTYPES, "lhs >> rhs, arithmetic for signed dtypes"),
}

for _name, (_kernel, _allowed, _doc) in _BINARY.items():
    register_tensor_op(_name, attrs={}, num_inputs=2, type_rel=_binary_relation(_allowed), impl=_kernel,
                       pattern=OpPattern.BROADCAST, doc=_doc, symbolic=True)


def mod(lhs: Any, rhs: Any) -> Call:
    """``lhs - trunc(lhs / rhs) * rhs`` with broadcasting (the sign of ``lhs``)."""
    return call_op("mod", lhs, rhs)


def floor_mod(lhs: Any, rhs: Any) -> Call:
    """``lhs - floor(lhs / rhs) * rhs`` with broadcasting (the sign of ``rhs``)."""
    return call_op("floor_mod", lhs, rhs)


def left_shift(lhs: Any, rhs: Any) -> Call:
    """``lhs << rhs`` on integers, with broadcasting."""
    return call_op("left_shift", lhs, rhs)


def right_shift(lhs: Any, rhs: Any) -> Call:
    """``lhs >> rhs`` on integers (arithmetic for signed dtypes), with broadcasting."""
    return call_op("right_shift", lhs, rhs)

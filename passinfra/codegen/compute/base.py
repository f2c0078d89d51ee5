"""The vocabulary of compute rules: tensor handles, output descriptions, rule registry.

A compute rule says *what* an op computes at one output index, in the loop-level IR,
without deciding loops or buffers (TVM's tensor-expression idea). The lowering
(:mod:`passinfra.codegen.lower`) decides what to inline and what to materialize.

A rule is ``rule(inputs, attrs, out_type) -> description`` (or a tuple of descriptions
for a tuple-valued op), where every input is a :class:`TensorHandle` (or a tuple of
them, for ``concatenate``) and ``attrs`` are complete (defaults filled in). Descriptions:

* :class:`ComputeOp` -- injective/elementwise: output index -> value expression.
* :class:`ReduceOp` -- a value per output index combined (sum/max/min) over reduction
  axes, then optionally finalized (mean's division); reductions, conv2d, dense, pools.
* :class:`ExternOp` -- a whole loop nest of its own writing its output buffers
  (softmax, layer_norm, batch_norm: several passes over the data with temporaries).

Rules are attached to ops with :func:`register_compute` (``Op.set_attr("compute", rule)``),
so an op registered by a user can get one the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Union

import numpy as np

from passinfra import tir
from passinfra.errors import IRError
from passinfra.ir.attrs import Attrs
from passinfra.ir.dims import SymDim, exact_div, is_static
from passinfra.ir.op.registry import Op
from passinfra.ir.types import TensorType, Type, is_float_dtype

COMPUTE_ATTR = "compute"

Indices = tuple[tir.PrimExpr, ...]


class TensorHandle(Protocol):
    """What a rule reads: a tensor's shape and dtype, and its element at some indices.

    ``load`` returns a BufferLoad for a materialized tensor, or the producer's own value
    expression (indices substituted) when the producer is inlined.
    """

    shape: tuple[int, ...]
    dtype: str

    def load(self, *indices: Any) -> tir.PrimExpr: ...


Value = Union[TensorHandle, tuple["Value", ...]]  # noqa: UP007  (a recursive alias needs Union)


@dataclass(frozen=True)
class BufferHandle:
    """A materialized tensor: loads read its buffer. ``dims``: its graph-level shape when
    that is symbolic (rules do their shape arithmetic on graph-level dimensions; the
    buffer's own shape is then loop-level expressions)."""

    buffer: tir.Buffer
    dims: tuple[Any, ...] | None = None

    @property
    def shape(self) -> tuple[Any, ...]:
        return self.buffer.shape if self.dims is None else self.dims

    @property
    def dtype(self) -> str:
        return self.buffer.dtype

    def load(self, *indices: Any) -> tir.PrimExpr:
        return self.buffer.load(*indices)


@dataclass(frozen=True)
class ComputeOp:
    """An injective output: ``fcompute(indices)`` is the value at ``indices``."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    fcompute: Callable[[Indices], tir.PrimExpr]


@dataclass(frozen=True)
class ReduceOp:
    """``finalize(combine_{r in reduce_extents} fbody(out, r), out)`` per output index
    (combine: sum, prod, max or min)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    reduce_extents: tuple[int, ...]
    combiner: str  # "sum", "prod", "max" or "min"
    fbody: Callable[[Indices, Indices], tir.PrimExpr]
    finalize: Callable[[tir.PrimExpr, Indices], tir.PrimExpr] | None = None

    def __post_init__(self) -> None:
        if self.combiner not in COMBINERS:
            raise IRError(f"reduction {self.name}: unknown combiner {self.combiner!r} "
                          f"(known: {', '.join(COMBINERS)})")

    def init(self) -> tir.PrimExpr:
        return reduction_identity(self.combiner, self.dtype)

    def combine(self, acc: tir.PrimExpr, value: tir.PrimExpr) -> tir.PrimExpr:
        return COMBINERS[self.combiner](acc, value)


@dataclass(frozen=True)
class ExternOp:
    """An output computed by a loop nest of its own: ``build(outputs)`` returns the
    statement that fills the output buffers (one per entry of ``outputs``)."""

    name: str
    outputs: tuple[tuple[tuple[int, ...], str], ...]  # (shape, dtype) per output
    build: Callable[[Sequence[tir.Buffer]], tir.Stmt]


Description = ComputeOp | ReduceOp | ExternOp
ComputeRule = Callable[[Sequence[Value], Attrs, Type], Description | tuple[Description, ...]]

COMBINERS: dict[str, Callable[[tir.PrimExpr, tir.PrimExpr], tir.PrimExpr]] = {
    "sum": tir.Add,
    "max": tir.Max,
    "min": tir.Min,
    "prod": tir.Mul,
}


def reduction_identity(combiner: str, dtype: str) -> tir.PrimExpr:
    """The neutral start value of ``combiner`` in ``dtype`` (max starts at the lowest)."""
    if combiner in ("sum", "prod"):
        start = 0 if combiner == "sum" else 1
        return tir.as_prim(start, dtype) if dtype != "bool" else tir.IntImm(start, "bool")
    lowest = combiner == "max"
    if is_float_dtype(dtype):  # bfloat16 too
        return tir.FloatImm(-math.inf if lowest else math.inf, dtype)
    if dtype == "bool":
        return tir.IntImm(0 if lowest else 1, "bool")
    info = np.iinfo(dtype)
    return tir.IntImm(int(info.min if lowest else info.max), dtype)


def register_compute(*names: str) -> Callable[[ComputeRule], ComputeRule]:
    """Decorator: attach the rule to each named op (``Op.set_attr("compute", rule)``)."""

    def decorate(rule: ComputeRule) -> ComputeRule:
        for name in names:
            Op.get(name).set_attr(COMPUTE_ATTR, rule)
        return rule

    return decorate


# --------------------------------------------------------------------------- helpers for rules


def output_shape(out_type: Type) -> tuple[int, ...]:
    """The static shape of a compute rule's (tensor) output type."""
    assert isinstance(out_type, TensorType)
    return out_type.shape


def imm(value: float, dtype: str) -> tir.PrimExpr:
    """A constant of ``dtype`` (bools as 0/1 of dtype bool)."""
    if isinstance(value, SymDim):  # a size known at run time (arange's start and stop)
        return tir.Cast(dtype, tir.as_prim(value)) if dtype != tir.INDEX_DTYPE else tir.as_prim(value)
    if dtype == "bool":
        return tir.IntImm(int(bool(value)), "bool")
    if is_float_dtype(dtype):  # bfloat16 too
        return tir.FloatImm(float(value), dtype)
    return tir.IntImm(int(value), dtype)


def broadcast_indices(in_shape: Sequence[int], out_indices: Indices, out_shape: Sequence[int]) -> Indices:
    """Indices into an input of ``in_shape`` broadcast (NumPy rules) to ``out_shape``.

    A size-1 input axis reads index 0 only where the output axis is longer; where both
    have the same extent the output index is passed through unchanged, so a consumer of
    the same shape reads its producer at exactly the loop variables (which is what lets
    the lowering fuse an epilogue into a reduction's loop nest).
    """
    offset = len(out_shape) - len(in_shape)
    indices = []
    for axis, extent in enumerate(in_shape):
        if extent == 1 and out_shape[axis + offset] != 1:
            indices.append(tir.IntImm(0))
        else:
            indices.append(out_indices[axis + offset])
    return tuple(indices)


def load_broadcast(handle: TensorHandle, out_indices: Indices, out_shape: Sequence[int]) -> tir.PrimExpr:
    return handle.load(*broadcast_indices(handle.shape, out_indices, out_shape))


def clamp(index: tir.PrimExpr, low: int, high: int) -> tir.PrimExpr:
    """``index`` clamped into [low, high]: loads under a Select stay inside the buffer
    (both sides of a Select may be evaluated)."""
    return tir.Max(tir.Min(index, tir.as_prim(high)), tir.as_prim(low))


def in_range(index: tir.PrimExpr, extent: int) -> tir.PrimExpr:
    return tir.And(tir.GE(index, tir.IntImm(0)), tir.LT(index, tir.as_prim(extent)))


def intrinsic(name: str, *args: tir.PrimExpr) -> tir.PrimExpr:
    return tir.Intrinsic(name, tuple(args), args[0].dtype)


def unravel(flat: tir.PrimExpr, shape: Sequence[int]) -> Indices:
    """Row-major indices of the element at ``flat`` in a tensor of ``shape``."""
    indices: list[tir.PrimExpr] = []
    if all(type(extent) is int for extent in shape):
        stride = int(np.prod(shape, dtype=np.int64)) if shape else 1
    else:  # symbolic sizes: the strides are graph-level dimensions (exact products)
        stride = math.prod(shape)
    for axis, extent in enumerate(shape):
        if is_static(extent):
            stride //= extent if extent else 1
        else:
            stride = exact_div(stride, extent)
        if extent == 1:
            indices.append(tir.IntImm(0))
            continue
        index = flat if stride == 1 else tir.FloorDiv(flat, tir.as_prim(stride))
        # the first axis needs no modulo: flat < size, so flat // stride < extent
        indices.append(index if axis == 0 else tir.FloorMod(index, tir.as_prim(extent)))
    return tuple(indices)


def ravel(indices: Indices, shape: Sequence[int]) -> tir.PrimExpr:
    """The row-major flat position of ``indices`` in a tensor of ``shape``."""
    flat: tir.PrimExpr | None = None
    for index, extent in zip(indices, shape):
        if extent == 1:
            continue
        flat = index if flat is None else flat * tir.as_prim(extent) + index
    return tir.IntImm(0) if flat is None else flat


def loop_nest(shape: Sequence[int], body: Callable[[Indices], tir.Stmt], prefix: str = "i",
              start_at: int = 0) -> tir.Stmt:
    """Serial loops over ``shape`` (outermost first) around ``body(loop_vars)``."""
    loop_vars = tuple(tir.TVar(f"{prefix}{start_at + k}") for k in range(len(shape)))
    stmt = body(loop_vars)
    for loop_var, extent in zip(reversed(loop_vars), reversed(tuple(shape))):
        stmt = tir.For(loop_var, tir.IntImm(0), tir.as_prim(extent), tir.ForKind.SERIAL, stmt)
    return stmt


def seq(*stmts: tir.Stmt) -> tir.Stmt:
    flat = [s for s in stmts if s is not None]
    return flat[0] if len(flat) == 1 else tir.SeqStmt(tuple(flat))


def local_scalar(name: str, dtype: str) -> tir.Buffer:
    """A one-element accumulator (a shape-() buffer in local scope)."""
    return tir.Buffer(name, (), dtype, "local")

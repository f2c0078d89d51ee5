"""The loop-level IR ("TIR") nodes: what a primitive function is lowered to before C.

Expressions are index and value arithmetic over loop variables and buffer loads;
statements are loops, stores, allocations and branches. Python operators on expressions
build nodes (``i * 4 + j``), so lowering rules read like the math. A :class:`PrimFunc`
is a :class:`~passinfra.ir.expr.BaseFunc`, so it lives in an IRModule next to
graph-level functions and flows through the same pass infrastructure.

Equality follows the graph IR's convention: ``==`` and ``hash`` are identity on every
node (nodes are frozen dataclasses with ``eq=False``). Structure is compared through
functions: :func:`passinfra.tir.functor.same_expr` (two expressions of one function,
variables and buffers by identity) and :func:`passinfra.tir.structural.tir_structural_equal`
(alpha-equivalence). Identity also keeps ``==`` and ``hash`` cheap and free of recursion
on the deep value expressions of large fused kernels.

Each node kind declares its fields once (:mod:`passinfra.tir.schema`: operands, nested
statements, binders, buffers, values); children, rebuilding, structural comparison, the
flat table form and the visitors' hooks are derived from that declaration. The nodes
check on construction that operands are expressions and nested statements statements.

This module imports only :mod:`passinfra.tir.schema` from the package.
"""

from __future__ import annotations

import contextvars
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from passinfra.errors import IRError
from passinfra.ir.attrs import Attrs, as_attrs
from passinfra.ir.dims import SymDim
from passinfra.ir.expr import BaseFunc
from passinfra.ir.types import is_float_dtype, normalize_dtype
from passinfra.tir import schema

INDEX_DTYPE = "int64"


class PrimExpr:
    """Base of loop-level expressions; every node has a ``dtype``."""

    __slots__ = ()
    dtype: str

    # arithmetic sugar: ints and floats are converted with the other operand's dtype
    def __add__(self, other: Any) -> PrimExpr:
        return Add(self, as_prim(other, self.dtype))

    def __radd__(self, other: Any) -> PrimExpr:
        return Add(as_prim(other, self.dtype), self)

    def __sub__(self, other: Any) -> PrimExpr:
        return Sub(self, as_prim(other, self.dtype))

    def __rsub__(self, other: Any) -> PrimExpr:
        return Sub(as_prim(other, self.dtype), self)

    def __mul__(self, other: Any) -> PrimExpr:
        return Mul(self, as_prim(other, self.dtype))

    def __rmul__(self, other: Any) -> PrimExpr:
        return Mul(as_prim(other, self.dtype), self)

    def __truediv__(self, other: Any) -> PrimExpr:
        return Div(self, as_prim(other, self.dtype))

    def __floordiv__(self, other: Any) -> PrimExpr:
        return FloorDiv(self, as_prim(other, self.dtype))

    def __mod__(self, other: Any) -> PrimExpr:
        return FloorMod(self, as_prim(other, self.dtype))

    def __neg__(self) -> PrimExpr:
        return Sub(as_prim(0, self.dtype), self)


def as_prim(value: Any, dtype: str = INDEX_DTYPE) -> PrimExpr:
    """``value`` as a PrimExpr: Python ints/floats/bools become immediates of ``dtype``."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, bool):
        return IntImm(int(value), "bool")
    if isinstance(value, int):
        return FloatImm(float(value), dtype) if is_float_dtype(dtype) else IntImm(value, dtype)
    if isinstance(value, float):
        return FloatImm(value, dtype if is_float_dtype(dtype) else "float32")
    if isinstance(value, np.integer):
        return as_prim(int(value), dtype)
    converted = _convert_symbolic(value)
    if converted is not None:
        return converted
    raise IRError(f"cannot use {value!r} ({type(value).__name__}) as a loop-level expression")


# set by passinfra.tir.sizes: turns a graph-level symbolic dimension into an index
# expression over the size variables of the kernel being built (None outside one)
# (a context variable: kernels may be lowered in several threads at once)
_symbolic_converter: contextvars.ContextVar[Any] = contextvars.ContextVar("symbolic_converter", default=None)


def _convert_symbolic(value: Any) -> PrimExpr | None:
    convert = _symbolic_converter.get()
    return None if convert is None else convert(value)


class Stmt:
    """Base of loop-level statements."""

    __slots__ = ()


# a buffer's extent along one axis: an int, or (in a kernel compiled for symbolic sizes)
# an index expression over the PrimFunc's ``dims`` variables
Extent = Union[int, "PrimExpr"]  # noqa: UP007


@dataclass(frozen=True, slots=True, eq=False)
class Buffer:
    """A named tensor in memory: shape and dtype; compared by identity like a Var.

    A shape entry is an int, or an int64 expression over the size variables of the
    PrimFunc holding the buffer (:attr:`PrimFunc.dims`): a kernel compiled once for
    every ``rows`` has buffers of shape ``(rows, 64)``."""

    name: str
    shape: tuple[Extent, ...]
    dtype: str
    scope: str = "global"

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(_extent(d) for d in self.shape))
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))

    def load(self, *indices: Any) -> BufferLoad:
        return BufferLoad(self, tuple(as_prim(i) for i in indices))

    @property
    def is_static(self) -> bool:
        return all(type(d) is int for d in self.shape)

    @property
    def size(self) -> Extent:
        """The number of elements: an int, or an expression when the shape is symbolic."""
        size: Extent = 1
        for dim in self.shape:
            size = dim if type(size) is int and size == 1 else size * dim
        return size


def _extent(dim: Any) -> Extent:
    if type(dim) is int:
        return dim
    if isinstance(dim, PrimExpr):
        if isinstance(dim, IntImm):
            return int(dim.value)
        if dim.dtype != INDEX_DTYPE:
            raise IRError(f"a symbolic buffer extent must be an {INDEX_DTYPE} expression, got {dim.dtype}")
        return dim
    if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)):
        # a graph-level symbolic dimension becomes an expression inside a size scope
        return _extent(as_prim(dim))
    return int(dim)


schema.set_bases(PrimExpr=PrimExpr, Stmt=Stmt, Buffer=Buffer)


@schema.node_kind(hook="tvar", variable=True)
class TVar(PrimExpr):
    """A scalar variable (loop variable or LetStmt variable); compared by identity."""

    name: str = schema.value()
    dtype: str = schema.value(default=INDEX_DTYPE)


schema.set_bases(TVar=TVar)


@schema.node_kind()
class IntImm(PrimExpr):
    """An integer constant. Built from a symbolic size instead (a graph-level dimension
    inside a size scope, :mod:`passinfra.tir.sizes`, or a buffer extent that is an index
    expression: a compute rule's ``IntImm(extent)``), it is that size's index expression,
    so rules written for static shapes build kernels for symbolic ones."""

    value: int = schema.value(codec=schema.INT_CODEC)
    dtype: str = schema.value(default=INDEX_DTYPE)


def _int_imm_new(cls: type, value: Any = 0, dtype: str = INDEX_DTYPE) -> Any:
    if type(value) is int or not isinstance(value, (SymDim, PrimExpr)):
        return object.__new__(cls)
    # a symbolic size: a graph-level one (an IRError outside a size scope), or a buffer
    # extent that is an index expression already
    expr = as_prim(value)
    return expr if normalize_dtype(dtype) == expr.dtype else Cast(normalize_dtype(dtype), expr)


IntImm.__new__ = _int_imm_new  # type: ignore[assignment,method-assign]


@schema.node_kind()
class FloatImm(PrimExpr):
    value: float = schema.value(codec=schema.FLOAT_CODEC)
    dtype: str = schema.value(default="float32")


def _result_dtype(node: PrimExpr) -> str:
    """The dtype of an arithmetic or select node: that of its first value operand, found
    by walking down without recursion (a left-leaning chain of thousands of ops, as one
    fused kernel's value expression can be, must not meet the recursion limit)."""
    while True:
        kind = type(node)
        if isinstance(node, BinaryOp):
            node = node.a
        elif kind is Select:
            node = node.true_value
        else:
            return node.dtype


@schema.node_kind(abstract=True)
class BinaryOp(PrimExpr):
    a: PrimExpr = schema.expr()
    b: PrimExpr = schema.expr()

    dtype = property(_result_dtype)  # type: ignore[assignment]


@schema.node_kind()
class Add(BinaryOp):
    pass


@schema.node_kind()
class Sub(BinaryOp):
    pass


@schema.node_kind()
class Mul(BinaryOp):
    pass


@schema.node_kind()
class Div(BinaryOp):
    """Float division, or C's truncating division on ints."""


@schema.node_kind()
class FloorDiv(BinaryOp):
    pass


@schema.node_kind()
class FloorMod(BinaryOp):
    pass


@schema.node_kind()
class Min(BinaryOp):
    pass


@schema.node_kind()
class Max(BinaryOp):
    pass


@schema.node_kind(abstract=True)
class CmpOp(PrimExpr):
    a: PrimExpr = schema.expr()
    b: PrimExpr = schema.expr()

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return "bool"


@schema.node_kind()
class EQ(CmpOp):
    pass


@schema.node_kind()
class NE(CmpOp):
    pass


@schema.node_kind()
class LT(CmpOp):
    pass


@schema.node_kind()
class LE(CmpOp):
    pass


@schema.node_kind()
class GT(CmpOp):
    pass


@schema.node_kind()
class GE(CmpOp):
    pass


@schema.node_kind()
class And(CmpOp):
    pass


@schema.node_kind()
class Or(CmpOp):
    pass


@schema.node_kind()
class Not(PrimExpr):
    a: PrimExpr = schema.expr()
    dtype: str = schema.value(default="bool")


@schema.node_kind()
class Select(PrimExpr):
    """``cond ? true_value : false_value`` (both sides may be evaluated)."""

    cond: PrimExpr = schema.expr()
    true_value: PrimExpr = schema.expr()
    false_value: PrimExpr = schema.expr()

    dtype = property(_result_dtype)  # type: ignore[assignment]


@schema.node_kind()
class Cast(PrimExpr):
    dtype: str = schema.value()
    value: PrimExpr = schema.expr()


@schema.node_kind()
class Intrinsic(PrimExpr):
    """A math intrinsic by name (exp, log, sqrt, tanh, erf, pow, fabs, ...)."""

    name: str = schema.value()
    args: tuple[PrimExpr, ...] = schema.expr_seq()
    dtype: str = schema.value()


@schema.node_kind()
class BufferLoad(PrimExpr):
    buffer: Buffer = schema.buffer()
    indices: tuple[PrimExpr, ...] = schema.expr_seq()

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.buffer.dtype


class ForKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"


@schema.node_kind()
class For(Stmt):
    loop_var: TVar = schema.binder()
    start: PrimExpr = schema.expr()
    extent: PrimExpr = schema.expr()
    kind: ForKind = schema.value(codec=(lambda kind: kind.value, ForKind))
    body: Stmt = schema.stmt()


@schema.node_kind()
class SeqStmt(Stmt):
    stmts: tuple[Stmt, ...] = schema.stmt_seq()


@schema.node_kind()
class BufferStore(Stmt):
    buffer: Buffer = schema.buffer()
    value: PrimExpr = schema.expr()
    indices: tuple[PrimExpr, ...] = schema.expr_seq()


@schema.node_kind()
class Allocate(Stmt):
    """``buffer`` exists (uninitialized) for the duration of ``body``."""

    buffer: Buffer = schema.buffer()
    body: Stmt = schema.stmt()


@schema.node_kind()
class IfThenElse(Stmt):
    cond: PrimExpr = schema.expr()
    then_case: Stmt = schema.stmt()
    else_case: Stmt | None = schema.stmt(optional=True)


@schema.node_kind()
class LetStmt(Stmt):
    var: TVar = schema.binder()
    value: PrimExpr = schema.expr()
    body: Stmt = schema.stmt()


@schema.node_kind()
class Evaluate(Stmt):
    value: PrimExpr = schema.expr()


class PrimFunc(BaseFunc):
    """A loop-level function: ``params`` buffers (inputs, then outputs) and a body.

    ``dims``: the int64 size variables of a kernel compiled for symbolic sizes (empty for
    a static one). The caller passes their values after the buffers; buffer shapes and
    loop extents are expressions over them.

    ``attrs`` is read-only; by convention ``num_inputs`` says how many leading params are
    inputs, and ``global_symbol`` names the C function.
    """

    __slots__ = ("params", "body", "dims")

    def __init__(self, params: Sequence[Buffer], body: Stmt, attrs: Mapping[str, Any] | None = None,
                 dims: Sequence[TVar] = ()) -> None:
        super().__init__()
        params = tuple(params)
        for i, param in enumerate(params):
            if not isinstance(param, Buffer):
                raise IRError(f"PrimFunc parameter {i} must be a Buffer, got {type(param).__name__}")
        if not isinstance(body, Stmt):
            raise IRError(f"PrimFunc body must be a statement, got {type(body).__name__}")
        dims = tuple(dims)
        for dim in dims:
            if not isinstance(dim, TVar) or dim.dtype != INDEX_DTYPE:
                raise IRError(f"PrimFunc size variables must be {INDEX_DTYPE} TVars, got {dim!r}")
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "body", body)
        object.__setattr__(self, "attrs", as_attrs(attrs))
        object.__setattr__(self, "dims", dims)

    def with_attr(self, key: str, value: Any) -> PrimFunc:
        return PrimFunc(self.params, self.body, self.attrs.with_item(key, value), self.dims)

    def with_body(self, body: Stmt) -> PrimFunc:
        return PrimFunc(self.params, body, self.attrs, self.dims)

    def astext(self, show_meta_data: bool = True) -> str:
        """The function's loop-level text (``show_meta_data`` is accepted for the
        graph IR's signature; a PrimFunc has no metadata section)."""
        # imported here: the printer sits above the nodes in the package's layering
        from passinfra.tir.printer import tir_astext

        return tir_astext(self)

    def __str__(self) -> str:
        return self.astext()

    def __repr__(self) -> str:
        return f"PrimFunc({', '.join(p.name for p in self.params)})"


__all__ = [
    "INDEX_DTYPE", "PrimExpr", "as_prim", "IntImm", "FloatImm", "TVar", "BinaryOp", "Add", "Sub",
    "Mul", "Div", "FloorDiv", "FloorMod", "Min", "Max", "CmpOp", "EQ", "NE", "LT", "LE", "GT", "GE",
    "And", "Or", "Not", "Select", "Cast", "Intrinsic", "Buffer", "BufferLoad", "Stmt", "ForKind",
    "For", "SeqStmt", "BufferStore", "Allocate", "IfThenElse", "LetStmt", "Evaluate", "PrimFunc",
    "Attrs", "field",
]


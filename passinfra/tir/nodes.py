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

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from passinfra.errors import IRError
from passinfra.ir.attrs import Attrs, as_attrs
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
    raise IRError(f"cannot use {value!r} ({type(value).__name__}) as a loop-level expression")


class Stmt:
    """Base of loop-level statements."""

    __slots__ = ()


@dataclass(frozen=True, slots=True, eq=False)
class Buffer:
    """A named tensor in memory: shape and dtype; compared by identity like a Var."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scope: str = "global"

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", normalize_dtype(self.dtype))

    def load(self, *indices: Any) -> BufferLoad:
        return BufferLoad(self, tuple(as_prim(i) for i in indices))

    @property
    def size(self) -> int:
        size = 1
        for dim in self.shape:
            size *= dim
        return size


schema.set_bases(PrimExpr=PrimExpr, Stmt=Stmt, Buffer=Buffer)


@schema.node_kind(hook="tvar", variable=True)
class TVar(PrimExpr):
    """A scalar variable (loop variable or LetStmt variable); compared by identity."""

    name: str = schema.value()
    dtype: str = schema.value(default=INDEX_DTYPE)


schema.set_bases(TVar=TVar)


@schema.node_kind()
class IntImm(PrimExpr):
    value: int = schema.value(codec=schema.INT_CODEC)
    dtype: str = schema.value(default=INDEX_DTYPE)


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

    ``attrs`` is read-only; by convention ``num_inputs`` says how many leading params are
    inputs, and ``global_symbol`` names the C function.
    """

    __slots__ = ("params", "body")

    def __init__(self, params: Sequence[Buffer], body: Stmt, attrs: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        params = tuple(params)
        for i, param in enumerate(params):
            if not isinstance(param, Buffer):
                raise IRError(f"PrimFunc parameter {i} must be a Buffer, got {type(param).__name__}")
        if not isinstance(body, Stmt):
            raise IRError(f"PrimFunc body must be a statement, got {type(body).__name__}")
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "body", body)
        object.__setattr__(self, "attrs", as_attrs(attrs))

    def with_attr(self, key: str, value: Any) -> PrimFunc:
        return PrimFunc(self.params, self.body, self.attrs.with_item(key, value))

    def with_body(self, body: Stmt) -> PrimFunc:
        return PrimFunc(self.params, body, self.attrs)

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


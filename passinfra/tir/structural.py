"""A flat table form of PrimFuncs: alpha-equivalence, hashing and the wire format.

:func:`flatten_prim_func` turns a PrimFunc into rows, children before parents, each
child named by its row number (the IR's wire format idea, so depth never meets the
recursion limit). Variables and buffers are numbered in order of first appearance
(parameters first), and rows are hash-consed, so:

* two PrimFuncs are alpha-equivalent (same structure, variables and buffers matched by
  position, names ignored) exactly when their :func:`canonical_key` values are equal,
  whatever sharing either has;
* the same rows, plus the names, rebuild the PrimFunc in another process.

Importing this module registers PrimFunc with the graph IR's structural equality/hash
and wire format (the package ``passinfra.tir`` imports it, so any use of the loop IR
has the registration).
"""

from __future__ import annotations

from typing import Any

from passinfra.errors import IRError
from passinfra.ir.attrs import Attrs
from passinfra.tir.nodes import (
    Add,
    Buffer,
    FloorDiv,
    FloorMod,
    IntImm,
    Max,
    Min,
    Mul,
    PrimExpr,
    PrimFunc,
    Stmt,
    Sub,
    TVar,
)
from passinfra.tir.printer import tir_astext
from passinfra.tir.schema import NO_ROW, kind_by_tag, schema_of


class FlatTIR:
    """The table of one PrimFunc (or statement / expression): ``rows`` (tag, payload...)
    with child rows by number, ``variables`` (name, dtype) and ``buffers``
    (name, shape, dtype, scope) in order of first appearance, ``params`` (buffer
    numbers) and ``root`` (row of the body)."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []
        self.row_index: dict[tuple, int] = {}
        self.variables: list[tuple[str, str]] = []
        self.buffers: list[tuple[str, tuple[int, ...], str, str]] = []
        self.var_index: dict[int, int] = {}
        self.buffer_index: dict[int, int] = {}
        self.params: tuple[int, ...] = ()
        self.dims: tuple[int, ...] = ()  # variable numbers of a PrimFunc's size variables
        self.root = NO_ROW
        self._alive: list[Any] = []  # keeps id() keys valid for the table's lifetime

    def buffer(self, buf: Buffer) -> int:
        index = self.buffer_index.get(id(buf))
        if index is None:
            index = self.buffer_index[id(buf)] = len(self.buffers)
            shape = buf.shape if buf.is_static else tuple(self._extent(d) for d in buf.shape)
            self.buffers.append((buf.name, shape, buf.dtype, buf.scope))
            self._alive.append(buf)
        return index

    def _extent(self, extent: Any) -> Any:
        """A symbolic buffer extent as a small tree: ints, ("v", variable number), and
        (kind name, a, b) for the index arithmetic sizes are made of."""
        if type(extent) is int:
            return extent
        if isinstance(extent, IntImm):
            return int(extent.value)
        if isinstance(extent, TVar):
            return ("v", self._variable(extent))
        if type(extent) in _EXTENT_KINDS:
            return (type(extent).__name__, self._extent(extent.a), self._extent(extent.b))
        raise IRError(f"a buffer extent may only use size variables and + - * // % min max, got {extent!r}")

    def _variable(self, var: TVar) -> int:
        index = self.var_index.get(id(var))
        if index is None:
            index = self.var_index[id(var)] = len(self.variables)
            self.variables.append((var.name, var.dtype))
            self._alive.append(var)
        return index

    def add(self, root: Stmt | PrimExpr) -> int:
        """Rows for ``root`` and everything below it; returns the root's row."""
        rows_of: dict[int, int] = {}
        stack: list[tuple[Any, bool]] = [(root, False)]
        self._alive.append(root)
        while stack:
            node, expanded = stack.pop()
            if not expanded:
                if id(node) in rows_of:
                    continue
                # first appearance numbering happens on entry, i.e. in pre-order
                schema = schema_of(type(node))
                if schema.variable:
                    self._variable(node)
                elif schema.has_buffers:
                    schema.map_fields(node, _same, _same, self._number_buffer)
                stack.append((node, True))
                stack.extend((child, False) for child in reversed(schema.children(node)))
                continue
            if id(node) in rows_of:
                continue
            row = self._row(node, rows_of)
            index = self.row_index.get(row)
            if index is None:
                index = self.row_index[row] = len(self.rows)
                self.rows.append(row)
            rows_of[id(node)] = index
        return rows_of[id(root)]

    def _number_buffer(self, buf: Buffer) -> Buffer:
        self.buffer(buf)
        return buf

    def _row(self, node: Any, rows_of: dict[int, int]) -> tuple:
        """The node's row: its declared fields in order, children by row number, buffers
        by number, values in canonical form (a variable: its number)."""
        schema = schema_of(type(node))
        if schema.variable:
            return (schema.tag, self.var_index[id(node)])
        return schema.row(node, lambda child: rows_of[id(child)], lambda buf: self.buffer_index[id(buf)])


def _same(node: Any) -> Any:
    return node


def flatten_prim_func(func: PrimFunc) -> FlatTIR:
    flat = FlatTIR()
    flat.dims = tuple(flat._variable(v) for v in func.dims)
    flat.params = tuple(flat.buffer(p) for p in func.params)
    flat.root = flat.add(func.body)
    return flat


def flatten_node(node: Stmt | PrimExpr) -> FlatTIR:
    flat = FlatTIR()
    flat.root = flat.add(node)
    return flat


def canonical_key(node: PrimFunc | Stmt | PrimExpr) -> tuple:
    """A value equal for alpha-equivalent nodes (names ignored; attrs of a PrimFunc not
    included: compare those separately)."""
    flat = flatten_prim_func(node) if isinstance(node, PrimFunc) else flatten_node(node)
    return (
        tuple(flat.rows),
        tuple(dtype for _, dtype in flat.variables),
        tuple(buf[1:] for buf in flat.buffers),
        flat.params,
        flat.root,
        flat.dims,
    )


def tir_structural_equal(a: Any, b: Any) -> bool:
    """Alpha-equivalence of two PrimFuncs (attrs included), statements or expressions:
    variables and buffers are matched by position of first appearance."""
    if type(a) is not type(b) and not (isinstance(a, PrimExpr) and isinstance(b, PrimExpr)):
        return False
    if isinstance(a, PrimFunc) and a.attrs != b.attrs:
        return False
    return canonical_key(a) == canonical_key(b)


def assert_tir_equal(a: Any, b: Any) -> None:
    """AssertionError showing both sides when they are not alpha-equivalent."""
    if not tir_structural_equal(a, b):
        raise AssertionError(f"loop-level IR differs:\n--- lhs\n{tir_astext(a)}\n--- rhs\n{tir_astext(b)}")


# ----------------------------------------------------------------------------- rebuild


def unflatten(rows: list[tuple], variables: list[tuple], buffers: list[tuple],
              var_objects: list[TVar] | None = None) -> tuple[list, list[Buffer]]:
    """The nodes of a table in row order, and the buffers (inverse of :class:`FlatTIR`).
    ``var_objects``: the variables to use (made from ``variables`` when not given)."""
    if var_objects is None:
        var_objects = [TVar(name, dtype) for name, dtype in variables]
    buffer_objects = [Buffer(name, tuple(_unextent(d, var_objects) for d in shape), dtype, scope)
                      for name, shape, dtype, scope in buffers]
    nodes: list[Any] = []
    node = nodes.__getitem__
    for row in rows:
        schema = schema_of(kind_by_tag(row[0]))
        nodes.append(var_objects[row[1]] if schema.variable else schema.unrow(row, node, buffer_objects))
    return nodes, buffer_objects


def _unextent(extent: Any, var_objects: list[TVar]) -> Any:
    if type(extent) is int:
        return extent
    if extent[0] == "v":
        return var_objects[extent[1]]
    kind, a, b = extent
    operands = (_unextent(x, var_objects) for x in (a, b))
    return _EXTENT_KINDS_BY_NAME[kind](*(IntImm(x) if type(x) is int else x for x in operands))


_EXTENT_KINDS = (Add, Sub, Mul, FloorDiv, FloorMod, Min, Max)
_EXTENT_KINDS_BY_NAME = {kind.__name__: kind for kind in _EXTENT_KINDS}


# ------------------------------------------------------------------------ registration


class _PrimFuncKey(tuple):
    """The canonical key as a structural-equality field; prints as the function's text
    so that a mismatch message shows IR, not tables."""

    func: PrimFunc

    def __repr__(self) -> str:
        return "\n" + tir_astext(self.func)


def _structural_fields(func: PrimFunc) -> tuple:
    key = _PrimFuncKey(canonical_key(func))
    key.func = func
    return (key, func.attrs)


def _encode(func: PrimFunc, encoder: Any) -> tuple:
    flat = flatten_prim_func(func)
    return (tuple(flat.rows), tuple(flat.variables), tuple(flat.buffers), flat.params, flat.root,
            encoder.attrs_ref(func.attrs), flat.dims)


def _decode(payload: tuple, decoder: Any) -> PrimFunc:
    rows, variables, buffers, params, root, attrs_ref, dims = payload
    var_objects = [TVar(name, dtype) for name, dtype in variables]
    nodes, buffer_objects = unflatten(list(rows), list(variables), list(buffers), var_objects)
    attrs: Attrs = decoder.attrs(attrs_ref)
    return PrimFunc([buffer_objects[p] for p in params], nodes[root], attrs, [var_objects[d] for d in dims])


def _register() -> None:
    from passinfra.ir.serialize import WireKind, register_wire_kind
    from passinfra.ir.structural import StructuralRule, register_structural_rule

    none = lambda node: ()  # noqa: E731
    register_structural_rule(
        PrimFunc,
        StructuralRule(b"PrimFunc", ("prim func body", "prim func attrs"), _structural_fields, none, none,
                       lambda node, index: index),
    )
    register_wire_kind(PrimFunc, WireKind("PrimFunc", none, _encode, _decode))


_register()

__all__ = ["FlatTIR", "flatten_prim_func", "canonical_key", "tir_structural_equal", "assert_tir_equal",
           "unflatten"]

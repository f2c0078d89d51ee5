"""The flat wire format: how IR crosses process boundaries (DESIGN.md, principle 2).

Pickling an expression or a module never walks the object graph recursively. Instead
:func:`reduce_node` (which ``Expr.__reduce_ex__`` and ``IRModule.__reduce_ex__`` call)
turns everything reachable into a *table*: one row per distinct node, children before
parents, each child named by its row number. Pickle then sees only a list of flat
tuples, so a chain of 100,000 calls pickles at Python's default recursion limit.

* Every node is one row, so sharing survives the trip, and a Var used in many places
  (or by many functions of one module) comes back as one object.
* Types and attrs are interned by value in side tables; rows refer to them by index.
  A symbolic dimension in a type travels as its canonical form (a DimVar as its name
  and bounds), so the receiver's types are equal to the sender's; a static type's
  bytes are what they were before symbolic dimensions existed.
* Inferred types (``_checked_type``) travel, so a worker need not infer them again;
  structural hash caches (``_shash``) do not.
* A Constant's array travels as a buffer: with protocol 5 a ``pickle.PickleBuffer``
  over the array's own memory, which ``pickle.dumps(..., buffer_callback=...)`` ships
  out-of-band and plain ``pickle.dumps`` writes once in-band; protocols below 5 get the
  bytes. Arrays shared by several constants are sent once. Rebuilt arrays are read-only
  views of the received buffer (copied only if misaligned).

Node kinds are described by :class:`WireKind` entries keyed by class. A kind with a
schema (:mod:`passinfra.ir.schema`) gets one derived when it is declared: its tag is the
class name, and its row holds one entry per declared field, in order: a child's row
number, a tuple of row numbers for a sequence, an index into the type or attrs table, a
plain value as it is, and for an array its dtype, shape and buffer index. Kinds without a
schema (PrimFunc, ...) add theirs with :func:`register_wire_kind`.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from passinfra.errors import IRError, RaypassError
from passinfra.ir.attrs import EMPTY_ATTRS, Attrs
from passinfra.ir.expr import Expr
from passinfra.ir.module import IRModule
from passinfra.ir.schema import FieldKind, NodeSchema, generate, on_node_kind, tuple_source
from passinfra.ir.types import Type

WIRE_VERSION = 1
NO_REF = -1  # an absent type (None) in a row


@dataclass(frozen=True)
class WireKind:
    """How one node class is written to and read from a table row.

    ``children(node)`` lists the sub-nodes the row refers to (they get rows first);
    ``encode(node, encoder)`` returns the row's payload, a tuple of plain values made with
    the encoder's ``ref`` / ``type_ref`` / ``attrs_ref`` / ``buffer_ref``; ``decode(payload,
    decoder)`` builds the node back with the decoder's ``node`` / ``type`` / ``attrs`` /
    ``array``.
    """

    tag: str
    children: Callable[[Any], tuple]
    encode: Callable[[Any, _Encoder], tuple]
    decode: Callable[[tuple, _Decoder], Any]


_KINDS_BY_CLASS: dict[type, WireKind] = {}
_KINDS_BY_TAG: dict[str, WireKind] = {}


def register_wire_kind(cls: type, kind: WireKind) -> None:
    """Teach the wire format a node class (its tag must be unique)."""
    owner = _KINDS_BY_TAG.get(kind.tag)
    if owner is not None and owner is not _KINDS_BY_CLASS.get(cls):
        raise IRError(f"wire tag {kind.tag!r} is already used by another node kind")
    _KINDS_BY_CLASS[cls] = kind
    _KINDS_BY_TAG[kind.tag] = kind


def _kind_of(node: Any) -> WireKind:
    kind = _KINDS_BY_CLASS.get(type(node))
    if kind is None:
        for base in type(node).__mro__[1:]:
            if base in _KINDS_BY_CLASS:
                return _KINDS_BY_CLASS[base]
        raise IRError(f"cannot serialize {type(node).__name__}: no wire kind registered for it "
                      "(see passinfra.ir.serialize.register_wire_kind)")
    return kind


# --------------------------------------------------------------------------- encoding


class _Encoder:
    """Builds the node table and its side tables for one pickled object."""

    def __init__(self, protocol: int) -> None:
        self.protocol = protocol
        self.rows: list[tuple] = []
        self.types: list[Type] = []
        self.attrs: list[Attrs] = []
        self.buffers: list[Any] = []
        self._rows_by_id: dict[int, int] = {}  # id(node) -> row; the root keeps nodes alive
        self._type_index: dict[Type, int] = {}
        self._attrs_index: dict[Attrs, int] = {}
        self._buffer_index: dict[int, int] = {}

    def ref(self, node: Expr) -> int:
        return self._rows_by_id[id(node)]

    def type_ref(self, ty: Type | None) -> int:
        if ty is None:
            return NO_REF
        index = self._type_index.get(ty)
        if index is None:
            index = self._type_index[ty] = len(self.types)
            self.types.append(ty)
        return index

    def attrs_ref(self, attrs: Attrs) -> int:
        index = self._attrs_index.get(attrs)
        if index is None:
            index = self._attrs_index[attrs] = len(self.attrs)
            self.attrs.append(attrs)
        return index

    def buffer_ref(self, array: np.ndarray) -> int:
        index = self._buffer_index.get(id(array))
        if index is None:
            index = self._buffer_index[id(array)] = len(self.buffers)
            self.buffers.append(self._buffer(array))
        return index

    def _buffer(self, array: np.ndarray) -> Any:
        if array.nbytes == 0:
            return b""
        if self.protocol >= 5:
            if array.dtype.kind == "V":  # bfloat16 (ml_dtypes) has no buffer-protocol format:
                array = np.ascontiguousarray(array).reshape(-1).view(np.uint8)  # its raw bytes
            return pickle.PickleBuffer(array)  # the array's own memory: no copy here
        return array.tobytes()

    def add(self, root: Expr) -> int:
        """Give ``root`` and everything below it rows, children first; return its row."""
        rows_by_id = self._rows_by_id
        # parallel stacks, not a stack of tuples: a deep chain keeps one entry per level
        # alive, and tuples there would make the garbage collector rescan them
        nodes: list[Any] = [root]
        exits: list[bool] = [False]  # False: queue the children; True: write the row
        while nodes:
            node = nodes.pop()
            if id(node) in rows_by_id:
                exits.pop()
                continue
            kind = _kind_of(node)
            if exits.pop():
                rows_by_id[id(node)] = len(self.rows)
                checked = self.type_ref(node._checked_type)
                self.rows.append((kind.tag, checked, *kind.encode(node, self)))
                continue
            nodes.append(node)
            exits.append(True)
            children = kind.children(node)
            for index in range(len(children) - 1, -1, -1):
                if id(children[index]) not in rows_by_id:
                    nodes.append(children[index])
                    exits.append(False)
        return rows_by_id[id(root)]

    def tables(self) -> tuple:
        return (WIRE_VERSION, self.rows, self.types, self.attrs, self.buffers)


def reduce_node(node: Any, protocol: int) -> tuple:
    """The ``__reduce_ex__`` value of an expression or module: a rebuild function and a
    flat table (see the module docstring)."""
    encoder = _Encoder(protocol)
    if isinstance(node, IRModule):
        roots = tuple((gv.name_hint, encoder.add(func)) for gv, func in node.functions.items())
        return (_rebuild_module, (encoder.tables(), roots, encoder.attrs_ref(node.attrs)))
    if isinstance(node, Expr):
        root = encoder.add(node)
        return (_rebuild_expr, (encoder.tables(), root))
    raise IRError(f"reduce_node serializes expressions and modules, not {type(node).__name__}")


# --------------------------------------------------------------------------- decoding


class _Decoder:
    """Rebuilds the nodes of one table, in row order."""

    def __init__(self, tables: tuple) -> None:
        version, self.rows, self.types, attrs, self.buffers = tables
        if version != WIRE_VERSION:
            raise IRError(f"IR wire format version {version} cannot be read by this build "
                          f"(it reads version {WIRE_VERSION})")
        self.attrs_list = [EMPTY_ATTRS if len(a) == 0 else a for a in attrs]
        self.nodes: list[Any] = []

    def node(self, ref: int) -> Any:
        return self.nodes[ref]

    def type(self, ref: int) -> Type | None:
        return None if ref == NO_REF else self.types[ref]

    def attrs(self, ref: int) -> Attrs:
        return self.attrs_list[ref]

    def array(self, ref: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        buffer = self.buffers[ref]
        if math.prod(shape) == 0:
            array = np.empty(shape, dtype=dtype)
        else:
            array = np.frombuffer(buffer, dtype=dtype).reshape(shape)
            if not array.flags.aligned:
                array = array.copy()
        array.flags.writeable = False  # IR constants are immutable, whatever the buffer is
        return array

    def decode_all(self) -> list[Any]:
        nodes = self.nodes
        for index, row in enumerate(self.rows):
            tag = row[0]
            try:
                kind = _KINDS_BY_TAG[tag]
                node = kind.decode(row[2:], self)
                checked = self.type(row[1])
            except RaypassError:
                raise  # already names what is wrong (an unknown op, a bad node)
            except (KeyError, IndexError, TypeError, ValueError) as err:
                raise IRError(f"malformed IR wire table at row {index} ({tag!r}): "
                              f"{type(err).__name__}: {err}") from err
            if checked is not None:
                object.__setattr__(node, "_checked_type", checked)
            nodes.append(node)
        return nodes


def _rebuild_expr(tables: tuple, root: int) -> Expr:
    return _Decoder(tables).decode_all()[root]


def _rebuild_module(tables: tuple, roots: tuple, attrs_ref: int) -> IRModule:
    decoder = _Decoder(tables)
    nodes = decoder.decode_all()
    return IRModule({name: nodes[ref] for name, ref in roots}, attrs=decoder.attrs(attrs_ref))


# --------------------------------------------------------------------------- public helpers


def to_wire(node: Expr | IRModule) -> tuple[bytes, list[pickle.PickleBuffer]]:
    """Pickle ``node`` with protocol 5, constants' arrays out-of-band: the payload (small:
    the node table) and the list of buffers (``buffer.raw()`` gives a memoryview)."""
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(node, protocol=5, buffer_callback=buffers.append)
    return payload, buffers


def from_wire(payload: bytes, buffers: Any = ()) -> Any:
    """Inverse of :func:`to_wire`; ``buffers`` may be PickleBuffers, bytes or memoryviews."""
    return pickle.loads(payload, buffers=buffers)


def wire_size(node: Expr | IRModule) -> int:
    """Bytes that sending ``node`` costs: the payload plus the out-of-band buffers."""
    payload, buffers = to_wire(node)
    return len(payload) + sum(buffer.raw().nbytes for buffer in buffers)


# --------------------------------------------------------------------------- node kinds


def _encode_items(field_kind: FieldKind, attr: str) -> list[str]:
    """Source of the row entries of one field (``ref`` is the encoder's ``ref``)."""
    if field_kind in (FieldKind.CHILD, FieldKind.BINDER):
        return [f"ref({attr})"]
    if field_kind in (FieldKind.CHILD_SEQ, FieldKind.BINDER_SEQ):
        return [f"tuple(map(ref, {attr}))"]
    if field_kind is FieldKind.TYPE:
        return [f"enc.type_ref({attr})"]
    if field_kind is FieldKind.ATTRS:
        return [f"enc.attrs_ref({attr})"]
    if field_kind is FieldKind.ARRAY:
        # the dtype object itself: pickle memoizes it, and it skips a slow name lookup
        return [f"{attr}.dtype", f"{attr}.shape", f"enc.buffer_ref({attr})"]
    return [attr]


def _decode_item(field_kind: FieldKind, at: int) -> tuple[str, int]:
    """Source of one field's value from the payload ``p`` at ``at``, and its width
    (``nodes`` is the decoder's list of the nodes built so far)."""
    if field_kind in (FieldKind.CHILD, FieldKind.BINDER):
        return f"nodes[p[{at}]]", 1
    if field_kind in (FieldKind.CHILD_SEQ, FieldKind.BINDER_SEQ):
        return f"[nodes[ref] for ref in p[{at}]]", 1
    if field_kind is FieldKind.TYPE:
        return f"d.type(p[{at}])", 1
    if field_kind is FieldKind.ATTRS:
        return f"d.attrs(p[{at}])", 1
    if field_kind is FieldKind.ARRAY:
        return f"d.array(p[{at + 2}], p[{at}], p[{at + 1}])", 3
    return f"p[{at}]", 1


def wire_kind_from_schema(schema: NodeSchema) -> WireKind:
    """The wire kind of a declared node kind (see the module docstring)."""
    cls = schema.cls
    items = [item for f in schema.fields for item in _encode_items(f.kind, f"node.{f.name}")]
    encode_lines = [*(["ref = enc.ref"] if schema.child_fields else []), f"return {tuple_source(items)}"]
    encode = generate(cls, "wire_encode", ["node", "enc"], encode_lines, {})
    values, at = [], 0
    for f in schema.fields:
        source, width = _decode_item(f.kind, at)
        values.append(source)
        at += width
    # rows refer to earlier rows: ``d.nodes[ref]`` is ``d.node(ref)``, without a call
    prologue = ["nodes = d.nodes"] if schema.child_fields else []
    decode_lines = [*prologue, f"return _make({', '.join(values)})"]
    decode = generate(cls, "wire_decode", ["p", "d"], decode_lines, {"_make": schema.make})
    return WireKind(cls.__name__, schema.children, encode, decode)


on_node_kind(lambda cls, schema: register_wire_kind(cls, wire_kind_from_schema(schema)))

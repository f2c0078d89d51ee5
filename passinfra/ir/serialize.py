"""The flat wire format: how IR crosses process boundaries (DESIGN.md, principle 2).

Pickling an expression or a module never walks the object graph recursively. Instead
:func:`reduce_node` (which ``Expr.__reduce_ex__`` and ``IRModule.__reduce_ex__`` call)
turns everything reachable into a *table*: one row per distinct node, children before
parents, each child named by its row number. Pickle then sees only a list of flat
tuples, so a chain of 100,000 calls pickles at Python's default recursion limit.

* Every node is one row, so sharing survives the trip, and a Var used in many places
  (or by many functions of one module) comes back as one object.
* Types and attrs are interned by value in side tables; rows refer to them by index.
* Inferred types (``_checked_type``) travel, so a worker need not infer them again;
  structural hash caches (``_shash``) do not.
* A Constant's array travels as a buffer: with protocol 5 a ``pickle.PickleBuffer``
  over the array's own memory, which ``pickle.dumps(..., buffer_callback=...)`` ships
  out-of-band and plain ``pickle.dumps`` writes once in-band; protocols below 5 get the
  bytes. Arrays shared by several constants are sent once. Rebuilt arrays are read-only
  views of the received buffer (copied only if misaligned).

Node kinds are described by :class:`WireKind` entries keyed by class; later kinds
(PrimFunc, ...) add theirs with :func:`register_wire_kind`.
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
from passinfra.ir.expr import Call, Constant, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem, Var
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op
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


def _leaf(node: Any) -> tuple:
    return ()


def _decode_function(payload: tuple, d: _Decoder) -> Function:
    params, body, ret_type, attrs = payload
    return Function([d.node(p) for p in params], d.node(body), d.type(ret_type), d.attrs(attrs))


_BUILTIN_KINDS: dict[type, WireKind] = {
    Var: WireKind(
        "Var", _leaf,
        lambda e, enc: (e.name_hint, enc.type_ref(e.type_annotation)),
        lambda p, d: Var(p[0], d.type(p[1])),
    ),
    GlobalVar: WireKind("GlobalVar", _leaf, lambda e, enc: (e.name_hint,), lambda p, d: GlobalVar(p[0])),
    Op: WireKind("Op", _leaf, lambda e, enc: (e.name,), lambda p, d: Op.get(p[0])),
    Constant: WireKind(
        "Constant", _leaf,
        # the dtype object itself: pickle memoizes it, and it skips a slow name lookup
        lambda e, enc: (e.data.dtype, e.data.shape, enc.buffer_ref(e.data)),
        lambda p, d: Constant(d.array(p[2], p[0], p[1])),
    ),
    Call: WireKind(
        "Call",
        lambda e: (e.op, *e.args),
        lambda e, enc: (enc.ref(e.op), tuple(enc.ref(a) for a in e.args), enc.attrs_ref(e.attrs)),
        lambda p, d: Call(d.node(p[0]), [d.node(a) for a in p[1]], d.attrs(p[2])),
    ),
    Tuple: WireKind(
        "Tuple",
        lambda e: e.fields,
        lambda e, enc: (tuple(enc.ref(f) for f in e.fields),),
        lambda p, d: Tuple([d.node(f) for f in p[0]]),
    ),
    TupleGetItem: WireKind(
        "TupleGetItem",
        lambda e: (e.tuple_value,),
        lambda e, enc: (enc.ref(e.tuple_value), e.index),
        lambda p, d: TupleGetItem(d.node(p[0]), p[1]),
    ),
    Let: WireKind(
        "Let",
        lambda e: (e.var, e.value, e.body),
        lambda e, enc: (enc.ref(e.var), enc.ref(e.value), enc.ref(e.body)),
        lambda p, d: Let(d.node(p[0]), d.node(p[1]), d.node(p[2])),
    ),
    If: WireKind(
        "If",
        lambda e: (e.cond, e.true_branch, e.false_branch),
        lambda e, enc: (enc.ref(e.cond), enc.ref(e.true_branch), enc.ref(e.false_branch)),
        lambda p, d: If(d.node(p[0]), d.node(p[1]), d.node(p[2])),
    ),
    Function: WireKind(
        "Function",
        lambda e: (*e.params, e.body),
        lambda e, enc: (
            tuple(enc.ref(p) for p in e.params), enc.ref(e.body),
            enc.type_ref(e.ret_type), enc.attrs_ref(e.attrs),
        ),
        _decode_function,
    ),
}

for _cls, _kind in _BUILTIN_KINDS.items():
    register_wire_kind(_cls, _kind)

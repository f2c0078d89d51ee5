"""Structural equality and hashing of IR: alpha-equivalence, iterative, linear in sharing.

Equality
    Two expressions are equal when they have the same node kinds in the same places and
    the same non-expression content (op names, attrs, types, tuple indices, constant
    dtype/shape/bytes), with variables matched up to renaming. A variable bound by a Let
    or as a Function parameter is paired with the variable bound at the same place on
    the other side; the pairing is a bijection that holds for the whole comparison. A
    free variable (used with no binder seen before it) equals only itself, unless
    ``map_free_vars=True``, which pairs free variables on first encounter. Var type
    annotations, Function ret_type and attrs, and Call attrs are compared; inferred
    types (``_checked_type``) are not. Constants compare bitwise, so NaN equals NaN of the
    same bits and 0.0 differs from -0.0.

Sharing
    Sharing is not structure: a DAG that uses a node twice equals a tree that holds two
    equal copies of it. The one exception, as in TVM, is a shared node that *binds*
    variables (a Function literal used twice): each copy in a tree binds its own Vars,
    while the shared node binds the same Vars twice, and the bijection tells them apart.
    Pairs of nodes already compared are not compared again, so comparison is linear in
    the number of distinct node pairs, whatever the sharing depth.

Hash
    ``structural_equal(a, b)`` implies ``structural_hash(a) == structural_hash(b)``,
    whatever ``map_free_vars`` is (the hash ignores the flag). One depth-first walk of
    the root numbers every Var at its first encounter (binding or use), in the same order
    the equality walk meets them; each distinct node is then hashed once from its kind,
    its content and its children's hashes, a Var by its number and annotation. The hash
    is a 64-bit blake2b digest of a canonical byte stream, so it is the same in every
    process. A node's hash as a root is cached in its ``_shash`` slot; a Constant's hash
    does not depend on context and is reused wherever the Constant appears.

Symbolic dimensions
    A dimension variable (:class:`~passinfra.ir.dims.DimVar`) is bound by the function
    being compared (the root, or each function of a module) when it is a whole dimension
    of a parameter's type annotation: ``fn (%x: Tensor[(n, 4), float32])`` binds ``n``.
    Both sides are renamed canonically before their types are compared, the i-th bound
    variable (in order of first appearance in the parameters) becoming the i-th
    placeholder with the same bounds, so functions equal up to a consistent renaming of
    their bound dimension variables are equal, and hash equally (the hash encodes the
    renamed types). Any other dimension variable is free: equal only to itself (same
    name and bounds), also under ``map_free_vars``. Outside a function (comparing bare
    types, or an expression that is not a Function) every dimension variable is free.
    A function without symbolic parameters is compared and hashed exactly as before.

Node kinds are described by :class:`StructuralRule` entries keyed by class, derived from
each kind's schema (:mod:`passinfra.ir.schema`): the content compared with ``==`` is every
declared value, type and attrs field and the length of every sequence field (an array
field gives its dtype and shape; its bytes are compared bitwise), the defs are the binder
fields and the children the other child fields, in declaration order. One thing is
specific: a Call's Op callee is also content (its name), so that a mismatch is reported
at the call. Node kinds without a schema (PrimFunc, ...) add their rule with
:func:`register_structural_rule`.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from passinfra.errors import IRError, RaypassError
from passinfra.ir.attrs import Attrs
from passinfra.ir.dims import DimVar, SymDim, canon_key, placeholder, substitute
from passinfra.ir.expr import Call, Constant, Expr, Function, GlobalVar, Var
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op
from passinfra.ir.schema import Field, FieldKind, NodeSchema, generate, schema_of, tuple_source
from passinfra.ir.types import FuncType, TensorType, TupleType, Type

# A child's place in its parent: a field name ("body"), a field and index (("args", 1)),
# or a bare index for Python lists and tuples.
Label = str | tuple[str, int] | int

_DIGEST_SIZE = 8


@dataclass(frozen=True)
class StructuralRule:
    """How structural equality and hashing see one node kind.

    ``fields(node)`` gives the node's non-expression content (compared with ``==``,
    hashed canonically), described for messages by ``field_names``; ``defs(node)`` the
    variables it binds (matched before its children are visited); ``children(node)`` its
    sub-nodes in order, and ``child_label(node, i)`` where child ``i`` sits, for paths.
    """

    tag: bytes
    field_names: tuple[str, ...]
    fields: Callable[[Any], tuple]
    defs: Callable[[Any], tuple]
    children: Callable[[Any], tuple]
    child_label: Callable[[Any, int], Label]


def _none(node: Any) -> tuple:
    return ()


def _no_label(node: Any, index: int) -> Label:
    return index


def _callee_name(call: Call) -> str | None:
    # an op callee is compared as a field so that a mismatch is reported at the call
    return call.op.name if isinstance(call.op, Op) else None


# Content beyond the declared fields, by node kind: (label, function of the node), put
# first. An op callee is compared as content so that a mismatch is reported at the call.
_EXTRA_CONTENT: dict[type, tuple[str, Callable[[Any], Any]]] = {Call: ("op", _callee_name)}


def _content_items(field: Field) -> list[tuple[str, str]]:
    """(label, source) of the content a declared field contributes."""
    if field.is_seq:
        return [(f"number of {field.text}", f"len(node.{field.name})")]
    if field.is_child:
        return []  # compared as a child (or, a binder, through the variable bijection)
    if field.kind is FieldKind.ARRAY:
        data = f"node.{field.name}"
        return [(f"{field.text} dtype", f"{data}.dtype"), (f"{field.text} shape", f"{data}.shape")]
    return [(field.text, f"node.{field.name}")]


def _child_labeller(fields: tuple[Field, ...]) -> Callable[[Any, int], Label]:
    """Where operand ``index`` of a node sits: a field name, or (name, position)."""

    def child_label(node: Any, index: int) -> Label:
        offset = 0
        for field in fields:
            if field.is_seq:
                count = len(getattr(node, field.name))
                if index < offset + count:
                    return (field.name, index - offset)
                offset += count
            elif index == offset:
                return field.name
            else:
                offset += 1
        return index

    return child_label


def rule_from_schema(schema: NodeSchema) -> StructuralRule:
    """The structural rule of a declared node kind (see the module docstring)."""
    cls = schema.cls
    items = [item for field in schema.fields for item in _content_items(field)]
    env: dict[str, Any] = {}
    extra = next((_EXTRA_CONTENT[base] for base in cls.__mro__ if base in _EXTRA_CONTENT), None)
    if extra is not None:
        env["_extra"] = extra[1]
        items.insert(0, (extra[0], "_extra(node)"))
    source = f"return {tuple_source([source for _, source in items])}"
    content = generate(cls, "structural_content", ["node"], [source], env)
    return StructuralRule(
        cls.__name__.encode(),
        tuple(label for label, _ in items),
        content,
        schema.binders,
        schema.operands,
        _child_labeller(schema.operand_fields),
    )


_RULES: dict[type, StructuralRule] = {
    # Python sequences of nodes, so that lists of expressions compare and hash too
    list: StructuralRule(b"list", ("length",), lambda s: (len(s),), _none, lambda s: s, _no_label),
    tuple: StructuralRule(b"list", ("length",), lambda s: (len(s),), _none, lambda s: s, _no_label),
}


def register_structural_rule(cls: type, rule: StructuralRule) -> None:
    """Describe a node kind without a schema (e.g. a loop-level PrimFunc) to equality and
    hashing, or replace the derived rule of one that has a schema."""
    _RULES[cls] = rule


def _rule_for(node: Any) -> StructuralRule | None:
    rule = _RULES.get(type(node))
    if rule is None and isinstance(node, Expr):
        for base in type(node).__mro__:
            if base in _RULES:
                return _RULES[base]
            schema = schema_of(base)
            if schema is not None and schema.cls is base:
                rule = _RULES[base] = rule_from_schema(schema)
                return rule
        raise IRError(f"structural equality/hash has no rule for {type(node).__name__}; "
                      "register one with register_structural_rule")
    return rule


# --------------------------------------------------------------------------- dimensions


def bound_dims(func: Function) -> tuple[DimVar, ...]:
    """The dimension variables ``func`` binds: those that are a whole dimension of a
    parameter's annotation, in order of first appearance (see the module docstring)."""
    found: dict[DimVar, None] = {}
    stack = [p.type_annotation for p in reversed(func.params) if p.type_annotation is not None]
    while stack:
        ty = stack.pop()
        if ty.is_static:
            continue
        if isinstance(ty, TensorType):
            found.update((dim, None) for dim in ty.shape if type(dim) is DimVar)
        elif isinstance(ty, TupleType):
            stack.extend(reversed(ty.fields))
        elif isinstance(ty, FuncType):
            stack.extend(reversed((*ty.arg_types, ty.ret_type)))
    return tuple(found)


class _Renamer:
    """The canonical renaming of one side's bound dimension variables: the i-th becomes
    the i-th placeholder, bounds kept. Applied to types and to the values that hold them
    (attrs, tuples); everything else is returned as it is."""

    def __init__(self, bound: tuple[DimVar, ...]) -> None:
        self.mapping = {var: placeholder(i, var.lo, var.hi) for i, var in enumerate(bound)}
        self.types: dict[Type, Type] = {}

    def rename(self, value: Any) -> Any:
        if isinstance(value, Type):
            if value.is_static:
                return value
            renamed = self.types.get(value)
            if renamed is None:
                renamed = self.types[value] = self._type(value)
            return renamed
        if isinstance(value, tuple):
            items = tuple(self.rename(v) for v in value)
            return value if all(x is y for x, y in zip(items, value)) else items
        if isinstance(value, SymDim):  # an attribute's dim (a slice end): renamed as in types
            return substitute(value, self.mapping)
        if isinstance(value, Attrs):
            items = {key: self.rename(v) for key, v in value.items()}
            return value if all(items[key] is value[key] for key in items) else Attrs(items)
        return value

    def _type(self, ty: Type) -> Type:
        if isinstance(ty, TensorType):
            return TensorType([substitute(d, self.mapping) for d in ty.shape], ty.dtype)
        if isinstance(ty, TupleType):
            return TupleType([self.rename(f) for f in ty.fields])
        if isinstance(ty, FuncType):
            return FuncType([self.rename(a) for a in ty.arg_types], self.rename(ty.ret_type))
        return ty


# --------------------------------------------------------------------------- equality


@dataclass
class Mismatch:
    """The first difference found: where, what, and the two nodes."""

    path: str
    reason: str
    lhs: Any
    rhs: Any
    context: tuple[str, Any, Any] | None  # (path, lhs, rhs) of the enclosing node

    def message(self) -> str:
        lines = [
            f"structural mismatch at {self.path}: {self.reason}",
            f"  lhs: {_node_text(self.lhs)}",
            f"  rhs: {_node_text(self.rhs)}",
        ]
        if self.context is not None:
            where, lhs, rhs = self.context
            lines += [f"  in lhs {where}: {_node_text(lhs)}", f"  in rhs {where}: {_node_text(rhs)}"]
        return "\n".join(lines)


class StructuralMismatchError(RaypassError, AssertionError):
    """Raised by :func:`assert_structural_equal`; carries the :class:`Mismatch`."""

    def __init__(self, mismatch: Mismatch) -> None:
        self.mismatch = mismatch
        super().__init__(mismatch.message())


# A path is a linked list (parent path, child index, lhs node, rhs node), one tuple per
# node pushed; it is turned into text (through the parent's child_label) only when a
# mismatch is reported. The root entry holds the root's name instead of an index.
_Path = tuple


def _path_text(path: _Path) -> str:
    parts: list[str] = []
    while path[0] is not None:
        parent = path[0]
        label = _rule_for(parent[2]).child_label(parent[2], path[1])
        if isinstance(label, int):
            parts.append(f"[{label}]")
        elif isinstance(label, tuple):
            parts.append(f".{label[0]}[{label[1]}]")
        else:
            parts.append(f".{label}")
        path = parent
    parts.append(path[1])
    return "".join(reversed(parts))


class _Comparer:
    """One comparison: the variable bijection and the memo of node pairs already done.

    The walk order, which the hasher repeats exactly, is depth-first from the left: at a
    node, its bound variables, then its Var children from left to right (handled on the
    spot, which keeps a deep chain's stack short), then its other children. Paths are
    recorded only when ``track_paths`` is set, for assert_structural_equal's message.
    """

    def __init__(self, map_free_vars: bool, track_paths: bool) -> None:
        self.map_free_vars = map_free_vars
        self.track_paths = track_paths
        self.lhs_to_rhs: dict[Var, Var] = {}
        self.rhs_to_lhs: dict[Var, Var] = {}
        self.done: set[tuple[int, int]] = set()
        # the canonical renamings of the dimension variables bound at the root functions
        # (see the module docstring); None while neither root binds any
        self.renaming: tuple[_Renamer, _Renamer] | None = None

    def compare(self, lhs: Any, rhs: Any, root_label: str) -> Mismatch | None:
        """The first difference between ``lhs`` and ``rhs``, or None."""
        root_path = (None, root_label, lhs, rhs)
        if type(lhs) is Function and type(rhs) is Function:
            lhs_dims, rhs_dims = bound_dims(lhs), bound_dims(rhs)
            if lhs_dims or rhs_dims:
                self.renaming = (_Renamer(lhs_dims), _Renamer(rhs_dims))
        if type(lhs) is Var or type(rhs) is Var:
            problem = self._var_leaf(lhs, rhs)
            return None if problem is None else self._mismatch(root_path, problem)
        stack: list[tuple[Any, Any, _Path | None]] = [(lhs, rhs, root_path)]
        done = self.done
        rules = _RULES
        track = self.track_paths
        while stack:
            a, b, path = stack.pop()
            kind = type(a)
            if kind is not type(b):
                return self._mismatch(path, f"different node kinds: {kind.__name__} vs {type(b).__name__}")
            key = (id(a), id(b))
            if key in done:
                continue
            rule = rules.get(kind) or _rule_for(a)
            problem = self._compare_content(rule, a, b) if rule else _compare_value(a, b)
            if problem is not None:
                return self._mismatch(path, problem)
            if rule is None:
                continue
            done.add(key)
            children_a, children_b = rule.children(a), rule.children(b)
            if len(children_a) != len(children_b):
                counts = f"{len(children_a)} vs {len(children_b)}"
                return self._mismatch(path, f"different numbers of children: {counts}")
            for index, child_a in enumerate(children_a):
                child_b = children_b[index]
                if type(child_a) is Var or type(child_b) is Var:
                    problem = self._var_leaf(child_a, child_b)
                    if problem is not None:
                        return self._mismatch((path, index, child_a, child_b) if track else None, problem)
            for index in range(len(children_a) - 1, -1, -1):
                child_a, child_b = children_a[index], children_b[index]
                if type(child_a) is not Var and (id(child_a), id(child_b)) not in done:
                    stack.append((child_a, child_b, (path, index, child_a, child_b) if track else None))
        return None

    def _var_leaf(self, a: Any, b: Any) -> str | None:
        if type(a) is not type(b):
            return f"different node kinds: {type(a).__name__} vs {type(b).__name__}"
        return self._use_var(a, b)

    def _compare_content(self, rule: StructuralRule, a: Any, b: Any) -> str | None:
        """Fields, constant bytes and bound variables of one pair of nodes."""
        fields_a, fields_b = rule.fields(a), rule.fields(b)
        if fields_a != fields_b if self.renaming is None else not self._same_value(fields_a, fields_b):
            for what, va, vb in zip(rule.field_names, fields_a, fields_b):
                if not self._same_value(va, vb):
                    return f"different {what}: {_value_text(va)} vs {_value_text(vb)}"
        if type(a) is Constant:
            return _compare_constant_data(a, b)
        for var_a, var_b in zip(rule.defs(a), rule.defs(b)):
            problem = self._def_var(var_a, var_b)
            if problem is not None:
                return problem
        return None

    def _same_value(self, a: Any, b: Any) -> bool:
        """``a == b``, after the canonical renaming of bound dimension variables."""
        if self.renaming is None:
            return a == b
        return self.renaming[0].rename(a) == self.renaming[1].rename(b)

    def _pair(self, a: Var, b: Var) -> str | None:
        if not self._same_value(a.type_annotation, b.type_annotation):
            return (f"different type annotations of variables {a.name_hint} and {b.name_hint}: "
                    f"{_value_text(a.type_annotation)} vs {_value_text(b.type_annotation)}")
        self.lhs_to_rhs[a] = b
        self.rhs_to_lhs[b] = a
        return None

    def _already_paired(self, a: Var, b: Var) -> str | None:
        partner_a = self.lhs_to_rhs.get(a)
        if partner_a is b:
            return None
        if partner_a is not None:
            return f"variable {a.name_hint} was matched with {partner_a.name_hint}, here with {b.name_hint}"
        partner_b = self.rhs_to_lhs[b]
        return (f"variable {b.name_hint} on the rhs was matched with {partner_b.name_hint}, "
                f"here with {a.name_hint}")

    def _def_var(self, a: Var, b: Var) -> str | None:
        if a in self.lhs_to_rhs or b in self.rhs_to_lhs:
            return self._already_paired(a, b)
        return self._pair(a, b)

    def _use_var(self, a: Var, b: Var) -> str | None:
        if a in self.lhs_to_rhs or b in self.rhs_to_lhs:
            return self._already_paired(a, b)
        if a is b:
            # a free variable on both sides; record it so it keeps matching only itself
            return self._pair(a, b)
        if self.map_free_vars:
            return self._pair(a, b)
        return (f"unequal free variables {a.name_hint} vs {b.name_hint} "
                "(free variables are equal only to themselves unless map_free_vars=True)")

    @staticmethod
    def _mismatch(path: _Path | None, reason: str) -> Mismatch:
        if path is None:  # not tracking paths: only the verdict is wanted
            return Mismatch("", reason, None, None, None)
        parent = path[0]
        context = None
        # a leaf alone (a variable, a global) says little; show the expression holding it
        if parent is not None and isinstance(path[2], (Var, GlobalVar, Op)):
            context = (_path_text(parent), parent[2], parent[3])
        return Mismatch(_path_text(path), reason, path[2], path[3], context)


def _compare_value(a: Any, b: Any) -> str | None:
    if isinstance(a, (Type, Attrs, str, bytes, int, float, bool, type(None))):
        return None if a == b else f"different values: {_value_text(a)} vs {_value_text(b)}"
    raise IRError(f"structural equality does not handle {type(a).__name__} values")


_SMALL_CONSTANT_BYTES = 4096


def _compare_constant_data(a: Constant, b: Constant) -> str | None:
    """Bitwise comparison of two constants of one dtype and shape."""
    data_a, data_b = a.data, b.data
    if data_a is data_b:
        return None
    if data_a.nbytes <= _SMALL_CONSTANT_BYTES:
        if data_a.tobytes() == data_b.tobytes():  # a copy, but cheaper than numpy calls
            return None
    # the digests decide only when both are cached (after structural_hash of one side only,
    # the other's is None, and the bits must be compared)
    elif (a._shash is None or b._shash is None or a._shash == b._shash) and np.array_equal(
            _bit_view(data_a), _bit_view(data_b)):
        return None
    bits_a, bits_b = _bit_view(data_a), _bit_view(data_b)
    first = int(np.flatnonzero(bits_a != bits_b)[0])
    flat_a, flat_b = data_a.reshape(-1), data_b.reshape(-1)
    return (f"different constant values: first difference at flat index {first}: "
            f"{flat_a[first]} vs {flat_b[first]}")


def _bit_view(array: np.ndarray) -> np.ndarray:
    """The array's elements as unsigned ints of the same width, for bitwise comparison."""
    return array.reshape(-1).view(f"u{array.dtype.itemsize}")


# --------------------------------------------------------------------------- hashing


def _digest(*parts: bytes) -> bytes:
    return hashlib.blake2b(b"".join(parts), digest_size=_DIGEST_SIZE).digest()


def _canon(value: Any) -> bytes:
    """A canonical byte encoding of a non-expression value; equal values encode equally."""
    if value is None:
        return b"N"
    if isinstance(value, bool):
        return b"B1" if value else b"B0"
    if isinstance(value, int):
        return b"I" + str(value).encode() + b";"
    if isinstance(value, float):
        return b"F" + struct.pack("<d", value + 0.0)  # + 0.0 turns -0.0 (== 0.0) into 0.0
    if isinstance(value, str):
        data = value.encode()
        return b"S" + str(len(data)).encode() + b":" + data
    if isinstance(value, bytes):  # e.g. object code a compile pass attaches to a function
        return b"Y" + str(len(value)).encode() + b":" + value
    if isinstance(value, tuple):
        return b"T" + str(len(value)).encode() + b":" + b"".join(_canon(v) for v in value)
    if isinstance(value, SymDim):  # never in a static type, whose encoding stays as it was
        return b"D" + _canon(canon_key(value))
    if isinstance(value, TensorType):
        return b"TT" + _canon(value.shape) + _canon(value.dtype)
    if isinstance(value, TupleType):
        return b"TU" + _canon(value.fields)
    if isinstance(value, FuncType):
        return b"FT" + _canon(value.arg_types) + _canon(value.ret_type)
    if isinstance(value, Attrs):
        # equality ignores key order, so the encoding sorts the keys
        return b"A" + _canon(tuple((key, value[key]) for key in sorted(value)))
    raise IRError(f"structural hash cannot encode {type(value).__name__} value {value!r}")


def _constant_digest(const: Constant) -> bytes:
    """The context-free digest of a Constant, computed once and cached in ``_shash``."""
    if const._shash is None:
        data = const.data
        hasher = hashlib.blake2b(b"Constant", digest_size=_DIGEST_SIZE)
        hasher.update(f"{data.dtype.str}{data.shape};".encode())
        if data.size:
            # no copy, whatever the size; as unsigned ints, since bfloat16 (ml_dtypes) has
            # no buffer-protocol format of its own
            hasher.update(memoryview(_bit_view(data)).cast("B"))
        object.__setattr__(const, "_shash", int.from_bytes(hasher.digest(), "little"))
    return const._shash.to_bytes(_DIGEST_SIZE, "little")


class _Hasher:
    """Hashes one root: numbers the variables, then each distinct node once."""

    def __init__(self) -> None:
        self.digests: dict[int, bytes] = {}  # id(node) -> digest; the root keeps nodes alive
        self.var_count = 0
        self.fields_cache: dict[tuple, bytes] = {}
        self.renamer: _Renamer | None = None  # bound dimension variables of a root function

    def hash_root(self, root: Any) -> bytes:
        """Walk in the comparer's order, numbering each Var when first met, and digest
        every distinct node once, after its children."""
        digests = self.digests
        if type(root) is Function:
            dims = bound_dims(root)
            self.renamer = _Renamer(dims) if dims else None
        if type(root) is Var:
            self._encounter_var(root)
            return digests[id(root)]
        started: set[int] = set()
        rules = _RULES
        # two parallel stacks rather than a stack of tuples: a deep chain keeps one entry
        # per level alive, and tuples there would make the garbage collector rescan
        nodes: list[Any] = [root]
        exits: list[bool] = [False]  # False: enter the node; True: digest it
        while nodes:
            node = nodes.pop()
            if exits.pop():
                rule = rules.get(type(node)) or _rule_for(node)
                digests[id(node)] = self._combine(rule, node)
                continue
            if id(node) in started:
                continue
            started.add(id(node))
            kind = type(node)
            if kind is Constant:
                digests[id(node)] = _constant_digest(node)
                continue
            rule = rules.get(kind) or _rule_for(node)
            if rule is None:
                digests[id(node)] = _digest(b"value", _canon(node))
                continue
            for var in rule.defs(node):
                self._encounter_var(var)
            children = rule.children(node)
            for child in children:
                if type(child) is Var:
                    self._encounter_var(child)
            nodes.append(node)
            exits.append(True)
            for index in range(len(children) - 1, -1, -1):
                child = children[index]
                if type(child) is not Var and id(child) not in started:
                    nodes.append(child)
                    exits.append(False)
        return digests[id(root)]

    def _encounter_var(self, var: Var) -> None:
        if id(var) not in self.digests:
            index = self.var_count
            self.var_count += 1
            annotation = var.type_annotation
            if self.renamer is not None:
                annotation = self.renamer.rename(annotation)
            self.digests[id(var)] = _digest(b"Var", _canon(index), _canon(annotation))

    def _combine(self, rule: StructuralRule, node: Any) -> bytes:
        fields = rule.fields(node)
        encoded = self.fields_cache.get(fields)
        if encoded is None:
            renamed = fields if self.renamer is None else self.renamer.rename(fields)
            encoded = self.fields_cache[fields] = _canon(renamed)
        digests = self.digests
        defs = rule.defs(node)
        children = rule.children(node)
        return _digest(
            rule.tag,
            encoded,
            b"D%d:" % len(defs),
            *[digests[id(var)] for var in defs],
            b"C%d:" % len(children),
            *[digests[id(child)] for child in children],
        )


def _expr_digest(expr: Expr) -> bytes:
    if expr._shash is None:
        digest = _Hasher().hash_root(expr)
        object.__setattr__(expr, "_shash", int.from_bytes(digest, "little"))
    return expr._shash.to_bytes(_DIGEST_SIZE, "little")


def _module_digest(mod: IRModule) -> bytes:
    names = sorted(gv.name_hint for gv in mod.functions)
    parts = [b"IRModule", _canon(len(names))]
    for name in names:
        parts += [_canon(name), _expr_digest(mod[name])]
    parts.append(_canon(mod.attrs))
    return _digest(*parts)


# --------------------------------------------------------------------------- public API


def structural_equal(a: Any, b: Any, map_free_vars: bool = False) -> bool:
    """Whether ``a`` and ``b`` (expressions, modules, types, attrs, or lists of them) are
    structurally equal, variables matched up to renaming (see the module docstring)."""
    if isinstance(a, Expr) and isinstance(b, Expr) and a._shash is not None and b._shash is not None:
        if a._shash != b._shash:
            return False  # both hashed before: equal values would have equal hashes
    return _first_mismatch(a, b, map_free_vars, track_paths=False) is None


def structural_hash(node: Any, map_free_vars: bool = False) -> int:
    """A 64-bit hash, the same in every process, with ``structural_equal(a, b)`` implying
    ``structural_hash(a) == structural_hash(b)``. ``map_free_vars`` does not change it
    (free variables are hashed by order of first use either way)."""
    if isinstance(node, Expr):
        digest = _expr_digest(node)
    elif isinstance(node, IRModule):
        digest = _module_digest(node)
    else:
        digest = _Hasher().hash_root(node)
    return int.from_bytes(digest, "little")


def assert_structural_equal(a: Any, b: Any, map_free_vars: bool = False) -> None:
    """Raise :class:`StructuralMismatchError` (an AssertionError) naming the path to the
    first difference, what differs, and the text of both sides."""
    mismatch = _first_mismatch(a, b, map_free_vars, track_paths=True)
    if mismatch is not None:
        raise StructuralMismatchError(mismatch)


def _first_mismatch(a: Any, b: Any, map_free_vars: bool, track_paths: bool) -> Mismatch | None:
    if a is b:
        return None
    if isinstance(a, IRModule) or isinstance(b, IRModule):
        return _module_mismatch(a, b, map_free_vars, track_paths)
    return _Comparer(map_free_vars, track_paths).compare(a, b, "root")


def _module_mismatch(a: Any, b: Any, map_free_vars: bool, track_paths: bool) -> Mismatch | None:
    if not (isinstance(a, IRModule) and isinstance(b, IRModule)):
        return Mismatch("module", f"different kinds: {type(a).__name__} vs {type(b).__name__}", a, b, None)
    names_a = {gv.name_hint for gv in a.functions}
    names_b = {gv.name_hint for gv in b.functions}
    if names_a != names_b:
        only_a, only_b = sorted(names_a - names_b), sorted(names_b - names_a)
        reason = f"different functions: only in lhs {only_a}, only in rhs {only_b}"
        return Mismatch("module", reason, a, b, None)
    if a.attrs != b.attrs:
        reason = f"different module attrs: {_value_text(a.attrs)} vs {_value_text(b.attrs)}"
        return Mismatch("module.attrs", reason, a.attrs, b.attrs, None)
    for name in sorted(names_a):
        func_a, func_b = a[name], b[name]
        if func_a is func_b:
            continue
        # each function is closed, so each gets its own variable bijection
        mismatch = _Comparer(map_free_vars, track_paths).compare(func_a, func_b, name)
        if mismatch is not None:
            return mismatch
    return None


# --------------------------------------------------------------------------- messages

_TEXT_LIMIT = 2000


def _node_text(node: Any) -> str:
    """The printed text of a node for a message (repr until the printer exists)."""
    try:
        text = str(node)
    except NotImplementedError:
        text = repr(node)
    except Exception as err:  # a message must still come out if the printer chokes
        text = f"{node!r} (not printable: {type(err).__name__}: {err})"
    if len(text) > _TEXT_LIMIT:
        text = f"{text[:_TEXT_LIMIT]}... ({len(text) - _TEXT_LIMIT} more characters)"
    return text


def _value_text(value: Any) -> str:
    if isinstance(value, np.dtype):
        return value.name
    if isinstance(value, Type):
        return _node_text(value)
    if isinstance(value, Attrs):
        return "{" + ", ".join(f"{k}={_value_text(v)}" for k, v in value.items()) + "}"
    return repr(value)

"""Node schemas: each expression kind declares its fields once; the rest is derived.

A node class lists its fields, in constructor order, as a class-level :class:`NodeSchema`
(in the spirit of xDSL's IRDL field definitions and TVM's reflection)::

    class Call(Expr):
        schema = NodeSchema(
            child("op"), child_seq("args"), attrs_field("attrs", label="call attrs"),
            method="visit_call", dataflow=True,
        )
        __slots__ = schema.slots()

Each field has a :class:`FieldKind`: a sub-expression (``child``), a tuple of them
(``child_seq``), a variable the node binds (``binder`` / ``binder_seq``, also children),
a type, attrs, a plain value (a name, an index) or an array (a constant's data). From the
declaration this module derives, once per class:

* the slots of the class (``__slots__ = schema.slots()``: a slot per declared field; a
  metaclass could add them, but would slow down every ``isinstance`` check on nodes);
* ``children(node)``: every sub-expression in evaluation order (binders included), and
  ``operands(node)`` / ``binders(node)``, the same split by role;
* ``map_children(node, fn)``: the node with ``fn`` applied to each child, the same object
  when nothing changed; :func:`with_children` puts a list of new children back;
* generated default methods: ``ExprVisitor``/``ExprMutator`` ``visit_*`` (see functor.py).

The other tables of the IR derive their entries from the same declaration: structural
equality/hash (the content of a node: values, types, attrs and sequence lengths; its
binders; its operands), the wire format (one row field per declared field), the
well-formedness walk, the dataflow graph of fusion and FuseOps' rebuilders. Node-specific
semantics (scoping of Let and Function, printing syntax, type rules) stay where they are
and read the declaration for the plain fields.

The derived functions are generated Python (as ``dataclasses`` generates ``__init__``),
so a derived ``children`` of Call is exactly ``return (node.op, *node.args)``: as fast as
a hand-written table entry.
"""

from __future__ import annotations

import enum
import inspect
import keyword
import linecache
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import MemberDescriptorType
from typing import Any


class FieldKind(enum.Enum):
    """What a declared field holds; decides how each derived table treats it."""

    CHILD = "child"  # one sub-expression
    CHILD_SEQ = "child_seq"  # a tuple of sub-expressions
    BINDER = "binder"  # a Var bound by this node (a child too)
    BINDER_SEQ = "binder_seq"  # a tuple of Vars bound by this node
    TYPE = "type"  # a Type, or None
    ATTRS = "attrs"  # an Attrs mapping
    VALUE = "value"  # a plain hashable value: a name, an index
    ARRAY = "array"  # a read-only NumPy array (a constant's data)


_CHILD_KINDS = frozenset({FieldKind.CHILD, FieldKind.CHILD_SEQ, FieldKind.BINDER, FieldKind.BINDER_SEQ})
_SEQ_KINDS = frozenset({FieldKind.CHILD_SEQ, FieldKind.BINDER_SEQ})
_BINDER_KINDS = frozenset({FieldKind.BINDER, FieldKind.BINDER_SEQ})


@dataclass(frozen=True)
class Field:
    """One declared field: the attribute (and constructor parameter) name, its kind, and
    how messages call it (``label``, default the name)."""

    name: str
    kind: FieldKind
    label: str | None = None

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or keyword.iskeyword(self.name) or self.name.startswith("_"):
            raise TypeError(f"a node field needs a public identifier as its name, got {self.name!r}")

    @property
    def is_child(self) -> bool:
        return self.kind in _CHILD_KINDS

    @property
    def is_seq(self) -> bool:
        return self.kind in _SEQ_KINDS

    @property
    def is_binder(self) -> bool:
        return self.kind in _BINDER_KINDS

    @property
    def text(self) -> str:
        return self.label or self.name


def child(name: str, label: str | None = None) -> Field:
    return Field(name, FieldKind.CHILD, label)


def child_seq(name: str, label: str | None = None) -> Field:
    return Field(name, FieldKind.CHILD_SEQ, label)


def binder(name: str, label: str | None = None) -> Field:
    return Field(name, FieldKind.BINDER, label)


def binder_seq(name: str, label: str | None = None) -> Field:
    return Field(name, FieldKind.BINDER_SEQ, label)


def type_field(name: str, label: str | None = None) -> Field:
    return Field(name, FieldKind.TYPE, label)


def attrs_field(name: str, label: str | None = None) -> Field:
    return Field(name, FieldKind.ATTRS, label)


def value(name: str, label: str | None = None) -> Field:
    return Field(name, FieldKind.VALUE, label)


def array(name: str, label: str | None = None) -> Field:
    return Field(name, FieldKind.ARRAY, label)


# --------------------------------------------------------------------------- code generation


def generate(
    owner: type, name: str, params: Sequence[str], lines: Iterable[str], env: dict, role: str = ""
) -> Callable:
    """Compile ``def name(params): lines`` with the globals ``env``; its source is kept in
    linecache (under a name made of the class, ``name`` and ``role``), so tracebacks
    through generated code show it."""
    body = list(lines) or ["pass"]
    source = f"def {name}({', '.join(params)}):\n" + "".join(f"    {line}\n" for line in body)
    filename = f"<node schema {owner.__module__}.{owner.__qualname__}.{name}{role and f' ({role})'}>"
    namespace = dict(env)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102  (generated from field names)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    function = namespace[name]
    function.__qualname__ = f"{owner.__qualname__}.{name}"
    return function


def tuple_source(items: Sequence[str]) -> str:
    """Source of a tuple display of ``items`` (``*x`` items are unpacked)."""
    if not items:
        return "()"
    if len(items) == 1:
        return items[0][1:] if items[0].startswith("*") else f"({items[0]},)"
    return f"({', '.join(items)})"


def _children_source(fields: Iterable[Field]) -> str:
    return tuple_source([f"*node.{f.name}" if f.is_seq else f"node.{f.name}" for f in fields])


def _map_lines(fields: tuple[Field, ...], fn: str) -> list[str]:
    """Body that applies ``fn`` to every child in order and rebuilds the node if one
    changed (``make`` builds a node from all field values in declaration order)."""
    lines: list[str] = []
    same: list[str] = []
    args: list[str] = []
    for index, f in enumerate(fields):
        if not f.is_child:
            args.append(f"node.{f.name}")
            continue
        new = f"v{index}"
        if f.is_seq:
            lines.append(f"{new} = tuple(map({fn}, node.{f.name}))")
            same.append(f"all(map(_is, {new}, node.{f.name}))")
        else:
            lines.append(f"{new} = {fn}(node.{f.name})")
            same.append(f"{new} is node.{f.name}")
        args.append(new)
    if not same:
        return ["return node"]
    lines.append(f"if {' and '.join(same)}:")
    lines.append("    return node")
    lines.append(f"return _make({', '.join(args)})")
    return lines


def _visit_lines(fields: tuple[Field, ...]) -> list[str]:
    # ``self.visit(...)`` each time: CPython's method-call fast path beats a bound method
    # kept in a local
    lines: list[str] = []
    for f in fields:
        if f.is_seq:
            lines += [f"for child in node.{f.name}:", "    self.visit(child)"]
        elif f.is_child:
            lines.append(f"self.visit(node.{f.name})")
    return lines


# --------------------------------------------------------------------------- declarations


class NodeSchema:
    """The declaration of one node kind: its fields in constructor order, the name of its
    visitor method, and whether it is a dataflow node (a value computed from its operands,
    opening no scope: Call, Tuple, TupleGetItem). ``make`` builds a node from the field
    values (default: the class itself; Op uses its registry lookup).

    Once declared on a class (see :func:`declare`), the schema also holds the derived
    functions below.
    """

    cls: type | None
    make: Callable[..., Any]  # field values in declaration order -> node
    children: Callable[[Any], tuple]  # every child (binders included), in order
    operands: Callable[[Any], tuple]  # the children that are not binders
    binders: Callable[[Any], tuple]  # the variables the node binds
    map_children: Callable[[Any, Callable[[Any], Any]], Any]  # see map_children below
    visit_default: Callable[[Any, Any], None]  # ExprVisitor's method: visit each child
    mutate_default: Callable[[Any, Any], Any]  # ExprMutator's: map_children(node, self.visit)

    def __init__(self, *fields: Field, method: str, dataflow: bool = False, make: Callable | None = None):
        names = [f.name for f in fields]
        if len(set(names)) != len(names):
            raise TypeError(f"a node schema declares a field twice: {names}")
        if not method.startswith("visit_") or not method.isidentifier():
            raise TypeError(f"a node schema's method must be a visit_* name, got {method!r}")
        self.fields: tuple[Field, ...] = tuple(fields)
        self.method = method
        self.dataflow = dataflow
        self._make = make
        self.cls = None

    # -- derived views of the declaration

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    @property
    def child_fields(self) -> tuple[Field, ...]:
        return tuple(f for f in self.fields if f.is_child)

    @property
    def operand_fields(self) -> tuple[Field, ...]:
        return tuple(f for f in self.fields if f.is_child and not f.is_binder)

    @property
    def binder_fields(self) -> tuple[Field, ...]:
        return tuple(f for f in self.fields if f.is_binder)

    @property
    def leaf(self) -> bool:
        """No sub-expressions (Var, GlobalVar, Constant, Op)."""
        return not self.child_fields

    @property
    def opens_scope(self) -> bool:
        """Children evaluated in a context of their own (Let, If, Function)."""
        return not self.dataflow and not self.leaf

    def __repr__(self) -> str:
        owner = self.cls.__name__ if self.cls is not None else "?"
        fields = ", ".join(f"{f.name}: {f.kind.value}" for f in self.fields)
        return f"NodeSchema({owner}: {fields})"

    def slots(self, *bases: type) -> tuple[str, ...]:
        """The ``__slots__`` of a class declaring this schema: its field names, except
        those that ``bases`` (and their bases) already hold as slots."""
        taken = {name for base in bases for klass in base.__mro__ for name in _slot_names(klass)}
        return tuple(name for name in self.names if name not in taken)

    # -- binding to a class

    def bind(self, cls: type) -> None:
        """Check the declaration against ``cls`` and generate the derived functions."""
        if self.cls is not None and self.cls is not cls:
            raise TypeError(f"this schema is already declared by {self.cls.__name__}")
        slotted = {name for name in self.names if isinstance(getattr(cls, name, None), MemberDescriptorType)}
        missing = [name for name in self.names if name not in slotted]
        if missing:
            raise TypeError(
                f"{cls.__name__} declares fields {missing} without slots for them; "
                "give the class __slots__ = schema.slots()"
            )
        make = self._make or cls
        if self._make is None:
            _check_constructor(cls, self.names)
        env = {"_make": make, "_is": operator.is_}
        self.cls = cls
        self.make = make

        def getter(name: str, fields: tuple[Field, ...]) -> Callable[[Any], tuple]:
            return generate(cls, name, ["node"], [f"return {_children_source(fields)}"], env)

        self.children = getter("children", self.child_fields)
        self.operands = getter("operands", self.operand_fields)
        self.binders = getter("binders", self.binder_fields)
        self.map_children = generate(cls, "map_children", ["node", "fn"], _map_lines(self.fields, "fn"), env)
        # defaults of ExprVisitor / ExprMutator for this kind (functor.py installs them)
        self.visit_default = generate(
            cls, self.method, ["self", "node"], _visit_lines(self.fields), env, role="ExprVisitor"
        )
        mutate = _map_lines(self.fields, "fn")
        if not self.leaf:
            mutate.insert(0, "fn = self.visit")
        self.mutate_default = generate(cls, self.method, ["self", "node"], mutate, env, role="ExprMutator")


def _slot_names(klass: type) -> tuple[str, ...]:
    slots = klass.__dict__.get("__slots__", ())
    return (slots,) if isinstance(slots, str) else tuple(slots)


def _check_constructor(cls: type, names: tuple[str, ...]) -> None:
    """The generic rebuild calls ``cls(*values)``: the constructor must take the declared
    fields first, in declaration order."""
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if tuple(positional[: len(names)]) != names:
        raise TypeError(
            f"{cls.__name__}.__init__ must take the declared fields {list(names)} first and in order, "
            f"got {positional}"
        )


_DECLARED: list[type] = []
_LISTENERS: list[Callable[[type, NodeSchema], None]] = []


def declare(cls: type, schema: NodeSchema) -> None:
    """Make ``schema`` the declaration of ``cls`` and tell the tables. A node class that
    assigns ``schema`` in its body is declared when it is created (``Expr``'s
    ``__init_subclass__``); this is for a class defined elsewhere (Op)."""
    schema.bind(cls)
    type.__setattr__(cls, "schema", schema)
    _DECLARED.append(cls)
    for listener in list(_LISTENERS):
        listener(cls, schema)


def on_node_kind(listener: Callable[[type, NodeSchema], None]) -> None:
    """Call ``listener(cls, schema)`` for every declared node kind, now and later."""
    _LISTENERS.append(listener)
    for cls in list(_DECLARED):
        listener(cls, cls.schema)


def node_kinds() -> list[type]:
    """The classes that declare a schema, in declaration order."""
    return list(_DECLARED)


def schema_of(cls: type) -> NodeSchema | None:
    """The schema ``cls`` declares or inherits (a subclass is seen as its declared base),
    or None for an expression class without one."""
    schema = getattr(cls, "schema", None)
    return schema if isinstance(schema, NodeSchema) and schema.cls is not None else None


class KindTable(dict):
    """A dict ``class -> derive(schema)`` filled on first use: ``table[type(node)]`` is a
    plain dict lookup after the first node of a class. A class without a schema raises
    KeyError (so callers keep their own error for foreign nodes)."""

    def __init__(self, derive: Callable[[NodeSchema], Any], entries: dict | None = None) -> None:
        super().__init__(entries or {})
        self._derive = derive

    def __missing__(self, cls: type) -> Any:
        schema = schema_of(cls)
        if schema is None:
            raise KeyError(cls)
        entry = self[cls] = self._derive(schema)
        return entry


# --------------------------------------------------------------------------- generic helpers

_CHILDREN = KindTable(lambda schema: schema.children)
_MAP = KindTable(lambda schema: schema.map_children)


def children_of(node: Any) -> tuple:
    """Every sub-expression of ``node`` in declaration order (binders included)."""
    try:
        return _CHILDREN[type(node)](node)
    except KeyError:
        raise TypeError(f"not an IR expression with a node schema: {type(node).__name__}") from None


def map_children(node: Any, fn: Callable[[Any], Any]) -> Any:
    """``node`` with every child replaced by ``fn(child)`` (called in declaration order);
    ``node`` itself when every ``fn(child) is child``."""
    try:
        rebuild = _MAP[type(node)]
    except KeyError:
        raise TypeError(f"not an IR expression with a node schema: {type(node).__name__}") from None
    return rebuild(node, fn)


def with_children(node: Any, children: Sequence[Any]) -> Any:
    """``node`` with its children (as :func:`children_of` lists them) replaced by
    ``children``; ``node`` itself when they are the same objects."""
    expected = len(children_of(node))
    if len(children) != expected:
        raise ValueError(f"{type(node).__name__} has {expected} children, got {len(children)}")
    it = iter(children)
    return map_children(node, lambda _: next(it))


__all__ = [
    "FieldKind",
    "Field",
    "NodeSchema",
    "KindTable",
    "child",
    "child_seq",
    "binder",
    "binder_seq",
    "type_field",
    "attrs_field",
    "value",
    "array",
    "declare",
    "on_node_kind",
    "node_kinds",
    "schema_of",
    "children_of",
    "map_children",
    "with_children",
    "generate",
    "tuple_source",
]

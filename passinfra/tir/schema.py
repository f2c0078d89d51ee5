"""Loop-level node schemas: each tir node kind declares its fields once; the rest is derived.

A node class is a frozen dataclass whose fields say what they hold (the loop IR's
counterpart of :mod:`passinfra.ir.schema`)::

    @node_kind()
    class For(Stmt):
        loop_var: TVar = binder()
        start: PrimExpr = expr()
        extent: PrimExpr = expr()
        kind: ForKind = value(codec=(lambda k: k.value, ForKind))
        body: Stmt = stmt()

A field is an operand expression (``expr``), a tuple of them (``expr_seq``), a nested
statement (``stmt``, optionally ``None``) or a tuple of statements (``stmt_seq``), a
variable the node binds (``binder``), a buffer it reads, writes or allocates (``buffer``)
or a plain value (``value``: a name, a dtype, a number; ``codec`` gives its canonical
form when that is not the value itself). From the declaration, once per class, this
module derives:

* ``children(node)``: every sub-node in field order (binders included) and the splits
  ``operands`` (without binders), ``exprs`` (the operand expressions) and ``stmts`` (the
  nested statements);
* ``rebuild(node, children)``: the node with new children in that order (same kind,
  same values and buffers), and ``map_fields(node, on_expr, on_stmt, on_buffer)``, the
  node with each field mapped by its role (the same object when nothing changed);
* ``key(node)``: the node's own content, children aside (values in canonical form,
  buffers by identity, sequence lengths): two nodes of one kind with equal keys and
  equal children are the same structure;
* ``row(node, ref, buffer_index)`` / ``unrow(row, node, buffers)``: the flat table form
  (:mod:`passinfra.tir.structural`), one row field per declared field;
* the visitor and mutator hook name (``visit_for``, ``rewrite_add``; from the class name
  unless declared) and the checks a node runs when it is built (operands are
  expressions, nested statements are statements: cheap, and they stop a malformed node
  where it is made rather than where it is printed or compiled).

The functor, printer, structural equality/hash, wire format and verifier read these, so
a node kind declared anywhere (a test, a plugin) is walked, rewritten, printed, compared
and hashed with no other edit. What differs per kind (printing syntax, evaluation, C
rendering) stays with whoever gives it meaning, dispatched by class.

This module is the bottom of :mod:`passinfra.tir`: it imports nothing from the package.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections.abc import Callable
from typing import Any

from passinfra.errors import IRError
from passinfra.ir.schema import generate, tuple_source

NO_ROW = -1  # an absent optional statement in a row


class Role(enum.Enum):
    """What a declared field holds; decides how each derived function treats it."""

    EXPR = "expr"  # one operand expression
    EXPR_SEQ = "expr_seq"  # a tuple of operand expressions
    STMT = "stmt"  # a nested statement
    OPT_STMT = "opt_stmt"  # a nested statement or None
    STMT_SEQ = "stmt_seq"  # a tuple of nested statements
    BINDER = "binder"  # a variable the node binds (a loop variable, a let variable)
    BUFFER = "buffer"  # a buffer the node reads, writes or allocates (not a child)
    VALUE = "value"  # a plain value: name, dtype, number, enum member


_CHILD_ROLES = frozenset({Role.EXPR, Role.EXPR_SEQ, Role.STMT, Role.OPT_STMT, Role.STMT_SEQ, Role.BINDER})
_SEQ_ROLES = frozenset({Role.EXPR_SEQ, Role.STMT_SEQ})
_STMT_ROLES = frozenset({Role.STMT, Role.OPT_STMT, Role.STMT_SEQ})
_EXPR_ROLES = frozenset({Role.EXPR, Role.EXPR_SEQ})

_META = "tir_role"
_CODEC = "tir_codec"

Codec = tuple[Callable[[Any], Any], Callable[[Any], Any]]  # (canonical form, back)


def _field(role: Role, codec: Codec | None = None, **kwargs: Any) -> Any:
    return dataclasses.field(metadata={_META: role, _CODEC: codec}, **kwargs)


def expr(**kwargs: Any) -> Any:
    return _field(Role.EXPR, **kwargs)


def expr_seq(**kwargs: Any) -> Any:
    return _field(Role.EXPR_SEQ, **kwargs)


def stmt(optional: bool = False) -> Any:
    return _field(Role.OPT_STMT, default=None) if optional else _field(Role.STMT)


def stmt_seq() -> Any:
    return _field(Role.STMT_SEQ)


def binder() -> Any:
    return _field(Role.BINDER)


def buffer() -> Any:
    return _field(Role.BUFFER)


def value(codec: Codec | None = None, **kwargs: Any) -> Any:
    """A plain field; ``codec`` = (to canonical form, back) when the value itself is not
    its canonical form (a float compared bitwise, an enum member by its value)."""
    return _field(Role.VALUE, codec, **kwargs)


FLOAT_CODEC: Codec = (lambda x: float(x).hex(), float.fromhex)  # NaN == NaN, 0.0 != -0.0
INT_CODEC: Codec = (int, int)


@dataclasses.dataclass(frozen=True)
class Field:
    name: str
    role: Role
    codec: Codec | None

    @property
    def is_child(self) -> bool:
        return self.role in _CHILD_ROLES

    @property
    def is_seq(self) -> bool:
        return self.role in _SEQ_ROLES


class TirSchema:
    """The declaration of one node kind and the functions derived from it (see the
    module docstring). ``variable``: the kind is a variable, compared and numbered by
    identity (TVar)."""

    children: Callable[[Any], tuple]
    operands: Callable[[Any], tuple]
    exprs: Callable[[Any], tuple]
    stmts: Callable[[Any], tuple]
    rebuild: Callable[[Any, Any], Any]
    map_fields: Callable[..., Any]
    key: Callable[[Any], tuple]
    row: Callable[..., tuple]
    unrow: Callable[..., Any]
    check: Callable[[Any], None]

    def __init__(self, cls: type, fields: tuple[Field, ...], hook: str, variable: bool) -> None:
        self.cls = cls
        self.fields = fields
        self.hook = hook
        self.variable = variable
        self.has_buffers = any(f.role is Role.BUFFER for f in fields)
        self.is_stmt = False  # set by node_kind

    @property
    def tag(self) -> str:
        return self.cls.__name__

    @property
    def leaf(self) -> bool:
        return not any(f.is_child for f in self.fields)

    def fields_with(self, *roles: Role) -> tuple[Field, ...]:
        return tuple(f for f in self.fields if f.role in roles)

    def __repr__(self) -> str:
        return f"TirSchema({self.tag}: {', '.join(f'{f.name}: {f.role.value}' for f in self.fields)})"


def _child_items(fields: tuple[Field, ...], optional_guard: bool = True) -> list[str]:
    items: list[str] = []
    for f in fields:
        if f.is_seq:
            items.append(f"*node.{f.name}")
        elif f.role is Role.OPT_STMT and optional_guard:
            items.append(f"*(() if node.{f.name} is None else (node.{f.name},))")
        else:
            items.append(f"node.{f.name}")
    return items


def _getter(cls: type, name: str, fields: tuple[Field, ...], env: dict) -> Callable[[Any], tuple]:
    return generate(cls, name, ["node"], [f"return {tuple_source(_child_items(fields))}"], env)


def _rebuild_lines(fields: tuple[Field, ...]) -> list[str]:
    """``rebuild(node, children)``: the children in ``children`` order put back."""
    # every child taken into a local in field order, then the node built from them
    lines = ["it = iter(children)"]
    args = []
    for f in fields:
        if f.is_seq:
            lines.append(f"v_{f.name} = tuple(next(it) for _ in node.{f.name})")
        elif f.role is Role.OPT_STMT:
            lines.append(f"v_{f.name} = None if node.{f.name} is None else next(it)")
        elif f.is_child:
            lines.append(f"v_{f.name} = next(it)")
        args.append(f"v_{f.name}" if f.is_child else f"node.{f.name}")
    lines.append(f"return type(node)({', '.join(args)})")
    return lines


def _map_lines(fields: tuple[Field, ...]) -> list[str]:
    """``map_fields(node, on_expr, on_stmt, on_buffer)``: each operand expression through
    ``on_expr``, each nested statement through ``on_stmt``, each buffer through
    ``on_buffer``, in field order; binders and values kept; ``node`` when all came back
    the same."""
    lines: list[str] = []
    same: list[str] = []
    args: list[str] = []
    for f in fields:
        fn = {Role.EXPR: "on_expr", Role.EXPR_SEQ: "on_expr", Role.STMT: "on_stmt", Role.OPT_STMT: "on_stmt",
              Role.STMT_SEQ: "on_stmt", Role.BUFFER: "on_buffer"}.get(f.role)
        old = f"node.{f.name}"
        if fn is None:
            args.append(old)
            continue
        new = f"v_{f.name}"
        if f.is_seq:
            lines.append(f"{new} = tuple(map({fn}, {old}))")
            same.append(f"all(map(_is, {new}, {old}))")
        elif f.role is Role.OPT_STMT:
            lines.append(f"{new} = None if {old} is None else {fn}({old})")
            same.append(f"{new} is {old}")
        else:
            lines.append(f"{new} = {fn}({old})")
            same.append(f"{new} is {old}")
        args.append(new)
    if not same:
        return ["return node"]
    lines += [f"if {' and '.join(same)}:", "    return node", f"return type(node)({', '.join(args)})"]
    return lines


def _encoded(f: Field, source: str) -> str:
    return f"_codec_{f.name}[0]({source})" if f.codec is not None else source


def _key_items(fields: tuple[Field, ...]) -> list[str]:
    items = []
    for f in fields:
        if f.role is Role.VALUE:
            items.append(_encoded(f, f"node.{f.name}"))
        elif f.role is Role.BUFFER:
            items.append(f"id(node.{f.name})")
        elif f.is_seq:
            items.append(f"len(node.{f.name})")
        elif f.role is Role.OPT_STMT:
            items.append(f"node.{f.name} is None")
    return items


# how a row holds each kind of field, and how the field is read back from the row:
# (source of the row item from the field ``{v}``, source of the field from the item ``{r}``)
_ROW_FORMS: dict[Role, tuple[str, str]] = {
    Role.BUFFER: ("buffer_index({v})", "buffers[{r}]"),
    Role.EXPR_SEQ: ("tuple(map(ref, {v}))", "tuple(map(node, {r}))"),
    Role.STMT_SEQ: ("tuple(map(ref, {v}))", "tuple(map(node, {r}))"),
    Role.OPT_STMT: ("_NO_ROW if {v} is None else ref({v})", "None if {r} == _NO_ROW else node({r})"),
    Role.EXPR: ("ref({v})", "node({r})"),
    Role.STMT: ("ref({v})", "node({r})"),
    Role.BINDER: ("ref({v})", "node({r})"),
}


def _row_items(tag: str, fields: tuple[Field, ...]) -> list[str]:
    items = [repr(tag)]
    for f in fields:
        field_source = f"node.{f.name}"
        if f.role is Role.VALUE:
            items.append(_encoded(f, field_source))
        else:
            items.append(_ROW_FORMS[f.role][0].format(v=field_source))
    return items


def _unrow_args(fields: tuple[Field, ...]) -> list[str]:
    args = []
    for position, f in enumerate(fields, start=1):
        item = f"row[{position}]"
        if f.role is Role.VALUE:
            args.append(f"_codec_{f.name}[1]({item})" if f.codec is not None else item)
        else:
            args.append(_ROW_FORMS[f.role][1].format(r=item))
    return args


# the class each child and buffer field must hold (names in the generated code's globals)
_CHECKED_CLASS = {Role.EXPR: "_PrimExpr", Role.EXPR_SEQ: "_PrimExpr", Role.STMT: "_Stmt",
                  Role.OPT_STMT: "_Stmt", Role.STMT_SEQ: "_Stmt", Role.BINDER: "_TVar",
                  Role.BUFFER: "_Buffer"}


def _check_lines(schema: TirSchema) -> list[str]:
    lines = []
    for f in schema.fields:
        base = _CHECKED_CLASS.get(f.role)
        if base is None:
            continue
        what = f"{schema.tag}.{f.name}"
        if f.is_seq:
            items = f"node.{f.name}"
            lines += [f"if type({items}) is not tuple or not all(isinstance(x, {base}) for x in {items}):",
                      f"    _bad(node, {what!r}, {base[1:]!r}, node.{f.name}, True)"]
        elif f.role is Role.OPT_STMT:
            lines += [f"if node.{f.name} is not None and not isinstance(node.{f.name}, {base}):",
                      f"    _bad(node, {what!r}, {base[1:]!r}, node.{f.name}, False)"]
        else:
            lines += [f"if not isinstance(node.{f.name}, {base}):",
                      f"    _bad(node, {what!r}, {base[1:]!r}, node.{f.name}, False)"]
    return lines


def _bad(node: Any, what: str, expected: str, got: Any, seq: bool) -> None:
    shape = f"a tuple of {expected}s" if seq else f"a {expected}"
    raise IRError(f"{what} must be {shape}, got {type(got).__name__} ({got!r:.80})")


def hook_name(cls: type) -> str:
    """``visit_``/``rewrite_`` suffix of a class: its name in snake case (an all-capital
    name such as EQ becomes ``eq``)."""
    name = cls.__name__
    if name.isupper():
        return name.lower()
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


# --------------------------------------------------------------------------- declaration

_KINDS: dict[type, TirSchema] = {}
_BY_TAG: dict[str, type] = {}
_BASES: dict[str, type] = {}  # PrimExpr, Stmt, TVar, Buffer: set by nodes.py (it sits above)


def set_bases(**bases: type) -> None:
    """nodes.py names its base classes here, for the construction checks."""
    _BASES.update(bases)


def node_kind(hook: str | None = None, variable: bool = False, abstract: bool = False,
              check: bool = True) -> Callable[[type], type]:
    """Class decorator: make ``cls`` a frozen, slotted dataclass with identity ``==`` and
    ``hash`` (as every IR node) and declare its fields (see the module docstring).
    ``abstract``: a base that declares fields for its subclasses (BinaryOp) but is not a
    kind itself. ``check``: verify child fields' classes when a node is built."""

    def declare(cls: type) -> type:
        own = [value.metadata.get(_META) for value in cls.__dict__.values()
               if isinstance(value, dataclasses.Field)]
        if check and "__post_init__" not in cls.__dict__ and any(role in _CHECKED_CLASS for role in own):
            # the dataclass __init__ calls it: the checks run for every node built (a kind
            # with only plain values, IntImm, gets no hook and no call)
            cls.__post_init__ = _run_checks  # type: ignore[attr-defined]
        cls = dataclasses.dataclass(frozen=True, slots=True, eq=False)(cls)
        fields = tuple(
            Field(f.name, f.metadata.get(_META, Role.VALUE), f.metadata.get(_CODEC))
            for f in dataclasses.fields(cls)
        )
        if abstract:
            return cls
        if cls.__name__ in _BY_TAG and _BY_TAG[cls.__name__].__qualname__ != cls.__qualname__:
            raise TypeError(f"a loop-level node kind named {cls.__name__} is already declared")
        schema = TirSchema(cls, fields, hook or hook_name(cls), variable)
        schema.is_stmt = issubclass(cls, _BASES["Stmt"])
        _bind(schema)
        _KINDS[cls] = schema
        _BY_TAG[cls.__name__] = cls
        if "__post_init__" in dir(cls):
            # the generated __init__ looks the hook up on each call: the kind's own check
            # replaces the placeholder, so building a node costs one call, no lookup
            checks = check and any(f.is_child or f.role is Role.BUFFER for f in fields)
            cls.__post_init__ = schema.check if checks else _no_checks  # type: ignore[attr-defined]
        return cls

    return declare


def _run_checks(node: Any) -> None:
    """The placeholder hook a declared class starts with (``node_kind`` replaces it with
    the kind's check); an abstract base's own instances are not checked."""


def _no_checks(node: Any) -> None:
    return None


def _bind(schema: TirSchema) -> None:
    cls, fields = schema.cls, schema.fields
    env: dict[str, Any] = {"_is": lambda a, b: a is b, "_NO_ROW": NO_ROW, "_bad": _bad}
    # TVar is declared with this machinery itself: the classes known so far
    env.update({f"_{name}": base for name, base in _BASES.items()})
    env.update({f"_codec_{f.name}": f.codec for f in fields if f.codec is not None})
    children = tuple(f for f in fields if f.is_child)
    schema.children = _getter(cls, "children", children, env)
    schema.operands = _getter(cls, "operands", tuple(f for f in children if f.role is not Role.BINDER), env)
    schema.exprs = _getter(cls, "exprs", schema.fields_with(*_EXPR_ROLES), env)
    schema.stmts = _getter(cls, "stmts", schema.fields_with(*_STMT_ROLES), env)
    schema.rebuild = generate(cls, "rebuild", ["node", "children"], _rebuild_lines(fields), env)
    schema.map_fields = generate(cls, "map_fields", ["node", "on_expr", "on_stmt", "on_buffer"],
                                 _map_lines(fields), env)
    schema.key = generate(cls, "key", ["node"], [f"return {tuple_source(_key_items(fields))}"], env)
    schema.row = generate(cls, "row", ["node", "ref", "buffer_index"],
                          [f"return {tuple_source(_row_items(cls.__name__, fields))}"], env)
    env["_cls"] = cls
    schema.unrow = generate(cls, "unrow", ["row", "node", "buffers"],
                            [f"return _cls({', '.join(_unrow_args(fields))})"], env)
    schema.check = generate(cls, "check", ["node"], _check_lines(schema), env)


def schema_of(cls: type) -> TirSchema:
    """The declaration of a loop-level node kind; IRError for anything else."""
    schema = _KINDS.get(cls)
    if schema is None:
        raise IRError(f"not a loop-level node: {cls.__name__}")
    return schema


def kind_by_tag(tag: str) -> type:
    cls = _BY_TAG.get(tag)
    if cls is None:
        raise IRError(f"unknown loop-level node kind {tag!r}")
    return cls


def node_kinds() -> list[type]:
    """Every declared kind, in declaration order."""
    return list(_KINDS)


def children(node: Any) -> tuple:
    """Every sub-node of ``node`` in field order, binders included."""
    return schema_of(type(node)).children(node)


__all__ = [
    "Role", "Field", "TirSchema", "NO_ROW", "FLOAT_CODEC", "INT_CODEC", "expr", "expr_seq", "stmt",
    "stmt_seq", "binder", "buffer", "value", "node_kind", "set_bases", "schema_of", "kind_by_tag",
    "node_kinds", "children", "hook_name",
]

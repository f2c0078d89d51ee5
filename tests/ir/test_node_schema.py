"""Node schemas: every node kind declares its fields once, and the derived tables follow.

The declaration (``cls.schema``) drives child iteration, the functors' default methods,
the generic rebuild, structural equality/hash and the wire format; these tests check each
against the declaration, field by field, and declare a new node kind to show that it
works everywhere without touching any table.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from passinfra import ir
from passinfra.errors import IRError
from passinfra.ir import op
from passinfra.ir.schema import (
    FieldKind,
    NodeSchema,
    binder,
    child,
    child_seq,
    children_of,
    map_children,
    node_kinds,
    schema_of,
    value,
    with_children,
)
from passinfra.ir.serialize import from_wire, to_wire

T2 = ir.TensorType((2,), "float32")
T3 = ir.TensorType((3,), "float32")
BUILTIN_KINDS = [
    ir.Var,
    ir.GlobalVar,
    ir.Constant,
    ir.Call,
    ir.Tuple,
    ir.TupleGetItem,
    ir.Let,
    ir.If,
    ir.Function,
    ir.Op,
]
CACHE_SLOTS = {"_shash", "_checked_type", "__weakref__"}


def sample(kind: type) -> ir.Expr:
    """One node of ``kind`` with every field set to something non-trivial."""
    x, y = ir.var("x", (2,)), ir.var("y", (2,))
    v = ir.var("v", (2,))
    make: dict[type, Callable[[], ir.Expr]] = {
        ir.Var: lambda: x,
        ir.GlobalVar: lambda: ir.GlobalVar("g"),
        ir.Constant: lambda: ir.const(np.array([1.0, 2.0], "float32")),
        ir.Call: lambda: op.nn.softmax(op.add(x, y), axis=0),
        ir.Tuple: lambda: ir.Tuple([x, op.exp(y)]),
        ir.TupleGetItem: lambda: ir.TupleGetItem(ir.Tuple([x, y]), 1),
        ir.Let: lambda: ir.Let(v, op.exp(x), op.add(v, x)),
        ir.If: lambda: ir.If(ir.var("c", (), "bool"), x, op.negative(y)),
        ir.Function: lambda: ir.Function([x, y], op.add(x, y), ret_type=T2, attrs={"Primitive": 1}),
        ir.Op: lambda: ir.Op.get("add"),
    }
    return make[kind]()


def field_values(node: ir.Expr) -> dict[str, Any]:
    return {name: getattr(node, name) for name in type(node).schema.names}


# --------------------------------------------------------------------------- declarations


@pytest.mark.parametrize("kind", BUILTIN_KINDS, ids=lambda k: k.__name__)
def test_every_node_kind_declares_a_schema(kind):
    schema = kind.schema
    assert isinstance(schema, NodeSchema) and schema.cls is kind and schema_of(kind) is schema
    assert kind in node_kinds()
    # the functors dispatch to the declared method, and every functor has it
    for functor in (ir.ExprFunctor, ir.ExprVisitor, ir.ExprMutator):
        assert callable(getattr(functor, schema.method))


@pytest.mark.parametrize("kind", [k for k in BUILTIN_KINDS if k is not ir.Op], ids=lambda k: k.__name__)
def test_the_schema_names_every_field_of_the_node(kind):
    """A node's instance fields are exactly its declared fields (the slots come from the
    schema), and the constructor takes them first, in order (the generic rebuild relies
    on it)."""
    slots = {slot for klass in kind.__mro__ for slot in klass.__dict__.get("__slots__", ())}
    assert slots - CACHE_SLOTS == set(kind.schema.names)
    node = sample(kind)
    assert kind(*field_values(node).values()).__class__ is kind


def test_op_declares_its_name_and_is_rebuilt_from_the_registry():
    schema = ir.Op.schema
    assert schema.names == ("name",) and schema.leaf
    assert schema.make("add") is ir.Op.get("add")


def test_a_declared_field_without_a_slot_is_refused():
    with pytest.raises(TypeError, match=r"declares fields \['a'\] without slots"):

        class Unslotted(ir.Expr):
            schema = NodeSchema(child("a"), method="visit_unslotted")

            def __init__(self, a: ir.Expr) -> None:
                super().__init__()


def test_a_constructor_that_does_not_take_the_fields_in_order_is_refused():
    with pytest.raises(TypeError, match=r"must take the declared fields \['a', 'b'\] first and in order"):

        class Swapped(ir.Expr):
            schema = NodeSchema(child("a"), child("b"), method="visit_swapped")
            __slots__ = schema.slots()

            def __init__(self, b: ir.Expr, a: ir.Expr) -> None:
                super().__init__()


# --------------------------------------------------------------------------- derived behaviour


@pytest.mark.parametrize("kind", BUILTIN_KINDS, ids=lambda k: k.__name__)
def test_children_are_the_child_fields_in_declaration_order(kind):
    node = sample(kind)
    expected: list[ir.Expr] = []
    for field in kind.schema.fields:
        if field.is_seq:
            expected.extend(getattr(node, field.name))
        elif field.is_child:
            expected.append(getattr(node, field.name))
    assert list(children_of(node)) == expected
    assert list(ir.expr_children(node)) == expected


@pytest.mark.parametrize("kind", BUILTIN_KINDS, ids=lambda k: k.__name__)
def test_generic_rebuild_round_trips(kind):
    node = sample(kind)
    children = children_of(node)
    assert with_children(node, children) is node
    assert map_children(node, lambda c: c) is node
    if not children:
        return
    # fresh copies of the children (one table, so binders and their uses stay paired)
    copies = pickle.loads(pickle.dumps(ir.Tuple(list(children)))).fields
    rebuilt = with_children(node, copies)
    assert type(rebuilt) is kind and rebuilt is not node
    assert ir.structural_equal(rebuilt, node, map_free_vars=True)
    assert ir.structural_hash(rebuilt) == ir.structural_hash(node)
    assert all(a is b for a, b in zip(children_of(rebuilt), copies))
    for field in kind.schema.fields:
        if not field.is_child:
            assert getattr(rebuilt, field.name) is getattr(node, field.name)
    with pytest.raises(ValueError, match="children"):
        with_children(node, list(children) + [children[0]])


@pytest.mark.parametrize("kind", BUILTIN_KINDS, ids=lambda k: k.__name__)
def test_functor_defaults_come_from_the_schema(kind):
    schema = kind.schema
    if kind is ir.Let:  # Let chains are walked by a loop: written out by hand
        return
    assert getattr(ir.ExprVisitor, schema.method) is schema.visit_default
    assert getattr(ir.ExprMutator, schema.method) is schema.mutate_default
    node = sample(kind)
    seen: list[ir.Expr] = []

    class Recorder(ir.ExprVisitor):
        def visit(self, expr):
            seen.append(expr)  # the children the default method hands to visit, in order

    getattr(Recorder(), schema.method)(node)
    assert seen == list(children_of(node))
    assert getattr(ir.ExprMutator(), schema.method)(node) is node


# A replacement for each declared field of each kind, and whether the change is one of
# structure (a variable's name is only a hint: renaming is not a structural change).
# Every declared field must have an entry: adding a field to a schema without saying
# how it differs fails test_every_declared_field_is_covered.
VARIANTS: dict[tuple[type, str], tuple[Callable[[ir.Expr], Any], bool]] = {
    (ir.Var, "name_hint"): (lambda n: "renamed", False),
    (ir.Var, "type_annotation"): (lambda n: T3, True),
    (ir.GlobalVar, "name_hint"): (lambda n: "other", True),
    (ir.Constant, "data"): (lambda n: np.array([1.0, 3.0], "float32"), True),
    (ir.Call, "op"): (lambda n: ir.Op.get("nn.relu"), True),
    (ir.Call, "args"): (lambda n: (op.subtract(*n.args[0].args),), True),
    (ir.Call, "attrs"): (lambda n: {"axis": -1}, True),
    (ir.Tuple, "fields"): (lambda n: (*n.fields, n.fields[0]), True),
    (ir.TupleGetItem, "tuple_value"): (lambda n: ir.Tuple([*n.tuple_value.fields, ir.const(0.0)]), True),
    (ir.TupleGetItem, "index"): (lambda n: 0, True),
    (ir.Let, "var"): (lambda n: ir.var("w", (3,)), True),
    (ir.Let, "value"): (lambda n: op.negative(n.value.args[0]), True),
    (ir.Let, "body"): (lambda n: op.multiply(*n.body.args), True),
    (ir.If, "cond"): (lambda n: ir.const(True), True),
    (ir.If, "true_branch"): (lambda n: n.false_branch, True),
    (ir.If, "false_branch"): (lambda n: n.true_branch, True),
    (ir.Function, "params"): (lambda n: (*n.params, ir.var("z", (2,))), True),
    (ir.Function, "body"): (lambda n: op.subtract(*n.body.args), True),
    (ir.Function, "ret_type"): (lambda n: None, True),
    (ir.Function, "attrs"): (lambda n: {"Primitive": 0}, True),
    (ir.Op, "name"): (lambda n: "subtract", True),
}


def test_every_declared_field_is_covered():
    declared = {(kind, name) for kind in BUILTIN_KINDS for name in kind.schema.names}
    assert declared == set(VARIANTS)


def _variant(kind: type, name: str) -> tuple[ir.Expr, ir.Expr, bool]:
    node = sample(kind)
    replace, structural = VARIANTS[(kind, name)]
    values = field_values(node)
    values[name] = replace(node)
    return node, kind.schema.make(*values.values()), structural


@pytest.mark.parametrize("kind, name", list(VARIANTS), ids=lambda v: getattr(v, "__name__", v))
def test_structural_equality_and_hash_see_every_declared_field(kind, name):
    node, variant, structural = _variant(kind, name)
    assert getattr(variant, name) is not getattr(node, name)
    assert ir.structural_equal(node, variant, map_free_vars=True) is not structural
    assert (ir.structural_hash(node) != ir.structural_hash(variant)) is structural


@pytest.mark.parametrize("kind, name", list(VARIANTS), ids=lambda v: getattr(v, "__name__", v))
def test_the_wire_format_carries_every_declared_field(kind, name):
    _, variant, _ = _variant(kind, name)
    copy = from_wire(*to_wire(variant))
    assert type(copy) is kind
    for field in kind.schema.fields:
        got, sent = getattr(copy, field.name), getattr(variant, field.name)
        if field.kind is FieldKind.ARRAY:
            assert got.dtype == sent.dtype and np.array_equal(got, sent)
        elif field.is_child:
            assert ir.structural_equal(got, sent, map_free_vars=True)
        else:
            assert got == sent
    ir.assert_structural_equal(copy, variant, map_free_vars=True)


# --------------------------------------------------------------------------- a new node kind


class SchemaTestSelect(ir.Expr):
    """A node kind declared only here: ``select[label](key, choices...)``. Nothing else
    in the IR was edited for it."""

    schema = NodeSchema(
        child("key"), child_seq("choices"), value("label"), method="visit_schema_test_select", dataflow=True
    )
    __slots__ = schema.slots()

    def __init__(self, key: ir.Expr, choices: Any, label: str) -> None:
        super().__init__()
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "choices", tuple(choices))
        object.__setattr__(self, "label", label)


def _select() -> tuple[SchemaTestSelect, ir.Var, ir.Var]:
    x, y = ir.var("x", (2,)), ir.var("y", (2,))
    return SchemaTestSelect(ir.const(1), [op.exp(x), y], "pick"), x, y


def test_a_new_node_kind_is_traversed_rebuilt_hashed_and_pickled():
    select, x, y = _select()
    root = ir.Function([x, y], ir.Tuple([select, x]))
    assert SchemaTestSelect.__slots__ == ("key", "choices", "label")
    assert select in list(ir.iter_post_order(root))
    assert ir.expr_children(select) == (select.key, *select.choices)

    class CountVars(ir.ExprVisitor):
        def __init__(self):
            super().__init__()
            self.vars = []

        def visit_var(self, var):
            self.vars.append(var.name_hint)

    counter = CountVars()
    counter.visit(root)
    assert counter.vars == ["x", "y"]  # reached through the new node's children

    class SwapExp(ir.ExprMutator):
        def visit_call(self, call):
            new = super().visit_call(call)
            return op.negative(*new.args) if new.op is ir.Op.get("exp") else new

    rewritten = SwapExp().visit(root)
    new_select = rewritten.body.fields[0]
    assert type(new_select) is SchemaTestSelect and new_select.label == "pick"
    assert new_select.choices[0].op is ir.Op.get("negative") and new_select.choices[1] is y
    assert ir.ExprMutator().visit(root) is root

    copy = pickle.loads(pickle.dumps(root))
    ir.assert_structural_equal(copy, root)
    assert ir.structural_hash(copy) == ir.structural_hash(root)
    relabelled = ir.Function([x, y], ir.Tuple([SchemaTestSelect(select.key, select.choices, "other"), x]))
    assert not ir.structural_equal(relabelled, root)
    assert ir.structural_hash(relabelled) != ir.structural_hash(root)
    assert ir.bound_vars(root) == [x, y] and ir.free_vars(select) == [x, y]
    ir.verify_well_formed(root)


class SchemaTestBind(ir.Expr):
    """A binder kind declared only here: bound_vars sees its binder; the well-formedness
    check, which cannot guess its scoping, refuses it by name."""

    schema = NodeSchema(binder("var"), child("body"), method="visit_schema_test_bind")
    __slots__ = schema.slots()

    def __init__(self, var: ir.Var, body: ir.Expr) -> None:
        super().__init__()
        object.__setattr__(self, "var", var)
        object.__setattr__(self, "body", body)


def test_a_new_kind_that_binds_variables_needs_a_scoping_rule():
    x = ir.var("x", (2,))
    node = SchemaTestBind(x, op.exp(x))
    assert ir.bound_vars(node) == [x] and ir.free_vars(node) == []
    with pytest.raises(IRError, match="no scoping rule for SchemaTestBind"):
        ir.verify_well_formed(node)

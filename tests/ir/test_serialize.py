"""The flat wire format: pickling keeps identity, sharing, inferred types and read-only
constants; arrays travel out-of-band with protocol 5; 100,000-deep programs pickle
under the default recursion limit; new node kinds can register themselves."""

from __future__ import annotations

import pickle
import sys

import numpy as np
import pytest

from passinfra import ir
from passinfra.errors import IRError, OpNotFoundError
from passinfra.ir import op
from passinfra.ir.op.registry import OpPattern, register_op
from passinfra.ir.serialize import WireKind, from_wire, register_wire_kind, to_wire, wire_size
from passinfra.ir.structural import StructuralRule, register_structural_rule
from passinfra.testing import make_chain

PROTOCOLS = list(range(2, pickle.HIGHEST_PROTOCOL + 1))


def round_trip(node, protocol=pickle.HIGHEST_PROTOCOL):
    return pickle.loads(pickle.dumps(node, protocol=protocol))


def sample_function() -> ir.Function:
    """Every expression kind, a shared subexpression, a shared Var, a closure."""
    x = ir.var("x", (2, 2))
    c = ir.var("c", (), "bool")
    weight = ir.const(np.arange(4, dtype="float32").reshape(2, 2))
    shared = op.add(x, weight)
    v = ir.Var("v", ir.TensorType((2, 2)))
    y = ir.var("y", (2, 2))
    closure = ir.Function([y], op.multiply(y, x), attrs={"Closure": 1})
    body = ir.Let(
        v,
        shared,
        ir.Tuple([
            ir.If(c, ir.Call(closure, [v]), shared),
            ir.TupleGetItem(ir.Tuple([shared, v]), 1),
            ir.Call(ir.GlobalVar("helper"), [x]),
            op.nn.softmax(v, axis=0),
        ]),
    )
    return ir.Function([x, c], body, attrs={"Name": "sample"})


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_round_trip_every_node_kind_keeps_identity_and_sharing(protocol):
    func = sample_function()
    copy = round_trip(func, protocol)
    assert copy is not func
    ir.assert_structural_equal(func, copy)
    assert ir.structural_hash(copy) == ir.structural_hash(func)
    x, _ = copy.params
    let = copy.body
    if_node, tgi, global_call, softmax = let.body.fields
    shared = let.value
    # one object per original node: the shared add, the let var and the param
    assert if_node.false_branch is shared and tgi.tuple_value.fields[0] is shared
    assert tgi.tuple_value.fields[1] is let.var and softmax.args[0] is let.var
    assert shared.args[0] is x and global_call.args[0] is x
    closure = if_node.true_branch.op
    assert closure.body.args[1] is x
    assert closure.attrs["Closure"] == 1 and copy.attrs["Name"] == "sample"
    assert softmax.op is ir.Op.get("nn.softmax") and softmax.attrs["axis"] == 0
    assert global_call.op == ir.GlobalVar("helper")
    constant = shared.args[1]
    assert not constant.data.flags.writeable and constant.data.dtype == np.float32
    np.testing.assert_array_equal(constant.data, np.arange(4).reshape(2, 2))


def test_identity_within_one_pickled_object_only():
    x = ir.var("x", (2,))
    # a Tuple is one IR object: one table, so the Var comes back as one object
    tup = round_trip(ir.Tuple([op.exp(x), x]))
    assert tup.fields[0].args[0] is tup.fields[1]
    # two separate IR objects in a list get a table each (documented boundary)
    a, b = round_trip([op.exp(x), x])
    assert a.args[0] is not b and a.args[0].name_hint == b.name_hint == "x"


def test_module_round_trip_shares_nodes_across_functions():
    x = ir.var("x", (2,))
    common = op.exp(x)
    mod = ir.IRModule({"main": ir.Function([x], common), "other": ir.Function([x], op.negative(common))})
    mod = mod.with_attr("version", 3)
    copy = round_trip(mod)
    assert [gv.name_hint for gv in copy.functions] == ["main", "other"]
    assert copy["other"].body.args[0] is copy["main"].body
    assert copy.attrs["version"] == 3
    ir.assert_structural_equal(mod, copy)


def test_checked_types_travel_and_hash_cache_does_not():
    h = ir.var("h", (2, 2))
    helper = ir.Function([h], op.negative(h))
    mod = ir.infer_type(ir.IRModule({"main": sample_function(), "helper": helper}))
    func = mod["main"]
    ir.structural_hash(func)
    assert func._shash is not None
    copy = round_trip(mod)["main"]
    assert copy._shash is None
    assert copy.checked_type == func.checked_type
    assert copy.body.value.checked_type == ir.TensorType((2, 2))
    assert copy.params[1].checked_type == ir.TensorType((), "bool")


def test_protocol5_ships_arrays_out_of_band():
    arrays = [np.full((256, 256), i, dtype="float32") for i in range(3)]
    x = ir.var("x", (256, 256))
    body = x
    for array in arrays:
        body = op.add(body, ir.const(array))
    shared = ir.const(np.ones(4, "float32"))
    mod = ir.IRModule({"main": ir.Function([x], ir.Tuple([body, shared, shared]))})
    buffers: list = []
    payload = pickle.dumps(mod, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 4  # the shared constant's array is sent once
    assert len(payload) < 4096
    copy = pickle.loads(payload, buffers=[bytearray(b.raw()) for b in buffers])  # writable buffers
    data = copy["main"].body.fields[0].args[1].data
    assert not data.flags.writeable
    ir.assert_structural_equal(mod, copy)
    payload2, buffers2 = to_wire(mod)
    assert len(buffers2) == 4
    ir.assert_structural_equal(mod, from_wire(payload2, buffers2))
    assert wire_size(mod) == len(payload2) + sum(b.raw().nbytes for b in buffers2)
    assert wire_size(mod) > 3 * 256 * 256 * 4


@pytest.mark.parametrize("protocol", [4, 5])
def test_one_megabyte_constant_pickles_to_about_one_megabyte(protocol):
    big = np.random.default_rng(0).standard_normal(262_144).astype("float32")  # 1 MiB
    x = ir.var("x", (262_144,))
    mod = ir.IRModule({"main": ir.Function([x], op.add(x, ir.const(big)))})
    data = pickle.dumps(mod, protocol=protocol)
    assert big.nbytes <= len(data) < 1.1 * big.nbytes
    np.testing.assert_array_equal(pickle.loads(data)["main"].body.args[1].data, big)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "bool"])
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 0, 2), (2, 3)])
def test_constants_of_every_dtype_and_shape(dtype, shape):
    array = (np.arange(int(np.prod(shape))) % 3).astype(dtype).reshape(shape)
    for protocol in (4, 5):
        copy = round_trip(ir.const(array), protocol)
        assert copy.data.dtype == array.dtype and copy.data.shape == shape
        assert not copy.data.flags.writeable
        np.testing.assert_array_equal(copy.data, array)


def test_unknown_op_on_the_receiving_side_names_it():
    name = "test_serialize.vanishing"
    vanishing = register_op(
        name, num_inputs=1, type_rel=lambda types, attrs: types[0], impl=lambda args, attrs: args[0],
        pattern=OpPattern.ELEMWISE,
    )
    data = pickle.dumps(ir.Call(vanishing, [ir.var("x", (2,))]))
    from passinfra.ir.op import registry

    del registry._REGISTRY[name]  # as on a worker that never registered it
    with pytest.raises(OpNotFoundError, match=name):
        pickle.loads(data)


def test_malformed_and_foreign_tables_are_reported():
    reducer, (tables, root) = sample_function().__reduce_ex__(5)
    version, rows, types, attrs, buffers = tables
    with pytest.raises(IRError, match="version 99"):
        reducer((99, rows, types, attrs, buffers), root)
    with pytest.raises(IRError, match="malformed IR wire table at row 0"):
        reducer((version, [("NoSuchKind", -1)], types, attrs, buffers), 0)


class Marker(ir.Expr):
    """A node kind from a later issue, registering itself with both tables."""

    __slots__ = ("label", "value")

    def __init__(self, label: str, value: ir.Expr) -> None:
        super().__init__()
        object.__setattr__(self, "label", label)
        object.__setattr__(self, "value", value)


register_wire_kind(Marker, WireKind(
    "test_serialize.Marker",
    lambda e: (e.value,),
    lambda e, enc: (e.label, enc.ref(e.value)),
    lambda p, d: Marker(p[0], d.node(p[1])),
))
register_structural_rule(Marker, StructuralRule(
    b"test_serialize.Marker", ("label",), lambda e: (e.label,), lambda e: (), lambda e: (e.value,),
    lambda e, i: "value",
))


def test_registered_node_kinds_pickle_and_compare():
    x = ir.var("x", (2,))
    marked = ir.Tuple([Marker("m", op.exp(x)), x])
    copy = round_trip(marked)
    assert isinstance(copy.fields[0], Marker) and copy.fields[0].label == "m"
    assert copy.fields[0].value.args[0] is copy.fields[1]
    assert ir.structural_equal(marked, copy, map_free_vars=True)
    assert ir.structural_hash(marked) == ir.structural_hash(copy)
    assert not ir.structural_equal(marked, ir.Tuple([Marker("n", op.exp(x)), x]))
    with pytest.raises(IRError, match="no wire kind registered"):
        pickle.dumps(Unregistered())


class Unregistered(ir.Expr):
    __slots__ = ()


@pytest.mark.usefixtures("default_recursion_limit")
@pytest.mark.parametrize("kind", ["add", "let"])
def test_hundred_thousand_deep_programs_round_trip(kind):
    mod = make_chain(100_000, kind)
    assert sys.getrecursionlimit() == 1000
    payload, buffers = to_wire(mod)
    copy = from_wire(payload, buffers)
    ir.assert_structural_equal(mod, copy)
    x = copy["main"].params[0]
    innermost = copy["main"].body
    while not isinstance(innermost, ir.Var):
        innermost = innermost.args[0] if kind == "add" else innermost.body
    if kind == "add":
        assert innermost is x

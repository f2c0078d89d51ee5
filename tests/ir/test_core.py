"""Types, attributes, expression nodes and IRModule: construction, immutability, identity."""

import numpy as np
import pytest

from passinfra import ir
from passinfra.errors import IRError
from passinfra.ir.attrs import Attrs


def test_tensor_type_is_a_value():
    a = ir.TensorType((1, 3), "float32")
    assert a == ir.TensorType([1, 3], np.float32)
    assert hash(a) == hash(ir.TensorType((1, 3), "float32"))
    assert a != ir.TensorType((1, 3), "float64")
    assert a.ndim == 2 and a.size == 3
    with pytest.raises(AttributeError, match="immutable"):
        a.shape = (2,)


@pytest.mark.parametrize("bad", ["float8_e4m3fn", "complex64", "int4"])
def test_unsupported_dtype_is_named(bad):
    with pytest.raises(IRError, match=bad):
        ir.TensorType((1,), bad)


def test_tensor_type_rejects_symbolic_and_negative_dims():
    with pytest.raises(IRError, match="ints"):
        ir.TensorType(("n", 3))
    with pytest.raises(IRError, match="non-negative"):
        ir.TensorType((-1, 3))


def test_tuple_and_func_types():
    t = ir.TensorType((2,), "int32")
    tup = ir.TupleType([t, t])
    fn = ir.FuncType([t], tup)
    assert fn == ir.FuncType((t,), ir.TupleType((t, t)))
    assert fn.arg_types == (t,) and fn.ret_type is tup
    with pytest.raises(IRError):
        ir.TupleType([1])


def test_attrs_are_frozen_and_hashable():
    attrs = Attrs({"strides": [1, 2], "dtype": "float32", "scale": np.float32(0.5)})
    assert attrs["strides"] == (1, 2)
    assert type(attrs["scale"]) is float
    assert attrs == {"dtype": "float32", "strides": (1, 2), "scale": 0.5}
    assert hash(attrs) == hash(Attrs({"scale": 0.5, "dtype": "float32", "strides": (1, 2)}))
    with pytest.raises(TypeError):
        attrs["strides"] = (3, 3)
    # an int and a float attribute are different values even though 1 == 1.0 in Python
    assert Attrs({"a": 1}) != Attrs({"a": 1.0})
    with pytest.raises(IRError, match="not allowed"):
        Attrs({"f": object()})


def test_with_item_is_the_attrs_built_whole():
    """with_item freezes and hashes only the new value; the result equals, hashes and
    knows its symbolic dimensions as the same mapping built at once."""
    from passinfra.ir.dims import DimVar

    base = Attrs({"numbers": list(range(100)), "name": "k", "size": DimVar("n", 1, 8) * 2})
    assert base.has_dims
    added = base.with_item("works", [1, 2]).with_item("name", "j")
    whole = Attrs({"numbers": tuple(range(100)), "name": "j", "size": DimVar("n", 1, 8) * 2, "works": (1, 2)})
    assert added == whole and hash(added) == hash(whole) and added["works"] == (1, 2)
    assert list(added) == ["numbers", "name", "size", "works"]  # insertion order kept
    replaced = added.with_item("size", 4)
    assert not replaced.has_dims and replaced["size"] == 4 and added.has_dims
    assert replaced != added and base["name"] == "k"
    with pytest.raises(IRError, match="not allowed"):
        base.with_item("f", object())


def test_nodes_are_immutable():
    x = ir.var("x", (2,))
    call = ir.Call(x, [x])
    for node, field in ((x, "name_hint"), (call, "args")):
        with pytest.raises(AttributeError, match="immutable"):
            setattr(node, field, None)


def test_var_compares_by_identity_global_var_by_name():
    a, b = ir.Var("x"), ir.Var("x")
    assert a != b and a == a
    assert len({a, b}) == 2
    assert ir.GlobalVar("f") == ir.GlobalVar("f")
    assert len({ir.GlobalVar("f"), ir.GlobalVar("f"), ir.GlobalVar("g")}) == 2


def test_var_helper_annotation():
    assert ir.var("x").type_annotation is None
    assert ir.var("x", (1, 2), "int64").type_annotation == ir.TensorType((1, 2), "int64")
    assert ir.var("x", 4).type_annotation == ir.TensorType((4,), "float32")
    t = ir.TupleType([ir.TensorType((), "bool")])
    assert ir.var("t", t).type_annotation is t


def test_constant_is_read_only_and_copies_writeable_input():
    source = np.arange(6, dtype="float32").reshape(2, 3)
    c = ir.Constant(source)
    source[0, 0] = 100.0
    assert c.data[0, 0] == 0.0
    assert not c.data.flags.writeable
    with pytest.raises(ValueError):
        c.data[0, 0] = 1.0
    assert c.shape == (2, 3) and c.dtype == "float32"


def test_const_default_dtypes_follow_relay():
    assert ir.const(1.0).dtype == "float32"
    assert ir.const(1).dtype == "int32"
    assert ir.const(True).dtype == "bool"
    assert ir.const([1.5, 2.5]).dtype == "float32"
    assert ir.const(np.zeros(2, "float64")).dtype == "float64"
    assert ir.const(2, "int64").dtype == "int64"
    with pytest.raises(IRError, match="complex"):
        ir.const(np.zeros(2, "complex64"))


def test_function_attrs_read_only_and_with_attr():
    x = ir.var("x", (1,))
    f = ir.Function([x], x)
    g = f.with_attr("Primitive", 1)
    assert dict(f.attrs) == {} and g.attrs["Primitive"] == 1
    assert g.params == f.params and g.body is f.body
    with pytest.raises(TypeError):
        g.attrs["Primitive"] = 0


def test_constructors_check_their_fields():
    x = ir.var("x")
    with pytest.raises(IRError, match="Var"):
        ir.Let(ir.GlobalVar("f"), x, x)
    with pytest.raises(IRError, match="parameter 0"):
        ir.Function([ir.GlobalVar("f")], x)
    with pytest.raises(IRError, match="argument 1"):
        ir.Call(x, [x, 3])
    with pytest.raises(IRError, match="index"):
        ir.TupleGetItem(x, -1)


def test_constant_owning_freezes_a_handed_over_array_instead_of_copying_it():
    from passinfra.ir.expr import Constant

    fresh = np.arange(12, dtype="float32").reshape(3, 4)
    owned = Constant.owning(fresh)
    assert owned.data is fresh and not fresh.flags.writeable  # no copy; nobody writes it now
    kept = np.arange(4, dtype="float32")
    copied = Constant(kept)  # the plain constructor: the caller may still write to its array
    assert copied.data is not kept and kept.flags.writeable
    transposed = np.arange(6, dtype="float32").reshape(2, 3).T
    assert Constant.owning(transposed).data.flags.c_contiguous  # not C order: copied as before
    assert Constant.owning(np.arange(3, dtype=">i4")).data.dtype.isnative

"""``ir.parse(str(mod))`` gives back a module with constants (DESIGN.md: ``str(mod)`` and
``astext()`` round-trip through ``ir.parse``).

The design: small constants print inline as literals; larger ones (or ones no literal
reproduces bit for bit) print as ``meta[Constant][i]`` in the body, and ``str(mod)``, like
``astext()``, ends with the ``metadata { ... }`` section holding each of them as base64 of
its raw bytes, one line per constant. The body stays readable, the text grows by 4/3 of the
weights' bytes, and printing and parsing stay linear.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from passinfra import ir
from passinfra.errors import IRTypeError, ParseError
from passinfra.frontend import from_onnx, zoo
from passinfra.frontend.zoo import ir_models
from tests.strategies import GEN_SETTINGS, programs


def module_of(*constants: np.ndarray) -> ir.IRModule:
    """``main`` returning the constants (a tuple when there are several)."""
    fields = [ir.Constant(c) for c in constants]
    body = fields[0] if len(fields) == 1 else ir.Tuple(fields)
    return ir.IRModule({"main": ir.Function([], body)})


def assert_round_trip(mod: ir.IRModule) -> ir.IRModule:
    """str -> parse gives a structurally equal module that prints to the same text."""
    text = str(mod)
    again = ir.parse(text)
    ir.assert_structural_equal(again, mod)
    assert str(again) == text
    return again


def test_str_of_a_module_with_a_large_constant_parses_back():
    x = ir.var("x", (2, 16))
    weight = np.arange(16 * 4, dtype="float32").reshape(4, 16) / 7
    mod = ir.IRModule({"main": ir.Function([x], ir.op.nn.dense(x, ir.const(weight)))})
    again = assert_round_trip(mod)
    np.testing.assert_array_equal(again["main"].body.args[1].data, weight)


@pytest.mark.parametrize("builder", sorted(ir_models.MODELS))
def test_python_builder_models_round_trip(builder):
    assert_round_trip(ir_models.MODELS[builder]())


@pytest.mark.parametrize(
    "spec", ["zoo:mlp", "zoo:resnet?depth=8&width=4", "zoo:transformer?layers=1&hidden=16&heads=2&seq=4"]
)
def test_imported_onnx_models_round_trip(spec):
    assert_round_trip(from_onnx(zoo.zoo_spec(spec)))


@pytest.mark.parametrize(
    "array",
    [
        np.array([np.nan, -0.0, np.inf, -np.inf, 1e-45, 3.4028235e38, 0.1, -2.5, 7.0], "float32"),
        np.array([0x7FC00001] * 3, "uint32").view("float32"),  # NaN with a payload
        np.array([np.nan, 5e-324, -1e308, 1 / 3], "float64"),
        np.array([2**63 - 1, -(2**63), 0, -1] * 3, "int64"),
        np.arange(24, dtype="int32").reshape(2, 3, 4),
        np.array([True, False] * 6).reshape(3, 4),
        np.zeros((0, 3), "float32"),  # empty: no literal says its dtype
        np.array(2.5, "float64"),
        np.arange(12, dtype=">f4"),  # big-endian input: the IR holds it in native order
        np.arange(20, dtype="float64").reshape(4, 5)[:, ::2],  # not contiguous
    ],
    ids=["float32-edges", "nan-payload", "float64", "int64-edges", "int32-3d", "bool", "empty", "scalar",
         "big-endian", "strided"],
)
def test_constants_come_back_bit_for_bit(array):
    again = assert_round_trip(module_of(array))
    data = again["main"].body.data
    assert data.dtype.name == array.dtype.name and data.shape == array.shape
    assert data.tobytes() == np.ascontiguousarray(array, array.dtype.newbyteorder("=")).tobytes()


def test_one_constant_used_twice_is_one_entry_and_one_node_again():
    weight = ir.const(np.ones((3, 3), "float32"))
    x = ir.var("x", (3, 3))
    mod = ir.IRModule({"main": ir.Function([x], ir.op.add(ir.op.multiply(x, weight), weight))})
    text = str(mod)
    assert text.count("meta[Constant][0]") == 3 and "meta[Constant][1]" not in text
    body = assert_round_trip(mod)["main"].body
    assert body.args[0].args[1] is body.args[1]


def test_the_body_stays_readable_and_the_text_grows_with_the_bytes():
    """Weights print as references in the body and as one base64 line each at the end:
    the text is about 4/3 of the weights' bytes, not a literal per element."""
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((64, 64)).astype("float32") for _ in range(8)]
    x = ir.var("x", (1, 64))
    body = x
    for w in weights:
        body = ir.op.nn.relu(ir.op.nn.dense(body, ir.const(w)))
    mod = ir.IRModule({"main": ir.Function([x], body)})
    text = str(mod)
    program, _, section = text.partition("\nmetadata {\n")
    # the def line, a dense and a relu per layer (the last relu is the tail), the brace
    assert "meta[Constant][7]" in program and len(program.strip().splitlines()) == 2 * len(weights) + 2
    assert max(len(line) for line in program.splitlines()) < 120
    assert len(section.splitlines()) == len(weights) + 1  # one line per constant, then "}"
    payload = sum(w.nbytes for w in weights)
    assert len(text) < payload * 4 / 3 + 200 * len(weights) + len(program)


def test_shared_text_mentions_the_omitted_metadata_only_when_asked():
    mod = module_of(np.ones(16, "float32"))
    assert "metadata {" in str(mod) and str(mod) == mod.astext()
    brief = mod.astext(show_meta_data=False)
    assert "// metadata omitted: 1 constant(s)" in brief
    with pytest.raises(ParseError, match=r"meta\[Constant\]\[0\] is not defined"):
        ir.parse(brief)


@GEN_SETTINGS
@given(programs(max_nodes=30))
def test_random_programs_round_trip_through_str(mod):
    # the generator's constants include ones large enough for the metadata section
    assert_round_trip(mod)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["float32", "float64", "int32", "int64", "bool"]),
    st.lists(st.integers(0, 4), min_size=0, max_size=3),
    st.integers(0, 2**32 - 1),
)
def test_random_constants_of_every_dtype_and_shape_round_trip(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
    array = raw.view(dtype).reshape(shape) if dtype != "bool" else (raw.reshape(shape) & 1).astype(bool)
    again = assert_round_trip(module_of(array, np.zeros(9, "float32")))
    assert again["main"].body.fields[0].data.tobytes() == array.tobytes()


# ------------------------------------ literals and attributes the parser refuses (fuzzing)


@pytest.mark.parametrize("text, problem", [
    ("1e39f", "1e39 is out of range for float32"),
    ("3.4028236e38f", "out of range for float32"),
    ("-1e999f64", "out of range for float64"),
    ("99999999999999999999i64", "out of range for int64"),
    ("9" * 5000 + "i32", "out of range for int32"),
])
def test_literals_too_big_for_their_dtype_are_parse_errors(text, problem):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning on the way
        with pytest.raises(ParseError, match=problem):
            ir.parse_expr(text)


def test_the_largest_literals_and_infinities_still_parse():
    assert ir.parse_expr("3.4028235e38f").data == np.float32(3.4028235e38)
    assert np.isinf(ir.parse_expr("-inff").data) and np.isinf(ir.parse_expr("inff64").data)
    assert ir.parse_expr("-9223372036854775808i64").data == -(2**63)


@pytest.mark.parametrize("dim, shown", [(str(2**63), str(2**63)), ("9" * 5000, "9" * 24 + "...")])
def test_integers_beyond_int64_are_parse_errors(dim, shown):
    with pytest.raises(ParseError, match=re.escape(f"integer {shown} is out of the int64 range")):
        ir.parse(f"def @main(%x: Tensor[({dim}, 3), float32]) {{\n  %x\n}}\n")


@pytest.mark.parametrize("name", [r'"a\q"', '"a\tb"', r'"\ud800"'])
def test_invalid_quoted_names_are_parse_errors(name):
    with pytest.raises(ParseError, match="invalid string"):
        ir.parse(f"def @main(%{name}: Tensor[(3), float32]) {{\n  %{name}\n}}\n")


X = "def @main(%x: Tensor[(1, 3, 4, 4), float32]) {{\n  {}\n}}\n"


@pytest.mark.parametrize("call, problem", [
    ("nn.max_pool2d(%x, pool_size=(2, 2), strides=(1.5, 1))",
     "strides of op nn.max_pool2d must be a tuple of ints, got (1.5, 1)"),
    ("nn.softmax(%x, axis=0.5)", "axis of op nn.softmax must be an int, got 0.5"),
    ("sum(%x, axis=(1,), keepdims=1)", "keepdims of op sum must be a bool, got 1"),
    ("nn.dropout(%x, rate=None)", "rate of op nn.dropout must be a float, got None"),
])
def test_op_attributes_of_the_wrong_kind_are_parse_errors(call, problem):
    # a builder converts its arguments; text reaches the op as written
    with pytest.raises(ParseError, match=re.escape(problem)):
        ir.parse(X.format(call))


def test_an_int_where_the_op_takes_a_float_is_that_float():
    call = ir.parse(X.format("nn.dropout(%x, rate=0)"))["main"].body
    assert call.attrs["rate"] == 0.0 and isinstance(call.attrs["rate"], float)


@pytest.mark.parametrize("call, problem", [
    ("reshape(%x, newshape=(2, 1e308))", "newshape must hold ints"),  # no default: the relation checks it
    ("expand_dims(%x, axis=0, num_newaxis=-1)", "num_newaxis must be non-negative, got -1"),
])
def test_attributes_the_type_relation_rejects(call, problem):
    mod = ir.parse(X.format(call))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(IRTypeError, match=re.escape(problem)):
            ir.infer_type(mod)

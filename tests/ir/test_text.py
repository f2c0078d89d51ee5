"""The text format: printer and parser round trips, sharing, scoping, names, constants,
attributes, errors with positions, and 100,000-node programs."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from passinfra import ir
from passinfra.errors import ParseError
from passinfra.ir import (
    Call,
    Constant,
    Function,
    FuncType,
    GlobalVar,
    If,
    IRModule,
    Let,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Var,
)
from passinfra.ir.functor import iter_post_order
from passinfra.ir.op.registry import Op, OpPattern, register_op
from passinfra.ir.parser import parse, parse_expr, parse_type
from passinfra.ir.printer import astext, type_to_text


def _first_type(arg_types, attrs):
    return arg_types[0]


def _private_op(name: str, num_inputs: int) -> Op:
    try:
        return Op.get(name)
    except KeyError:
        return register_op(
            name,
            num_inputs=num_inputs,
            type_rel=_first_type,
            impl=lambda args, attrs: args[0],
            pattern=OpPattern.BROADCAST,
        )


BINARY = _private_op("test_text.binary", 2)
UNARY = _private_op("test_text.unary", 1)
ANY = _private_op("test_text.variadic", -1)

F32 = TensorType((1, 3), "float32")
BOOL = TensorType((), "bool")


def binary(a, b, **attrs):
    return Call(BINARY, [a, b], attrs or None)


def unary(a):
    return Call(UNARY, [a])


def roundtrip(mod: IRModule) -> IRModule:
    """Print, parse, print again: the texts agree, and the modules are structurally equal."""
    text = mod.astext()
    again = parse(text)
    assert again.astext() == text
    assert ir.structural_equal(mod, again)
    return again


def count_nodes(expr) -> int:
    return sum(1 for _ in iter_post_order(expr))


# ------------------------------------------------------------------------------ types


@pytest.mark.parametrize(
    "ty, text",
    [
        (TensorType((2, 3), "float32"), "Tensor[(2, 3), float32]"),
        (TensorType((), "int64"), "Tensor[(), int64]"),
        (TensorType((5,), "bool"), "Tensor[(5), bool]"),
        (TupleType([]), "()"),
        (TupleType([TensorType((1,), "int32")]), "(Tensor[(1), int32],)"),
        (
            TupleType([F32, TupleType([BOOL, BOOL])]),
            "(Tensor[(1, 3), float32], (Tensor[(), bool], Tensor[(), bool]))",
        ),
        (
            FuncType([F32, BOOL], F32),
            "fn (Tensor[(1, 3), float32], Tensor[(), bool]) -> Tensor[(1, 3), float32]",
        ),
    ],
)
def test_type_text_round_trip(ty, text):
    assert type_to_text(ty) == text
    assert astext(ty) == text
    assert str(ty) == text
    assert parse_type(text) == ty


def test_parse_type_accepts_bare_dtype_and_trailing_comma():
    assert parse_type("float64") == TensorType((), "float64")
    assert parse_type("Tensor[(4,), int32]") == TensorType((4,), "int32")


def test_parse_type_rejects_unknown_dtype_with_position():
    with pytest.raises(ParseError, match="unknown dtype 'float8'") as info:
        parse_type("Tensor[(2), float8]")
    assert (info.value.line, info.value.column) == (1, 13)


# ------------------------------------------------------------------- every node kind


def test_module_with_every_node_kind_round_trips():
    x, y = ir.var("x", (1, 3)), ir.var("y", (1, 3))
    cond = Var("c", BOOL)
    first = binary(x, y, axis=1)
    pair = Tuple([first, unary(y)])
    picked = TupleGetItem(pair, 1)
    inner_param = Var("a", F32)
    inner = Function([inner_param], unary(inner_param), F32)
    bound = Var("t", F32)
    body = Let(
        bound,
        Call(inner, [picked]),  # a call of a Function literal
        If(cond, binary(bound, ir.const(2.0)), Call(GlobalVar("helper"), [bound])),
    )
    main = Function([x, y, cond], body, F32)
    f = Var("f", FuncType([F32], F32))
    helper = Function([Var("p", F32)], ir.const(np.zeros((1, 3), "float32")), F32)
    higher = Function([f, x], Call(f, [x]))  # a call of a Var
    mod = IRModule({"main": main, "helper": helper, "higher": higher})

    text = mod.astext()
    assert "def @main(%x: Tensor[(1, 3), float32], %y: Tensor[(1, 3), float32], %c: Tensor[(), bool])" in text
    assert "test_text.binary(%x, %y, axis=1)" in text
    assert "fn (%a: Tensor[(1, 3), float32]) -> Tensor[(1, 3), float32] {" in text
    assert "let %t: Tensor[(1, 3), float32] = " in text
    assert "if (%c) {" in text and "} else {" in text
    assert "@helper(%t)" in text
    assert "%f(%x)" in text
    assert re.search(r"%\d+\.1;", text)  # the TupleGetItem

    again = roundtrip(mod)
    assert [gv.name_hint for gv in again.functions] == ["main", "helper", "higher"]
    main2 = again["main"]
    assert isinstance(main2.body, Let) and isinstance(main2.body.body, If)
    call_inner = main2.body.value
    assert isinstance(call_inner.op, Function)
    assert isinstance(call_inner.args[0], TupleGetItem) and call_inner.args[0].index == 1
    assert main2.body.body.false_branch.op == GlobalVar("helper")
    assert main2.ret_type == F32
    assert main2.params[2].type_annotation == BOOL


def test_expression_round_trip_with_free_vars():
    x, w = Var("x", F32), Var("w")
    expr = binary(unary(x), w)
    text = astext(expr)
    assert text.startswith("free_var %x: Tensor[(1, 3), float32];\nfree_var %w;\n")
    parsed = parse_expr(text)
    assert parsed.astext() == text
    assert ir.structural_equal(expr, parsed, map_free_vars=True)
    # the free var is one fresh Var everywhere it appears
    assert parsed.op is BINARY and parsed.args[0].args[0].name_hint == "x"
    assert parsed.args[0].args[0].type_annotation == F32


def test_parse_expr_creates_one_fresh_var_per_free_name():
    expr = parse_expr("%0 = test_text.binary(%a, %b);\ntest_text.binary(%0, %a)")
    a = expr.args[1]
    assert isinstance(a, Var) and a.name_hint == "a"
    assert expr.args[0].args[0] is a
    assert expr.args[0].args[1] is not a


def test_atoms_print_alone():
    assert astext(BINARY).strip() == "test_text.binary"
    assert parse_expr(astext(BINARY)) is BINARY
    assert astext(GlobalVar("main")).strip() == "@main"
    assert parse_expr("@main") == GlobalVar("main")


def test_str_of_expression_and_module_uses_the_printer():
    x = Var("x", F32)
    func = Function([x], unary(x))
    assert str(func) == astext(func, show_meta_data=False)
    mod = IRModule({"main": func})
    assert str(mod) == mod.astext(show_meta_data=False)
    assert str(mod).startswith("def @main(%x: Tensor[(1, 3), float32]) {")


def test_printing_is_deterministic():
    x = Var("x", F32)
    body = Let(Var("y"), unary(x), binary(Var("x"), x))
    mod = IRModule({"main": Function([x], body)})
    texts = {mod.astext() for _ in range(3)}
    assert len(texts) == 1
    assert "0x" not in texts.pop()  # no object addresses


# ------------------------------------------------------------------------------ sharing


def test_shared_node_is_printed_once_and_shared_after_parsing():
    x = Var("x", F32)
    shared = unary(x)
    body = binary(binary(shared, shared), shared)
    mod = IRModule({"main": Function([x], body)})
    text = mod.astext()
    assert text.count("test_text.unary(") == 1
    body2 = roundtrip(mod)["main"].body
    inner = body2.args[0]
    assert inner.args[0] is inner.args[1] is body2.args[1]
    assert count_nodes(body2) == count_nodes(body)


def test_single_use_tail_and_let_value_print_in_place():
    x = Var("x", F32)
    y = Var("y")
    mod = IRModule({"main": Function([x], Let(y, unary(x), binary(y, y)))})
    assert mod.astext() == (
        "def @main(%x: Tensor[(1, 3), float32]) {\n"
        "  let %y = test_text.unary(%x);\n"
        "  test_text.binary(%y, %y)\n"
        "}\n"
    )
    roundtrip(mod)


def test_node_used_in_both_branches_is_defined_before_the_if():
    x, c = Var("x", F32), Var("c", BOOL)
    shared = unary(x)
    only_true = unary(shared)
    mod = IRModule({"main": Function([x, c], If(c, binary(only_true, shared), shared))})
    text = mod.astext()
    lines = text.splitlines()
    shared_line = next(i for i, line in enumerate(lines) if "test_text.unary(%x)" in line)
    if_line = next(i for i, line in enumerate(lines) if line.strip().startswith("if ("))
    assert shared_line < if_line and lines[shared_line].startswith("  %")
    # used only in the true branch: defined inside it (deeper indentation)
    inner_line = next(line for line in lines if "test_text.unary(%" in line and "(%x)" not in line)
    assert inner_line.startswith("    %")
    body = roundtrip(mod)["main"].body
    assert body.true_branch.args[1] is body.false_branch


def test_node_using_a_function_parameter_stays_inside_that_function():
    x = Var("x", F32)
    a = Var("a", F32)
    uses_param = unary(a)
    free_of_param = unary(x)
    inner = Function([a], binary(binary(uses_param, uses_param), free_of_param))
    mod = IRModule({"main": Function([x], Call(inner, [free_of_param]))})
    text = mod.astext()
    lines = text.splitlines()
    fn_line = next(i for i, line in enumerate(lines) if "fn (" in line)
    param_use = next(i for i, line in enumerate(lines) if "test_text.unary(%a)" in line)
    outer_use = next(i for i, line in enumerate(lines) if "test_text.unary(%x)" in line)
    assert outer_use < fn_line < param_use  # x's node is shared outside, a's stays inside
    body = roundtrip(mod)["main"].body
    assert body.op.body.args[1] is body.args[0]


def test_temporary_of_a_branch_is_not_visible_outside():
    text = (
        "def @main(%c: Tensor[(), bool], %x) {\n"
        "  %0 = if (%c) {\n"
        "    %1 = test_text.unary(%x);\n"
        "    %1\n"
        "  } else {\n"
        "    %x\n"
        "  };\n"
        "  test_text.binary(%0, %1)\n"
        "}\n"
    )
    with pytest.raises(ParseError, match="undefined temporary %1") as info:
        parse(text)
    assert (info.value.line, info.value.column) == (8, 24)


def test_shared_let_and_let_as_value_print_as_blocks():
    x = Var("x", F32)
    inner_var = Var("v")
    block = Let(inner_var, unary(x), binary(inner_var, x))  # a Let used twice
    outer = Var("o")
    value_block = Let(Var("w"), unary(x), unary(x))  # a Let as a let value
    body = Let(outer, value_block, binary(block, binary(block, outer)))
    mod = IRModule({"main": Function([x], body)})
    text = mod.astext()
    assert "let %o = {" in text
    assert re.search(r"%\d+ = \{", text)
    body2 = roundtrip(mod)["main"].body
    assert isinstance(body2.value, Let)
    uses = body2.body.args
    assert uses[0] is uses[1].args[0] and isinstance(uses[0], Let)


def test_if_used_as_operand_and_nested_function_in_let():
    x, c = Var("x", F32), Var("c", BOOL)
    choice = If(c, unary(x), x)
    f = Var("f")
    p = Var("p", F32)
    body = Let(f, Function([p], unary(p), F32, {"Inline": True}), Call(f, [binary(choice, choice)]))
    mod = IRModule({"main": Function([x, c], body)})
    text = mod.astext()
    assert re.search(r"%\d+ = if \(%c\) \{", text)
    assert "let %f = fn (%p: Tensor[(1, 3), float32], Inline=True) -> Tensor[(1, 3), float32] {" in text
    fn = roundtrip(mod)["main"].body.value
    assert fn.attrs["Inline"] is True


def test_tuple_shapes_print_unambiguously():
    x = Var("x", F32)
    mod = IRModule({"main": Function([x], Tuple([Tuple([]), Tuple([x]), Tuple([x, x])]))})
    text = mod.astext()
    assert "()" in text and "(%x,)" in text and "(%x, %x)" in text
    body = roundtrip(mod)["main"].body
    assert [len(f.fields) for f in body.fields] == [0, 1, 2]


def _random_program(data, depth: int, pool: list) -> object:
    """A random well-formed expression over ``pool`` (vars and nodes in scope) with
    sharing, lets, ifs and closures, so placement of temporaries across scopes is tested."""
    pool = list(pool)
    bindings = []
    for _ in range(data.draw(st.integers(1, 6))):
        pick = lambda: data.draw(st.sampled_from(pool))  # noqa: E731
        kind = data.draw(st.sampled_from(["unary", "binary", "tuple", "let", "if", "fn"]))
        if kind == "unary":
            pool.append(unary(pick()))
        elif kind == "binary":
            pool.append(binary(pick(), pick()))
        elif kind == "tuple":
            pool.append(TupleGetItem(Tuple([pick(), pick()]), data.draw(st.integers(0, 1))))
        elif kind == "let":
            var = Var("v")
            bindings.append((var, pick()))
            pool.append(var)
        elif kind == "if" and depth > 0:
            cond = Var("c", BOOL)
            bindings.append((cond, Constant(np.array(True))))
            branches = [_random_program(data, depth - 1, pool) for _ in range(2)]
            pool.append(If(cond, *branches))
        elif kind == "fn" and depth > 0:
            param = Var("p")
            func = Function([param], _random_program(data, depth - 1, [*pool, param]))
            pool.append(Call(func, [pick()]))
    body = binary(pool[-1], data.draw(st.sampled_from(pool)))
    for var, value in reversed(bindings):
        body = Let(var, value, body)
    return body


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_random_programs_round_trip_with_their_sharing(data):
    x = Var("x", F32)
    expr = _random_program(data, 2, [x])
    text = astext(expr)
    parsed = parse_expr(text)
    assert astext(parsed) == text
    assert count_nodes(parsed) == count_nodes(expr)
    assert ir.structural_equal(expr, parsed, map_free_vars=True)
    mod = IRModule({"main": Function([x], expr)})
    roundtrip(mod)


# -------------------------------------------------------------------------------- names


def test_vars_with_one_name_get_distinct_printed_names():
    x1, x2, x3 = Var("x", F32), Var("x"), Var("x_1")
    body = Let(x2, unary(x1), Let(x3, unary(x2), binary(x3, x1)))
    mod = IRModule({"main": Function([x1], body)})
    text = mod.astext()
    assert "def @main(%x: Tensor[(1, 3), float32])" in text
    assert "let %x_1 = test_text.unary(%x);" in text
    assert "let %x_1_1 = test_text.unary(%x_1);" in text
    assert "test_text.binary(%x_1_1, %x)" in text
    body2 = roundtrip(mod)["main"].body
    assert len({id(v) for v in ir.all_vars(body2)}) == 3


def test_names_are_per_function_and_temporaries_never_clash_with_vars():
    zero = Var("0", F32)  # a var whose name looks like a temporary
    mod = IRModule(
        {
            "f": Function([zero], binary(unary(zero), zero)),
            "g": Function([Var("x")], Var("x")),  # a free x: an ill-formed but printable body
        }
    )
    text = mod.astext()
    assert '%"0"' in text and "%0 = test_text.unary(%\"0\");" in text
    assert "def @g(%x) {\n  %x_1\n}" in text
    f = parse(mod.astext().split("\n\ndef @g")[0])["f"]
    assert f.body.args[1] is f.params[0] and f.params[0].name_hint == "0"


def test_names_with_special_characters_are_quoted():
    odd = Var('conv1.0.weight "q"', F32)
    dotted = Var("layer.bias", F32)
    mod = IRModule({"my func": Function([odd, dotted], binary(odd, dotted))})
    text = mod.astext()
    assert 'def @"my func"(%"conv1.0.weight \\"q\\""' in text
    assert "%layer.bias" in text
    again = roundtrip(mod)
    assert again["my func"].params[0].name_hint == 'conv1.0.weight "q"'


# ----------------------------------------------------------------------------- constants


@pytest.mark.parametrize(
    "value, text",
    [
        (np.float32(1.5), "1.5f"),
        (np.float32(-0.0), "-0.0f"),
        (np.float32(0.1), "0.1f"),
        (np.float64(0.1), "0.1f64"),
        (np.int32(-7), "-7i32"),
        (np.int64(2**40), "1099511627776i64"),
        (np.bool_(True), "true"),
        (np.float32("nan"), "nanf"),
        (np.float32("-inf"), "-inff"),
        (np.float64("inf"), "inff64"),
        (np.arange(4, dtype="int32").reshape(2, 2), "[[0i32, 1i32], [2i32, 3i32]]"),
        (np.array([True, False]), "[true, false]"),
        (np.ones((1, 1, 2), "float32"), "[[[1.0f, 1.0f]]]"),
    ],
)
def test_small_constants_print_inline_and_round_trip_exactly(value, text):
    const = Constant(np.asarray(value))
    printed = astext(const).strip()
    assert printed == text
    parsed = parse_expr(printed)
    assert parsed.data.dtype == const.data.dtype and parsed.shape == const.shape
    assert parsed.data.tobytes() == const.data.tobytes()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(width=32, allow_nan=True), min_size=1, max_size=8),
    st.sampled_from(["float32", "float64"]),
)
def test_float_constants_round_trip_bit_exactly(values, dtype):
    data = np.array(values, dtype=dtype)
    text = astext(Constant(data))
    parsed = parse_expr(text)
    assert parsed.data.tobytes() == data.tobytes()


def test_nan_with_payload_goes_to_metadata_to_stay_exact():
    odd_nan = np.array([0x7FC00001], dtype="uint32").view("float32")
    text = astext(Constant(odd_nan))
    assert "meta[Constant][0]" in text
    assert parse_expr(text).data.tobytes() == odd_nan.tobytes()


def test_large_constants_go_to_the_metadata_section():
    x = Var("x", TensorType((4, 4), "float32"))
    weight = Constant(np.arange(16, dtype="float32").reshape(4, 4))
    other = Constant(np.arange(9, dtype="int64"))
    body = binary(binary(x, weight), Call(ANY, [weight, other, ir.const(1.0)]))
    mod = IRModule({"main": Function([x], body)})
    text = mod.astext()
    assert text.count("meta[Constant][0]") == 3  # two uses + the section entry
    assert "meta[Constant][1]: Tensor[(9), int64] = " in text
    assert text.rstrip().endswith("}")
    again = roundtrip(mod)
    body2 = again["main"].body
    assert body2.args[0].args[1] is body2.args[1].args[0]  # one Constant per meta entry
    np.testing.assert_array_equal(body2.args[1].args[1].data, np.arange(9))
    assert body2.args[1].args[1].data.dtype == np.int64


def test_without_metadata_the_text_says_so_and_parsing_names_the_missing_entry():
    x = Var("x", TensorType((16,), "float32"))
    mod = IRModule({"main": Function([x], binary(x, Constant(np.ones(16, "float32"))))})
    text = mod.astext(show_meta_data=False)
    assert "metadata {" not in text
    assert "// metadata omitted: 1 constant(s)" in text
    with pytest.raises(ParseError, match=r"meta\[Constant\]\[0\] is not defined") as info:
        parse(text)
    assert (info.value.line, info.value.column) == (2, 24)


def test_metadata_entry_of_the_wrong_size_is_rejected():
    text = (
        "def @main() {\n  meta[Constant][0]\n}\n"
        'metadata {\n  meta[Constant][0]: Tensor[(2), float32] = "AAAA";\n}\n'
    )
    with pytest.raises(ParseError, match="holds 3 bytes") as info:
        parse(text)
    assert info.value.line == 5


# -------------------------------------------------------------------------------- attrs


def test_attribute_values_keep_their_python_types():
    attrs = {
        "i": 1,
        "neg": -3,
        "f": 1.0,
        "tiny": 1e-5,
        "inf": float("-inf"),
        "yes": True,
        "s": 'say "hi"\n\tüñí',
        "none": None,
        "t": (1, (2.5, "a"), (), (False,)),
        "ty": TupleType([F32, BOOL]),
        "weird key": 0,
    }
    x = Var("x", F32)
    mod = IRModule({"main": Function([x], Call(ANY, [x], attrs))})
    text = mod.astext()
    assert 'i=1, neg=-3, f=1.0, tiny=1e-05, inf=-inf, yes=True, s="say \\"hi\\"\\n\\t' in text
    assert 'none=None, t=(1, (2.5, "a"), (), (False,)), ' in text
    assert "ty=type((Tensor[(1, 3), float32], Tensor[(), bool]))" in text
    assert '"weird key"=0' in text
    parsed = roundtrip(mod)["main"].body.attrs
    assert list(parsed) == list(attrs)
    for key, value in attrs.items():
        assert type(parsed[key]) is type(value), key
        assert parsed[key] == value, key


def test_function_and_module_attrs_round_trip():
    x = Var("x", F32)
    func = Function([x], x).with_attr("Primitive", 1).with_attr("Compiler", "c").with_attr("scale", 2.0)
    mod = IRModule({"main": func}, attrs={"executor": "graph"})
    text = mod.astext()
    assert text.startswith('module_attrs(executor="graph")\n')
    assert 'def @main(%x: Tensor[(1, 3), float32], Primitive=1, Compiler="c", scale=2.0) {' in text
    again = roundtrip(mod)
    assert again.attrs["executor"] == "graph"
    assert dict(again["main"].attrs) == {"Primitive": 1, "Compiler": "c", "scale": 2.0}
    assert type(again["main"].attrs["scale"]) is float


# ------------------------------------------------------------------------ hand-written text


def test_hand_written_text_with_comments_and_nested_operands():
    text = """
    // a comment
    def @main(%x: Tensor[(1, 3), float32]) -> Tensor[(1, 3), float32] {
      test_text.binary(test_text.unary(%x), %x)  // nested operands are accepted
    }
    def @second() { @main([[1f, 2f, 3f]]) }
    """
    mod = parse(text)
    body = mod["main"].body
    assert body.op is BINARY and body.args[0].op is UNARY and body.args[0].args[0] is mod["main"].params[0]
    arg = mod["second"].body.args[0]
    assert arg.shape == (1, 3) and arg.dtype == "float32"


def test_global_vars_may_be_used_before_their_definition():
    mod = parse("def @a() { @b() }\ndef @b() { 1f }\n")
    assert mod["a"].body.op == GlobalVar("b")


# ------------------------------------------------------------------------- parse errors


@pytest.mark.parametrize(
    "text, message, line, column",
    [
        ("def @main() {\n  nosuch.op(1f)\n}", "unknown op 'nosuch.op'", 2, 3),
        ("def @main(%x) {\n  test_text.unary(%y)\n}", "undefined variable %y", 2, 19),
        ("def @main() {\n  %0 = test_text.unary(1f)\n  %0\n}", "expected ';'", 3, 3),
        ("def @main() {\n  2.5q\n}", "unknown constant suffix 'q'", 2, 3),
        ("def @main() {\n  7\n}", "needs a dtype suffix", 2, 3),
        ('def @main() {\n  test_text.unary(1f, s="open)\n}', "unterminated string", 2, 25),
        ("def @main() { 1f }\ndef @main() { 2f }", "function @main is defined twice", 2, 5),
        ("def @main() {\n  test_text.unary(1f, axis=1, %x)\n}", "positional argument cannot follow", 2, 31),
        ("def @main() {\n  [[1f, 2f], [3f]]\n}", "ragged tensor literal", 2, 17),
        ("def @main() {\n  [1f, 2i32]\n}", "mixes dtypes", 2, 3),
        ("def @main() {\n  99999999999i32\n}", "out of range for int32", 2, 3),
        ("def @main() {\n  $\n}", "unexpected character '$'", 2, 3),
        ("main() { 1f }", "expected 'def'", 1, 1),
        ("def @main() {\n  1f\n", "expected '}'", 3, 1),
    ],
)
def test_parse_errors_carry_line_and_column(text, message, line, column):
    with pytest.raises(ParseError, match=re.escape(message)) as info:
        parse(text)
    assert (info.value.line, info.value.column) == (line, column)
    assert f"line {line}, column {column}" in str(info.value)


def test_parse_error_is_a_value_error():
    with pytest.raises(ValueError):
        parse("def")


# -------------------------------------------------------------------------- big programs


def test_long_call_chain_prints_and_parses_at_default_recursion_limit():
    x = Var("x", F32)
    expr = x
    for _ in range(100_000):
        expr = Call(BINARY, [expr, x])
    mod = IRModule({"main": Function([x], expr)})
    text = mod.astext()
    assert text.count("\n") == 100_002
    again = parse(text)
    body = again["main"].body
    assert body.args[1] is again["main"].params[0]
    assert again.astext() == text


def test_long_let_chain_prints_and_parses_at_default_recursion_limit():
    x = Var("x", F32)
    names = [Var("v") for _ in range(100_000)]
    body = names[-1]
    for i in range(len(names) - 1, -1, -1):
        body = Let(names[i], names[i - 1] if i else x, body)
    mod = IRModule({"main": Function([x], body)})
    text = mod.astext()
    assert "let %v_99999 = %v_99998;" in text
    again = parse(text)
    node, depth, last_var = again["main"].body, 0, None
    while isinstance(node, Let):
        last_var, node, depth = node.var, node.body, depth + 1
    assert depth == 100_000
    assert node is last_var and last_var.name_hint == "v_99999"


# ------------------------------------------------------------------ real ops (op.* helper)


def test_real_ops_round_trip():
    from passinfra.ir import op

    data = ir.var("data", (1, 3, 8, 8))
    weight = ir.var("weight", (4, 3, 3, 3))
    conv = op.nn.conv2d(data, weight, strides=(1, 1), padding=(1, 1))
    gamma, beta, mean, var = (ir.var(n, (4,)) for n in ("gamma", "beta", "mean", "var"))
    bn = op.nn.batch_norm(conv, gamma, beta, mean, var, epsilon=1e-3)
    normalized = TupleGetItem(bn, 0)
    halves = op.split(op.add(normalized, ir.const(1.0)), 2, axis=1)
    out = op.add(TupleGetItem(halves, 0), TupleGetItem(halves, 1))
    mod = IRModule.from_expr(Function([data, weight, gamma, beta, mean, var], out))
    text = mod.astext()
    assert "nn.conv2d(%data, %weight" in text and "nn.batch_norm(" in text and "split(" in text
    again = roundtrip(mod)
    assert again.astext() == text
    calls = [n for n in iter_post_order(again["main"]) if isinstance(n, Call)]
    batch_norm = next(n for n in calls if n.op.name == "nn.batch_norm")
    assert math.isclose(batch_norm.attrs["epsilon"], 1e-3)

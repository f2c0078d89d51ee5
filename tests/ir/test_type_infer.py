"""Type inference: every node kind, global calls and recursion, errors, caches, depth."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from passinfra import ir
from passinfra.errors import IRTypeError
from passinfra.ir.op.registry import OpPattern, register_op
from passinfra.ir.type_infer import infer_module, infer_type, show_ir
from passinfra.ir.types import FuncType, TensorType, TupleType

# private ops, so these tests do not depend on the real op library
REL_CALLS = {"add": 0}


def _add_rel(arg_types, attrs):
    REL_CALLS["add"] += 1
    a, b = arg_types
    if a == b:
        return a
    if a.dtype != b.dtype:
        raise IRTypeError(f"dtypes differ: {a.dtype} vs {b.dtype}")
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise IRTypeError(f"shapes {a.shape} and {b.shape} do not broadcast") from None
    return TensorType(shape, a.dtype)


def _less_rel(arg_types, attrs):
    a, b = arg_types
    return TensorType(np.broadcast_shapes(a.shape, b.shape), "bool")


def _split2_rel(arg_types, attrs):
    (x,) = arg_types
    half = TensorType((x.shape[0] // 2, *x.shape[1:]), x.dtype)
    return TupleType([half, half])


ADD = register_op("test_types.add", num_inputs=2, type_rel=_add_rel, impl=lambda a, _: a[0] + a[1],
                  pattern=OpPattern.BROADCAST)
LESS = register_op("test_types.less", num_inputs=2, type_rel=_less_rel, impl=lambda a, _: a[0] < a[1],
                   pattern=OpPattern.BROADCAST)
SPLIT2 = register_op("test_types.split2", num_inputs=1, type_rel=_split2_rel,
                     impl=lambda a, _: tuple(np.split(a[0], 2)), pattern=OpPattern.INJECTIVE)
BROKEN = register_op("test_types.broken", num_inputs=1, type_rel=lambda t, a: 1 / 0,
                     impl=lambda a, _: a[0], pattern=OpPattern.OPAQUE)
NOT_A_TYPE = register_op("test_types.not_a_type", num_inputs=1, type_rel=lambda t, a: (2, 3),
                         impl=lambda a, _: a[0], pattern=OpPattern.OPAQUE)

T23 = TensorType((2, 3), "float32")
T3 = TensorType((3,), "float32")
BOOL = TensorType((), "bool")


def shown(ty) -> str:
    """A regex matching ``ty`` as error messages print it."""
    return re.escape(show_ir(ty))


def add(a, b):
    return ir.Call(ADD, [a, b])


def test_every_node_kind_gets_its_type():
    x = ir.var("x", (2, 3))
    flag = ir.var("flag", (), "bool")
    y = ir.Var("y")  # let-bound, unannotated: takes the value's type
    c = ir.const(np.ones(3, "float32"))
    inner = ir.Function([ir.var("p", (2, 3))], ir.Tuple([x, c]))  # a closure over x
    w = ir.var("w", (4, 3))
    pair = ir.Call(SPLIT2, [w])
    half = ir.TupleGetItem(pair, 1)
    branch = ir.If(flag, add(y, c), ir.TupleGetItem(ir.Call(inner, [x]), 0))
    body = ir.Let(y, add(x, half), ir.Tuple([branch, half]))
    func = ir.Function([x, flag, w], body)

    ty = infer_type(func)

    w_type = TensorType((4, 3), "float32")
    assert ty == FuncType([T23, BOOL, w_type], TupleType([T23, T23]))
    assert func.checked_type == ty
    assert c.checked_type == T3
    assert y.checked_type == T23
    assert pair.checked_type == TupleType([T23, T23])
    assert half.checked_type == T23
    assert inner.checked_type == FuncType([T23], TupleType([T23, T3]))
    assert branch.checked_type == T23
    assert body.checked_type == TupleType([T23, T23])


def test_expression_with_annotated_free_vars():
    a, b = ir.var("a", (3,)), ir.var("b", (2, 3))
    assert infer_type(add(a, b)) == T23


def test_broadcasting_op_relation_result_is_used():
    a, b = ir.var("a", (4, 1)), ir.var("b", (3,))
    assert infer_type(add(a, b)) == TensorType((4, 3), "float32")


# -- variables and functions ------------------------------------------------------------

def test_unannotated_parameter_is_an_error_naming_it_and_the_function():
    x = ir.Var("x")
    mod = ir.IRModule({"main": ir.Function([x], x)})
    with pytest.raises(IRTypeError, match=r"cannot infer the type of parameter %x of function @main; annot"):
        infer_type(mod)


def test_unannotated_parameter_of_a_nested_function_names_the_enclosing_global():
    q = ir.Var("q")
    mod = ir.IRModule({"main": ir.Function([], ir.Function([q], q))})
    with pytest.raises(IRTypeError, match=r"parameter %q of a function literal in @main"):
        infer_type(mod)


def test_unannotated_free_variable_is_an_error():
    z = ir.Var("z")
    with pytest.raises(IRTypeError, match=r"cannot infer the type of variable %z"):
        infer_type(add(z, ir.var("a", (3,))))


def test_let_annotation_must_match_value():
    x = ir.var("x", (2, 3))
    y = ir.var("y", (3,))
    let = ir.Let(y, add(x, x), y)
    expected = f"let %y is annotated {shown(T3)} but its value has type {shown(T23)}"
    with pytest.raises(IRTypeError, match=expected):
        infer_type(let)


def test_let_of_a_function_literal_can_be_called_through_the_var():
    x = ir.var("x", (3,))
    f = ir.Var("f")
    p = ir.var("p", (3,))
    let = ir.Let(f, ir.Function([p], add(p, p)), ir.Call(f, [x]))
    assert infer_type(let) == T3
    assert f.checked_type == FuncType([T3], T3)


def test_function_ret_type_must_match_body():
    x = ir.var("x", (3,))
    func = ir.Function([x], x, ret_type=T23)
    mod = ir.IRModule({"f": func})
    with pytest.raises(IRTypeError, match=f"function @f is annotated to return {shown(T23)} but its body has "
                                          f"type {shown(T3)}"):
        infer_type(mod)


def test_function_literal_call_checks_arguments():
    p = ir.var("p", (3,))
    literal = ir.Function([p], p)
    expected = f"argument 0 of the call of a function literal has type {shown(T23)}, expected {shown(T3)}"
    with pytest.raises(IRTypeError, match=expected):
        infer_type(ir.Call(literal, [ir.var("x", (2, 3))]))
    with pytest.raises(IRTypeError, match=r"call of a function literal passes 2 arguments; it takes 1"):
        infer_type(ir.Call(literal, [ir.var("x", (3,)), ir.var("y", (3,))]))


def test_calling_a_non_function_is_an_error():
    t = ir.var("t", (3,))
    with pytest.raises(IRTypeError, match=r"cannot call %t: its type .* is not a function type"):
        infer_type(ir.Call(t, []))


def test_calling_a_func_typed_var_checks_arguments():
    f = ir.Var("f", FuncType([T3], T3))
    assert infer_type(ir.Call(f, [ir.var("x", (3,))])) == T3
    with pytest.raises(IRTypeError, match=r"argument 0 of the call of %f"):
        infer_type(ir.Call(f, [ir.var("x", (2, 3))]))


# -- tuples and If ----------------------------------------------------------------------

def test_tuple_getitem_out_of_range_names_index_and_arity():
    tup = ir.Tuple([ir.var("a", (3,)), ir.var("b", (3,))])
    with pytest.raises(IRTypeError, match=r"index 2 is out of range for a tuple of 2 fields"):
        infer_type(ir.TupleGetItem(tup, 2))


def test_tuple_getitem_of_a_tensor_is_an_error():
    with pytest.raises(IRTypeError, match=r"TupleGetItem needs a tuple"):
        infer_type(ir.TupleGetItem(ir.var("a", (3,)), 0))


def test_if_condition_must_be_a_bool_scalar_and_the_actual_type_is_named():
    a = ir.var("a", (3,))
    expected = f"condition of an If must be a bool scalar {shown(BOOL)}, got {shown(T3)}"
    with pytest.raises(IRTypeError, match=expected):
        infer_type(ir.If(a, a, a))
    cond = ir.Call(LESS, [ir.var("s", ()), ir.const(0.0)])
    assert infer_type(ir.If(cond, a, a)) == T3


def test_if_branches_must_agree():
    flag = ir.var("flag", (), "bool")
    with pytest.raises(IRTypeError, match=f"branches of an If have different types: true branch {shown(T3)}, "
                                          f"false branch {shown(T23)}"):
        infer_type(ir.If(flag, ir.var("a", (3,)), ir.var("b", (2, 3))))


# -- op calls ---------------------------------------------------------------------------

def test_op_failure_names_op_function_and_shows_the_call():
    a, b = ir.var("a", (2,)), ir.var("b", (3,))
    call = add(a, b)
    mod = ir.IRModule({"main": ir.Function([a, b], call)})
    with pytest.raises(IRTypeError) as info:
        infer_type(mod)
    message = str(info.value)
    assert "op test_types.add" in message
    assert "do not broadcast" in message
    assert "function @main" in message
    assert show_ir(call) in message  # the printed call (repr until the printer lands)


def test_op_wrong_arity_is_a_type_error():
    with pytest.raises(IRTypeError, match=r"op test_types.add expects 2 arguments, got 1"):
        infer_type(ir.Call(ADD, [ir.var("a", (3,))]))


def test_type_relation_crash_is_reported_as_type_error_naming_op():
    with pytest.raises(IRTypeError, match=r"op test_types.broken: type relation failed: ZeroDivisionError"):
        infer_type(ir.Call(BROKEN, [ir.var("a", (3,))]))


def test_type_relation_returning_a_non_type_is_rejected():
    with pytest.raises(IRTypeError, match=r"op test_types.not_a_type: type relation returned \(2, 3\)"):
        infer_type(ir.Call(NOT_A_TYPE, [ir.var("a", (3,))]))


def test_op_used_as_a_value_is_an_error():
    with pytest.raises(IRTypeError, match=r"op test_types.add is used as a value"):
        infer_type(ir.Tuple([ADD]))
    with pytest.raises(IRTypeError, match=r"op test_types.add is used as a value"):
        infer_type(ADD)


# -- global functions -------------------------------------------------------------------

def _double() -> ir.Function:
    p = ir.var("p", (3,))
    return ir.Function([p], add(p, p))


def test_module_inference_returns_the_same_module_and_types_every_function():
    x = ir.var("x", (3,))
    # main comes first but calls double: inference must follow the call graph
    mod = ir.IRModule({"main": ir.Function([x], ir.Call(ir.GlobalVar("double"), [x])), "double": _double()})
    assert infer_type(mod) is mod
    assert mod["main"].checked_type == FuncType([T3], T3)
    assert mod["double"].checked_type == FuncType([T3], T3)
    assert infer_module(mod) is mod


def test_global_var_type_is_not_cached_on_the_global_var():
    x = ir.var("x", (3,))
    gv = ir.GlobalVar("double")
    mod = ir.IRModule({"main": ir.Function([x], ir.Call(gv, [x])), "double": _double()})
    infer_type(mod)
    assert gv._checked_type is None
    assert infer_type(gv, mod) == FuncType([T3], T3)


def test_call_of_global_checks_argument_types_naming_the_callee():
    x = ir.var("x", (2, 3))
    mod = ir.IRModule({"main": ir.Function([x], ir.Call(ir.GlobalVar("double"), [x])), "double": _double()})
    with pytest.raises(IRTypeError, match=f"argument 0 of the call of @double has type {shown(T23)}, "
                                          f"expected {shown(T3)}\nin function @main"):
        infer_type(mod)


def test_call_of_global_checks_arity():
    x = ir.var("x", (3,))
    main = ir.Function([x], ir.Call(ir.GlobalVar("double"), [x, x]))
    mod = ir.IRModule({"main": main, "double": _double()})
    with pytest.raises(IRTypeError, match=r"call of @double passes 2 arguments; it takes 1"):
        infer_type(mod)


def test_call_of_a_global_missing_from_the_module_names_it():
    x = ir.var("x", (3,))
    mod = ir.IRModule({"main": ir.Function([x], ir.Call(ir.GlobalVar("nowhere"), [x]))})
    with pytest.raises(IRTypeError, match=r"@nowhere is not defined in the module \(functions: @main\)"):
        infer_type(mod)


def test_global_var_without_a_module_is_an_error():
    with pytest.raises(IRTypeError, match=r"@double is a global function, but no module was given"):
        infer_type(ir.Call(ir.GlobalVar("double"), [ir.var("x", (3,))]))


def test_expression_calling_a_global_is_inferred_against_the_module():
    mod = ir.IRModule({"double": _double()})
    call = ir.Call(ir.GlobalVar("double"), [ir.var("x", (3,))])
    assert infer_type(call, mod) == T3
    assert mod["double"].checked_type == FuncType([T3], T3)  # the callee was inferred on the way


def _countdown(name: str, callee: str, annotate: bool) -> ir.Function:
    """fn(n: bool, x) { if n { callee(n, x + x) } else { x } }"""
    n, x = ir.var("n", (), "bool"), ir.var("x", (3,))
    body = ir.If(n, ir.Call(ir.GlobalVar(callee), [n, add(x, x)]), x)
    return ir.Function([n, x], body, ret_type=T3 if annotate else None)


def test_self_recursion_with_annotated_return_type():
    mod = ir.IRModule({"loop": _countdown("loop", "loop", annotate=True)})
    infer_type(mod)
    assert mod["loop"].checked_type == FuncType([BOOL, T3], T3)


def test_self_recursion_without_return_type_is_an_error_naming_it():
    mod = ir.IRModule({"loop": _countdown("loop", "loop", annotate=False)})
    with pytest.raises(IRTypeError, match=r"recursive functions @loop: @loop is called before its type"):
        infer_type(mod)


def test_mutual_recursion_without_annotations_names_the_cycle():
    mod = ir.IRModule({
        "main": ir.Function([], ir.const(1.0)),
        "ping": _countdown("ping", "pong", annotate=False),
        "pong": _countdown("pong", "ping", annotate=False),
    })
    with pytest.raises(IRTypeError, match=r"recursive functions @ping, @pong"):
        infer_type(mod)


def test_mutual_recursion_needs_the_signature_only_where_the_cycle_is_entered():
    mod = ir.IRModule({
        "ping": _countdown("ping", "pong", annotate=False),
        "pong": _countdown("pong", "ping", annotate=True),
    })
    infer_type(mod)  # ping is inferred first and uses pong's declared signature
    assert mod["ping"].checked_type == mod["pong"].checked_type == FuncType([BOOL, T3], T3)


def test_infer_type_of_a_module_function_handles_its_recursion():
    mod = ir.IRModule({"loop": _countdown("loop", "loop", annotate=True)})
    assert infer_type(mod["loop"], mod) == FuncType([BOOL, T3], T3)


# -- caches -----------------------------------------------------------------------------

def test_second_inference_does_not_rerun_type_relations():
    x = ir.var("x", (3,))
    mod = ir.IRModule({"main": ir.Function([x], add(add(x, x), x))})
    before = REL_CALLS["add"]
    infer_type(mod)
    assert REL_CALLS["add"] == before + 2
    infer_type(mod)
    infer_type(mod["main"])
    assert REL_CALLS["add"] == before + 2


def test_new_node_over_cached_children_only_computes_the_new_part():
    x = ir.var("x", (3,))
    inner = add(add(x, x), x)
    infer_type(inner)
    before = REL_CALLS["add"]
    assert infer_type(add(inner, x)) == T3
    assert REL_CALLS["add"] == before + 1


def test_cached_var_type_must_agree_with_annotation():
    x = ir.var("x", (3,))
    object.__setattr__(x, "_checked_type", T23)  # a stale cache
    expected = f"variable %x has the cached type {shown(T23)} but is annotated {shown(T3)}"
    with pytest.raises(IRTypeError, match=expected):
        infer_type(add(x, x))


def test_rebinding_an_unannotated_var_with_another_type_is_an_error():
    y = ir.Var("y")
    infer_type(ir.Let(y, ir.var("a", (3,)), y))
    with pytest.raises(IRTypeError, match=r"let %y is already typed .* but its value has type"):
        infer_type(ir.Let(y, ir.var("b", (2, 3)), y))


def test_non_ir_input_is_rejected():
    with pytest.raises(IRTypeError, match=r"infer_type needs an expression.*got int"):
        infer_type(3)


# -- depth ------------------------------------------------------------------------------

CHAIN = 100_000


def test_100k_call_chain_with_default_recursion_limit():
    assert sys.getrecursionlimit() <= 10_000
    x = ir.var("x", (3,))
    expr = x
    for _ in range(CHAIN):
        expr = add(expr, x)
    mod = ir.IRModule({"main": ir.Function([x], expr)})
    infer_type(mod)
    assert mod["main"].checked_type == FuncType([T3], T3)


def test_100k_let_chain_with_default_recursion_limit():
    x = ir.var("x", (3,))
    names = [ir.Var(f"v{i}") for i in range(CHAIN)]
    body: ir.Expr = ir.Tuple([names[-1], names[0]])
    for i in reversed(range(CHAIN)):
        body = ir.Let(names[i], add(names[i - 1] if i else x, x), body)
    assert infer_type(ir.Function([x], body)) == FuncType([T3], TupleType([T3, T3]))
    assert names[CHAIN // 2].checked_type == T3


def test_show_ir_keeps_both_ends_of_long_text():
    class Long:
        def __str__(self):
            return "head" + "x" * 10_000 + "the failing call"

    text = show_ir(Long(), limit=100)
    assert text.startswith("head")
    assert text.endswith("the failing call")
    assert "... (9920 characters omitted) ..." in text
    assert len(text) < 150


def test_show_ir_falls_back_to_repr_when_printing_fails():
    class Unprintable:
        def __str__(self):
            raise NotImplementedError("printer not written yet")

        def __repr__(self):
            return "Unprintable()"

    assert show_ir(Unprintable()) == "Unprintable()"

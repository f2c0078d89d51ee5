"""The well-formedness verifier: each rule accepted and rejected, messages, depth."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from passinfra import ir
from passinfra.errors import WellFormedError
from passinfra.ir.op.registry import OpPattern, register_op
from passinfra.ir.type_infer import infer_type, show_ir
from passinfra.ir.types import FuncType, TensorType
from passinfra.ir.well_formed import verify_well_formed, well_formed

ADD = register_op("test_wf.add", num_inputs=2, type_rel=lambda t, a: t[0], impl=lambda a, _: a[0] + a[1],
                  pattern=OpPattern.BROADCAST)
CONCAT = register_op("test_wf.concat", num_inputs=-1, type_rel=lambda t, a: t[0],
                     impl=lambda a, _: np.concatenate(a), pattern=OpPattern.INJECTIVE)

T3 = TensorType((3,), "float32")


def add(a, b):
    return ir.Call(ADD, [a, b])


def message_of(node, *args, **kwargs) -> str:
    with pytest.raises(WellFormedError) as info:
        verify_well_formed(node, *args, **kwargs)
    return str(info.value)


# -- accepted programs ------------------------------------------------------------------

def test_a_module_using_every_construct_is_well_formed():
    x, flag = ir.var("x", (3,)), ir.var("flag", (), "bool")
    y, z = ir.Var("y"), ir.Var("z")
    p = ir.var("p", (3,))
    shared = add(x, x)  # one node used in both branches and after the If
    closure = ir.Function([p], add(p, x))  # captures x from the enclosing function
    branch = ir.If(flag, add(shared, y), ir.Call(closure, [shared]))
    body = ir.Let(y, shared, ir.Let(z, branch, ir.TupleGetItem(ir.Tuple([z, shared]), 1)))
    helper_param = ir.var("h", (3,))
    mod = ir.IRModule({
        "main": ir.Function([x, flag], ir.Call(ir.GlobalVar("helper"), [body])),
        "helper": ir.Function([helper_param], ir.Call(CONCAT, [helper_param, helper_param, helper_param])),
    })
    verify_well_formed(mod)
    assert well_formed(mod)


def test_a_let_node_shared_in_two_places_is_one_binding():
    x = ir.var("x", (3,))
    y = ir.Var("y")
    let = ir.Let(y, x, add(y, y))
    verify_well_formed(ir.Function([x], ir.Tuple([let, let])))


def test_a_node_shared_between_nested_scopes_is_accepted():
    x = ir.var("x", (3,))
    a, b = ir.Var("a"), ir.Var("b")
    common = add(x, x)
    # common is checked in the outer scope and reused inside the scope of a
    verify_well_formed(ir.Function([x], ir.Let(a, common, ir.Let(b, add(a, common), b))))


# -- free variables ---------------------------------------------------------------------

def test_free_variable_in_a_module_function_is_rejected_with_function_and_ir():
    x, stray = ir.var("x", (3,)), ir.var("stray", (3,))
    use = add(x, stray)
    mod = ir.IRModule({"main": ir.Function([x], use)})
    message = message_of(mod)
    assert "free variable %stray in function @main" in message
    assert show_ir(use) in message
    assert not well_formed(mod)


def test_free_variables_in_a_bare_expression_are_allowed_unless_refused():
    expr = add(ir.var("a", (3,)), ir.var("b", (3,)))
    verify_well_formed(expr)
    with pytest.raises(WellFormedError, match=r"free variable %a in the expression"):
        verify_well_formed(expr, allow_free_vars=False)


def test_a_function_given_alone_must_be_closed_by_default():
    func = ir.Function([], ir.var("a", (3,)))
    with pytest.raises(WellFormedError, match=r"free variable %a"):
        verify_well_formed(func)
    verify_well_formed(func, allow_free_vars=True)


def test_a_function_given_with_its_module_is_named():
    func = ir.Function([], ir.var("a", (3,)))
    mod = ir.IRModule({"f": func})
    with pytest.raises(WellFormedError, match=r"free variable %a in function @f"):
        verify_well_formed(func, mod)


# -- binding twice ----------------------------------------------------------------------

def test_a_var_bound_by_two_lets_is_rejected():
    x, y = ir.var("x", (3,)), ir.Var("y")
    inner = ir.Let(y, add(y, x), y)
    outer = ir.Let(y, x, inner)
    message = message_of(ir.IRModule({"main": ir.Function([x], outer)}))
    assert "variable %y is bound twice: by a let in @main and by a let in @main" in message
    assert show_ir(inner) in message


def test_a_var_bound_as_two_params_of_one_function_is_rejected():
    x = ir.var("x", (3,))
    with pytest.raises(WellFormedError, match=r"%x is bound twice: it appears twice in the parameters"):
        verify_well_formed(ir.Function([x, x], x))


def test_a_param_rebound_by_a_let_is_rejected():
    x = ir.var("x", (3,))
    with pytest.raises(WellFormedError, match=r"%x is bound twice: as a parameter of a function in "
                                              r"@main and by a let in @main"):
        verify_well_formed(ir.IRModule({"main": ir.Function([x], ir.Let(x, ir.const(1.0), x))}))


def test_a_var_bound_in_two_global_functions_is_rejected():
    x = ir.var("x", (3,))
    mod = ir.IRModule({"f": ir.Function([x], x), "g": ir.Function([x], add(x, x))})
    with pytest.raises(WellFormedError, match=r"%x is bound twice: as a parameter of a function in @f and "
                                              r"as a parameter of a function in @g"):
        verify_well_formed(mod)


def test_nested_functions_binding_one_param_are_rejected():
    p = ir.var("p", (3,))
    inner = ir.Function([p], p)
    with pytest.raises(WellFormedError, match=r"%p is bound twice"):
        verify_well_formed(ir.Function([p], ir.Call(inner, [p])))


# -- scope ------------------------------------------------------------------------------

def test_a_var_used_in_its_own_let_value_is_rejected():
    x, y = ir.var("x", (3,)), ir.Var("y")
    let = ir.Let(y, add(x, y), y)
    message = message_of(ir.Function([x], let))
    assert "variable %y is used in the value of its own let binding" in message
    assert show_ir(let) in message


def test_a_var_used_after_its_let_body_is_rejected():
    x, y = ir.var("x", (3,)), ir.Var("y")
    late_use = ir.Tuple([ir.Let(y, x, y), y])
    message = message_of(late_use)  # even though free variables are allowed here
    assert "variable %y is used outside the scope of its binding (by a let in the expression)" in message
    assert show_ir(late_use) in message


def test_a_use_before_the_binding_appears_is_out_of_scope_not_free():
    x, y = ir.var("x", (3,)), ir.Var("y")
    with pytest.raises(WellFormedError, match=r"%y is used outside the scope of its binding"):
        verify_well_formed(ir.Tuple([y, ir.Let(y, x, y)]))


def test_a_node_shared_into_another_function_cannot_use_the_first_ones_params():
    x = ir.var("x", (3,))
    shared = add(x, x)
    mod = ir.IRModule({"f": ir.Function([x], shared), "g": ir.Function([], shared)})
    with pytest.raises(WellFormedError, match=r"%x is used outside the scope of its binding \(as a parameter "
                                              r"of a function in @f\)\nin function @g"):
        verify_well_formed(mod)


def test_a_node_shared_out_of_a_let_body_is_rejected():
    x, y = ir.var("x", (3,)), ir.Var("y")
    uses_y = add(y, x)
    with pytest.raises(WellFormedError, match=r"%y is used outside the scope"):
        verify_well_formed(ir.Function([x], ir.Tuple([ir.Let(y, x, uses_y), uses_y])))


def test_a_param_used_outside_its_function_literal_is_rejected():
    x, p = ir.var("x", (3,)), ir.var("p", (3,))
    literal = ir.Function([p], p)
    with pytest.raises(WellFormedError, match=r"%p is used outside the scope of its binding"):
        verify_well_formed(ir.Function([x], ir.Tuple([literal, p])))


# -- calls ------------------------------------------------------------------------------

def test_op_call_with_wrong_arity_is_rejected():
    x = ir.var("x", (3,))
    call = ir.Call(ADD, [x, x, x])
    message = message_of(ir.Function([x], call))
    assert "call of op test_wf.add passes 3 arguments; it takes 2" in message
    assert show_ir(call) in message


def test_variadic_op_takes_any_number_of_arguments():
    x = ir.var("x", (3,))
    verify_well_formed(ir.Function([x], ir.Call(CONCAT, [x] * 5)))


def test_global_call_with_wrong_arity_is_rejected():
    x = ir.var("x", (3,))
    p = ir.var("p", (3,))
    main = ir.Function([x], ir.Call(ir.GlobalVar("id"), [x, x]))
    mod = ir.IRModule({"main": main, "id": ir.Function([p], p)})
    with pytest.raises(WellFormedError, match=r"@id passes 2 arguments; it takes 1\nin function @main"):
        verify_well_formed(mod)


def test_call_of_a_global_missing_from_the_module_is_rejected():
    x = ir.var("x", (3,))
    call = ir.Call(ir.GlobalVar("missing"), [x])
    mod = ir.IRModule({"main": ir.Function([x], call)})
    message = message_of(mod)
    assert "@missing is not defined in the module (functions: @main)" in message
    assert show_ir(call) in message


def test_a_global_used_as_a_value_must_exist_too():
    mod = ir.IRModule({"main": ir.Function([], ir.Tuple([ir.GlobalVar("ghost")]))})
    with pytest.raises(WellFormedError, match=r"@ghost is not defined in the module"):
        verify_well_formed(mod)


def test_globals_are_not_checked_without_a_module():
    verify_well_formed(ir.Call(ir.GlobalVar("anything"), [ir.var("x", (3,))]))


def test_function_literal_call_with_wrong_arity_is_rejected():
    p = ir.var("p", (3,))
    with pytest.raises(WellFormedError, match=r"call of a function literal passes 0 arguments; it takes 1"):
        verify_well_formed(ir.Call(ir.Function([p], p), []))


def test_call_of_a_func_typed_var_with_wrong_arity_is_rejected():
    f = ir.Var("f", FuncType([T3, T3], T3))
    with pytest.raises(WellFormedError, match=r"call of %f passes 1 arguments; it takes 2"):
        verify_well_formed(ir.Call(f, [ir.var("x", (3,))]))


# -- tuples -----------------------------------------------------------------------------

def test_tuple_getitem_of_a_literal_tuple_out_of_range_is_rejected():
    x = ir.var("x", (3,))
    tgi = ir.TupleGetItem(ir.Tuple([x, x]), 2)
    message = message_of(tgi)
    assert "TupleGetItem index 2 is out of range for a tuple of 2 fields" in message
    assert show_ir(tgi) in message
    verify_well_formed(ir.TupleGetItem(ir.Tuple([x, x]), 1))


def test_non_ir_input_is_rejected():
    with pytest.raises(WellFormedError, match=r"needs an expression, a function or an IRModule, got str"):
        verify_well_formed("main")


# -- random programs --------------------------------------------------------------------

# each step: (make a let binding?, index of the first operand, index of the second operand)
OPERAND = st.integers(0, 10**6)
STEPS = st.lists(st.tuples(st.booleans(), OPERAND, OPERAND), min_size=1, max_size=25)


def _random_program(steps) -> tuple[ir.Function, list[ir.Var]]:
    """A closed function mixing let bindings with dataflow nodes shared across them."""
    x = ir.var("x", (3,))
    available: list[ir.Expr] = [x]
    bindings: list[tuple[ir.Var, ir.Expr]] = []
    for make_let, i, j in steps:
        value = add(available[i % len(available)], available[j % len(available)])
        if make_let:
            var = ir.Var(f"v{len(bindings)}")
            bindings.append((var, value))
            available.append(var)
        else:
            available.append(value)  # unbound: may be shared by any later step
    body: ir.Expr = ir.Tuple(available[-3:])
    for var, value in reversed(bindings):
        body = ir.Let(var, value, body)
    return ir.Function([x], body), [var for var, _ in bindings]


@settings(max_examples=40, deadline=None)
@given(STEPS)
def test_random_programs_are_well_formed_and_typed(steps):
    func, _ = _random_program(steps)
    verify_well_formed(func)
    result = infer_type(func)
    assert all(field == T3 for field in result.ret_type.fields)


@settings(max_examples=40, deadline=None)
@given(STEPS, st.data())
def test_random_programs_with_a_rebound_var_are_rejected(steps, data):
    func, bound = _random_program(steps)
    if len(bound) < 2:
        return
    first, second = sorted(data.draw(st.lists(st.integers(0, len(bound) - 1), min_size=2, max_size=2,
                                              unique=True)))
    # rebuild with the later binding reusing the earlier one's variable

    class Rebind(ir.ExprMutator):
        def visit_var(self, var):
            return bound[first] if var is bound[second] else var

    with pytest.raises(WellFormedError, match=f"%{bound[first].name_hint} is bound twice"):
        verify_well_formed(Rebind().visit(func))


# -- depth ------------------------------------------------------------------------------

CHAIN = 100_000


def test_100k_call_chain_is_verified_with_default_recursion_limit():
    assert sys.getrecursionlimit() <= 10_000
    x = ir.var("x", (3,))
    expr = x
    for _ in range(CHAIN):
        expr = add(expr, x)
    verify_well_formed(ir.IRModule({"main": ir.Function([x], expr)}))


def test_100k_let_chain_is_verified_and_a_late_error_found():
    x = ir.var("x", (3,))
    names = [ir.Var(f"v{i}") for i in range(CHAIN)]
    body: ir.Expr = names[-1]
    for i in reversed(range(CHAIN)):
        body = ir.Let(names[i], add(names[i - 1] if i else x, x), body)
    verify_well_formed(ir.Function([x], body))
    # the innermost binding reuses the outermost variable: found at the bottom of the chain
    depth = CHAIN // 5
    broken: ir.Expr = ir.Let(names[0], x, names[depth - 1])
    for i in reversed(range(1, depth)):
        broken = ir.Let(names[i], add(names[i - 1], x), broken)
    broken = ir.Let(names[0], x, broken)
    with pytest.raises(WellFormedError, match=r"%v0 is bound twice"):
        verify_well_formed(ir.Function([x], broken))

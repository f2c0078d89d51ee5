"""The reference interpreter: every node kind against NumPy, closures, calls between
functions, input checking, and programs far deeper than Python's recursion limit."""

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import passinfra
from passinfra import ir
from passinfra.errors import EvaluationError
from passinfra.ir.op.registry import OpPattern, register_op
from passinfra.runtime.interpreter import Closure, evaluate


def _register(name, impl, num_inputs=2):
    return register_op(
        f"test_interp.{name}",
        num_inputs=num_inputs,
        type_rel=lambda types, attrs: types[0],
        impl=impl,
        pattern=OpPattern.OPAQUE,
        override=True,  # the module may be imported twice in one session
    )


_ADD = _register("add", lambda args, attrs: np.add(args[0], args[1]))
_SUB = _register("sub", lambda args, attrs: np.subtract(args[0], args[1]))
_MUL = _register("mul", lambda args, attrs: np.multiply(args[0], args[1]))
_LESS = _register("less", lambda args, attrs: np.less(args[0], args[1]))
_SCALE = _register("scale", lambda args, attrs: args[0] * np.asarray(attrs["factor"], args[0].dtype), 1)
_SPLIT = _register("split2", lambda args, attrs: tuple(np.split(args[0], 2)), 1)
_SCALAR = _register("scalar_sum", lambda args, attrs: np.sum(args[0]), 1)  # returns a NumPy scalar
_BROKEN = _register("broken", lambda args, attrs: np.reshape(args[0], (7, 11)), 1)
_WRONG_KIND = _register("wrong_kind", lambda args, attrs: "not an array", 1)
_COUNTED_CALLS = []
_COUNTED = _register("counted", lambda args, attrs: _COUNTED_CALLS.append(1) or args[0].copy(), 1)


def add(a, b):
    return ir.Call(_ADD, [a, b])


def sub(a, b):
    return ir.Call(_SUB, [a, b])


def mul(a, b):
    return ir.Call(_MUL, [a, b])


def less(a, b):
    return ir.Call(_LESS, [a, b])


def i32(value):
    return ir.const(value, "int32")


@pytest.fixture(autouse=True)
def default_recursion_limit():
    """Every test runs with Python's default recursion limit, whatever ran before."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(old)


# -- node kinds ------------------------------------------------------------------------


def test_constant_evaluates_to_its_array():
    data = np.arange(6, dtype="float32").reshape(2, 3)
    out = evaluate(ir.const(data))
    np.testing.assert_array_equal(out, data)
    assert out.dtype == np.float32


def test_package_level_evaluate_is_the_interpreter():
    assert passinfra.evaluate is evaluate


def test_function_params_and_op_calls_match_numpy():
    x, y = ir.var("x", (2, 3)), ir.var("y", (3,))
    func = ir.Function([x, y], mul(add(x, y), ir.const(2.0)))
    a = np.random.default_rng(0).standard_normal((2, 3)).astype("float32")
    b = np.arange(3, dtype="float32")
    np.testing.assert_allclose(evaluate(func, a, b), (a + b) * np.float32(2.0), rtol=1e-6)


def test_call_attrs_reach_the_op_implementation():
    x = ir.var("x", (3,))
    func = ir.Function([x], ir.Call(_SCALE, [x], {"factor": 3.0}))
    np.testing.assert_array_equal(evaluate(func, np.ones(3, "float32")), np.full(3, 3.0, "float32"))


def test_module_runs_entry_and_named_functions():
    x = ir.var("x", (2,))
    mod = ir.IRModule({"main": ir.Function([x], add(x, x))})
    y = ir.var("y", (2,))
    mod["other"] = ir.Function([y], mul(y, y))
    data = np.array([3.0, 4.0], "float32")
    np.testing.assert_array_equal(evaluate(mod, data), [6.0, 8.0])
    np.testing.assert_array_equal(evaluate(mod, data, entry="other"), [9.0, 16.0])


def test_shared_node_is_evaluated_once():
    x = ir.var("x", (2,))
    shared = ir.Call(_COUNTED, [x])
    func = ir.Function([x], add(shared, shared))
    _COUNTED_CALLS.clear()
    np.testing.assert_array_equal(evaluate(func, np.array([1.0, 2.0], "float32")), [2.0, 4.0])
    assert len(_COUNTED_CALLS) == 1


def test_tuple_and_tuple_getitem_give_nested_python_tuples():
    x = ir.var("x", (2,))
    inner = ir.Tuple([x, add(x, x)])
    func = ir.Function([x], ir.Tuple([inner, ir.TupleGetItem(inner, 1)]))
    data = np.array([1.0, 2.0], "float32")
    out = evaluate(func, data)
    assert isinstance(out, tuple) and isinstance(out[0], tuple)
    np.testing.assert_array_equal(out[0][0], data)
    np.testing.assert_array_equal(out[0][1], [2.0, 4.0])
    np.testing.assert_array_equal(out[1], [2.0, 4.0])


def test_op_with_tuple_output_and_getitem():
    x = ir.var("x", (4,))
    parts = ir.Call(_SPLIT, [x])
    func = ir.Function([x], sub(ir.TupleGetItem(parts, 1), ir.TupleGetItem(parts, 0)))
    np.testing.assert_array_equal(evaluate(func, np.array([1, 2, 10, 20], "float32")), [9.0, 18.0])


def test_numpy_scalar_output_becomes_a_zero_dim_array():
    x = ir.var("x", (3,))
    out = evaluate(ir.Function([x], ir.Call(_SCALAR, [x])), np.array([1, 2, 3], "float32"))
    assert isinstance(out, np.ndarray) and out.shape == () and out == 6.0


def test_let_binds_and_later_bindings_see_earlier_ones():
    x = ir.var("x", (2,))
    a, b = ir.var("a"), ir.var("b")
    body = ir.Let(a, add(x, x), ir.Let(b, mul(a, a), sub(b, a)))
    data = np.array([1.0, 3.0], "float32")
    twice = data + data
    np.testing.assert_array_equal(evaluate(ir.Function([x], body), data), twice * twice - twice)


def test_let_used_as_an_argument():
    x = ir.var("x", (2,))
    t = ir.var("t")
    func = ir.Function([x], add(ir.Let(t, mul(x, x), t), x))
    np.testing.assert_array_equal(evaluate(func, np.array([2.0, 3.0], "float32")), [6.0, 12.0])


@pytest.mark.parametrize("flag, expected", [(True, [2.0, 4.0]), (False, [1.0, 4.0])])
def test_if_takes_the_branch_the_condition_names(flag, expected):
    c, x = ir.var("c", (), "bool"), ir.var("x", (2,))
    func = ir.Function([c, x], ir.If(c, add(x, x), mul(x, x)))
    np.testing.assert_array_equal(evaluate(func, np.array(flag), np.array([1.0, 2.0], "float32")), expected)


def test_untaken_branch_is_not_evaluated():
    x = ir.var("x", (2,))
    boom = ir.Call(_BROKEN, [x])  # would raise if it ran
    func = ir.Function([x], ir.If(ir.const(True), x, boom))
    np.testing.assert_array_equal(evaluate(func, np.array([1.0, 2.0], "float32")), [1.0, 2.0])


def test_if_condition_must_be_a_bool_scalar():
    x = ir.var("x", (2,))
    func = ir.Function([x], ir.If(ir.const(1.0), x, x))
    with pytest.raises(EvaluationError, match="If condition must be a bool scalar, got an array of shape"):
        evaluate(func, np.zeros(2, "float32"))


# -- closures and calls ---------------------------------------------------------------


def test_closure_captures_variables_at_creation():
    x, y = ir.var("x", (2,)), ir.var("y", (2,))
    adder = ir.Function([y], add(x, y))  # captures x
    f = ir.var("f")
    outer = ir.Function([x], ir.Let(f, adder, ir.Call(f, [ir.const(np.array([10.0, 20.0], "float32"))])))
    np.testing.assert_array_equal(evaluate(outer, np.array([1.0, 2.0], "float32")), [11.0, 22.0])


def test_returned_closure_is_callable_from_python_and_keeps_its_environment():
    x, y = ir.var("x", (2,)), ir.var("y", (2,))
    make_adder = ir.Function([x], ir.Function([y], add(x, y)))
    closure = evaluate(make_adder, np.array([1.0, 2.0], "float32"))
    assert isinstance(closure, Closure)
    np.testing.assert_array_equal(closure(np.array([5.0, 5.0], "float32")), [6.0, 7.0])
    np.testing.assert_array_equal(evaluate(closure, np.array([0.0, 1.0], "float32")), [1.0, 3.0])


def test_calling_a_function_literal_directly():
    x, y = ir.var("x", (2,)), ir.var("y", (2,))
    func = ir.Function([x], ir.Call(ir.Function([y], mul(y, y)), [x]))
    np.testing.assert_array_equal(evaluate(func, np.array([3.0, 4.0], "float32")), [9.0, 16.0])


def test_higher_order_global_function_takes_a_closure():
    f = ir.Var("f", ir.FuncType([ir.TensorType((2,))], ir.TensorType((2,))))
    v = ir.var("v", (2,))
    mod = ir.IRModule()
    mod["apply_twice"] = ir.Function([f, v], ir.Call(f, [ir.Call(f, [v])]))
    x, k = ir.var("x", (2,)), ir.var("k", (2,))
    triple = ir.Function([k], mul(k, ir.const(3.0)))
    mod["main"] = ir.Function([x], ir.Call(ir.GlobalVar("apply_twice"), [triple, x]))
    np.testing.assert_array_equal(evaluate(mod, np.array([1.0, 2.0], "float32")), [9.0, 18.0])


def _factorial_module():
    n = ir.var("n", (), "int32")
    fact = ir.GlobalVar("fact")
    body = ir.If(less(n, i32(2)), i32(1), mul(n, ir.Call(fact, [sub(n, i32(1))])))
    mod = ir.IRModule({"fact": ir.Function([n], body, ret_type=ir.TensorType((), "int32"))})
    m = ir.var("m", (), "int32")
    mod["main"] = ir.Function([m], ir.Call(fact, [m]))
    return mod


@pytest.mark.parametrize("n, expected", [(0, 1), (1, 1), (5, 120), (10, 3628800)])
def test_recursive_global_function_factorial(n, expected):
    out = evaluate(_factorial_module(), n)  # a Python int takes the annotated int32
    assert out.dtype == np.int32 and out.shape == () and int(out) == expected


def test_global_recursion_deeper_than_the_python_stack():
    n = ir.var("n", (), "int32")
    countdown = ir.GlobalVar("countdown")
    body = ir.If(less(n, i32(1)), n, ir.Call(countdown, [sub(n, i32(1))]))
    mod = ir.IRModule({"countdown": ir.Function([n], body)})
    assert int(evaluate(mod, np.int32(5000), entry="countdown")) == 0


def test_unbounded_recursion_is_an_error_not_a_memory_leak(monkeypatch):
    from passinfra.runtime import interpreter

    monkeypatch.setattr(interpreter, "MAX_CALL_DEPTH", 2000)
    n = ir.var("n", (), "int32")
    forever = ir.GlobalVar("forever")
    mod = ir.IRModule({"forever": ir.Function([n], ir.Call(forever, [add(n, i32(1))]))})
    with pytest.raises(EvaluationError, match="call depth exceeds 2000 calling @forever"):
        evaluate(mod, 0, entry="forever")


def test_recursive_local_function_bound_by_let():
    # let sum_to = fn (n) { if n < 1 { 0 } else { n + sum_to(n - 1) } }; sum_to(x)
    sum_to, n, x = ir.var("sum_to"), ir.var("n", (), "int32"), ir.var("x", (), "int32")
    body = ir.If(less(n, i32(1)), i32(0), add(n, ir.Call(sum_to, [sub(n, i32(1))])))
    func = ir.Function([x], ir.Let(sum_to, ir.Function([n], body), ir.Call(sum_to, [x])))
    assert int(evaluate(func, 100)) == 5050


def test_global_var_as_a_value():
    x, y = ir.var("x", (2,)), ir.var("y", (2,))
    mod = ir.IRModule({"double": ir.Function([y], add(y, y))})
    g = ir.var("g")
    mod["main"] = ir.Function([x], ir.Let(g, ir.GlobalVar("double"), ir.Call(g, [x])))
    np.testing.assert_array_equal(evaluate(mod, np.array([1.0, 5.0], "float32")), [2.0, 10.0])


# -- checking inputs and reporting errors -----------------------------------------------


def _two_param_module():
    x, y = ir.var("x", (2, 3)), ir.var("y", (3,), "int32")
    return ir.IRModule({"main": ir.Function([x, y], x)})


def test_wrong_number_of_arguments_names_the_parameters():
    with pytest.raises(EvaluationError, match=r"@main expects 2 arguments \(%x, %y\), got 1"):
        evaluate(_two_param_module(), np.zeros((2, 3), "float32"))


def test_shape_mismatch_names_parameter_expected_and_actual():
    with pytest.raises(EvaluationError) as info:
        evaluate(_two_param_module(), np.zeros((3, 2), "float32"), np.zeros(3, "int32"))
    message = str(info.value)
    assert "argument %x of @main" in message
    assert "expected Tensor[(2, 3), float32]" in message
    assert "got an array of shape (3, 2) and dtype float32" in message


def test_dtype_mismatch_names_parameter_expected_and_actual():
    with pytest.raises(EvaluationError, match=r"argument %y of @main: expected Tensor\[\(3,\), int32\], "
                       r"got an array of shape \(3,\) and dtype float32"):
        evaluate(_two_param_module(), np.zeros((2, 3), "float32"), np.zeros(3, "float32"))


def test_python_scalars_and_lists_take_the_annotated_dtype():
    x, y = ir.var("x", (), "float64"), ir.var("y", (3,), "int32")
    func = ir.Function([x, y], ir.Tuple([x, y]))
    out_x, out_y = evaluate(func, 2, [1, 2, 3])
    assert out_x.dtype == np.float64 and out_x == 2.0
    assert out_y.dtype == np.int32 and list(out_y) == [1, 2, 3]


def test_unannotated_python_scalars_default_to_float32_and_int32():
    x, y = ir.var("x"), ir.var("y")
    out = evaluate(ir.Function([x, y], ir.Tuple([x, y])), 1.5, 3)
    assert out[0].dtype == np.float32 and out[1].dtype == np.int32


def test_python_scalar_with_wrong_shape_is_rejected():
    x = ir.var("x", (3,))
    expected = r"argument %x of the function: expected Tensor\[\(3,\), float32\]"
    with pytest.raises(EvaluationError, match=expected):
        evaluate(ir.Function([x], x), 1.0)


def test_tuple_typed_parameter_accepts_python_tuples():
    ty = ir.TupleType([ir.TensorType((2,)), ir.TensorType((), "int32")])
    p = ir.Var("p", ty)
    func = ir.Function([p], ir.TupleGetItem(p, 1))
    assert evaluate(func, (np.zeros(2, "float32"), 7)).dtype == np.int32
    expected = r"argument %p of the function\[0\]: expected Tensor\[\(2,\), float32\]"
    with pytest.raises(EvaluationError, match=expected):
        evaluate(func, (np.zeros(3, "float32"), 7))
    with pytest.raises(EvaluationError, match="expected a tuple of 2"):
        evaluate(func, (np.zeros(2, "float32"),))


def test_arguments_of_internal_calls_are_checked_too():
    y = ir.var("y", (3,))
    mod = ir.IRModule({"takes3": ir.Function([y], y)})
    x = ir.var("x", (2,))
    mod["main"] = ir.Function([x], ir.Call(ir.GlobalVar("takes3"), [x]))
    with pytest.raises(EvaluationError, match="argument %y of @takes3: expected Tensor"):
        evaluate(mod, np.zeros(2, "float32"))


def test_result_is_checked_against_the_return_type():
    x = ir.var("x", (2,))
    func = ir.Function([x], ir.Tuple([x]), ret_type=ir.TensorType((2,)))
    with pytest.raises(EvaluationError, match="the result of the function: expected Tensor"):
        evaluate(func, np.zeros(2, "float32"))


def test_op_failure_names_the_op_and_keeps_the_cause():
    x = ir.var("x", (3,))
    with pytest.raises(EvaluationError, match="op test_interp.broken failed: ValueError") as info:
        evaluate(ir.Function([x], ir.Call(_BROKEN, [x])), np.zeros(3, "float32"))
    assert isinstance(info.value.__cause__, ValueError)


def test_op_returning_a_non_array_is_reported():
    x = ir.var("x", (3,))
    with pytest.raises(EvaluationError, match="op test_interp.wrong_kind returned a str"):
        evaluate(ir.Function([x], ir.Call(_WRONG_KIND, [x])), np.zeros(3, "float32"))


def test_op_arity_is_checked():
    x = ir.var("x", (3,))
    with pytest.raises(EvaluationError, match="op test_interp.add expects 2 arguments, got 1"):
        evaluate(ir.Function([x], ir.Call(_ADD, [x])), np.zeros(3, "float32"))


def test_unbound_variable_is_named():
    x, free = ir.var("x", (2,)), ir.var("free", (2,))
    with pytest.raises(EvaluationError, match="variable %free is not bound"):
        evaluate(ir.Function([x], add(x, free)), np.zeros(2, "float32"))


def test_missing_global_function_is_named():
    x = ir.var("x", (2,))
    mod = ir.IRModule({"main": ir.Function([x], ir.Call(ir.GlobalVar("nowhere"), [x]))})
    expected = r"no function named @nowhere in the module \(functions: main\)"
    with pytest.raises(EvaluationError, match=expected):
        evaluate(mod, np.zeros(2, "float32"))
    with pytest.raises(EvaluationError, match="no function named @absent"):
        evaluate(mod, entry="absent")


def test_tuple_getitem_errors():
    x = ir.var("x", (2,))
    with pytest.raises(EvaluationError, match="TupleGetItem .0 of an array of shape"):
        evaluate(ir.Function([x], ir.TupleGetItem(x, 0)), np.zeros(2, "float32"))
    with pytest.raises(EvaluationError, match="TupleGetItem .3 out of range for a tuple of 1 fields"):
        evaluate(ir.Function([x], ir.TupleGetItem(ir.Tuple([x]), 3)), np.zeros(2, "float32"))


def test_calling_a_tensor_is_an_error():
    x = ir.var("x", (2,))
    with pytest.raises(EvaluationError, match="cannot call an array of shape"):
        evaluate(ir.Function([x], ir.Call(x, [])), np.zeros(2, "float32"))


def test_closed_expression_takes_no_arguments():
    with pytest.raises(EvaluationError, match="an expression takes no arguments, got 1"):
        evaluate(ir.const(1.0), np.zeros(1))
    with pytest.raises(EvaluationError, match="evaluate needs an IRModule, a Function or an expression"):
        evaluate("main")


# -- depth ------------------------------------------------------------------------------


def test_100k_op_chain_with_default_recursion_limit():
    x, one = ir.var("x", (), "int32"), i32(1)
    node = x
    for _ in range(100_000):
        node = add(node, one)
    assert int(evaluate(ir.Function([x], node), 5)) == 100_005


def test_100k_let_chain_with_default_recursion_limit():
    x, two = ir.var("x", (), "int32"), i32(2)
    bound = [ir.var(f"v{i}") for i in range(100_000)]
    body = bound[-1]
    for i in reversed(range(len(bound))):
        previous = bound[i - 1] if i else x
        body = ir.Let(bound[i], add(previous, two), body)
    assert int(evaluate(ir.Function([x], body), 1)) == 200_001


# -- a random program against NumPy ------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("asm"), st.integers(0, 50), st.integers(0, 50)), max_size=30))
def test_random_dataflow_graphs_match_numpy(steps):
    params = [ir.var("a", (3,)), ir.var("b", (3,))]
    inputs = [np.array([1.0, -2.0, 0.5], "float32"), np.array([0.25, 3.0, -1.0], "float32")]
    nodes, values = list(params), list(inputs)
    builders = {"a": (add, np.add), "s": (sub, np.subtract), "m": (mul, np.multiply)}
    for kind, i, j in steps:  # each step combines two earlier nodes, so nodes are shared
        build, compute = builders[kind]
        left, right = i % len(nodes), j % len(nodes)
        nodes.append(build(nodes[left], nodes[right]))
        values.append(compute(values[left], values[right]))
    out = evaluate(ir.Function(params, ir.Tuple(nodes)), *inputs)
    for got, want in zip(out, values):
        np.testing.assert_array_equal(got, want)


# -- the registered ops ------------------------------------------------------------------


def test_registered_elementwise_and_reduction_ops_match_numpy():
    from passinfra.ir import op

    x, y = ir.var("x", (2, 3)), ir.var("y", (3,))
    body = ir.Tuple([
        op.add(x, y),
        op.subtract(x, y),
        op.multiply(x, y),
        op.exp(x),
        op.maximum(x, y),
        op.sum(x, axis=1),
        op.reshape(x, (3, 2)),
        op.transpose(x),
    ])
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 3)).astype("float32")
    b = rng.standard_normal(3).astype("float32")
    out = evaluate(ir.Function([x, y], body), a, b)
    expected = [a + b, a - b, a * b, np.exp(a), np.maximum(a, b), a.sum(axis=1), a.reshape(3, 2), a.T]
    for got, want in zip(out, expected):
        np.testing.assert_allclose(got, want, rtol=1e-6)
        assert got.dtype == np.float32


def test_registered_batch_norm_returns_a_three_tuple():
    from passinfra.ir import op

    x = ir.var("x", (2, 3, 4, 4))
    gamma, beta, mean, var = (np.full(3, v, "float32") for v in (2.0, 0.5, 1.0, 4.0))
    call = op.nn.batch_norm(x, *(ir.const(c) for c in (gamma, beta, mean, var)))
    data = np.random.default_rng(2).standard_normal((2, 3, 4, 4)).astype("float32")
    out = evaluate(ir.Function([x], call), data)
    assert isinstance(out, tuple) and len(out) == 3
    expected = (data - 1.0) / np.sqrt(4.0 + 1e-5) * 2.0 + 0.5
    np.testing.assert_allclose(out[0], expected, rtol=1e-5, atol=1e-6)

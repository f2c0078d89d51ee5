"""BackwardFoldScaleAxis, ForwardFoldScaleAxis and their Sequential FoldScaleAxis."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import passinfra.transform.builtin.infer_type  # noqa: F401  (registers InferType, which the passes require)
from passinfra import evaluate, ir
from passinfra.ir import op
from passinfra.transform import PassContext, Sequential, get_pass
from passinfra.transform.builtin.backward_fold_scale_axis import BackwardFoldScaleAxis
from passinfra.transform.builtin.fold_constant import FoldConstant
from passinfra.transform.builtin.fold_scale_axis import FoldScaleAxis
from passinfra.transform.builtin.forward_fold_scale_axis import ForwardFoldScaleAxis
from passinfra.transform.builtin.simplify_inference import SimplifyInference
from tests.strategies import GEN_SETTINGS, program_inputs, programs
from tests.transform.pass_equivalence import assert_same_value

RNG = np.random.default_rng(0)


def rand(*shape: int, low: float | None = None, high: float | None = None) -> np.ndarray:
    if low is not None:
        return RNG.uniform(low, high, shape).astype("float32")
    return RNG.standard_normal(shape).astype("float32")


def run(pass_, func: ir.Function) -> ir.Function:
    return pass_(ir.IRModule({"main": func}))["main"]


def assert_results_close(actual, expected) -> None:
    """rtol 1e-5, atol 1e-5: folding a scale into a weight reassociates the products of a sum."""
    assert_same_value(actual, expected, atol=1e-5)


def op_names(expr: ir.Expr) -> list[str]:
    return [n.op.name for n in ir.iter_post_order(expr) if isinstance(n, ir.Call)]


def check_same_values(before: ir.Function, after: ir.Function, *shapes: tuple[int, ...]) -> None:
    args = [rand(*s) for s in shapes]
    assert_results_close(evaluate(after, *args), evaluate(before, *args))


# --------------------------------------------------------------------------- backward


def test_backward_conv2d_scale_folds_into_weight():
    x, weight, scale = ir.var("x", (1, 3, 5, 5)), rand(4, 3, 3, 3), rand(4, 1, 1, low=0.5, high=2)
    before = ir.Function([x], op.multiply(op.nn.conv2d(x, ir.const(weight), padding=(1, 1)), ir.const(scale)))
    new_weight = op.multiply(ir.const(weight), ir.const(scale.reshape(4, 1, 1, 1)))
    expected = ir.Function([x], op.nn.conv2d(x, new_weight, padding=(1, 1)))
    after = run(BackwardFoldScaleAxis(), before)
    ir.assert_structural_equal(after, expected)
    check_same_values(before, after, (1, 3, 5, 5))


def test_backward_crosses_bias_add_add_and_relu_with_positive_scale():
    x, weight = ir.var("x", (1, 2, 4, 4)), rand(3, 2, 1, 1)
    bias, shift, scale = rand(3), rand(1, 3, 1, 1), rand(1, 3, 1, 1, low=0.5, high=2)
    conv = op.nn.conv2d(x, ir.const(weight))
    shifted = op.add(op.nn.bias_add(conv, ir.const(bias)), ir.const(shift))
    body = op.multiply(ir.const(scale), op.nn.relu(shifted))
    before = ir.Function([x], body)
    vector = scale.reshape(3)
    new_conv = op.nn.conv2d(x, op.multiply(ir.const(weight), ir.const(vector.reshape(3, 1, 1, 1))))
    new_bias = op.nn.bias_add(new_conv, op.multiply(ir.const(bias), ir.const(vector)))
    new_add = op.add(new_bias, op.multiply(ir.const(shift), ir.const(vector.reshape(3, 1, 1))))
    expected = ir.Function([x], op.nn.relu(new_add))
    after = run(BackwardFoldScaleAxis(), before)
    ir.assert_structural_equal(after, expected)
    check_same_values(before, after, (1, 2, 4, 4))


def test_backward_dense_scale_per_unit():
    x, weight, scale = ir.var("x", (2, 5)), rand(3, 5), rand(3, low=0.5, high=2)
    before = ir.Function([x], op.multiply(op.nn.dense(x, ir.const(weight)), ir.const(scale)))
    expected = ir.Function([x], op.nn.dense(x, op.multiply(ir.const(weight), ir.const(scale.reshape(3, 1)))))
    after = run(BackwardFoldScaleAxis(), before)
    ir.assert_structural_equal(after, expected)
    check_same_values(before, after, (2, 5))


def test_backward_leaves_unsafe_patterns_alone():
    x = ir.var("x", (1, 2, 3, 3))
    conv = op.nn.conv2d(x, ir.const(rand(2, 2, 1, 1)))
    negative = ir.const(np.array([[[1.0]], [[-1.0]]], "float32"))
    spatial = ir.const(rand(3, 3))
    cases = [
        op.multiply(op.nn.relu(conv), negative),  # relu does not commute with a negative scale
        op.multiply(conv, spatial),  # not per channel
        op.add(op.multiply(conv, negative), conv),  # conv used twice
        op.multiply(op.nn.softmax(conv), negative),  # softmax is not crossed
        op.multiply(conv, ir.const(np.array([[[np.inf]], [[1.0]]], "float32"))),  # not finite
    ]
    for body in cases:
        func = ir.Function([x], body)
        assert run(BackwardFoldScaleAxis(), func) is func


def test_backward_long_chain_is_iterative():
    x = ir.var("x", (1, 2, 2, 2))
    shift = ir.const(rand(2, 1, 1))
    body: ir.Expr = op.nn.conv2d(x, ir.const(rand(2, 2, 1, 1)))
    for _ in range(20_000):
        body = op.add(body, shift)
    after = run(BackwardFoldScaleAxis(), ir.Function([x], op.multiply(body, ir.const(rand(2, 1, 1)))))
    names = op_names(after)
    assert names.count("add") == 20_000 and names.count("multiply") == 20_001  # scaled weight + shifts
    assert after.body.op.name == "add"


# --------------------------------------------------------------------------- forward


def test_forward_conv2d_input_scale_folds_into_weight():
    x, weight, scale = ir.var("x", (1, 3, 5, 5)), rand(4, 3, 3, 3), rand(3, 1, 1, low=0.5, high=2)
    before = ir.Function([x], op.nn.conv2d(op.multiply(x, ir.const(scale)), ir.const(weight), padding=(1, 1)))
    factor = np.broadcast_to(scale.reshape(1, 3), (4, 3)).reshape(4, 3, 1, 1)
    new_weight = op.multiply(ir.const(weight), ir.const(factor))
    expected = ir.Function([x], op.nn.conv2d(x, new_weight, padding=(1, 1)))
    after = run(ForwardFoldScaleAxis(), before)
    ir.assert_structural_equal(after, expected)
    check_same_values(before, after, (1, 3, 5, 5))


def test_forward_grouped_depthwise_and_relu():
    x = ir.var("x", (1, 4, 5, 5))
    scale = ir.const(rand(1, 4, 1, 1, low=0.5, high=2))
    for groups, weight_shape in ((2, (6, 2, 3, 3)), (4, (8, 1, 3, 3))):
        data = op.nn.relu(op.multiply(x, scale))
        weight = ir.const(rand(*weight_shape))
        before = ir.Function([x], op.nn.conv2d(data, weight, padding=(1, 1), groups=groups))
        after = run(ForwardFoldScaleAxis(), before)
        assert op_names(after) == ["nn.relu", "multiply", "nn.conv2d"]  # multiply is on the weight
        check_same_values(before, after, (1, 4, 5, 5))


def test_forward_dense_scale_per_input_feature():
    x, weight, scale = ir.var("x", (2, 5)), rand(3, 5), rand(5, low=0.5, high=2)
    before = ir.Function([x], op.nn.dense(op.multiply(ir.const(scale), x), ir.const(weight)))
    expected = ir.Function([x], op.nn.dense(x, op.multiply(ir.const(weight), ir.const(scale.reshape(1, 5)))))
    after = run(ForwardFoldScaleAxis(), before)
    ir.assert_structural_equal(after, expected)
    check_same_values(before, after, (2, 5))


def test_forward_keeps_shared_or_non_channel_scales():
    x = ir.var("x", (1, 2, 3, 3))
    weight = ir.const(rand(2, 2, 1, 1))
    scaled = op.multiply(x, ir.const(rand(2, 1, 1)))
    shared = ir.Function([x], op.add(op.nn.conv2d(scaled, weight), scaled))
    spatial = ir.Function([x], op.nn.conv2d(op.multiply(x, ir.const(rand(3, 3))), weight))
    for func in (shared, spatial):
        assert run(ForwardFoldScaleAxis(), func) is func


# --------------------------------------------------------------------------- FoldScaleAxis


def test_fold_scale_axis_is_registered_sequence():
    pass_ = get_pass("FoldScaleAxis")
    assert isinstance(pass_, Sequential)
    assert (pass_.info.name, pass_.info.opt_level) == ("FoldScaleAxis", 3)
    assert [p.info.name for p in pass_.passes] == ["BackwardFoldScaleAxis", "ForwardFoldScaleAxis"]
    for name in ("BackwardFoldScaleAxis", "ForwardFoldScaleAxis"):
        info = get_pass(name).info
        assert (info.opt_level, tuple(info.required)) == (3, ("InferType",))


def test_conv_batch_norm_relu_folds_to_conv_add_relu():
    x = ir.var("x", (1, 3, 6, 6))
    conv = op.nn.conv2d(x, ir.const(rand(4, 3, 3, 3)), padding=(1, 1))
    stats = [rand(4, low=0.5, high=1.5), rand(4), rand(4), rand(4, low=0.5, high=1.5)]
    bn = op.nn.batch_norm(conv, *(ir.const(s) for s in stats))
    before = ir.IRModule({"main": ir.Function([x], op.nn.relu(ir.TupleGetItem(bn, 0)))})
    pipeline = Sequential([SimplifyInference(), FoldConstant(), FoldScaleAxis(), FoldConstant()])
    with PassContext(opt_level=3):
        after = pipeline(before)
    assert op_names(after["main"]) == ["nn.conv2d", "add", "nn.relu"]
    assert all(isinstance(arg, ir.Constant) for arg in (after["main"].body.args[0].args[1],))
    check_same_values(before["main"], after["main"], (1, 3, 6, 6))


def test_nothing_runs_below_opt_level_3():
    x = ir.var("x", (1, 2, 3, 3))
    func = ir.Function([x], op.multiply(op.nn.conv2d(x, ir.const(rand(2, 2, 1, 1))), ir.const(rand(2, 1, 1))))
    mod = ir.IRModule({"main": func})
    assert FoldScaleAxis()(mod)["main"] is func  # default context: opt_level 2


@given(programs(max_nodes=30), st.integers(0, 2**16))
@GEN_SETTINGS
def test_property_evaluation_unchanged(mod, seed):
    inputs = program_inputs(mod, seed)
    with PassContext(opt_level=3):
        after = FoldScaleAxis()(mod)
    ir.verify_well_formed(after)
    ir.infer_type(after)
    assert_results_close(evaluate(after, *inputs), evaluate(mod, *inputs))


@st.composite
def scaled_conv_functions(draw) -> ir.Function:
    """``[relu](x * s_in) -> conv2d (grouped or not) -> [bias_add] -> [add c] -> [relu]
    -> [* s_out]`` with scales of every per-channel spelling, positive or mixed."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    c_in = draw(st.integers(1, 4))
    groups = draw(st.sampled_from([g for g in (1, 2, 4) if c_in % g == 0]))
    c_out = groups * draw(st.integers(1, 2))
    kernel = draw(st.sampled_from([1, 3]))

    def per_channel(channels: int) -> ir.Constant:
        shape = draw(st.sampled_from([(channels, 1, 1), (1, channels, 1, 1), (), (1, 1, 1)]))
        low = 0.5 if draw(st.booleans()) else -2.0
        return ir.const(rng.uniform(low, 2.0, shape).astype("float32"))

    x = ir.var("x", (1, c_in, 4, 4))
    data: ir.Expr = x
    if draw(st.booleans()):
        data = op.multiply(data, per_channel(c_in))
        if draw(st.booleans()):
            data = op.nn.relu(data)
    weight = ir.const(rng.standard_normal((c_out, c_in // groups, kernel, kernel)).astype("float32"))
    y = op.nn.conv2d(data, weight, padding=(kernel // 2, kernel // 2), groups=groups)
    if draw(st.booleans()):
        y = op.nn.bias_add(y, ir.const(rng.standard_normal(c_out).astype("float32")))
    if draw(st.booleans()):
        y = op.add(y, per_channel(c_out))
    if draw(st.booleans()):
        y = op.nn.relu(y)
    if draw(st.booleans()):
        y = op.multiply(y, per_channel(c_out))
    return ir.Function([x], y)


@given(scaled_conv_functions(), st.integers(0, 2**16))
@GEN_SETTINGS
def test_property_conv_scale_patterns_fold_correctly(func, seed):
    from passinfra.transform.builtin.alter_op_layout import AlterOpLayout

    mod = ir.IRModule({"main": func})
    data = np.random.default_rng(seed).standard_normal((1, *func.params[0].type_annotation.shape[1:]))
    data = data.astype("float32")
    expected = evaluate(mod, data)
    with PassContext(opt_level=3):
        folded = Sequential([FoldScaleAxis(), FoldConstant()])(mod)
        assert_results_close(evaluate(folded, data), expected)
        relaid = Sequential([AlterOpLayout(), FoldConstant()])(folded)
    ir.verify_well_formed(relaid)
    ir.infer_type(relaid)
    assert_results_close(evaluate(relaid, data), expected)

"""SimplifyInference: Before/Expected rewrites, config flag, identity sharing, properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import passinfra.transform.builtin.infer_type  # noqa: F401  (registers InferType, which the pass requires)
from passinfra import evaluate, ir
from passinfra.ir import op
from passinfra.transform import PassContext, get_pass
from passinfra.transform.builtin.simplify_inference import SPLIT_LAYER_NORM, SimplifyInference
from tests.strategies import GEN_SETTINGS, program_inputs, programs
from tests.transform.pass_equivalence import assert_same_value


def run(func: ir.Function, config: dict | None = None) -> ir.Function:
    with PassContext(config=config):
        return SimplifyInference()(ir.IRModule({"main": func}))["main"]


def assert_results_close(actual, expected) -> None:
    """rtol 1e-5, atol 1e-6 for values near 0."""
    assert_same_value(actual, expected, atol=1e-6)


def bn_params(channels: int, dtype: str = "float32") -> list[ir.Var]:
    return [ir.var(name, (channels,), dtype) for name in ("gamma", "beta", "mean", "var")]


def expected_scale_shift(data, gamma, beta, mean, var, eps, dtype, trailing):
    scale = op.divide(gamma, op.sqrt(op.add(var, ir.const(eps, dtype))))
    shift = op.subtract(beta, op.multiply(mean, scale))
    if trailing:
        scale, shift = op.expand_dims(scale, 1, trailing), op.expand_dims(shift, 1, trailing)
    return op.add(op.multiply(data, scale), shift)


def test_batch_norm_becomes_scale_and_shift_along_channels():
    x = ir.var("x", (2, 3, 4, 5))
    params = bn_params(3)
    before = ir.Function([x, *params], ir.TupleGetItem(op.nn.batch_norm(x, *params, epsilon=1e-3), 0))
    expected = ir.Function([x, *params], expected_scale_shift(x, *params, 1e-3, "float32", trailing=2))
    ir.assert_structural_equal(run(before), expected)


def test_batch_norm_on_last_axis_needs_no_expand_and_stats_fields_become_inputs():
    x = ir.var("x", (4, 3), "float64")
    params = bn_params(3, "float64")
    bn = op.nn.batch_norm(x, *params, axis=-1)
    before = ir.Function([x, *params], ir.Tuple([ir.TupleGetItem(bn, i) for i in range(3)]))
    gamma, beta, mean, var = params
    out = expected_scale_shift(x, *params, 1e-5, "float64", trailing=0)
    expected = ir.Function([x, *params], ir.Tuple([out, mean, var]))
    ir.assert_structural_equal(run(before), expected)


def test_two_reads_of_one_batch_norm_share_one_rewrite():
    x = ir.var("x", (1, 2, 3, 3))
    bn = op.nn.batch_norm(x, *(ir.const(np.full(2, v, "float32")) for v in (1.0, 0.5, 0.1, 2.0)))
    before = ir.Function([x], op.add(ir.TupleGetItem(bn, 0), ir.TupleGetItem(bn, 0)))
    after = run(before)
    assert after.body.args[0] is after.body.args[1]
    data = np.random.default_rng(1).standard_normal((1, 2, 3, 3)).astype("float32")
    assert_results_close(evaluate(after, data), evaluate(before, data))


def test_dropout_becomes_its_input():
    x = ir.var("x", (2, 3))
    before = ir.Function([x], op.nn.relu(op.nn.dropout(op.exp(x), rate=0.3)))
    expected = ir.Function([x], op.nn.relu(op.exp(x)))
    ir.assert_structural_equal(run(before), expected)


def test_layer_norm_kept_by_default_and_function_returned_unchanged():
    x, gamma, beta = ir.var("x", (2, 6)), ir.var("g", (6,)), ir.var("b", (6,))
    before = ir.Function([x, gamma, beta], op.nn.layer_norm(x, gamma, beta))
    assert run(before) is before
    assert run(before, {SPLIT_LAYER_NORM: False}) is before


def test_layer_norm_split_when_configured():
    x, gamma, beta = ir.var("x", (2, 6, 3)), ir.var("g", (6,)), ir.var("b", (6,))
    before = ir.Function([x, gamma, beta], op.nn.layer_norm(x, gamma, beta, axis=1, epsilon=1e-4))
    centered = op.subtract(x, op.mean(x, 1, keepdims=True))
    variance = op.mean(op.multiply(centered, centered), 1, keepdims=True)
    normalized = op.divide(centered, op.sqrt(op.add(variance, ir.const(1e-4, "float32"))))
    body = op.add(op.multiply(normalized, op.expand_dims(gamma, 1, 1)), op.expand_dims(beta, 1, 1))
    expected = ir.Function([x, gamma, beta], body)
    after = run(before, {SPLIT_LAYER_NORM: True})
    ir.assert_structural_equal(after, expected)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype("float32") for s in ((2, 6, 3), (6,), (6,))]
    assert_results_close(evaluate(after, *args), evaluate(before, *args))


def test_config_value_type_is_checked():
    with pytest.raises(TypeError, match="split_layer_norm"):
        PassContext(config={SPLIT_LAYER_NORM: "yes"})


def test_nothing_to_simplify_keeps_objects():
    x = ir.var("x", (2, 2))
    before = ir.IRModule({"main": ir.Function([x], op.nn.softmax(op.add(x, x)))})
    after = SimplifyInference()(before)
    assert after is not before
    assert after["main"] is before["main"]


def test_demo_cnn_batch_norm_removed_results_equal():
    from passinfra.frontend.zoo.ir_models import demo_cnn

    mod = demo_cnn()
    after = SimplifyInference()(mod)
    names = [n.op.name for n in ir.iter_post_order(after["main"]) if isinstance(n, ir.Call)]
    assert "nn.batch_norm" not in names
    data = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype("float32")
    assert_results_close(evaluate(after, data), evaluate(mod, data))


def test_registered_with_tvm_info():
    info = get_pass("SimplifyInference").info
    assert (info.name, info.opt_level, tuple(info.required)) == ("SimplifyInference", 0, ("InferType",))


def test_deep_dropout_chain_is_iterative():
    x = ir.var("x", (2,))
    body: ir.Expr = x
    for _ in range(30_000):
        body = op.nn.dropout(op.negative(body))
    after = run(ir.Function([x], body))
    negatives = [n for n in ir.iter_post_order(after) if isinstance(n, ir.Call)]
    assert len(negatives) == 30_000 and all(n.op.name == "negative" for n in negatives)


@given(programs(max_nodes=30), st.integers(0, 2**16))
@GEN_SETTINGS
def test_property_evaluation_unchanged(mod, seed):
    inputs = program_inputs(mod, seed)
    with PassContext(config={SPLIT_LAYER_NORM: True}):
        after = SimplifyInference()(mod)
    ir.verify_well_formed(after)
    ir.infer_type(after)
    assert_results_close(evaluate(after, *inputs), evaluate(mod, *inputs))

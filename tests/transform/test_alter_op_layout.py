"""AlterOpLayout: NHWC conversion, layout propagation, transpose counts, the demo pipeline."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import passinfra.transform.builtin.infer_type  # noqa: F401  (registers InferType, which the pass requires)
from passinfra import evaluate, ir
from passinfra.frontend.zoo.ir_models import demo_cnn
from passinfra.ir import op
from passinfra.transform import PassConfigError, PassContext, Sequential, get_pass
from passinfra.transform.builtin.alter_op_layout import (
    LAYOUT_CONFIG,
    NCHW_TO_NHWC,
    NHWC_TO_NCHW,
    OIHW_TO_HWIO,
    AlterOpLayout,
)
from passinfra.transform.builtin.fold_constant import FoldConstant
from passinfra.transform.builtin.fold_scale_axis import FoldScaleAxis
from passinfra.transform.builtin.simplify_inference import SimplifyInference
from tests.strategies import GEN_SETTINGS, program_inputs, programs
from tests.transform.pass_equivalence import assert_same_value

RNG = np.random.default_rng(0)
NHWC = {"data_layout": "NHWC", "kernel_layout": "HWIO"}


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype("float32")


def run(func: ir.Function, config: dict | None = None) -> ir.Function:
    with PassContext(config=config):
        return AlterOpLayout()(ir.IRModule({"main": func}))["main"]


def assert_results_close(actual, expected) -> None:
    """rtol 1e-5, atol 1e-5: a changed layout reorders the sums of a convolution."""
    assert_same_value(actual, expected, atol=1e-5)


def op_names(expr: ir.Expr) -> list[str]:
    return [n.op.name for n in ir.iter_post_order(expr) if isinstance(n, ir.Call)]


def is_constant_valued(expr: ir.Expr) -> bool:
    return not any(isinstance(n, (ir.Var, ir.GlobalVar)) for n in ir.iter_post_order(expr))


def activation_transposes(expr: ir.Expr) -> int:
    """Transposes of values computed at run time (those of weights and biases fold away)."""
    return sum(
        1 for n in ir.iter_post_order(expr)
        if isinstance(n, ir.Call) and n.op.name == "transpose" and not is_constant_valued(n.args[0])
    )


def check_same_values(before: ir.Function, after: ir.Function, *shapes: tuple[int, ...]) -> None:
    args = [rand(*s) for s in shapes]
    assert_results_close(evaluate(after, *args), evaluate(before, *args))


def test_single_conv2d_gets_transposes_at_both_ends():
    x, weight = ir.var("x", (1, 3, 5, 5)), ir.const(rand(4, 3, 3, 3))
    before = ir.Function([x], op.nn.conv2d(x, weight, strides=(2, 2), padding=(1, 1)))
    conv = op.nn.conv2d(op.transpose(x, NCHW_TO_NHWC), op.transpose(weight, OIHW_TO_HWIO),
                        strides=(2, 2), padding=(1, 1), **NHWC)
    expected = ir.Function([x], op.transpose(conv, NHWC_TO_NCHW))
    after = run(before)
    ir.assert_structural_equal(after, expected)
    check_same_values(before, after, (1, 3, 5, 5))


def test_layout_propagates_through_bias_relu_per_channel_ops_and_pool():
    x, w1, w2 = ir.var("x", (1, 2, 6, 6)), ir.const(rand(4, 2, 3, 3)), ir.const(rand(3, 4, 1, 1))
    bias, shift = ir.const(rand(4)), ir.const(rand(4, 1, 1))
    y = op.nn.relu(op.nn.bias_add(op.nn.conv2d(x, w1, padding=(1, 1)), bias))
    y = op.nn.max_pool2d(op.add(y, shift), (2, 2), strides=(2, 2))
    before = ir.Function([x], op.nn.conv2d(y, w2))

    z = op.nn.conv2d(op.transpose(x, NCHW_TO_NHWC), op.transpose(w1, OIHW_TO_HWIO), padding=(1, 1), **NHWC)
    z = op.nn.relu(op.nn.bias_add(z, bias, axis=3))
    z = op.add(z, op.transpose(op.expand_dims(shift, 0, 1), NCHW_TO_NHWC))
    z = op.nn.max_pool2d(z, (2, 2), strides=(2, 2), layout="NHWC")
    z = op.nn.conv2d(z, op.transpose(w2, OIHW_TO_HWIO), **NHWC)
    expected = ir.Function([x], op.transpose(z, NHWC_TO_NCHW))
    after = run(before)
    ir.assert_structural_equal(after, expected)
    check_same_values(before, after, (1, 2, 6, 6))


def test_conv_relu_conv_chain_has_one_transpose_in_and_one_out():
    x = ir.var("x", (1, 3, 8, 8))
    y = op.nn.relu(op.nn.conv2d(x, ir.const(rand(8, 3, 3, 3)), padding=(1, 1)))
    y = op.nn.relu(op.nn.conv2d(y, ir.const(rand(8, 8, 3, 3)), padding=(1, 1)))
    y = op.nn.conv2d(y, ir.const(rand(4, 8, 1, 1)))
    before = ir.IRModule({"main": ir.Function([x], y)})
    after = AlterOpLayout()(before)
    assert activation_transposes(after["main"]) == 2
    folded = FoldConstant()(after)
    assert op_names(folded["main"]).count("transpose") == 2
    check_same_values(before["main"], folded["main"], (1, 3, 8, 8))


def test_quantize_dequantize_between_convs_stays_nhwc():
    """A QDQ model's convolutions: the activations' quantize/dequantize pairs (per tensor)
    and a per-channel dequantize keep the NHWC value, so the chain has one transpose in
    and one out (each pair used to cost one out and one back in)."""
    x = ir.var("x", (1, 3, 8, 8))
    scale, zero = ir.const(np.float32(0.05)), ir.const(np.uint8(128))
    y = op.nn.conv2d(x, ir.const(rand(8, 3, 3, 3)), padding=(1, 1))
    y = op.qnn.dequantize(op.qnn.quantize(y, scale, zero), scale, zero)
    per_channel = ir.const(np.linspace(0.01, 0.08, 8, dtype=np.float32).reshape(8, 1, 1))
    codes = op.qnn.quantize(y, per_channel, ir.const(np.zeros((8, 1, 1), np.int8)))
    y = op.qnn.dequantize(codes, per_channel, ir.const(np.zeros((8, 1, 1), np.int8)))
    before = ir.IRModule({"main": ir.Function([x], op.nn.conv2d(y, ir.const(rand(4, 8, 1, 1))))})
    after = AlterOpLayout()(before)
    assert activation_transposes(after["main"]) == 2
    check_same_values(before["main"], after["main"], (1, 3, 8, 8))


def test_dense_block_concatenation_stays_nhwc():
    """DenseNet's pattern: features concatenated along the channels with a conv's output,
    then a per-channel scale, relu and the next conv. Only the block input is NCHW (one
    transpose in) and the result (one out); the concatenation joins NHWC values on axis 3."""
    x = ir.var("x", (1, 4, 6, 6))
    grown = op.nn.relu(op.nn.conv2d(x, ir.const(rand(2, 4, 3, 3)), padding=(1, 1)))
    features = op.concatenate([x, grown], axis=1)
    scaled = op.nn.relu(op.multiply(features, ir.const(rand(6, 1, 1))))
    y = op.concatenate([features, op.nn.conv2d(scaled, ir.const(rand(3, 6, 1, 1)))], axis=-3)
    before = ir.IRModule({"main": ir.Function([x], y)})
    after = FoldConstant()(AlterOpLayout()(before))
    assert op_names(after["main"]).count("transpose") == 2
    concats = [n for n in ir.iter_post_order(after["main"].body)
               if isinstance(n, ir.Call) and n.op.name == "concatenate"]
    assert len(concats) == 2 and all(c.attrs["axis"] == 3 for c in concats)
    check_same_values(before["main"], after["main"], (1, 4, 6, 6))


def test_concatenation_without_nhwc_operands_or_off_the_channels_is_left_alone():
    x, z = ir.var("x", (1, 4, 6, 6)), ir.var("z", (1, 2, 6, 6))
    plain = ir.Function([x, z], op.concatenate([x, z], axis=1))
    assert ir.structural_equal(run(plain), plain)
    conv = op.nn.conv2d(x, ir.const(rand(4, 4, 1, 1)))
    along_height = ir.Function([x], op.concatenate([conv, x], axis=2))
    after = run(along_height)
    (concat,) = [n for n in ir.iter_post_order(after.body)
                 if isinstance(n, ir.Call) and n.op.name == "concatenate"]
    assert concat.attrs["axis"] == 2
    check_same_values(along_height, after, (1, 4, 6, 6))


def test_nchw_consumers_share_one_transpose_back():
    x = ir.var("x", (1, 2, 3, 3))
    conv = op.nn.conv2d(x, ir.const(rand(2, 2, 1, 1)))
    before = ir.Function([x], ir.Tuple([op.nn.softmax(conv), op.sum(conv), op.nn.relu(conv)]))
    after = run(before)
    assert activation_transposes(after) == 3  # in, back for softmax+sum (shared), back for relu
    softmax, total = after.body.fields[0], after.body.fields[1]
    assert softmax.args[0] is total.args[0]
    check_same_values(before, after, (1, 2, 3, 3))


def test_reductions_over_rows_and_columns_keeping_dimensions_stay_nhwc():
    """A quantized global average pool (sum over the image, kept dimensions) and a mean
    over the negative axes reduce the NHWC value over axes 1 and 2: the only transposes
    are the small results' ([1, 1, 1, 4]); a reduction over the channels, or without kept
    dimensions, still reads NCHW (one transpose back, shared)."""
    x = ir.var("x", (1, 3, 6, 6))
    conv = op.nn.relu(op.nn.conv2d(x, ir.const(rand(4, 3, 3, 3)), padding=(1, 1)))
    pooled = op.sum(op.cast(op.multiply(conv, ir.const(np.float32(16))), "int32"), axis=(2, 3), keepdims=True)
    mean = op.mean(conv, axis=(-1, -2), keepdims=True)
    kept = ir.Function([x], ir.Tuple([pooled, mean]))
    after = run(kept)
    reductions = [n for n in ir.iter_post_order(after.body)
                  if isinstance(n, ir.Call) and n.op.name in ("sum", "mean")]
    assert [r.attrs["axis"] for r in reductions] == [(1, 2), (1, 2)]
    transposed = [n.args[0] for n in ir.iter_post_order(after.body) if isinstance(n, ir.Call)
                  and n.op.name == "transpose" and not is_constant_valued(n.args[0])]
    assert [n.op.name for n in transposed[1:]] == ["sum", "mean"]  # after the input's
    check_same_values(kept, after, (1, 3, 6, 6))

    channels = ir.Function([x], ir.Tuple([op.sum(conv, axis=1, keepdims=True), op.sum(conv, axis=(2, 3))]))
    after = run(channels)
    assert activation_transposes(after) == 2  # in, and back for both reductions
    assert [n.attrs["axis"] for n in ir.iter_post_order(after.body)
            if isinstance(n, ir.Call) and n.op.name == "sum"] == [(1,), (2, 3)]
    check_same_values(channels, after, (1, 3, 6, 6))

    # a call that leaves its attributes out (text IR) has the defaults: all axes, read NCHW
    bare = ir.Function([x], ir.Call(op.sum(conv).op, [conv], ir.Attrs({})))
    assert activation_transposes(run(bare)) == 2


def test_grouped_conv_and_full_size_operands_stay_correct():
    x, residual = ir.var("x", (1, 4, 5, 5)), ir.var("r", (1, 4, 5, 5))
    conv = op.nn.conv2d(x, ir.const(rand(4, 1, 3, 3)), padding=(1, 1), groups=4)
    before = ir.Function([x, residual], op.nn.avg_pool2d(op.add(conv, residual), (3, 3), padding=(1, 1)))
    after = run(before)
    assert "nn.conv2d" in op_names(after)
    check_same_values(before, after, (1, 4, 5, 5), (1, 4, 5, 5))


def test_nchw_config_or_no_conv_leaves_function_unchanged():
    x = ir.var("x", (1, 2, 3, 3))
    with_conv = ir.Function([x], op.nn.conv2d(x, ir.const(rand(2, 2, 1, 1))))
    assert run(with_conv, {LAYOUT_CONFIG: "NCHW"}) is with_conv
    without_conv = ir.Function([x], op.nn.relu(op.nn.max_pool2d(x, (2, 2))))
    assert run(without_conv) is without_conv


def test_unsupported_layout_is_an_error_naming_the_key():
    x = ir.var("x", (1, 2, 3, 3))
    func = ir.Function([x], op.nn.relu(x))
    with pytest.raises(PassConfigError, match="relay.AlterOpLayout.layout.*NCHWc"):
        run(func, {LAYOUT_CONFIG: "NCHWc"})


def test_registered_with_tvm_info():
    info = get_pass("AlterOpLayout").info
    assert (info.name, info.opt_level, tuple(info.required)) == ("AlterOpLayout", 3, ("InferType",))


def test_long_elementwise_chain_after_conv_is_iterative():
    x = ir.var("x", (1, 2, 2, 2))
    shift = ir.const(rand(2, 1, 1))
    y: ir.Expr = op.nn.conv2d(x, ir.const(rand(2, 2, 1, 1)))
    for _ in range(20_000):
        y = op.nn.relu(op.add(y, shift))
    after = run(ir.Function([x], y))
    assert activation_transposes(after) == 2
    assert after.body.op.name == "transpose" and after.body.args[0].op.name == "nn.relu"


def test_demo_cnn_full_pipeline_keeps_results():
    mod = demo_cnn()
    pipeline = Sequential([SimplifyInference(), FoldConstant(), FoldScaleAxis(), FoldConstant(),
                           AlterOpLayout(), FoldConstant()])
    with PassContext(opt_level=3):
        after = pipeline(mod)
    names = op_names(after["main"])
    assert names.count("transpose") == 2 and "nn.batch_norm" not in names and "multiply" not in names
    calls = [n for n in ir.iter_post_order(after["main"]) if isinstance(n, ir.Call)]
    conv = next(n for n in calls if n.op.name == "nn.conv2d")
    assert conv.attrs["data_layout"] == "NHWC" and isinstance(conv.args[1], ir.Constant)
    ir.verify_well_formed(after)
    check_same_values(mod["main"], after["main"], (1, 3, 16, 16))


@given(programs(max_nodes=30), st.integers(0, 2**16))
@GEN_SETTINGS
def test_property_evaluation_unchanged(mod, seed):
    inputs = program_inputs(mod, seed)
    after = AlterOpLayout()(mod)
    ir.verify_well_formed(after)
    ir.infer_type(after)
    assert_results_close(evaluate(after, *inputs), evaluate(mod, *inputs))

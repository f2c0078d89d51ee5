"""Depthwise integer convolutions and looked-up outputs (issue 33): a depthwise QDQ
convolution runs on the integer runtime's depthwise bodies (``c/qgemm.c``: 9 on AVX2, over
input rows widened once, 10 in C), and an element-wise function of a requantized output that
QuantizedLookupTables made a table (a hard-swish) joins its kernel, which looks each value
up as it stores it. Exact: the interpreter's bits on every instruction set and thread
count."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import passinfra
from passinfra.frontend import from_onnx
from passinfra.transform import FuseQDQ, InferType, PassContext
from tests.frontend.test_qdq_fusion import _build, _Graph, _requantized_calls, conv_model
from tests.isa_levels import assert_same_on_every_isa, qgemm_body_calls

_AVX2_DEPTHWISE, _PORTABLE_DEPTHWISE = 9, 10


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("qdq-depthwise-cache"))


def _fused_reference(model, x: np.ndarray) -> np.ndarray:
    """The interpreter's value of the model after FuseQDQ (the integer ops' arithmetic)."""
    with PassContext(opt_level=3):
        return np.asarray(passinfra.evaluate(FuseQDQ()(InferType()(from_onnx(model))), x))


def _bodies_at_avx2(lib, x: np.ndarray) -> list[int]:
    """The integer bodies one call of ``lib`` takes at the AVX2 level."""
    levels = lib.conv_isa()
    lib.conv_isa("avx2")
    try:
        before = qgemm_body_calls(lib)
        lib(x)
        return [after - first for after, first in zip(qgemm_body_calls(lib), before, strict=True)]
    finally:
        lib.conv_isa(levels)


# channels in blocks of 16 (four pixels at a time, and the rest of a row's pixels one at a
# time) and 8 and past them (in C); odd and even filters, stride, dilation, padding; uint8
# and int8 images; symmetric 7-bit, full-range and asymmetric uint8 weights
@pytest.mark.parametrize(("shape", "kernel", "stride", "pad", "dilation", "act", "weight"), [
    ((1, 20, 9, 11), 3, 1, 1, 1, "uint8", "int8"),  # 16 + 4 channels; 11 pixels a row: 4 + 4 + 3
    ((2, 24, 8, 7), 5, 2, 2, 1, "int8", "int8 full"),  # two images, 16 + 8 channels
    ((1, 56, 10, 9), 3, 2, 1, 1, "uint8", "uint8"),  # an even stride: 48 + 8 channels
    ((1, 8, 10, 10), 2, 1, 0, 2, "int8", "int8"),  # an even filter, dilation 2
    ((1, 16, 5, 3), 3, 1, 1, 1, "uint8", "int8"),  # rows of 3 pixels: one at a time
    ((1, 3, 4, 4), 7, 1, 3, 1, "uint8", "int8 full"),  # 3 channels, in C; every window at the border
])
def test_a_depthwise_convolution_runs_on_the_depthwise_body(shape, kernel, stride, pad, dilation, act, weight,
                                                            cache_dir):
    dtype = weight.split()[0]
    model, feeds = conv_model(shape, shape[1], kernel, stride, pad, shape[1], dilation, act=act,
                              symmetric=dtype == "int8", full_range=weight.endswith("full"),
                              weight_dtype=dtype)
    (fused,) = _requantized_calls(model)
    assert fused.op.name == "qnn.requantized_conv2d" and fused.attrs["groups"] == shape[1]
    lib = _build(model, cache_dir)
    assert_same_on_every_isa(lib, [feeds["x"]], _fused_reference(model, feeds["x"]))
    took = _bodies_at_avx2(lib, feeds["x"])
    body = _AVX2_DEPTHWISE if shape[1] >= 8 else _PORTABLE_DEPTHWISE  # (fewer than 8 channels: in C)
    assert took[body] == 1 and sum(took) == 1, took


def test_a_depthwise_convolution_of_int32_outputs_runs_on_the_depthwise_body(cache_dir):
    """ConvInteger of one group a channel: the int32 sums (no requantization), exactly."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (1, 24, 7, 9)).astype(np.uint8)
    inits = [numpy_helper.from_array(rng.integers(-128, 128, (24, 1, 3, 3)).astype(np.int8), "w"),
             numpy_helper.from_array(np.array(131, np.uint8), "xz"),
             numpy_helper.from_array(rng.integers(-9, 9, (24,)).astype(np.int8), "wz")]
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], group=24, pads=[1, 0, 1, 2])
    graph = helper.make_graph([node], "dw", [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    expected = np.asarray(passinfra.evaluate(from_onnx(model), x))
    lib = _build(model, cache_dir)
    assert_same_on_every_isa(lib, [x], expected)
    assert _bodies_at_avx2(lib, x)[_AVX2_DEPTHWISE] == 1


def test_a_stride_2_depthwise_layer_runs_on_both_threads(cache_dir):
    """MobileNetV3's first depthwise layer (112x112 -> 56x56, 16 channels) is worth two
    threads: body 9's work counts its pairs' slots and its rows' widening and requantizing,
    not its multiply-adds alone, by which it ran serially (as did the same layers at 28x28,
    14x14 and 7x7)."""
    model, feeds = conv_model((1, 16, 112, 112), 16, 3, 2, 1, 16)
    lib = _build(model, cache_dir)
    lib.set_num_threads(2)
    lib(feeds["x"])
    before = lib.thread_stats()
    lib(feeds["x"])
    after = lib.thread_stats()
    ran = {key: after[key] - before[key] for key in ("parallel_loops", "serial_loops")}
    assert ran["serial_loops"] == 0 and ran["parallel_loops"] >= 1, ran


def _hard_swish_model(shape, out_channels, kernel, groups, act, seed=0):
    """``Q(HardSwish(DQ(Q(conv(...)))))`` read by a pointwise convolution: QuantizedLookupTables
    makes the hard-swish a table of the first convolution's 8-bit output."""
    g = _Graph(shape, act, seed)
    zero = 128 if act == "uint8" else 0
    x = g.qdq("x", 0.05, zero - 3)
    w, scales = g.weight((out_channels, shape[1] // groups, kernel, kernel), 0, True)
    y = g.qdq(g.node("Conv", [x, w, g.bias(out_channels, 0.05, scales)], kernel_shape=[kernel, kernel],
                     pads=[kernel // 2] * 4, group=groups), 0.06, zero - 20)
    y = g.qdq(g.node("HardSwish", [y]), 0.04, zero - 60)
    w, scales = g.weight((8, out_channels, 1, 1), 0, True)
    y = g.node("Conv", [y, w, g.bias(8, 0.04, scales)], kernel_shape=[1, 1])
    return g.model(g.qdq(y, 0.1, zero)), g.feeds()


# a GEMM of 16 columns (rows' bytes looked up two at a time: 7 x 9 rows, an odd count) and
# of 40 (a panel of 32, then 8 in a row's vectors); a depthwise one of 56 channels (32 + 16 + 8)
@pytest.mark.parametrize(("shape", "out_channels", "kernel", "groups", "act"), [
    ((1, 8, 7, 9), 16, 3, 1, "uint8"),
    ((1, 8, 7, 9), 40, 3, 1, "int8"),
    ((1, 56, 6, 5), 56, 3, 56, "uint8"),
    ((1, 56, 6, 5), 56, 5, 56, "int8"),
])
def test_a_table_of_the_output_joins_its_kernel(shape, out_channels, kernel, groups, act, cache_dir):
    model, feeds = _hard_swish_model(shape, out_channels, kernel, groups, act)
    fused, _pointwise = _requantized_calls(model)
    assert len(fused.args) == 8 and fused.args[-1].data.shape == (256,), "the table is its last input"
    expected = np.asarray(passinfra.evaluate(from_onnx(model), feeds["x"]))
    assert_same_on_every_isa(_build(model, cache_dir), [feeds["x"]], expected)


# a tail of fewer than 32 values; several chunks of the runtime's 4096 (two threads' parts)
@pytest.mark.parametrize(("shape", "dtype"), [((3, 7, 5), "uint8"), ((2, 4200), "int8")])
def test_a_take_of_a_byte_table_by_uint8_indices_is_the_runtime_s_lookup(shape, dtype, cache_dir):
    """``take`` of 256 bytes by uint8 indices (QuantizedLookupTables' tables where no kernel
    takes them in) runs as ``rp_lookup_u8``: 32 values a step by VPSHUFB, the table's values."""
    from passinfra.ir import op
    from passinfra.ir.expr import Constant, Function, Var
    from passinfra.ir.module import IRModule
    from passinfra.ir.types import TensorType

    rng = np.random.default_rng(5)
    info = np.iinfo(dtype)
    table = rng.integers(info.min, info.max + 1, 256).astype(dtype)
    x = Var("x", TensorType(shape, "uint8"))
    mod = IRModule.from_expr(Function([x], op.take(Constant.owning(table), x, axis=0)))
    indices = rng.integers(0, 256, shape).astype(np.uint8)
    indices.flat[:256] = np.arange(256)[:indices.size]  # every value of the table read
    with PassContext(opt_level=3, config={"codegen.cache_dir": cache_dir}):
        lib = passinfra.build(mod)
    # (runtime=True: the library links the runtime, which nothing but the lookup calls here)
    assert_same_on_every_isa(lib, [indices], table[indices.astype(np.int64)], runtime=True)


@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(channels=st.integers(1, 40), kernel=st.integers(1, 5), stride=st.integers(1, 2), pad=st.integers(0, 2),
       dilation=st.integers(1, 2), height=st.integers(3, 9), width=st.integers(3, 9),
       act=st.sampled_from(["uint8", "int8"]), weight=st.sampled_from(["int8", "int8 full", "uint8"]))
def test_any_depthwise_geometry_is_the_interpreter_s(channels, kernel, stride, pad, dilation, height, width,
                                                     act, weight, cache_dir):
    """Random depthwise geometries (every one whose window fits the padded image): the
    library's bits are the interpreter's on every ISA and thread count. One channel is one
    group, not depthwise: a sum of ``kernel**2`` products, which ExactFloatConvolutions puts
    on the float kernels, and a 1x1 of one channel (a product) on generated loops without
    the runtime; every other geometry links it."""
    assume((height + 2 * pad - dilation * (kernel - 1) - 1) // stride >= 0)
    assume((width + 2 * pad - dilation * (kernel - 1) - 1) // stride >= 0)
    dtype = weight.split()[0]
    shape = (1, channels, height, width)
    model, feeds = conv_model(shape, channels, kernel, stride, pad, channels, dilation, act=act,
                              symmetric=dtype == "int8", full_range=weight.endswith("full"),
                              weight_dtype=dtype)
    links_runtime = None if channels == 1 else True
    assert_same_on_every_isa(_build(model, cache_dir), [feeds["x"]], _fused_reference(model, feeds["x"]),
                             runtime=links_runtime)


@pytest.mark.parametrize("act", ["uint8", "int8"])
def test_a_table_of_a_matmul_s_output_joins_its_gemm(act, cache_dir):
    """The same after a QDQ MatMul (``rp_qgemm_lut_i8``): 37 rows of 40 columns (a panel of
    32 and a row's vector of 8)."""
    g = _Graph((37, 48), act, seed=2)
    zero = 128 if act == "uint8" else 0
    x = g.qdq("x", 0.03, zero - 8)
    w, scales = g.weight((48, 40), 1, True)
    y = g.qdq(g.node("Add", [g.node("MatMul", [x, w]), g.bias(40, 0.03, scales)]), 0.05, zero + 3)
    y = g.qdq(g.node("HardSwish", [y]), 0.04, zero - 60)
    w, scales = g.weight((40, 8), 1, True)
    model = g.model(g.qdq(g.node("MatMul", [y, w]), 0.1, zero))
    fused = _requantized_calls(model)[0]
    assert fused.op.name == "qnn.requantized_matmul" and len(fused.args) == 8, "the table joined the GEMM"
    feeds = g.feeds()
    expected = np.asarray(passinfra.evaluate(from_onnx(model), feeds["x"]))
    assert_same_on_every_isa(_build(model, cache_dir), [feeds["x"]], expected)

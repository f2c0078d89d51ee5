"""QDQ models as integer code (issue 33): FuseQDQ turns DequantizeLinear -> Conv / MatMul /
Gemm / Add -> QuantizeLinear groups into qnn ops on the quantized values, which compute
onnxruntime's QLinear arithmetic exactly; the integer convolution runs on the runtime's
integer GEMM (one group, grouped) or its depthwise body (test_qdq_depthwise.py), the same
bits on every instruction set here and for any thread count; the weights stay int8."""

from __future__ import annotations

import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import passinfra
from passinfra.build import COMPILE_PIPELINE
from passinfra.frontend import from_onnx
from passinfra.ir.expr import Call
from passinfra.ir.functor import post_order_visit
from passinfra.ir.op.registry import Op
from passinfra.transform import FuseQDQ, InferType, PassContext, Sequential
from passinfra.transform.registry import get_pass
from tests.isa_levels import assert_same_on_every_isa, qgemm_body_calls

ort = pytest.importorskip("onnxruntime")

_ONNX = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}
_F32 = np.float32


class _Graph:
    """A QDQ graph under construction: float input ``x``, quantized as ``act`` dtype."""

    def __init__(self, shape: tuple[int, ...], act: str = "uint8", seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.act = act
        self.nodes: list = []
        self.inits: list = []
        self.input = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
        self.shape = shape
        self._count = 0

    def _name(self, stem: str) -> str:
        self._count += 1
        return f"{stem}{self._count}"

    def init(self, value: np.ndarray, stem: str) -> str:
        name = self._name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def qdq(self, value: str, scale: float, zero: int, dtype: str | None = None) -> str:
        """``DQ(Q(value))`` on a per-tensor grid."""
        dtype = dtype or self.act
        s, z = self.init(np.array(scale, _F32), "s"), self.init(np.array(zero, dtype), "z")
        q, dq = self._name("q"), self._name("dq")
        self.nodes += [helper.make_node("QuantizeLinear", [value, s, z], [q]),
                       helper.make_node("DequantizeLinear", [q, s, z], [dq])]
        return dq

    def weight(self, shape: tuple[int, ...], axis: int, per_channel: bool, dtype: str = "int8",
               symmetric: bool = True, full_range: bool = False) -> tuple[str, np.ndarray]:
        """``DQ(w)`` of an 8-bit initializer, per tensor or per ``axis``; and its scales.
        An int8 weight has 7-bit codes, [-64, 63] (onnxruntime's ``reduce_range``) unless
        ``full_range``: onnxruntime's u8 x s8 kernel on AVX2 without VNNI adds pairs of
        products in 16 bits with saturation (VPMADDUBSW), exact on every CPU only for such a
        weight; raypass's sums are exact for any (compared with the interpreter then)."""
        info = np.iinfo(dtype)
        low, high = (-64, 64) if dtype == "int8" and not full_range else (info.min, info.max + 1)
        codes = self.rng.integers(low, high, shape).astype(dtype)
        count = shape[axis] if per_channel else 1
        scales = (self.rng.uniform(0.5, 1.5, count) / 64).astype(_F32)
        zeros = (np.zeros(count, dtype) if symmetric
                 else self.rng.integers(info.min // 4, info.max // 4, count).astype(dtype))
        if not per_channel:
            scales, zeros = scales.reshape(()), zeros.reshape(())
        names = [self.init(codes, "w"), self.init(scales, "ws"), self.init(zeros, "wz")]
        dq = self._name("wdq")
        attrs = {"axis": axis} if per_channel else {}
        self.nodes.append(helper.make_node("DequantizeLinear", names, [dq], **attrs))
        return dq, scales

    def bias(self, count: int, x_scale: float, w_scales: np.ndarray) -> str:
        """``DQ(b)`` of an int32 bias with the scale ``x_scale * w_scale`` (as the quantizer)."""
        scale = (np.float32(x_scale) * w_scales).astype(_F32).reshape(-1)
        scale = np.broadcast_to(scale, (count,)).copy() if scale.size > 1 else scale.reshape(())
        codes = self.rng.integers(-5000, 5000, count).astype(np.int32)
        zeros = np.zeros_like(scale, np.int32)
        names = [self.init(codes, "b"), self.init(scale, "bs"), self.init(zeros, "bz")]
        dq = self._name("bdq")
        attrs = {"axis": 0} if scale.size > 1 else {}
        self.nodes.append(helper.make_node("DequantizeLinear", names, [dq], **attrs))
        return dq

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def model(self, output: str):
        result = helper.make_tensor_value_info(output, TensorProto.FLOAT, None)
        graph = helper.make_graph(self.nodes, "qdq", [self.input], [result], self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])

    def feeds(self) -> dict[str, np.ndarray]:
        return {"x": self.rng.standard_normal(self.shape).astype(_F32)}


def conv_model(shape, out_channels, kernel, stride=1, pad=0, groups=1, dilation=1, act="uint8",
               per_channel=True, bias=True, relu_zero=None, symmetric=True, seed=0, out_scale=0.08,
               full_range=False, weight_dtype="int8"):
    g = _Graph(shape, act, seed)
    zero = 128 if act == "uint8" else 0
    x = g.qdq("x", 0.05, zero - 3)
    w, scales = g.weight((out_channels, shape[1] // groups, kernel, kernel), 0, per_channel,
                         dtype=weight_dtype, symmetric=symmetric, full_range=full_range)
    inputs = [x, w] + ([g.bias(out_channels, 0.05, scales)] if bias else [])
    y = g.node("Conv", inputs, kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4,
               group=groups, dilations=[dilation, dilation])
    if relu_zero is not None:
        y = g.node("Relu", [y])
        return g.model(g.qdq(y, 0.04, relu_zero)), g.feeds()
    return g.model(g.qdq(y, out_scale, zero + 5)), g.feeds()


def _fused_ops(model) -> list[str]:
    with PassContext(opt_level=3):
        mod = FuseQDQ()(InferType()(from_onnx(model)))
    return re.findall(r"^\s+(?:%\d+ = )?([a-z_.0-9]+)\(", str(mod), re.MULTILINE)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("qdq-cache"))


def _build(model, cache_dir: str):
    with PassContext(opt_level=3, config={"codegen.cache_dir": cache_dir}):
        return passinfra.build(from_onnx(model))


def _onnxruntime(model, feeds) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


_CONVOLUTIONS = ("shape", "out_channels", "kernel", "stride", "pad", "groups", "act", "per_channel")


@pytest.mark.parametrize(_CONVOLUTIONS, [
    ((1, 16, 9, 9), 24, 1, 1, 0, 1, "uint8", True),  # pointwise: the data is the GEMM's matrix
    ((1, 64, 7, 9), 40, 1, 1, 0, 1, "uint8", True),  # 64 channels: AMX reads 32 of the 63 rows in place
    ((1, 8, 11, 9), 40, 3, 2, 1, 1, "uint8", True),  # im2col with padding, 5 x 5 = 25 rows
    ((2, 3, 12, 12), 16, 3, 1, 1, 1, "int8", False),  # 27 products a sum: an RGB first layer, two images
    ((1, 6, 12, 12), 16, 3, 1, 1, 1, "int8", True),  # 54: the integer GEMM
    ((1, 3, 23, 21), 8, 7, 2, 3, 1, "uint8", True),  # a 7x7 stem: a row of taps inside is one copy of 21
    ((1, 3, 6, 4), 8, 7, 1, 3, 1, "uint8", True),  # no row of taps inside a line of 4 pixels
    # two images of 575 rows, gathered a line of output pixels at a time: row blocks end mid-line
    ((2, 3, 25, 23), 24, 3, 1, 1, 1, "uint8", True),
    # AMX where the CPU has it (36 k): the same, gathered a line at a time into its tiles
    ((2, 4, 25, 23), 24, 3, 1, 1, 1, "int8", True),
    # 3136 k: a line of 14 output pixels gathered in parts of 10 rows (AMX's buffer of 32 KiB)
    ((1, 64, 9, 14), 24, 7, 1, 3, 1, "uint8", True),
    ((1, 32, 8, 8), 32, 3, 1, 1, 2, "uint8", True),  # grouped: two GEMMs of 16 channels in one call
    ((1, 32, 19, 17), 32, 3, 1, 1, 2, "int8", True),  # 323 rows: two row blocks, the last of 67
    ((2, 48, 11, 9), 48, 3, 2, 1, 3, "uint8", True),  # groups of 16, stride 2: two images, read in place
    ((1, 24, 7, 7), 24, 5, 2, 2, 24, "uint8", True),  # depthwise: the runtime's depthwise body
    ((1, 4, 3, 3), 6, 1, 1, 0, 1, "uint8", True),  # 9 rows: VNNI where there is AMX
])
def test_a_qdq_convolution_is_onnxruntime_s_qlinearconv_exactly(shape, out_channels, kernel, stride, pad,
                                                                 groups, act, per_channel, cache_dir):
    model, feeds = conv_model(shape, out_channels, kernel, stride, pad, groups, act=act,
                              per_channel=per_channel)
    ops = _fused_ops(model)
    assert "qnn.conv2d" in ops and "nn.conv2d" not in ops, ops
    expected = _onnxruntime(model, feeds)
    # (a short sum may run on float kernels that are generated C, not the runtime's)
    assert_same_on_every_isa(_build(model, cache_dir), [feeds["x"]], expected, runtime=None)


@pytest.mark.parametrize("act", ["uint8", "int8"])
def test_narrow_groups_of_a_weight_whose_pairs_fit_read_the_image_in_place_on_avx2(act, cache_dir):
    """Without VNNI, a convolution of narrow groups (16 channels a group, whole quads) whose
    weight's pairs fit 16 bits (7-bit codes) multiplies by VPMADDUBSW reading its image in
    place (body 8 of c/qgemm.c: no im2col copy, which cost RegNet's grouped 3x3 layers more
    than their products); at the AVX2 level on any CPU (not AVX-VNNI's direct body, on a CPU
    that has it) and onnxruntime's bits."""
    model, feeds = conv_model((1, 48, 13, 11), 48, 3, 2, 1, 3, act=act)  # stride 2, padding
    lib = _build(model, cache_dir)
    expected = _onnxruntime(model, feeds)
    assert_same_on_every_isa(lib, [feeds["x"]], expected)
    levels = lib.conv_isa()
    lib.conv_isa("avx2")
    try:
        before = qgemm_body_calls(lib)
        assert np.array_equal(lib(feeds["x"]), expected)
        took = [after - first for after, first in zip(qgemm_body_calls(lib), before, strict=True)]
    finally:
        lib.conv_isa(levels)
    assert sum(took) == 1 and took[8 if took[6] == 0 else 6] == 1, took


@pytest.mark.parametrize("act", ["uint8", "int8"])
def test_outputs_far_outside_the_output_type_saturate_as_onnxruntime_s(act, cache_dir):
    """An output scale of 1e-9: the requantized values reach 1e10 and more, past int32 as
    well as past the 8-bit type, and every one saturates to its end of the type."""
    model, feeds = conv_model((1, 16, 6, 7), 40, 3, 1, 1, act=act, out_scale=1e-9)
    expected = _onnxruntime(model, feeds)
    assert np.unique(expected).size <= 3 and expected.min() < 0 < expected.max()  # the ends (0: a sum of 0)
    assert_same_on_every_isa(_build(model, cache_dir), [feeds["x"]], expected)


def test_dilation_and_asymmetric_weights(cache_dir):
    """Weight zero points per channel, not all 0: the kernels remove them exactly (codes of
    the full 8 bits: on AVX2, the body that widens to 16 bits)."""
    model, feeds = conv_model((1, 8, 10, 10), 12, 3, 1, 2, 1, dilation=2, symmetric=False, full_range=True)
    expected = np.asarray(passinfra.evaluate(from_onnx(model), feeds["x"]))
    lib = _build(model, cache_dir)
    with PassContext(opt_level=3):
        fused = FuseQDQ()(InferType()(from_onnx(model)))
    assert np.array_equal(lib(feeds["x"]), np.asarray(passinfra.evaluate(fused, feeds["x"])))
    # against the float path (the group unfused): within one step of the output grid
    assert np.abs(lib(feeds["x"]) - expected).max() <= 0.08 * 1.001


@pytest.mark.parametrize("zero", [0, 40])
def test_a_relu_in_the_group_is_a_maximum_with_the_zero_point(zero, cache_dir):
    model, feeds = conv_model((1, 8, 6, 6), 16, 3, 1, 1, relu_zero=zero)
    ops = _fused_ops(model)
    assert "nn.relu" not in ops and ("maximum" in ops) == (zero != 0), ops
    expected = _onnxruntime(model, feeds)
    got = _build(model, cache_dir)(feeds["x"])
    assert got.min() >= 0.0
    assert np.abs(got - expected).max() <= 0.04 * 1.001  # onnxruntime keeps this group in float


def _matmul_model(rows: int, k: int, n: int, op: str, per_channel: bool, act: str = "int8"):
    g = _Graph((rows, k), act, seed=k + n)
    x = g.qdq("x", 0.03, 0 if act == "int8" else 120)
    if op == "Gemm":  # transB: the weight [n, k], per channel along its rows
        w, scales = g.weight((n, k), 0, per_channel)
        y = g.node("Gemm", [x, w, g.bias(n, 0.03, scales)], transB=1)
    else:
        w, scales = g.weight((k, n), 1, per_channel)
        y = g.node("Add", [g.node("MatMul", [x, w]), g.bias(n, 0.03, scales)])
    return g.model(g.qdq(y, 0.1, 3 if act == "int8" else 128)), g.feeds()


@pytest.mark.parametrize(("rows", "k", "n", "op", "per_channel", "act"), [
    (1, 64, 40, "MatMul", True, "int8"),
    (33, 70, 48, "MatMul", False, "uint8"),
    (4, 96, 10, "Gemm", True, "uint8"),
    (70, 128, 40, "MatMul", True, "uint8"),  # uint8 rows of 128: read in place but the last 6
])
def test_a_qdq_matmul_is_onnxruntime_s_exactly(rows, k, n, op, per_channel, act, cache_dir):
    model, feeds = _matmul_model(rows, k, n, op, per_channel, act)
    ops = _fused_ops(model)
    assert "qnn.matmul" in ops and "matmul" not in ops and "nn.dense" not in ops, ops
    assert_same_on_every_isa(_build(model, cache_dir), [feeds["x"]], _onnxruntime(model, feeds))


def test_a_qdq_add_is_qlinearadd_and_movement_drops_its_pairs(cache_dir):
    g = _Graph((1, 4, 6, 6), seed=3)
    a = g.qdq("x", 0.05, 128)
    b = g.qdq(g.node("Sigmoid", ["x"]), 0.004, 0)
    added = g.qdq(g.node("Add", [a, b]), 0.06, 120)
    pooled = g.qdq(g.node("MaxPool", [added], kernel_shape=[2, 2], strides=[2, 2]), 0.06, 120)
    model = g.model(pooled)
    ops = _fused_ops(model)
    # the add and the pool on the quantized values: one dequantize left, the output's
    assert "qnn.add" in ops and "add" not in ops and ops.count("qnn.dequantize") == 1, ops
    feeds = g.feeds()
    expected = _onnxruntime(model, feeds)
    assert np.array_equal(_build(model, cache_dir)(feeds["x"]), expected)


@pytest.mark.parametrize("zero", [0, 9])
def test_a_residual_add_and_its_relu_are_one_qlinearadd(zero, cache_dir):
    """Q(relu(DQ(a) + DQ(b))): a residual block's join. The ReLU becomes a maximum with
    the output's zero point, nothing where that is the type's lowest (as onnxruntime drops
    it before its QLinearAdd; it keeps the other group in float, one step away at most)."""
    g = _Graph((1, 8, 6, 5), seed=6)
    a = g.qdq("x", 0.05, 128)
    b = g.qdq(g.node("Sigmoid", ["x"]), 0.004, 0)
    model = g.model(g.qdq(g.node("Relu", [g.node("Add", [a, b])]), 0.04, zero))
    ops = _fused_ops(model)
    assert "qnn.add" in ops and "nn.relu" not in ops and ("maximum" in ops) == (zero != 0), ops
    feeds = g.feeds()
    got = _build(model, cache_dir)(feeds["x"])
    with PassContext(opt_level=3):
        fused = FuseQDQ()(InferType()(from_onnx(model)))
    assert got.min() >= 0.0
    assert np.array_equal(got, np.asarray(passinfra.evaluate(fused, feeds["x"])))
    # onnxruntime's AVX2 QLinearAdd rounds with fused multiply-adds, b's term first
    # (ir/op/quantize.py): one step away where a value lies within float32 rounding of a
    # half; two of these 240 do
    assert np.abs(got - _onnxruntime(model, feeds)).max() <= 0.04 * 1.001


@pytest.mark.parametrize(("act", "shape"), [("uint8", (1, 256, 7, 7)), ("int8", (2, 96, 13, 11))])
def test_a_qdq_global_average_pool_is_qlinearglobalaveragepool_exactly(act, shape, cache_dir):
    """onnxruntime turns DQ -> GlobalAveragePool -> Q into QLinearGlobalAveragePool (the
    int32 sum of the codes, requantized): so does FuseQDQ, to the bit. (Here the float
    path, relay.FuseQDQ.enabled off, is one step off in one output of each case.)"""
    g = _Graph(shape, act, seed=5)
    zero = 120 if act == "uint8" else -3
    y = g.node("GlobalAveragePool", [g.qdq("x", 0.05, zero)])
    model = g.model(g.qdq(y, 0.02, zero + 7))
    ops = _fused_ops(model)
    assert "sum" in ops and "nn.global_avg_pool2d" not in ops, ops
    feeds = {"x": g.feeds()["x"] * 3}
    assert_same_on_every_isa(_build(model, cache_dir), [feeds["x"]], _onnxruntime(model, feeds), runtime=None)


def test_a_group_that_cannot_fuse_keeps_the_float_path(cache_dir):
    """A bias whose scale is not x_scale * w_scale: the group stays float32 (and folds)."""
    model, feeds = conv_model((1, 4, 6, 6), 8, 3, 1, 1)
    for init in model.graph.initializer:
        if init.name.startswith("bs"):
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * _F32(3), init.name))
    ops = _fused_ops(model)
    assert "nn.conv2d" in ops and "qnn.conv2d" not in ops, ops
    expected = np.asarray(passinfra.evaluate(from_onnx(model), feeds["x"]))
    assert np.array_equal(_build(model, cache_dir)(feeds["x"]), expected)


# 6: groups of 16 outputs, in panels of 16 columns; 96: depthwise, HWIO as it is
@pytest.mark.parametrize("groups", [1, 6, 96])
def test_the_weights_stay_int8_in_the_library(groups, cache_dir, tmp_path):
    model, _ = conv_model((1, 96, 8, 8), 96, 3, 1, 1, groups=groups)
    codes = sum(numpy_helper.to_array(i).nbytes for i in model.graph.initializer)
    lib = _build(model, cache_dir)
    lib.export_library(str(tmp_path / "lib.so"))
    weights = (tmp_path / "lib.so.weights.bin").stat().st_size
    assert weights <= 1.05 * codes, (weights, codes)


def ops_after_the_rewrite(model, last: str = "ExactFloatConvolutions", target: str = "avx2") -> list[str]:
    """The ops of ``model`` after the compile pipeline up to pass ``last`` (for the
    convolution rule's ``target`` instruction set)."""
    mod = from_onnx(model)
    with PassContext(opt_level=3, config={"codegen.target_isa": target}):
        for name in COMPILE_PIPELINE[:COMPILE_PIPELINE.index(last) + 1]:
            mod = get_pass(name)(mod)
    return re.findall(r"^\s+(?:%\d+ = )?([a-z_.0-9]+)\(", str(mod), re.MULTILINE)


def test_short_sums_run_exactly_on_the_float_kernels_and_long_ones_stay_integer():
    """ExactFloatConvolutions: a convolution of fewer than 32 products a sum (16 for a
    weight whose pairs fit VPMADDUBSW: an RGB first layer of 7-bit codes stays integer)
    becomes a float32 convolution of x - zx and w - zw where every partial sum is an
    integer below 2^24; a depthwise one stays integer (the runtime's depthwise body), and
    then requantizes there (RequantizeInKernels)."""
    depthwise, _ = conv_model((1, 8, 9, 9), 8, 3, 1, 1, 8)
    grayscale, _ = conv_model((1, 1, 9, 9), 8, 3, 1, 1)  # 9 products a sum
    first_layer, _ = conv_model((1, 3, 9, 9), 8, 3, 1, 1)  # 27, 7-bit codes
    full_range, _ = conv_model((1, 3, 9, 9), 8, 3, 1, 1, full_range=True)
    wide, _ = conv_model((1, 8, 9, 9), 8, 3, 1, 1, full_range=True)  # 72
    for model, on_float in ((depthwise, False), (grayscale, True), (first_layer, False), (full_range, True),
                            (wide, False)):
        ops = ops_after_the_rewrite(model)
        assert ("nn.conv2d" in ops) == on_float and ("qnn.conv2d" in ops) != on_float, ops
    # the integer ones then requantize in their kernels (RequantizeInKernels)
    for model in (wide, depthwise):
        ops = ops_after_the_rewrite(model, "RequantizeInKernels")
        assert "qnn.requantized_conv2d" in ops and "qnn.requantize" not in ops, ops
    # a depthwise convolution of two outputs a channel has no integer kernel: on the float
    # kernels, unless a sum could pass 2^24 (961 taps of -128: 961 * 128 * 255 > 2^24)
    large, _ = conv_model((1, 4, 33, 33), 8, 31, 1, 15, 4)
    assert "nn.conv2d" in ops_after_the_rewrite(large)
    data_zero = large.graph.node[0].input[2]  # the input's QuantizeLinear: x - 0 up to 255
    for init in large.graph.initializer:
        if re.fullmatch(r"w\d+", init.name):
            init.CopyFrom(numpy_helper.from_array(np.full((8, 1, 31, 31), -128, np.int8), init.name))
        if init.name == data_zero:
            init.CopyFrom(numpy_helper.from_array(np.array(0, np.uint8), init.name))
    assert "qnn.conv2d" in ops_after_the_rewrite(large)


def test_sums_of_16_products_stay_integer_on_avx512(cache_dir):
    """On the AVX-512 target a convolution of 16 products a sum or more (a 1x1 of 16
    channels, an RGB first layer's 27; full-range codes) is left to the integer GEMM, where
    AVX2's rule puts both on the float kernels; 8 products go to the float kernels on
    both. Either way the outputs are onnxruntime's QLinearConv's."""
    pointwise, feeds = conv_model((1, 16, 7, 9), 24, 1, full_range=True)
    first_layer, first_feeds = conv_model((1, 3, 9, 9), 8, 3, 1, 1, full_range=True)
    narrow, _ = conv_model((1, 8, 7, 9), 24, 1, full_range=True)
    for model, target, integer in ((pointwise, "avx512", True), (pointwise, "avx2", False),
                                   (first_layer, "avx512", True), (first_layer, "avx2", False),
                                   (narrow, "avx512", False)):
        ops = ops_after_the_rewrite(model, target=target)
        assert ("qnn.conv2d" in ops) == integer and ("nn.conv2d" in ops) != integer, (target, ops)
    for model, inputs in ((pointwise, feeds), (first_layer, first_feeds)):
        expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, inputs)[0]
        for target in ("avx512", "avx2"):
            config = {"codegen.cache_dir": cache_dir, "codegen.target_isa": target}
            with PassContext(opt_level=3, config=config):
                lib = passinfra.build(from_onnx(model))
            assert np.array_equal(lib(*inputs.values()), expected), target


# two groups of 8 channels, or depthwise (16 groups of one); with a table of the outputs last
@pytest.mark.parametrize(("residual_first", "depthwise", "table"), [
    (None, False, False), (False, False, False), (True, False, False), (None, True, True), (True, True, True),
])
def test_requantized_contractions_are_their_parts_in_every_evaluator(residual_first, depthwise, table):
    """qnn.requantized_conv2d (RequantizeInKernels' fusion, run by the integer GEMM's
    requantizing epilogue): the interpreter's value is the requantize of the contraction
    plus the bias (then, with a residual, qnn.add of it and the residual, in either
    order; then, with a table, a take of it), and the lowered kernel run by the TIR
    evaluator agrees bit for bit."""
    from passinfra.codegen.lower import lower_primitive_function
    from passinfra.ir.expr import Function, Var
    from passinfra.ir.op import quantize as qnn
    from passinfra.ir.op.requantized import requantized_conv2d
    from passinfra.ir.types import TensorType
    from passinfra.tir.evaluator import run_prim_func

    rng = np.random.default_rng(9)
    data = rng.integers(0, 256, (1, 5, 6, 16)).astype(np.uint8)
    out = 16 if depthwise else 24
    weight = rng.integers(-128, 128, (3, 3, 1 if depthwise else 8, out)).astype(np.int8)
    bias = rng.integers(-3000, 3000, (1, 1, 1, out)).astype(np.int32)
    multiplier = rng.uniform(1e-4, 3e-3 if not depthwise else 3e-2, (1, 1, 1, out)).astype(np.float32)
    zeros = [passinfra.ir.const(np.array(v, t)) for v, t in ((7, np.uint8), (0, np.int8), (100, np.uint8))]
    attrs = {"strides": (2, 1), "padding": (1, 1, 1, 1), "groups": 16 if depthwise else 2,
             "data_layout": "NHWC", "kernel_layout": "HWIO"}
    x, w = Var("x", TensorType(data.shape, "uint8")), Var("w", TensorType(weight.shape, "int8"))
    b, m = Var("b", TensorType(bias.shape, "int32")), Var("m", TensorType(multiplier.shape, "float32"))
    parts = qnn.requantize(passinfra.ir.op.add(qnn.conv2d(x, w, zeros[0], zeros[1], **attrs), b), m, zeros[2])
    params, args, extra = [x, w, b, m], [data, weight, bias, multiplier], []
    if residual_first is not None:  # then qnn.add with a residual laid out as the output
        r = Var("r", TensorType((1, 3, 6, out), "uint8"))
        params.append(r)
        args.append(rng.integers(0, 256, (1, 3, 6, out)).astype(np.uint8))
        scales = [passinfra.ir.const(np.array(v, np.float32)) for v in (0.07, 0.05, 0.09)]
        add_zero = passinfra.ir.const(np.array(120, np.uint8))
        extra = [scales[0], r, scales[1], zeros[0], scales[2], add_zero]
        operands = [(parts, scales[0], zeros[2]), (r, scales[1], zeros[0])]
        if residual_first:
            operands.reverse()
        parts = qnn.add(*operands[0], *operands[1], scales[2], add_zero)
        attrs = {**attrs, "residual_first": residual_first}
    if table:  # then each output looked up (a parameter: lowering takes tensors as FuseOps passes them)
        t = Var("t", TensorType((256,), "uint8"))
        params.append(t)
        args.append(rng.integers(0, 256, 256).astype(np.uint8))
        parts = passinfra.ir.op.take(t, parts, axis=0)
        extra = [*extra, t]
    fused = Function(params, requantized_conv2d(x, w, zeros[0], zeros[1], b, m, zeros[2], *extra, **attrs))
    expected = np.asarray(passinfra.evaluate(Function(params, parts), *args))
    assert expected.dtype == np.uint8 and len(np.unique(expected)) > 20
    assert np.array_equal(np.asarray(passinfra.evaluate(fused, *args)), expected)
    lowered = lower_primitive_function(InferType()(passinfra.ir.IRModule({"main": fused}))["main"], "k")
    assert np.array_equal(run_prim_func(lowered, *args), expected)


@pytest.mark.parametrize("act", ["uint8", "int8"])
def test_an_activation_between_qdq_pairs_is_a_lookup_table(act, cache_dir):
    """QuantizedLookupTables: DQ -> HardSwish -> Q (a float activation between integer
    convolutions) is a function of one 8-bit value, so one of 256: a table, whose values
    are the interpreter's evaluation of the same operations, bit for bit."""
    g = _Graph((1, 8, 6, 6), act, seed=4)
    zero = 128 if act == "uint8" else 0
    x = g.qdq("x", 0.05, zero)
    w, scales = g.weight((16, 8, 3, 3), 0, True)
    y = g.qdq(g.node("Conv", [x, w, g.bias(16, 0.05, scales)], kernel_shape=[3, 3], pads=[1, 1, 1, 1]), 0.06,
              zero - 7)
    model = g.model(g.qdq(g.node("HardSwish", [y]), 0.03, zero - 20))
    feeds = g.feeds()
    mod = from_onnx(model)
    with PassContext(opt_level=3):
        mod = FuseQDQ()(InferType()(mod))
        from passinfra.transform import get_pass

        tabled = get_pass("QuantizedLookupTables")(mod)
    ops = re.findall(r"^\s+(?:%\d+ = )?([a-z_.0-9]+)\(", str(tabled), re.MULTILINE)
    assert "take" in ops and "nn.hard_swish" not in ops and "multiply" not in ops, ops
    take = re.search(r"take\(meta\[Constant\]\[\d+\], (%\d+)", str(tabled))
    codes = re.search(rf"{take.group(1)} = ([a-z_.0-9]+)\(", str(tabled)).group(1)
    assert codes == ("add" if act == "int8" else "qnn.requantize"), codes  # uint8 codes index it as they are
    expected = np.asarray(passinfra.evaluate(mod, feeds["x"]))
    assert np.array_equal(np.asarray(passinfra.evaluate(tabled, feeds["x"])), expected)
    assert np.array_equal(_build(model, cache_dir)(feeds["x"]), expected)


def _requantized_calls(model) -> list[Call]:
    """The module's requantized contractions after RequantizeInKernels."""
    names = COMPILE_PIPELINE[:COMPILE_PIPELINE.index("RequantizeInKernels") + 1]
    with PassContext(opt_level=3):
        mod = Sequential([get_pass(name) for name in names], opt_level=0)(from_onnx(model))
    found: list[Call] = []
    post_order_visit(mod["main"], lambda e: found.append(e) if isinstance(e, Call) and isinstance(e.op, Op)
                     and e.op.name.startswith("qnn.requantized_") else None)
    return found


# the convolution's output as QLinearAdd's first operand or its second; a pointwise
# convolution of the data itself (rp_qgemm) or a padded 3x3 one (rp_qconv); uint8 or int8;
# two groups of 8 channels (each group's residual columns its own), or a depthwise one
@pytest.mark.parametrize(("act", "kernel", "residual_first", "groups"), [
    ("uint8", 1, False, 1), ("uint8", 3, True, 1), ("int8", 3, False, 1), ("int8", 1, True, 1),
    ("uint8", 3, False, 2), ("int8", 3, True, 16),  # 16: depthwise (its own body)
])
def test_a_residual_add_joins_the_integer_gemm_that_requantizes_its_operand(act, kernel, residual_first,
                                                                           groups, cache_dir):
    """Q(DQ(Q(conv(...))) + DQ(residual)): the add (QLinearAdd) joins the requantized
    convolution (RequantizeInKernels), which adds the residual to each block of outputs as
    the GEMM stores them; the bits of the add after the convolution (the interpreter of the
    fused QDQ graph), on every instruction set and thread count."""
    zero = 128 if act == "uint8" else 0
    g = _Graph((2, 16, 9, 7), act, seed=11 + kernel)
    x = g.qdq("x", 0.05, zero - 3)
    for layer in range(2):  # the first's output is the second's data and the residual
        w, scales = g.weight((16, 16 // groups, kernel, kernel), 0, True)
        x = g.qdq(g.node("Conv", [x, w, g.bias(16, 0.08 if layer else 0.05, scales)],
                         kernel_shape=[kernel, kernel], pads=[kernel // 2] * 4, group=groups),
                  0.08, zero + 5 + layer)
        if layer == 0:  # the residual: a DequantizeLinear of its own (as onnxruntime's quantizer writes)
            quantize = g.nodes[-2]
            residual = g._name("dq")
            inputs = list(quantize.output) + list(quantize.input[1:])
            g.nodes.append(helper.make_node("DequantizeLinear", inputs, [residual]))
    total = g.node("Add", [residual, x] if residual_first else [x, residual])
    model = g.model(g.qdq(total, 0.1, zero + 2))
    first, fused = _requantized_calls(model)  # the second with the add's six inputs
    assert len(first.args) == 7 and len(fused.args) == 13
    assert fused.attrs.get("residual_first", False) == residual_first
    feeds = g.feeds()
    with PassContext(opt_level=3):
        reference = np.asarray(passinfra.evaluate(FuseQDQ()(InferType()(from_onnx(model))), feeds["x"]))
    assert_same_on_every_isa(_build(model, cache_dir), [feeds["x"]], reference)


def test_a_residual_add_after_a_matmul_joins_its_integer_gemm(cache_dir):
    g = _Graph((37, 48), "uint8", seed=4)
    x = g.qdq("x", 0.03, 120)
    w, scales = g.weight((48, 48), 1, True)
    y = g.qdq(g.node("Add", [g.node("MatMul", [x, w]), g.bias(48, 0.03, scales)]), 0.1, 128)
    model = g.model(g.qdq(g.node("Add", [y, x]), 0.12, 125))
    (fused,) = _requantized_calls(model)
    assert fused.op.name == "qnn.requantized_matmul" and len(fused.args) == 13
    feeds = g.feeds()
    with PassContext(opt_level=3):
        reference = np.asarray(passinfra.evaluate(FuseQDQ()(InferType()(from_onnx(model))), feeds["x"]))
    assert_same_on_every_isa(_build(model, cache_dir), [feeds["x"]], reference)

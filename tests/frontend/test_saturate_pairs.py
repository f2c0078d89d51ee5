"""SaturatePairs (issue 33): with ``relay.SaturatePairs.enabled``, u8 x s8 contractions add
their products in pairs saturated to int16, as onnxruntime's U8S8 kernels do on CPUs
without VNNI (VPMADDUBSW). The interpreter, the TIR evaluator and the C runtime compute
it alike, the same bits on every instruction set and thread count; off by default."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import passinfra
from passinfra.codegen.passes.saturate_pairs import ENABLED_CONFIG, SaturatePairs
from passinfra.errors import IRTypeError
from passinfra.frontend import from_onnx
from passinfra.ir.attrs import Attrs
from passinfra.ir.op.registry import Op
from passinfra.ir.types import TensorType
from passinfra.runtime.interpreter import evaluate
from passinfra.transform import FuseQDQ, InferType, PassContext
from tests.frontend.test_integer_gemm import matmul_integer
from tests.frontend.test_qdq_fusion import conv_model
from tests.isa_levels import assert_same_on_every_isa, qgemm_body_calls

ort = pytest.importorskip("onnxruntime")

_ON = {ENABLED_CONFIG: True}


def _pairs_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """sum_j sat16(a[:, 2j] b[2j] + a[:, 2j+1] b[2j+1]) of raw operands, written out."""
    a, b = a.astype(np.int64), b.astype(np.int64)
    if a.shape[1] % 2:
        a, b = np.pad(a, ((0, 0), (0, 1))), np.pad(b, ((0, 1), (0, 0)))
    total = np.zeros((a.shape[0], b.shape[1]), np.int64)
    for j in range(a.shape[1] // 2):
        pair = np.outer(a[:, 2 * j], b[2 * j]) + np.outer(a[:, 2 * j + 1], b[2 * j + 1])
        total += np.clip(pair, -32768, 32767)
    return total


def test_the_ops_add_raw_products_in_saturated_pairs():
    """qnn.matmul: the pairs of raw products saturated, then the zero points removed
    exactly; qnn.conv2d: the pairs along (ky, kx, channel) of a group, the padding holding
    the data's zero point (a 3-channel tap's last channel pairs with the next tap's first)."""
    matmul, conv = Op.get("qnn.matmul"), Op.get("qnn.conv2d")
    assert np.array_equal(matmul.impl([np.full((1, 2), 255, np.uint8), np.full((2, 1), 127, np.int8),
                                       np.uint8(0), np.int8(0)], Attrs({"saturate_pairs": True})), [[32767]])
    rng = np.random.default_rng(3)
    a = np.where(rng.random((6, 9)) < 0.6, 255, rng.integers(0, 256, (6, 9))).astype(np.uint8)
    b = rng.integers(-128, 128, (9, 5)).astype(np.int8)
    zb = rng.integers(-3, 3, 5).astype(np.int8)
    got = matmul.impl([a, b, np.uint8(7), zb], Attrs({"saturate_pairs": True}))
    row_sums, column_sums = a.astype(np.int64).sum(1)[:, None], b.astype(np.int64).sum(0)
    expected = _pairs_reference(a, b) - 7 * column_sums - zb * row_sums + 9 * 7 * zb.astype(np.int64)
    assert np.array_equal(got, expected)
    assert not np.array_equal(got, matmul.impl([a, b, np.uint8(7), zb], Attrs({})))  # pairs did saturate

    x = np.where(rng.random((1, 6, 5, 5)) < 0.6, 255, 0).astype(np.uint8)
    w = np.where(rng.random((4, 3, 3, 3)) < 0.5, 127, -128).astype(np.int8)
    attrs = {"strides": (2, 2), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 2}
    got = conv.impl([x, w, np.uint8(9), np.int8(0)], Attrs({**attrs, "saturate_pairs": True}))
    padded = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=9)
    for o in range(4):
        for i in range(3):
            for j in range(3):
                window = padded[0, o // 2 * 3:o // 2 * 3 + 3, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
                row = window.transpose(1, 2, 0).reshape(1, 27)  # (ky, kx, channel)
                column = w[o].transpose(1, 2, 0).reshape(27, 1)
                assert got[0, o, i, j] == _pairs_reference(row, column)[0, 0] - 9 * int(column.sum())


def test_saturating_pairs_are_defined_for_uint8_data_and_int8_weights():
    matmul = Op.get("qnn.matmul")
    types = [TensorType((2, 4), "int8"), TensorType((4, 3), "int8"), TensorType((), "int8"),
             TensorType((), "int8")]
    with pytest.raises(IRTypeError, match="saturate_pairs is defined for uint8 data and int8 weights"):
        matmul.type_rel(types, Attrs({"saturate_pairs": True}))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("saturate-cache"))


def _build(model, cache_dir: str, saturate: bool):
    config = {"codegen.cache_dir": cache_dir, **(_ON if saturate else {})}
    with PassContext(opt_level=3, config=config):
        return passinfra.build(from_onnx(model))


def _marked(model, saturate: bool = True):
    """The model's module after FuseQDQ and SaturatePairs, and its marked calls' ops."""
    with PassContext(opt_level=3, config=_ON if saturate else {}):
        mod = SaturatePairs()(FuseQDQ()(InferType()(from_onnx(model))))
    text = str(mod)
    marked = [line for line in text.splitlines() if "saturate_pairs=True" in line]
    return mod, [line.split("(")[0].split()[-1] for line in marked]


def _onnxruntime_saturates() -> bool:
    """Whether onnxruntime's u8 x s8 kernel saturates pairs on this CPU (no VNNI)."""
    model, _ = matmul_integer((1, 2), 1, "uint8", "int8", "none", "none")
    model.graph.initializer[-1].CopyFrom(numpy_helper.from_array(np.full((2, 1), 127, np.int8), "B"))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return int(session.run(None, {"A": np.full((1, 2), 255, np.uint8)})[0][0, 0]) == 32767


# one row (a decode step), a block of rows read in place (k a multiple of 4), an odd k; a
# right operand computed at run time (packed by the kernel: no flag, saturating bodies)
@pytest.mark.parametrize(("rows", "k", "weight"), [(1, 64, True), (300, 128, True), (17, 131, True),
                                                   (9, 40, False)])
def test_a_saturating_matmul_is_the_interpreter_s_on_every_isa(rows, k, weight, cache_dir):
    n = 40
    model, feeds = matmul_integer((rows, k), n, "uint8", "int8", "one", "none", weight=weight, seed=rows)
    rng = np.random.default_rng(rows)
    feeds["A"] = np.where(rng.random((rows, k)) < 0.7, 255, feeds["A"]).astype(np.uint8)
    mod, marked = _marked(model)
    assert marked == ["qnn.matmul"]
    expected = evaluate(mod, *feeds.values())
    exact = evaluate(from_onnx(model), *feeds.values())
    assert not np.array_equal(expected, exact), "pairs saturated"
    lib = _build(model, cache_dir, saturate=True)
    assert_same_on_every_isa(lib, list(feeds.values()), expected)
    levels = lib.conv_isa()
    lib.conv_isa("avx2")
    try:  # at the AVX2 level (AVX-VNNI CPUs too: VNNI does not saturate): VPMADDUBSW
        before = qgemm_body_calls(lib)
        assert np.array_equal(lib(*feeds.values()), expected)
        took = [after - first for after, first in zip(qgemm_body_calls(lib), before, strict=True)]
    finally:
        lib.conv_isa(levels)
    assert took[7] == 1, took
    if _onnxruntime_saturates():
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        assert np.array_equal(session.run(None, feeds)[0], expected)


def test_saturating_convolutions_are_onnxruntime_s_without_vnni(cache_dir):
    """A full-range QDQ stack: an RGB first layer (27 products: pairs across taps, on the
    integer GEMM, not the float kernels), groups of 16 channels (the direct body on AVX2), a
    depthwise layer (the runtime's depthwise body, exact: not marked, as onnxruntime computes
    it exactly too) and a pointwise layer."""
    model, feeds = conv_model((1, 3, 16, 16), 32, 3, stride=2, pad=1, full_range=True, seed=5)
    for groups, kernel, out, zero in ((2, 3, 32, 133), (32, 3, 32, 125), (1, 1, 24, 125)):
        model = _stack(model, out, kernel, groups, zero)
    feeds = {"x": feeds["x"] * 40}  # inputs far out, so the data is often 255
    mod, marked = _marked(model)
    assert sorted(marked) == ["qnn.conv2d"] * 3
    assert _marked(model, saturate=False)[1] == []
    expected = evaluate(mod, feeds["x"])
    lib = _build(model, cache_dir, saturate=True)
    assert_same_on_every_isa(lib, [feeds["x"]], expected)
    exact = _build(model, cache_dir, saturate=False)
    assert not np.array_equal(expected, exact(feeds["x"])), "pairs saturated"
    if _onnxruntime_saturates():
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        assert np.array_equal(session.run(None, feeds)[0], expected)


def _stack(model, out_channels: int, kernel: int, groups: int, zero: int):
    """``model`` with one more QDQ convolution (a full-range int8 weight) on its output,
    quantized as that output is (scale 0.08, zero point ``zero``), so the pair between them
    changes nothing."""
    rng = np.random.default_rng(out_channels * 7 + groups)
    graph = model.graph
    last = graph.output[0].name
    channels = 32
    codes = rng.integers(-128, 128, (out_channels, channels // groups, kernel, kernel)).astype(np.int8)
    scales = (rng.uniform(0.5, 1.5, out_channels) / 64).astype(np.float32)
    tag = f"s{len(graph.node)}"
    inits = [numpy_helper.from_array(codes, f"{tag}w"), numpy_helper.from_array(scales, f"{tag}ws"),
             numpy_helper.from_array(np.zeros(out_channels, np.int8), f"{tag}wz"),
             numpy_helper.from_array(np.float32(0.08), f"{tag}xs"),
             numpy_helper.from_array(np.uint8(zero), f"{tag}xz"),
             numpy_helper.from_array(np.float32(0.08), f"{tag}ys"),
             numpy_helper.from_array(np.uint8(125), f"{tag}yz")]
    graph.initializer.extend(inits)
    nodes = [helper.make_node("QuantizeLinear", [last, f"{tag}xs", f"{tag}xz"], [f"{tag}q"]),
             helper.make_node("DequantizeLinear", [f"{tag}q", f"{tag}xs", f"{tag}xz"], [f"{tag}dq"]),
             helper.make_node("DequantizeLinear", [f"{tag}w", f"{tag}ws", f"{tag}wz"], [f"{tag}wdq"], axis=0),
             helper.make_node("Conv", [f"{tag}dq", f"{tag}wdq"], [f"{tag}y"], kernel_shape=[kernel, kernel],
                              pads=[kernel // 2] * 4, group=groups),
             helper.make_node("QuantizeLinear", [f"{tag}y", f"{tag}ys", f"{tag}yz"], [f"{tag}yq"]),
             helper.make_node("DequantizeLinear", [f"{tag}yq", f"{tag}ys", f"{tag}yz"], [f"{tag}out"])]
    graph.node.extend(nodes)
    graph.output[0].name = f"{tag}out"
    return model

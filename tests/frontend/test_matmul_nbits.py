"""Weight-only quantized MatMul (issue 33): com.microsoft MatMulNBits imports as
``qnn.matmul_nbits``, whose codes stay codes in the library and are dequantized in the
kernel's inner loop; results against onnxruntime, across threads and instruction sets."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import passinfra
from passinfra.frontend import OnnxImportError, from_onnx
from passinfra.ir.op.matmul_nbits import dequantized_weight
from passinfra.runtime.module import CONV_ISA_LEVELS
from passinfra.transform import PassContext
from tests.numerics import assert_sums_close

ort = pytest.importorskip("onnxruntime")


def quantize_blocks(w: np.ndarray, bits: int, block: int):
    """``w`` [K, N] as MatMulNBits stores it (asymmetric per block, as onnxruntime's
    quantizer does): codes [N, blocks, blob], scales [N * blocks], packed zero points."""
    k, n = w.shape
    blocks, top = -(-k // block), (1 << bits) - 1
    padded = np.zeros((n, blocks * block), np.float32)
    padded[:, :k] = w.T
    grouped = padded.reshape(n, blocks, block)
    low, high = np.minimum(grouped.min(-1), 0), np.maximum(grouped.max(-1), 0)
    scale = np.where(high > low, (high - low) / top, 1.0).astype(np.float32)
    zero = np.clip(np.round(-low / scale), 0, top).astype(np.uint8)
    codes = np.clip(np.round(grouped / scale[..., None]) + zero[..., None], 0, top).astype(np.uint8)
    if bits == 8:
        return codes, scale.reshape(-1), zero.reshape(-1)
    zero = np.concatenate([zero, np.zeros((n, blocks % 2), np.uint8)], axis=1)
    packed_zero = (zero[:, 0::2] | zero[:, 1::2] << 4).ravel()
    return codes[..., 0::2] | codes[..., 1::2] << 4, scale.reshape(-1), packed_zero


def nbits_model(a_shape, n, bits, block, zero_points=True, bias=False, seed=0, **extra_inputs):
    rng = np.random.default_rng(seed)
    k = a_shape[-1]
    codes, scales, zeros = quantize_blocks(rng.standard_normal((k, n)).astype(np.float32), bits, block)
    tensors = {"B": codes, "scales": scales, "zero_points": zeros if zero_points else None, "g_idx": None,
               "bias": rng.standard_normal(n).astype(np.float32) if bias else None, **extra_inputs}
    names = [name if value is not None else "" for name, value in tensors.items()]
    while names and not names[-1]:
        names.pop()
    inits = [numpy_helper.from_array(value, name) for name, value in tensors.items() if value is not None]
    node = helper.make_node("MatMulNBits", ["A", *names], ["Y"], domain="com.microsoft", K=k, N=n, bits=bits,
                            block_size=block)
    value = helper.make_tensor_value_info
    graph = helper.make_graph([node], "nbits", [value("A", TensorProto.FLOAT, a_shape)],
                              [value("Y", TensorProto.FLOAT, [*a_shape[:-1], n])], inits)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _weight(model):
    """The float weight [N, K] the model's codes stand for, and the node's bits and block."""
    values = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    node = model.graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    k, n, bits, block = attrs["K"], attrs["N"], attrs.get("bits", 4), attrs["block_size"]
    blocks = -(-k // block)
    zeros = values.get("zero_points")
    if zeros is None:
        zeros = np.full((n, blocks), 1 << (bits - 1), np.uint8)
    elif bits == 4:
        per_row = zeros.reshape(n, -1)
        zeros = np.stack([per_row & 15, per_row >> 4], -1).reshape(n, -1)[:, :blocks]
    return dequantized_weight(values["B"].reshape(n, blocks, -1), values["scales"].reshape(n, blocks),
                              zeros.reshape(n, blocks), bits, block, k), values.get("bias")


def _check(model, a, tmp_path):
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"A": a})[0]
    mod = from_onnx(model)
    with PassContext(opt_level=3, config={"codegen.cache_dir": str(tmp_path)}):
        lib = passinfra.build(mod)
    weight, bias = _weight(model)
    magnitude = np.abs(a) @ np.abs(weight).T + (0 if bias is None else np.abs(bias))
    terms = a.shape[-1] + (bias is not None)
    for got in (np.asarray(passinfra.evaluate(mod, a)), lib(a)):
        assert_sums_close(got, expected, terms, magnitude)
    return mod, lib


@pytest.mark.parametrize(("a_shape", "n", "bits", "block", "zero_points", "bias"), [
    ((1, 96), 40, 4, 32, True, True),  # a decode step
    ((5, 100), 33, 4, 64, True, False),  # K not a multiple of the block, odd N
    ((2, 3, 64), 17, 4, 32, False, True),  # rank-3 data; no zero points: the middle code
    ((4, 80), 24, 8, 16, True, False),
    ((1, 48), 8, 8, 32, False, False),
])
def test_matmul_nbits_computes_what_onnxruntime_does(a_shape, n, bits, block, zero_points, bias, tmp_path):
    model = nbits_model(a_shape, n, bits, block, zero_points, bias)
    a = np.random.default_rng(1).standard_normal(a_shape).astype(np.float32)
    mod, lib = _check(model, a, tmp_path)
    assert "qnn.matmul_nbits" in str(mod)
    # the same bits on one thread and two, and on every instruction set the runtime has here
    reference = lib(a)
    lib.set_num_threads(1)
    assert np.array_equal(lib(a), reference)
    for level in CONV_ISA_LEVELS[:CONV_ISA_LEVELS.index(lib.conv_isa()) + 1]:
        assert lib.conv_isa(level) == level
        assert np.array_equal(lib(a), reference), level


def test_the_library_keeps_the_codes(tmp_path):
    k, n = 512, 256
    model = nbits_model((1, k), n, 4, 32)
    _, lib = _check(model, np.ones((1, k), np.float32), tmp_path)
    lib.export_library(str(tmp_path / "lib.so"))
    weights = (tmp_path / "lib.so.weights.bin").stat().st_size
    codes_scales_zeros = k * n // 2 + (k // 32) * n * (4 + 1)  # zero points unpacked to a byte each
    assert codes_scales_zeros <= weights <= codes_scales_zeros + 4096  # alignment, nothing else
    assert weights < k * n * 4 // 6  # a float32 weight would be 4 bytes an element


def test_blocks_of_16_four_bit_codes_run_as_a_float_weight(tmp_path):
    """Blocks the kernel does not read (8 bytes) are dequantized at import: still right."""
    model = nbits_model((3, 80), 9, 4, 16, bias=True)
    mod, _ = _check(model, np.random.default_rng(2).standard_normal((3, 80)).astype(np.float32), tmp_path)
    assert "qnn.matmul_nbits" not in str(mod)


def test_onnxruntime_s_own_quantizer_output_imports(tmp_path):
    from onnxruntime.quantization import matmul_nbits_quantizer as quantizer  # needs onnx-ir (test extras)

    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "w")]
    graph = helper.make_graph([helper.make_node("MatMul", ["A", "w"], ["Y"])], "mm",
                              [helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 48])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    q = quantizer.MatMulNBitsQuantizer(model, bits=4, block_size=32, is_symmetric=False)  # rewrites model
    q.process()
    quantized = q.model.model if hasattr(q.model, "model") else q.model
    assert [node.op_type for node in quantized.graph.node] == ["MatMulNBits"]
    expected = ort.InferenceSession(quantized.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"A": np.ones((2, 64), np.float32)})[0]
    got = np.asarray(passinfra.evaluate(from_onnx(quantized), np.ones((2, 64), np.float32)))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize(("change", "message"), [
    ({"g_idx": np.arange(64, dtype=np.int32)}, "g_idx"),
    ("bits=2", "2-bit weights are not supported"),
    ("weight input", "B must be an initializer"),
])
def test_what_the_importer_refuses_is_one_clear_error(change, message):
    if isinstance(change, dict):
        model = nbits_model((1, 64), 8, 4, 32, **change)
    else:
        model = nbits_model((1, 64), 8, 4, 32)
        node = model.graph.node[0]
        if change == "bits=2":
            next(a for a in node.attribute if a.name == "bits").i = 2
        else:  # B a graph input instead of an initializer
            b = next(i for i in model.graph.initializer if i.name == "B")
            model.graph.input.append(helper.make_tensor_value_info("B", TensorProto.UINT8, list(b.dims)))
            model.graph.initializer.remove(b)
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(model)

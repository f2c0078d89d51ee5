"""The dtypes beyond float32/float64/int32/int64/bool through the compiled library.

float16 and bfloat16 kernels load the 16-bit patterns, compute in float32 and round to
nearest-even on store (their accumulators and scratch buffers are floats); integer
kernels compute in their own types, wrapping around on overflow. Checked per dtype
against the reference interpreter (ops on half precision there compute in float32 and
round each op's result, so a fused kernel, which rounds only what it stores, may differ
by an ulp or two) and against NumPy and onnxruntime: elementwise ops, a matmul, a conv,
reductions, every cast with NaN/inf/overflow/rounding edge cases, a float16 and a
bfloat16 model imported from ONNX, and the library's inputs, outputs and weights of
those dtypes (NumPy float16, ``ml_dtypes.bfloat16``) across export and load.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import passinfra
import passinfra.codegen  # noqa: F401  (attaches the compute rules)
from passinfra import ir
from passinfra.codegen.c_renderer import render_prim_func
from passinfra.codegen.lower import lower_primitive_function
from passinfra.codegen.transform.storage_flatten import storage_flatten_prim_func
from passinfra.errors import EvaluationError
from passinfra.frontend import from_onnx
from passinfra.ir import op
from passinfra.ir.types import HALF_DTYPES, INT_DTYPES
from passinfra.runtime import load_module
from passinfra.transform import PassContext
from tests.ir.test_dtypes import (
    NEW_INT_DTYPES,
    assert_close,
    assert_same,
    cast_case,
    draw,
    fn,
    onnx_model,
    rounded,
    run_ort,
)

ort = pytest.importorskip("onnxruntime")

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture(scope="module")
def codegen_ctx(tmp_path_factory: pytest.TempPathFactory):
    with PassContext(config={"codegen.cache_dir": str(tmp_path_factory.mktemp("codegen_cache"))}) as ctx:
        yield ctx


def build(mod: ir.IRModule, opt_level: int = 3):
    return passinfra.build(mod, opt_level=opt_level)


# --------------------------------------------------------------------------- float16 / bfloat16


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_precision_kernels_match_the_interpreter_and_numpy(dtype, codegen_ctx):
    rng = np.random.default_rng(20)
    a, b = ir.var("a", (6, 40), dtype), ir.var("b", (40, 5), dtype)
    img, w = ir.var("img", (1, 3, 7, 7), dtype), ir.var("w", (4, 3, 3, 3), dtype)
    va, vb = draw(dtype, (6, 40), rng), draw(dtype, (40, 5), rng)
    vi, vw = draw(dtype, (1, 3, 7, 7), rng), draw(dtype, (4, 3, 3, 3), rng)
    elementwise = [op.add(a, a), op.multiply(a, a), op.divide(a, op.abs(a)),
                   op.subtract(op.negative(a), a), op.maximum(a, op.zeros((), dtype))]
    # (a fused kernel keeps abs(a) + 1 in float32, where the interpreter rounds it)
    math = [op.exp(a), op.tanh(a), op.sigmoid(a), op.nn.softmax(a),
            op.divide(a, op.add(op.abs(a), op.ones((), dtype)))]
    contractions = [op.matmul(a, b), op.nn.conv2d(img, w, padding=(1, 1)), op.sum(a, axis=1),
                    op.mean(a, axis=0), op.max(a, axis=1), op.nn.relu(op.nn.conv2d(img, w))]
    mod = fn(a, b, img, w, body=ir.Tuple(elementwise + math + contractions))
    inputs = (va, vb, vi, vw)
    got, expected = build(mod)(*inputs), passinfra.evaluate(mod, *inputs)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype == np.dtype(dtype)
    # correctly rounded ops are computed and rounded once either way: the same bits
    for g, e in zip(got[:5], expected[:5]):
        assert_same(g, e)
    # math: float32 libm (an ulp) then one rounding; softmax stores its exponentials
    for g, e in zip(got[5:10], expected[5:10]):
        assert_close(g, e.astype(np.float64), dtype, ulps=2)
    wa, wb = va.astype(np.float64), vb.astype(np.float64)
    assert_close(got[10], wa @ wb, dtype, scale=np.abs(wa) @ np.abs(wb))
    assert_close(got[12], wa.sum(axis=1), dtype, scale=np.abs(wa).sum(axis=1))
    assert_close(got[13], wa.mean(axis=0), dtype, scale=np.abs(wa).mean(axis=0))
    assert_same(got[14], va.max(axis=1))
    for index in (11, 15):  # convolutions: against the interpreter (both accumulate in float32)
        assert_close(got[index], expected[index].astype(np.float64), dtype, ulps=1, scale=27 * 9.0)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_precision_accumulates_in_float32(dtype, codegen_ctx):
    """4096 ones: a float16 accumulator would stop at 2048 (2048 + 1 rounds to 2048) and a
    bfloat16 one at 256; both kernels accumulate in float32 and round the total once."""
    x = ir.var("x", (4, 4096), dtype)
    ones = np.ones((4, 4096), dtype)
    total, row_mean = build(fn(x, body=ir.Tuple([op.sum(x), op.mean(x, axis=1)])))(ones)
    assert total.dtype == np.dtype(dtype) and float(total) == 16384.0
    assert row_mean.astype(np.float64).tolist() == [1.0] * 4


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_precision_overflow_nan_and_rounding_on_store(dtype, codegen_ctx):
    big = 60000.0 if dtype == "float16" else 3e38
    x = ir.var("x", (6,), dtype)
    data = rounded(np.array([big, -big, np.nan, 1.0, 0.0, -0.0]), dtype)
    twice, negated = build(fn(x, body=ir.Tuple([op.add(x, x), op.negative(x)])))(data)
    assert_same(twice, rounded(np.array([np.inf, -np.inf, np.nan, 2.0, 0.0, -0.0]), dtype))
    # (negative is 0 - x, as for every float dtype: the sign of a zero or NaN is not kept)
    np.testing.assert_array_equal(negated.astype(np.float64), -data.astype(np.float64))


def test_the_c_of_a_half_precision_kernel_stores_16_bits_and_accumulates_in_float():
    x = ir.var("x", (4, 8), "float16")
    func = ir.Function([x], op.sum(x, axis=1)).with_attr("Primitive", 1)
    source = render_prim_func(storage_flatten_prim_func(lower_primitive_function(func, "half_sum")))
    assert "const uint16_t* restrict x" in source and "uint16_t* restrict out" in source
    assert "float acc[1];" in source  # the accumulator is a float, not a float16
    assert "rp_f16_load(x[" in source and "rp_f16_store(" in source


# --------------------------------------------------------------------------- integers


@pytest.mark.parametrize("dtype, helper", [("uint8", "rp_max_u8"), ("int8", "rp_max_i8"),
                                           ("uint16", "rp_max_u16"), ("int16", "rp_max_i16")])
def test_the_c_of_a_narrow_integer_max_pool_compares_in_its_own_type(dtype, helper):
    """A max (or min) of 8- and 16-bit integers is one of the type's values: compared as
    the type, GCC vectorizes it at the type's width (VPMAXUB over 32 uint8 lanes), where
    through int32 it widened every load (a uint8 max pool ran 6x slower). The values are
    checked in test_integer_kernels_wrap_around_in_their_type."""
    x = ir.var("x", (1, 5, 5, 32), dtype)
    pool = op.nn.max_pool2d(x, (3, 3), (2, 2), (1, 1), layout="NHWC")
    func = ir.Function([x], op.minimum(pool, ir.const(np.array(100, dtype)))).with_attr("Primitive", 1)
    source = render_prim_func(storage_flatten_prim_func(lower_primitive_function(func, "narrow_pool")))
    assert f"{helper}(" in source and helper.replace("max", "min") + "(" in source
    assert "rp_max_i32(" not in source.split("rp-kernel")[-1]


@pytest.mark.parametrize("dtype", NEW_INT_DTYPES)
def test_integer_kernels_wrap_around_in_their_type(dtype, codegen_ctx):
    rng = np.random.default_rng(21)
    a, b, d = ir.var("a", (5, 7), dtype), ir.var("b", (7, 3), dtype), ir.var("d", (5, 7), dtype)
    va, vb, vd = draw(dtype, (5, 7), rng), draw(dtype, (7, 3), rng), draw(dtype, (5, 7), rng)
    info = np.iinfo(dtype)
    va[0, :4] = [info.max, info.min, info.max, 1]
    vd[vd == 0] = 1  # an integer division by zero is undefined (C traps)
    vd[0, 1] = -1 if info.min < 0 else 1  # min / -1 wraps to min
    fused_sum = op.add(a, a)
    body = ir.Tuple([
        fused_sum, op.subtract(a, op.multiply(a, a)), op.divide(a, d), op.negative(a), op.abs(a),
        # the wrapped sum must be compared and divided as the type holds it, not as C's int
        op.less(fused_sum, a), op.divide(fused_sum, op.add(op.ones((), dtype), op.ones((), dtype))),
        op.maximum(a, op.negative(a)), op.matmul(a, b), op.sum(a, axis=1), op.max(a, axis=0),
        op.min(a, axis=1), op.cast(op.multiply(a, a), "float32"),
    ])
    mod = fn(a, b, d, body=body)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy warns about the wrap-around it does
        expected = passinfra.evaluate(mod, va, vb, vd)
    got = build(mod)(va, vb, vd)
    for g, e in zip(got, expected):
        assert_same(g, e)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_same(got[0], va + va)
        assert_same(got[8], np.matmul(va, vb))
        assert_same(got[9], va.sum(axis=1, dtype=dtype))


@pytest.mark.parametrize("dtype", NEW_INT_DTYPES)
def test_integer_onnx_ops_compiled_match_onnxruntime(dtype, codegen_ctx):
    rng = np.random.default_rng(22)
    a, b = draw(dtype, (3, 8), rng), draw(dtype, (3, 8), rng)
    b[b == 0] = 3
    names = ["Add", "Sub", "Mul", "Div", "Greater", "Equal", "Abs"]
    nodes = [helper.make_node(n, ["a", "b"] if n != "Abs" else ["a"], [n.lower()]) for n in names]
    outputs = {n.lower(): ("bool" if n in ("Greater", "Equal") else dtype) for n in names}
    model = onnx_model(nodes, {"a": (dtype, a.shape), "b": (dtype, b.shape)}, outputs)
    got = build(from_onnx(model))(a, b)
    for g, e in zip(got, run_ort(model, {"a": a, "b": b})):
        assert_same(g, e)


# --------------------------------------------------------------------------- casts


def _defined(data: np.ndarray, target: str) -> np.ndarray:
    from tests.ir.test_dtypes import _defined as defined

    return defined(data, target)


@pytest.mark.parametrize("source", ["float64", "float32", "float16", "bfloat16", "int64", "int32", "uint8",
                                    "int8", "uint64", "bool"])
def test_compiled_casts_equal_the_interpreter_bit_for_bit(source, codegen_ctx):
    """Every cast from ``source`` on edge values (NaN, inf, the overflow thresholds, ties,
    subnormals, integer wrap-around): the same values and signs as the interpreter, where
    the conversion is defined (a float out of an integer's range is not, in C or ONNX)."""
    mod, data, targets = cast_case(source)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = passinfra.evaluate(mod, data)
    got = build(mod, opt_level=0)(data)
    for target, g, e in zip(targets, got, expected):
        defined = _defined(data, target)
        assert_same(g[defined], e[defined])


# --------------------------------------------------------------------------- models from ONNX


def _half_model(dtype: str, rng: np.random.Generator):
    """conv -> relu -> flatten -> matmul (weights as initializers) -> softmax and a sum."""
    weight = draw(dtype, (16, 10), rng, -0.5, 0.5)
    kernel = draw(dtype, (4, 3, 3, 3), rng, -0.5, 0.5)
    nodes = [helper.make_node("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("MatMul", ["f", "w"], ["m"]),
             helper.make_node("Softmax", ["m"], ["y"], axis=-1),
             helper.make_node("ReduceSum", ["m", "axes"], ["s"], keepdims=1)]
    model = onnx_model(nodes, {"x": (dtype, (2, 3, 4, 4))}, {"y": dtype, "s": dtype},
                       {"k": kernel, "w": weight, "axes": np.array([1], np.int64)})
    return model, draw(dtype, (2, 3, 4, 4), rng)


def test_float16_model_from_onnx_compiled_matches_onnxruntime(codegen_ctx):
    model, x = _half_model("float16", np.random.default_rng(23))
    mod = from_onnx(model)
    assert mod["main"].params[0].type_annotation.dtype == "float16"
    probs, sums = build(mod)(x)
    want_probs, want_sums = run_ort(model, {"x": x})
    assert probs.dtype == sums.dtype == np.float16
    # onnxruntime and raypass round intermediates at different places: a few ulps, and a
    # sum within an ulp of its magnitude
    assert_close(probs, want_probs.astype(np.float64), "float16", ulps=4)
    assert_close(sums, want_sums.astype(np.float64), "float16", ulps=4, scale=np.abs(want_sums).max() + 1)


def test_bfloat16_model_from_onnx_compiled_matches_onnxruntime_in_float32(codegen_ctx):
    """onnxruntime has no bfloat16 kernels: it runs the same model in float32 on the same
    (bfloat16-exact) weights and inputs, and its result rounded to bfloat16 is the
    reference, within the ulps that rounding intermediates costs."""
    rng = np.random.default_rng(24)
    model, x = _half_model("bfloat16", rng)
    mod = from_onnx(model)
    lib = build(mod)
    probs, sums = lib(x)
    assert probs.dtype == sums.dtype == BFLOAT16
    interp_probs, interp_sums = passinfra.evaluate(mod, x)
    assert_close(probs, interp_probs.astype(np.float64), "bfloat16", ulps=2)
    assert_close(sums, interp_sums.astype(np.float64), "bfloat16", ulps=2, scale=np.abs(interp_sums).max())
    wide = _as_float32(model)
    want_probs, want_sums = run_ort(wide, {"x": x.astype(np.float32)})
    assert_close(probs, want_probs.astype(np.float64), "bfloat16", ulps=4)
    assert_close(sums, want_sums.astype(np.float64), "bfloat16", ulps=4, scale=np.abs(want_sums).max() + 1)


def _as_float32(model):
    """The model with its bfloat16 inputs, outputs and initializers widened to float32."""
    from onnx import numpy_helper

    wide = type(model)()
    wide.CopyFrom(model)
    for value in (*wide.graph.input, *wide.graph.output):
        if value.type.tensor_type.elem_type == TensorProto.BFLOAT16:
            value.type.tensor_type.elem_type = TensorProto.FLOAT
    for init in wide.graph.initializer:
        if init.data_type == TensorProto.BFLOAT16:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init).astype(np.float32), init.name))
    return wide


# --------------------------------------------------------------------------- runtime IO


@pytest.mark.parametrize("dtype", [*HALF_DTYPES, "int8", "uint16", "uint64"])
def test_inputs_outputs_and_weights_survive_export_and_load(dtype, codegen_ctx, tmp_path):
    rng = np.random.default_rng(25)
    weight = draw(dtype, (3, 4), rng, -2, 2)
    x = ir.var("x", (3, 4), dtype)
    mod = fn(x, body=ir.Tuple([op.add(x, ir.const(weight)), op.multiply(x, ir.const(weight[::-1].copy()))]))
    value = draw(dtype, (3, 4), rng, -2, 2)
    lib = build(mod)
    lib.export_library(tmp_path / "lib.so")
    loaded = load_module(tmp_path / "lib.so")
    expected = passinfra.evaluate(mod, value)
    for g, e in zip(loaded(value), expected):
        assert_same(g, e)
    assert [s["dtype"] for s in loaded.metadata["inputs"]] == [dtype]
    wrong = value.astype(np.float32) if dtype in INT_DTYPES else value.astype(np.float64)
    with pytest.raises(EvaluationError, match=f"input 'x': expected dtype {dtype}, got"):
        loaded(wrong)


def test_a_float32_array_for_a_bfloat16_input_is_an_error_saying_how_to_make_one(codegen_ctx):
    x = ir.var("x", (2,), "bfloat16")
    lib = build(fn(x, body=op.add(x, x)))
    with pytest.raises(EvaluationError, match=r"expected dtype bfloat16, got float32 \(make one with "
                                              r"x.astype\(ml_dtypes.bfloat16\)\)"):
        lib(np.ones(2, np.float32))
    assert_same(lib(np.ones(2, BFLOAT16)), np.full(2, 2, BFLOAT16))

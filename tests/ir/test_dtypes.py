"""The dtypes beyond float32/float64/int32/int64/bool, through the IR: float16 and
bfloat16 (storage types: every op computes on them in float32 and rounds its result to
nearest-even) and int8/int16/uint8/uint16/uint32/uint64 (computed in their own type,
wrapping around on overflow).

Covered: IR types and type relations (which ops take which dtypes, and the one error for
the others), the interpreter per dtype against NumPy and onnxruntime (elementwise ops, a
matmul, a conv, reductions, casts with NaN/inf/overflow/rounding edge cases),
FoldConstant, the text and wire formats, and the ONNX importer (inputs, outputs and
initializers of every dtype; the one-line error listing the dtypes left out of scope).

References. NumPy computes in float32 and rounds, exactly the semantics, so the
correctly rounded operations (+ - * /) are compared bit for bit; math functions (whose
float32 results may differ by an ulp between CPUs) and sums (whose rounding depends on
their order) within a tolerance of the dtype (:func:`assert_close`). onnxruntime has
float16 kernels for most ops and none for bfloat16, which is compared against NumPy only.
"""

from __future__ import annotations

import pickle
import warnings

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from passinfra import evaluate, ir
from passinfra.errors import EvaluationError, IRError, IRTypeError, ParseError
from passinfra.frontend.onnx import UnsupportedDtypesError, UnsupportedOpsError, from_onnx
from passinfra.ir import op
from passinfra.ir.serialize import from_wire, to_wire
from passinfra.ir.type_infer import infer_type
from passinfra.ir.types import DTYPES, FLOAT_DTYPES, HALF_DTYPES, INT_DTYPES, normalize_dtype
from passinfra.transform import FoldConstant

ort = pytest.importorskip("onnxruntime")

NEW_INT_DTYPES = ("int8", "int16", "uint8", "uint16", "uint32", "uint64")
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
# one unit in the last place at 1.0 (the spacing of the dtype's significand)
EPSILON = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}
ONNX_TYPE = {
    "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16, "float32": TensorProto.FLOAT,
    "float64": TensorProto.DOUBLE, "int8": TensorProto.INT8, "int16": TensorProto.INT16,
    "int32": TensorProto.INT32, "int64": TensorProto.INT64, "uint8": TensorProto.UINT8,
    "uint16": TensorProto.UINT16, "uint32": TensorProto.UINT32, "uint64": TensorProto.UINT64,
    "bool": TensorProto.BOOL,
}


# --------------------------------------------------------------------------- helpers


def rounded(value: np.ndarray, dtype: str) -> np.ndarray:
    """``value`` (computed in float32 or float64) rounded to ``dtype``."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(value).astype(dtype)


def assert_close(got: np.ndarray, expected: np.ndarray, dtype: str, ulps: float = 1.0,
                 scale: float | np.ndarray = 0.0) -> None:
    """``got`` has ``dtype`` and the shape of ``expected`` (computed exactly, in float64),
    and is within ``ulps`` units in the last place of ``dtype`` at each value's magnitude,
    plus ``ulps`` ulps at ``scale`` (the magnitude of what was summed: a sum's rounding
    error grows with its terms, not with its result)."""
    got = np.asarray(got)
    assert got.dtype.name == dtype and got.shape == np.shape(expected)
    wide, exact = got.astype(np.float64), np.asarray(expected, np.float64)
    assert np.array_equal(np.isnan(wide), np.isnan(exact)), (got, expected)
    finite = np.isfinite(exact)
    assert np.array_equal(wide[~finite & ~np.isnan(exact)], exact[~finite & ~np.isnan(exact)])
    bound = ulps * EPSILON[dtype] * (np.abs(exact) + scale) + 1e-30
    excess = np.abs(wide - exact)[finite] - np.broadcast_to(bound, exact.shape)[finite]
    assert np.all(excess <= 0), f"off by up to {excess.max()} beyond {ulps} ulp(s) of {dtype}"


def assert_same(got: np.ndarray, expected: np.ndarray) -> None:
    """The same dtype, shape and values (NaN where NaN is, -0.0 where -0.0 is)."""
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got.dtype, expected.dtype)
    if got.dtype.kind in "iub":
        np.testing.assert_array_equal(got, expected)
        return
    wide, exact = got.astype(np.float64), expected.astype(np.float64)
    assert np.array_equal(wide, exact, equal_nan=True), (got, expected)
    assert np.array_equal(np.signbit(wide), np.signbit(exact)), (got, expected)


def draw(dtype: str, shape: tuple[int, ...], rng: np.random.Generator, low: float = -3.0,
         high: float = 3.0) -> np.ndarray:
    """Random values of ``dtype``: floats uniform in [low, high], integers over their
    whole range (so sums and products wrap around)."""
    if dtype in FLOAT_DTYPES:
        return rounded(rng.uniform(low, high, shape), dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def onnx_model(nodes: list, inputs: dict[str, tuple[str, tuple[int, ...]]], outputs: dict[str, str],
               initializers: dict[str, np.ndarray] | None = None, opset: int = 17) -> onnx.ModelProto:
    """A model of ``nodes``; inputs name -> (dtype, shape), outputs name -> dtype."""
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, ONNX_TYPE[d], list(s)) for n, (d, s) in inputs.items()],
        [helper.make_tensor_value_info(n, ONNX_TYPE[d], None) for n, d in outputs.items()],
        initializer=[numpy_helper.from_array(a, n) for n, a in (initializers or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def run_interpreter(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    mod = from_onnx(model)
    result = evaluate(mod, *(feeds[p.name_hint] for p in mod["main"].params))
    return list(result) if isinstance(result, tuple) else [result]


def fn(*params: ir.Var, body: ir.Expr) -> ir.IRModule:
    return ir.IRModule.from_expr(ir.Function(list(params), body))


# --------------------------------------------------------------------------- types


def test_every_new_dtype_is_an_ir_dtype():
    for dtype in ("float16", "bfloat16", *NEW_INT_DTYPES):
        assert dtype in DTYPES
        assert ir.TensorType((2,), dtype).dtype == dtype
        assert normalize_dtype(np.dtype(dtype)) == dtype
    assert normalize_dtype(np.float16) == "float16"
    assert normalize_dtype(ml_dtypes.bfloat16) == "bfloat16"
    assert ir.const(np.ones(3, BFLOAT16)).dtype == "bfloat16"
    assert ir.const(np.uint64(2**64 - 1)).data == np.uint64(2**64 - 1)
    assert set(HALF_DTYPES) < set(FLOAT_DTYPES) and set(NEW_INT_DTYPES) < set(INT_DTYPES)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2", "int4", "uint4", "float4_e2m1fn",
                                   "float8_e8m0fnu", "complex64"])
def test_out_of_scope_dtypes_are_an_error_naming_them(dtype):
    with pytest.raises(IRError, match=f"unsupported dtype '{dtype}'; supported: float16, bfloat16"):
        ir.TensorType((2,), np.dtype(dtype))


# --------------------------------------------------------------------------- type relations


@pytest.mark.parametrize("dtype", NEW_INT_DTYPES + HALF_DTYPES)
def test_arithmetic_comparison_reduction_and_matmul_take_every_numeric_dtype(dtype):
    a, b = ir.var("a", (2, 3), dtype), ir.var("b", (3, 4), dtype)
    cases = {
        op.add(a, a): ((2, 3), dtype), op.divide(a, a): ((2, 3), dtype), op.maximum(a, a): ((2, 3), dtype),
        op.less(a, a): ((2, 3), "bool"), op.equal(a, a): ((2, 3), "bool"), op.abs(a): ((2, 3), dtype),
        op.sum(a, axis=1): ((2,), dtype), op.max(a): ((), dtype), op.matmul(a, b): ((2, 4), dtype),
        op.nn.dense(a, op.transpose(b)): ((2, 4), dtype), op.nn.relu(a): ((2, 3), dtype),
        op.where(op.less(a, a), a, a): ((2, 3), dtype), op.cast(a, "float32"): ((2, 3), "float32"),
    }
    for call, (shape, out_dtype) in cases.items():
        assert infer_type(ir.Function([a, b], call)).ret_type == ir.TensorType(shape, out_dtype)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_float_ops_take_half_precision(dtype):
    x = ir.var("x", (1, 2, 5, 5), dtype)
    w = ir.var("w", (3, 2, 3, 3), dtype)
    for call in (op.exp(x), op.nn.softmax(x), op.mean(x, axis=1), op.nn.gelu(x), op.erf(x),
                 op.nn.avg_pool2d(x, 2), op.nn.layer_norm(x, op.ones((5,), dtype), op.zeros((5,), dtype))):
        assert infer_type(ir.Function([x], call)).ret_type.dtype == dtype
    conv = op.nn.conv2d(x, w, padding=(1, 1))
    assert infer_type(ir.Function([x, w], conv)).ret_type == ir.TensorType((1, 3, 5, 5), dtype)


@pytest.mark.parametrize("dtype", NEW_INT_DTYPES)
def test_float_only_ops_reject_integers_naming_the_dtypes_they_take(dtype):
    x = ir.var("x", (1, 2, 4, 4), dtype)
    message = (r"op {}: expected .* of dtype float16, bfloat16, float32 or float64, "
               rf"got Tensor\[\(1, 2, 4, 4\), {dtype}\]")
    for name, call in (("exp", op.exp(x)), ("nn.softmax", op.nn.softmax(x)), ("mean", op.mean(x)),
                       ("nn.avg_pool2d", op.nn.avg_pool2d(x, 2)), ("nn.gelu", op.nn.gelu(x))):
        with pytest.raises(IRTypeError, match=message.format(name)):
            infer_type(ir.Function([x], call))


def test_mixed_dtypes_are_one_error_naming_both():
    a, b = ir.var("a", (3,), "float16"), ir.var("b", (3,), "bfloat16")
    with pytest.raises(IRTypeError, match=r"op add: expected the right operand of dtype float16 .* "
                                          r"got Tensor\[\(3\), bfloat16\]"):
        infer_type(ir.Function([a, b], op.add(a, b)))
    i, u = ir.var("i", (3,), "int8"), ir.var("u", (3,), "uint8")
    with pytest.raises(IRTypeError, match=r"op matmul: expected the right operand of dtype int8"):
        infer_type(ir.Function([i, u], op.matmul(i, u)))
    data, index = ir.var("d", (4,), "float16"), ir.var("k", (2,), "int8")
    message = r"op take: expected the indices of dtype int32, int64 or uint8, got .*8"
    with pytest.raises(IRTypeError, match=message):
        infer_type(ir.Function([data, index], op.take(data, index)))


# --------------------------------------------------------------------------- interpreter: floats


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_correctly_rounded_arithmetic_is_float32_rounded_once(dtype):
    """+ - * / on float16/bfloat16 are the float32 results rounded to the dtype: exactly
    NumPy's float32 computation (IEEE, so the same on every CPU), rounded."""
    rng = np.random.default_rng(1)
    x, y = ir.var("x", (64,), dtype), ir.var("y", (64,), dtype)
    a, b = draw(dtype, (64,), rng, -100, 100), draw(dtype, (64,), rng, 0.5, 60)
    outs = evaluate(fn(x, y, body=ir.Tuple([op.add(x, y), op.subtract(x, y), op.multiply(x, y),
                                           op.divide(x, y), op.maximum(x, y), op.negative(x)])), a, b)
    wa, wb = a.astype(np.float32), b.astype(np.float32)
    for got, exact in zip(outs, (wa + wb, wa - wb, wa * wb, wa / wb, np.maximum(wa, wb), -wa)):
        assert_same(got, rounded(exact, dtype))


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_overflow_and_nan_follow_ieee_in_the_dtype(dtype):
    big = 60000.0 if dtype == "float16" else 3e38
    x = ir.var("x", (4,), dtype)
    a = rounded(np.array([big, -big, np.nan, 1.0]), dtype)
    out = evaluate(fn(x, body=op.add(x, x)), a)
    assert_same(out, rounded(np.array([np.inf, -np.inf, np.nan, 2.0]), dtype))


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_math_functions_within_an_ulp(dtype):
    rng = np.random.default_rng(2)
    x = ir.var("x", (200,), dtype)
    a = draw(dtype, (200,), rng, -4, 4)
    exact = a.astype(np.float64)
    cases = {op.exp(x): np.exp(exact), op.tanh(x): np.tanh(exact), op.sigmoid(x): 1 / (1 + np.exp(-exact)),
             op.sqrt(op.abs(x)): np.sqrt(np.abs(exact))}
    outs = evaluate(fn(x, body=ir.Tuple(list(cases))), a)
    for got, expected in zip(outs, cases.values()):
        assert_close(got, expected, dtype, ulps=1)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_matmul_conv_and_reductions_accumulate_in_float32(dtype):
    rng = np.random.default_rng(3)
    a, b = ir.var("a", (8, 64), dtype), ir.var("b", (64, 5), dtype)
    img, w = ir.var("img", (1, 3, 6, 6), dtype), ir.var("w", (4, 3, 3, 3), dtype)
    va, vb, vi, vw = (draw(dtype, s, rng) for s in ((8, 64), (64, 5), (1, 3, 6, 6), (4, 3, 3, 3)))
    body = ir.Tuple([op.matmul(a, b), op.nn.conv2d(img, w, padding=(1, 1)), op.sum(a, axis=1),
                     op.mean(a, axis=0), op.max(a, axis=1)])
    outs = evaluate(fn(a, b, img, w, body=body), va, vb, vi, vw)
    ea, eb, ei, ew = (v.astype(np.float64) for v in (va, vb, vi, vw))
    conv = np.einsum("nchwij,ocij->nohw", np.lib.stride_tricks.sliding_window_view(
        np.pad(ei, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3)), ew)
    assert_close(outs[0], ea @ eb, dtype, scale=np.abs(ea) @ np.abs(eb))
    assert_close(outs[1], conv, dtype, scale=9 * 3 * 9.0)
    assert_close(outs[2], ea.sum(axis=1), dtype, scale=np.abs(ea).sum(axis=1))
    assert_close(outs[3], ea.mean(axis=0), dtype, scale=np.abs(ea).mean(axis=0))
    assert_same(outs[4], va.max(axis=1))
    # 4096 ones: a float16 accumulator stops at 2048 (2048 + 1 rounds back to 2048)
    ones = ir.var("ones", (4096,), dtype)
    total = evaluate(fn(ones, body=op.sum(ones)), np.ones(4096, dtype))
    assert total.dtype.name == dtype and float(total) == 4096.0


def test_float16_ops_match_onnxruntime():
    rng = np.random.default_rng(4)
    a, b = draw("float16", (3, 16), rng), draw("float16", (16, 4), rng)
    img, w = draw("float16", (1, 2, 5, 5), rng), draw("float16", (3, 2, 3, 3), rng)
    nodes = [helper.make_node("Add", ["a", "a"], ["add"]), helper.make_node("Mul", ["a", "a"], ["mul"]),
             helper.make_node("Abs", ["a"], ["a2"]), helper.make_node("Div", ["a", "a2"], ["div"]),
             helper.make_node("Exp", ["a"], ["exp"]), helper.make_node("Tanh", ["a"], ["tanh"]),
             helper.make_node("MatMul", ["a", "b"], ["mm"]),
             helper.make_node("Conv", ["img", "w"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("ReduceSum", ["a"], ["sum"], keepdims=0),
             helper.make_node("Softmax", ["a"], ["softmax"], axis=-1),
             helper.make_node("Less", ["a", "a2"], ["less"])]
    names = ("add", "mul", "div", "exp", "tanh", "mm", "conv", "sum", "softmax")
    outputs = {name: "float16" for name in names}
    model = onnx_model(nodes, {"a": ("float16", a.shape), "b": ("float16", b.shape),
                               "img": ("float16", img.shape), "w": ("float16", w.shape)},
                       {**outputs, "less": "bool"})
    feeds = {"a": a, "b": b, "img": img, "w": w}
    got, expected = run_interpreter(model, feeds), run_ort(model, feeds)
    # onnxruntime may keep intermediates of a kernel in float32 or round them: within an
    # ulp of each other, and sums within an ulp of the summed magnitude
    scales = {"mm": np.abs(a).astype(np.float64) @ np.abs(b), "sum": np.abs(a).astype(np.float64).sum(),
              "conv": 18 * 9.0}
    for name, g, e in zip([*outputs, "less"], got, expected):
        if name == "less":
            np.testing.assert_array_equal(g, e)
        else:
            assert_close(g, e, "float16", ulps=1, scale=scales.get(name, 0.0))


# --------------------------------------------------------------------------- interpreter: integers


@pytest.mark.parametrize("dtype", NEW_INT_DTYPES)
def test_integer_ops_wrap_around_like_numpy_and_onnxruntime(dtype):
    rng = np.random.default_rng(5)
    a, b = draw(dtype, (4, 6), rng), draw(dtype, (4, 6), rng)
    b[b == 0] = 1
    info = np.iinfo(dtype)
    a[0, :3], b[0, :3] = info.max, info.max  # max + max, max * max wrap
    names = ["Add", "Sub", "Mul", "Div", "Less", "Equal", "Abs"]
    nodes = [helper.make_node(n, ["a", "b"] if n != "Abs" else ["a"], [n.lower()]) for n in names]
    outputs = {n.lower(): ("bool" if n in ("Less", "Equal") else dtype) for n in names}
    model = onnx_model(nodes, {"a": (dtype, a.shape), "b": (dtype, b.shape)}, outputs)
    got = run_interpreter(model, {"a": a, "b": b})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy warns about the wrap-around it does
        trunc = np.where((a < 0) != (b < 0), -(np.abs(a) // np.abs(b)), np.abs(a) // np.abs(b))
        numpy_results = [a + b, a - b, a * b, trunc.astype(dtype), a < b, a == b, np.abs(a)]
    for g, e in zip(got, numpy_results):
        assert_same(g, np.asarray(e))
    for g, e in zip(got, run_ort(model, {"a": a, "b": b})):
        assert_same(g, e)


@pytest.mark.parametrize("dtype", NEW_INT_DTYPES)
def test_integer_matmul_and_reductions_in_the_type(dtype):
    rng = np.random.default_rng(6)
    x, y = ir.var("x", (3, 5), dtype), ir.var("y", (5, 2), dtype)
    a, b = draw(dtype, (3, 5), rng), draw(dtype, (5, 2), rng)
    outs = evaluate(fn(x, y, body=ir.Tuple([op.matmul(x, y), op.sum(x, axis=1), op.max(x, axis=0),
                                           op.min(x)])), a, b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = [np.matmul(a, b), a.sum(axis=1, dtype=dtype), a.max(axis=0), np.asarray(a.min())]
    for g, e in zip(outs, expected):
        assert_same(g, e)
    if dtype in ("uint32", "uint64"):  # the integer types onnxruntime's MatMul takes
        model = onnx_model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                           {"a": (dtype, a.shape), "b": (dtype, b.shape)}, {"y": dtype})
        assert_same(run_ort(model, {"a": a, "b": b})[0], outs[0])


# --------------------------------------------------------------------------- casts

EDGES = np.array([
    0.0, -0.0, 1.0, -2.5, np.nan, np.inf, -np.inf, 0.1, 3.5,
    65504.0, 65519.99, 65520.0, 70000.0, -1e6,  # float16: the largest, just below/at the overflow tie
    1 + 2**-11, 1 + 3 * 2**-11,  # float16 ties: to even (down, then up)
    1 + 2**-8, 1 + 3 * 2**-8,  # bfloat16 ties
    2.0**-24, 2.0**-25, 3 * 2.0**-26, 1e-10,  # float16 subnormals and underflow
    3.3895e38, 3.4e38, 1e39, -1e39, 1e-40,  # bfloat16/float32 overflow, a float32 subnormal
], np.float64)
# float64 values that round differently directly and through float32 (double rounding)
DOUBLE_ROUNDING = np.array([1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-30], np.float64)


def _cast_sources() -> dict[str, np.ndarray]:
    with np.errstate(over="ignore"):
        return {
            "float64": np.concatenate([EDGES, DOUBLE_ROUNDING]),
            "float32": EDGES.astype(np.float32),
            "float16": EDGES.astype(np.float16),
            "bfloat16": EDGES.astype(np.float32).astype(BFLOAT16),
            "int64": np.array([0, 1, -1, 300, -129, 65504, 65520, 70000, 2**24 + 2**16 + 1, -2**40],
                              np.int64),
            "int32": np.array([0, 1, -1, 300, -129, 255, 256, 70000, 2**24 + 1, -2**31], np.int32),
            "uint8": np.array([0, 1, 127, 128, 255], np.uint8),
            "int8": np.array([0, 1, -1, 127, -128], np.int8),
            "uint64": np.array([0, 1, 2**63, 2**64 - 1], np.uint64),
            "bool": np.array([True, False]),
        }


def cast_case(source: str) -> tuple[ir.IRModule, np.ndarray, list[str]]:
    """``main(x) = (cast(x, t) for every other dtype t)`` and its edge-case input."""
    data = _cast_sources()[source]
    targets = [t for t in DTYPES if t != source]
    x = ir.var("x", data.shape, source)
    return fn(x, body=ir.Tuple([op.cast(x, t) for t in targets])), data, targets


def numpy_cast(data: np.ndarray, target: str) -> np.ndarray:
    """NumPy's cast (ml_dtypes' for bfloat16), without its overflow warnings."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return data.astype(target)


def _defined(data: np.ndarray, target: str) -> np.ndarray:
    """Where converting ``data`` to ``target`` is defined: a float (NaN, inf, or beyond
    the range of int64) to an integer is not, in C or ONNX."""
    if data.dtype.kind not in "fV" or target not in INT_DTYPES:
        return np.ones(data.shape, bool)
    wide = data.astype(np.float64)
    limit = 2.0**31 if np.iinfo(target).bits <= 32 else 2.0**63
    return np.isfinite(wide) & (np.abs(wide) < limit) & ((wide > -1) | (target[0] != "u"))


@pytest.mark.parametrize("source", list(_cast_sources()))
def test_casts_round_to_nearest_even_saturate_to_inf_and_wrap_integers(source):
    mod, data, targets = cast_case(source)
    outs = evaluate(mod, data)
    for target, got in zip(targets, outs):
        defined = _defined(data, target)
        assert_same(got[defined], numpy_cast(data, target)[defined])


def test_cast_edge_values_explicitly():
    f64 = np.array([1 + 2**-11, 1 + 3 * 2**-11, 65519.99, 65520.0, 2.0**-25, 3 * 2.0**-26,
                    1 + 2**-11 + 2**-40], np.float64)
    x = ir.var("x", f64.shape, "float64")
    to_half = evaluate(fn(x, body=op.cast(x, "float16")), f64)
    # ties to even; the largest float16 below the tie; the tie rounds to inf; half the
    # smallest subnormal ties to 0; 1.5 of it rounds up; no double rounding from float64
    assert to_half.tolist() == [1.0, 1 + 2**-9, 65504.0, np.inf, 0.0, 2.0**-24, 1 + 2**-10]
    # to bfloat16 through float32, as ml_dtypes and onnxruntime do: 1 + 2**-8 + 2**-30 is
    # 1 + 2**-8 in float32, a tie, so 1.0
    y = ir.var("y", (5,), "float64")
    wide = np.array([1 + 2**-8, 1 + 3 * 2**-8, 3.39e38, 1e39, 1 + 2**-8 + 2**-30])
    to_bf16 = evaluate(fn(y, body=op.cast(y, "bfloat16")), wide)
    assert to_bf16.astype(np.float64).tolist() == [1.0, 1 + 2**-6, 3.3895313892515355e38, np.inf, 1.0]
    ints = ir.var("i", (4,), "int32")
    wrapped = evaluate(fn(ints, body=ir.Tuple([op.cast(ints, "int8"), op.cast(ints, "uint8")])),
                       np.array([300, -129, 127, -1], np.int32))
    assert wrapped[0].tolist() == [44, 127, 127, -1] and wrapped[1].tolist() == [44, 127, 127, 255]
    floats = ir.var("f", (4,), "float16")
    truncated = evaluate(fn(floats, body=ir.Tuple([op.cast(floats, "int8"), op.cast(floats, "bool")])),
                         np.array([-1.75, 1.75, np.nan, 0.0], np.float16))
    assert truncated[0][:2].tolist() == [-1, 1] and truncated[1].tolist() == [True, True, True, False]


@pytest.mark.parametrize("source", ["float64", "float32", "float16", "int64", "int32", "uint8", "int8"])
def test_onnx_casts_match_onnxruntime(source):
    """Cast nodes from ``source`` to every dtype onnxruntime returns to NumPy (not
    bfloat16), imported and interpreted, against onnxruntime. One known difference is
    left out: onnxruntime casts float64 to float16 through float32 (double rounding), the
    IR rounds directly, as NumPy does (``test_cast_edge_values_explicitly``)."""
    data = _cast_sources()[source]
    if source == "float64":
        data = EDGES
    targets = [t for t in DTYPES if t not in (source, "bfloat16")]
    nodes = [helper.make_node("Cast", ["x"], [f"to_{t}"], to=ONNX_TYPE[t]) for t in targets]
    model = onnx_model(nodes, {"x": (source, data.shape)}, {f"to_{t}": t for t in targets}, opset=19)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = run_ort(model, {"x": data})
    for target, got, want in zip(targets, run_interpreter(model, {"x": data}), expected):
        defined = _defined(data, target)
        assert_same(got[defined], want[defined])


def test_bfloat16_casts_through_onnx_round_trip():
    """onnxruntime cannot hand bfloat16 to NumPy: cast there and back to float32."""
    nodes = [helper.make_node("Cast", ["x"], ["b"], to=TensorProto.BFLOAT16),
             helper.make_node("Cast", ["b"], ["y"], to=TensorProto.FLOAT)]
    with np.errstate(over="ignore"):
        data = EDGES.astype(np.float32)
    model = onnx_model(nodes, {"x": ("float32", data.shape)}, {"y": "float32"}, opset=19)
    assert_same(run_interpreter(model, {"x": data})[0], run_ort(model, {"x": data})[0])


# --------------------------------------------------------------------------- FoldConstant


@pytest.mark.parametrize("dtype", HALF_DTYPES + NEW_INT_DTYPES)
def test_fold_constant_agrees_with_the_interpreter(dtype):
    rng = np.random.default_rng(7)
    c1, c2 = ir.const(draw(dtype, (4, 4), rng, -2, 2)), ir.const(draw(dtype, (4, 4), rng, -2, 2))
    x = ir.var("x", (4, 4), dtype)
    folded_part = op.add(op.matmul(c1, c2), op.maximum(c1, c2))
    mod = fn(x, body=op.multiply(x, folded_part))
    folded = FoldConstant()(mod)
    product = folded["main"].body
    assert isinstance(product.args[1], ir.Constant) and product.args[1].dtype == dtype
    expected = evaluate(fn(body=folded_part))
    assert_same(product.args[1].data, expected)
    value = draw(dtype, (4, 4), rng, -2, 2)
    assert_same(evaluate(folded, value), evaluate(mod, value))


# --------------------------------------------------------------------------- text and wire formats


def test_every_dtype_round_trips_through_the_text_format():
    for dtype in DTYPES:
        rng = np.random.default_rng(8)
        values = np.array([0, 1, 1, 0], bool) if dtype == "bool" else draw(dtype, (4,), rng)
        if dtype in FLOAT_DTYPES:
            values = rounded(np.array([0.1, -2.5, np.inf, np.nan]), dtype)
        big = draw(dtype, (20,), np.random.default_rng(9)) if dtype != "bool" else np.ones(20, bool)
        x = ir.var("x", (4,), dtype)
        mod = fn(x, body=ir.Tuple([op.equal(x, ir.Constant(values)), op.equal(op.take(ir.Constant(big),
                                   ir.const(np.array([0, 1, 2, 3], np.int32))), x)]))
        text = mod.astext()
        assert f"Tensor[(4), {dtype}]" in text
        ir.assert_structural_equal(ir.parse(text), mod)
        for kept, parsed in ((values, ir.parse(text)["main"].body.fields[0].args[1].data),):
            assert kept.tobytes() == parsed.tobytes()


@pytest.mark.parametrize(("literal", "dtype", "value"), [
    ("1.5f16", "float16", 1.5), ("0.1f16", "float16", np.float16(0.1)), ("-2bf16", "bfloat16", -2.0),
    ("infbf16", "bfloat16", np.inf), ("nanf16", "float16", np.nan), ("65504f16", "float16", 65504.0),
    ("-128i8", "int8", -128), ("255u8", "uint8", 255), ("-32768i16", "int16", -32768),
    ("65535u16", "uint16", 65535), ("4294967295u32", "uint32", 2**32 - 1),
    ("18446744073709551615u64", "uint64", 2**64 - 1),
])
def test_scalar_literals_of_every_dtype(literal, dtype, value):
    mod = ir.parse(f"def @main() {{\n  {literal}\n}}")
    data = mod["main"].body.data
    assert data.dtype.name == dtype
    np.testing.assert_array_equal(data.astype(np.float64), np.float64(value))
    assert ir.parse(mod.astext())["main"].body.data.tobytes() == data.tobytes()


@pytest.mark.parametrize(("literal", "message"), [
    ("70000f16", "70000 is out of range for float16"), ("1e39bf16", "1e39 is out of range for bfloat16"),
    ("128i8", "128 is out of range for int8"), ("-1u8", "-1 is out of range for uint8"),
    ("18446744073709551616u64", "out of range for uint64"), ("1.5u16", "must be a whole number"),
    ("2.5x16", "unknown constant suffix 'x16'.*use f16, bf16, f \\(float32\\), f64, i8"),
])
def test_bad_literals_are_one_error_naming_the_dtype(literal, message):
    with pytest.raises(ParseError, match=message):
        ir.parse(f"def @main() {{\n  {literal}\n}}")


@pytest.mark.parametrize("dtype", HALF_DTYPES + NEW_INT_DTYPES)
def test_constants_of_every_dtype_cross_the_wire_and_pickle(dtype):
    data = draw(dtype, (3, 5), np.random.default_rng(10))[:, ::2]  # not contiguous
    x = ir.var("x", (3, 3), dtype)
    mod = fn(x, body=op.add(x, ir.Constant(data)))
    for copy in (from_wire(*to_wire(mod)), pickle.loads(pickle.dumps(mod, protocol=5)),
                 pickle.loads(pickle.dumps(mod, protocol=4))):
        ir.assert_structural_equal(copy, mod)
        assert copy["main"].body.args[1].data.tobytes() == np.ascontiguousarray(data).tobytes()


# --------------------------------------------------------------------------- ONNX import


@pytest.mark.parametrize("dtype", HALF_DTYPES + NEW_INT_DTYPES)
def test_onnx_inputs_outputs_and_initializers_of_every_dtype(dtype):
    weight = draw(dtype, (2, 3), np.random.default_rng(11), -2, 2)
    nodes = [helper.make_node("Add", ["x", "w"], ["y"]), helper.make_node("Identity", ["w"], ["w_out"])]
    model = onnx_model(nodes, {"x": (dtype, (2, 3))}, {"y": dtype, "w_out": dtype}, {"w": weight})
    mod = from_onnx(model)
    assert mod["main"].params[0].type_annotation == ir.TensorType((2, 3), dtype)
    value = draw(dtype, (2, 3), np.random.default_rng(12), -2, 2)
    total, echoed = evaluate(mod, value)
    assert_same(echoed, weight)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exact = rounded(value.astype(np.float32) + weight.astype(np.float32), dtype) if dtype in HALF_DTYPES \
            else value + weight
    assert_same(total, exact)


def test_unsupported_dtypes_are_one_line_listing_each_with_its_count():
    nodes = [helper.make_node("Cast", ["x"], ["a"], to=TensorProto.FLOAT8E4M3FN),
             helper.make_node("Cast", ["a"], ["b"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["b", "q"], ["c"]),
             helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT4E2M1)]
    int4 = helper.make_tensor("q", TensorProto.INT4, [2], [1, -2])
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT4E2M1, [2])],
                              initializer=[int4, helper.make_tensor("r", TensorProto.INT4, [2], [3, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(UnsupportedDtypesError) as info:
        from_onnx(model)
    assert info.value.counts == {"FLOAT8E4M3FN": 1, "FLOAT4E2M1": 1, "INT4": 2}
    assert str(info.value) == ("the ONNX model uses 3 unsupported dtype(s): "
                               "FLOAT4E2M1 (x1), FLOAT8E4M3FN (x1), INT4 (x2)")
    # with unsupported ops as well: one line listing both
    model.graph.node.append(helper.make_node("Foo", ["b"], ["h"], domain="com.example"))
    with pytest.raises(UnsupportedOpsError, match=r"^the ONNX model uses 1 unsupported op type\(s\): "
                                                  r"com.example.Foo \(x1\); and 3 unsupported dtype\(s\): "
                                                  r"FLOAT4E2M1 \(x1\), FLOAT8E4M3FN \(x1\), INT4 \(x2\)$"):
        from_onnx(model)


def test_evaluating_with_the_wrong_dtype_names_both():
    x = ir.var("x", (2,), "bfloat16")
    with pytest.raises(EvaluationError, match="expected Tensor.*bfloat16.*got an array of shape .* float32"):
        evaluate(fn(x, body=op.add(x, x)), np.ones(2, np.float32))

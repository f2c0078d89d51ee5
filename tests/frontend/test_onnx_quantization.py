"""Quantization: the ONNX quantization ops and onnxruntime's QOperator ops, per op against
onnxruntime (interpreted and compiled), and models quantized by ``onnxruntime.quantization``.

Per op. One node per model, over the attribute combinations the spec lists (opset 10, 13,
19, 21 and 23 forms; per-tensor, per-axis and blocked scales; every target dtype; inputs
with NaN, infinities, exact .5 ties and values far outside the range, so rounding half to
even and saturation are exercised). Each model runs on onnxruntime, on the reference
interpreter and through the compiled library; integer outputs must be identical, float
outputs too (both compute the same float32 operations). Where onnxruntime has no kernel
(bfloat16, int32 inputs, s8u8 QLinearMatMul, per-channel ConvInteger zero points) the
ONNX reference implementation is the oracle, and for per-row MatMulInteger zero points,
which neither implements, the formula itself.

Tolerances. onnxruntime's results for QLinearAdd, QLinearSigmoid and
QLinearGlobalAveragePool depend on the CPU: its AVX2 QLinearAdd kernel fuses
multiply-adds, NEON uses fixed point for both QLinearAdd and the average pool, and its
logistic is a polynomial approximation (see :mod:`passinfra.ir.op.quantize`). Those ops
are compared within one quantization step on at most 1% of the elements (on x86-64 with
AVX2, the machine these tests were written on, they are identical: every one of the
65,536 input pairs of a QLinearAdd included). Every other op is compared exactly.

Operands. 8-bit products are summed exactly in int32 by raypass. onnxruntime's U8S8
kernels on AVX2 CPUs without VNNI add pairs of products in int16 with saturation
(VPMADDUBSW), so an int8 operand multiplied by a uint8 one is kept within [-64, 63] (and
the quantized models use ``reduce_range``, onnxruntime's own remedy): then no pair
saturates on any CPU, and the comparison does not depend on which kernel runs.

Models. An MLP (MatMul, Relu, Gemm) and a small CNN (Conv, Relu, MaxPool, a residual
Add, Concat, Sigmoid * x, LeakyRelu, GlobalAveragePool, Gemm), quantized with
``quantize_dynamic`` and with ``quantize_static`` in QDQ and QOperator formats (uint8 and
int8 activations, per-tensor and per-channel weights, a calibration reader over random
batches). raypass's outputs (the last quantized tensor and the float output after the
final DequantizeLinear), interpreted and compiled, are compared with onnxruntime running
the same quantized model: exactly where the quantized model is integer kernels and
single float32 operations (the MLP, dynamic and QOperator), else with the tolerances of
:func:`assert_model_outputs`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import passinfra
from passinfra import evaluate, ir
from passinfra.errors import IRTypeError
from passinfra.frontend import OnnxImportError, from_onnx
from passinfra.frontend.onnx import UnsupportedDtypesError
from passinfra.ir import op
from passinfra.transform import PassContext

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

MS = "com.microsoft"
RNG = np.random.default_rng(20240611)
BF16 = np.dtype(ml_dtypes.bfloat16)


@pytest.fixture(scope="module", autouse=True)
def _object_cache(tmp_path_factory: pytest.TempPathFactory):
    """Compiled kernels go to a cache of this module's own (and stay out of ~/.cache)."""
    with PassContext(config={"codegen.cache_dir": str(tmp_path_factory.mktemp("codegen-cache"))}):
        yield


# --------------------------------------------------------------------------- data


def f32(value: float) -> np.ndarray:
    return np.asarray(value, dtype=np.float32)


def floats(*shape: int, scale: float = 40.0) -> np.ndarray:
    """Normal values with NaN, infinities, exact .5 ties (at scale 0.5: 1.25 -> 2.5 -> 2)
    and values far past any 16-bit range at the start."""
    values = RNG.normal(0.0, scale, shape).astype(np.float32)
    special = [np.nan, np.inf, -np.inf, 1.25, 1.75, -1.25, -0.75, 0.25, 1e6, -1e6]
    flat = values.reshape(-1)
    flat[: min(len(special), flat.size)] = special[: flat.size]
    return values


def half(values: np.ndarray) -> np.ndarray:
    """``values`` as float16 (1e6 becomes inf, as it should)."""
    with np.errstate(over="ignore"):
        return values.astype(np.float16)


def finite(*shape: int, scale: float = 40.0) -> np.ndarray:
    """As :func:`floats` without NaN and infinities (for the ONNX reference, which leaves
    NaN undefined)."""
    values = floats(*shape, scale=scale)
    return np.where(np.isfinite(values), values, np.float32(3.0)).astype(np.float32)


def ints(dtype: str, *shape: int, low: int | None = None, high: int | None = None) -> np.ndarray:
    info = np.iinfo(dtype)
    low = info.min if low is None else low
    high = info.max if high is None else high
    return RNG.integers(low, high, shape, endpoint=True).astype(dtype)


def u8(*shape: int) -> np.ndarray:
    return ints("uint8", *shape)


def s8(*shape: int, limit: int = 128) -> np.ndarray:
    """int8 values; ``limit=64`` for an operand multiplied by uint8 values (module docstring)."""
    return ints("int8", *shape, low=-limit, high=limit - 1)


def scales(*shape: int) -> np.ndarray:
    return RNG.uniform(0.01, 0.05, shape).astype(np.float32)


# --------------------------------------------------------------------------- one-node models


@dataclasses.dataclass
class Arg:
    """A node input: a graph input fed at run time, or an initializer (``const``)."""

    value: np.ndarray | None
    const: bool = True


def In(value: np.ndarray) -> Arg:  # capitalized: it reads as the Arg constructor it is
    return Arg(value, const=False)


def node_model(op_type: str, args: Sequence[Arg | np.ndarray | None], outputs: int = 1, opset: int = 21,
               domain: str = "", out_types: Sequence[int] | None = None,
               **attrs) -> tuple[onnx.ModelProto, dict]:
    """One ``op_type`` node; arrays are initializers, ``In(array)`` graph inputs, None an
    omitted input. Output types come from ONNX shape inference (or ``out_types``, for the
    com.microsoft ops ONNX does not know)."""
    inputs, initializers, names, feeds = [], [], [], {}
    for index, arg in enumerate(args):
        arg = arg if isinstance(arg, Arg) or arg is None else Arg(np.asarray(arg))
        if arg is None or arg.value is None:
            names.append("")
            continue
        name = f"in{index}"
        names.append(name)
        if arg.const:
            initializers.append(numpy_helper.from_array(arg.value, name))
        else:
            dtype = helper.np_dtype_to_tensor_dtype(arg.value.dtype)
            inputs.append(helper.make_tensor_value_info(name, dtype, arg.value.shape))
            feeds[name] = arg.value
    out_names = [f"out{k}" for k in range(outputs)]
    node = helper.make_node(op_type, names, out_names, domain=domain, **attrs)
    value_infos = [helper.make_tensor_value_info(n, (out_types or [0] * outputs)[k], None)
                   for k, n in enumerate(out_names)]
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(helper.make_graph([node], "g", inputs, value_infos, initializers),
                              opset_imports=imports)
    if out_types is None:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        for output, typed in zip(model.graph.output, inferred.graph.output):
            output.CopyFrom(typed)
    return model, feeds


def run_onnxruntime(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def run_reference(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, feeds)]


def run_raypass(model: onnx.ModelProto, feeds: dict) -> dict[str, list[np.ndarray]]:
    """{"interpreted": outputs, "compiled": outputs}."""
    mod = from_onnx(model)
    arrays = [feeds[p.name_hint] for p in mod["main"].params]
    results = {"interpreted": evaluate(mod, *arrays), "compiled": passinfra.build(mod)(*arrays)}
    return {how: list(out) if isinstance(out, tuple) else [out] for how, out in results.items()}


def assert_same(got: np.ndarray, expected: np.ndarray, within_one: bool = False, what: str = "") -> None:
    """Same dtype, shape and values (NaN where NaN); ``within_one``: integer values may be
    1 apart on at most 1% of the elements (module docstring)."""
    assert got.dtype == expected.dtype and got.shape == expected.shape, (what, got.dtype, got.shape,
                                                                       expected.dtype, expected.shape)
    if not within_one:
        np.testing.assert_array_equal(got, expected, err_msg=what)
        return
    difference = np.abs(got.astype(np.int64) - expected.astype(np.int64))
    assert difference.max(initial=0) <= 1, (what, difference.max())
    assert np.count_nonzero(difference) <= max(1, expected.size // 100), (what, np.count_nonzero(difference))


# --------------------------------------------------------------------------- per-op cases


@dataclasses.dataclass
class Case:
    id: str
    model: onnx.ModelProto
    feeds: dict
    oracle: Callable[[onnx.ModelProto, dict], list[np.ndarray]] = run_onnxruntime
    within_one: bool = False


CASES: list[Case] = []


def case(case_id: str, op_type: str, args: Sequence, *, oracle=run_onnxruntime, within_one: bool = False,
         **kwargs) -> None:
    model, feeds = node_model(op_type, args, **kwargs)
    CASES.append(Case(case_id, model, feeds, oracle, within_one))


def ms_case(case_id: str, op_type: str, args: Sequence, out_dtype: np.dtype, within_one: bool = False,
            **attrs) -> None:
    case(case_id, op_type, args, domain=MS, opset=17, within_one=within_one,
         out_types=[helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype))], **attrs)


QUANTIZED = ("uint8", "int8", "uint16", "int16")

# QuantizeLinear: every form of the spec, every target dtype
X = floats(3, 4, 5)
case("quantize-opset10-uint8", "QuantizeLinear", [In(X), f32(0.5), np.uint8(128)], opset=10)
case("quantize-opset10-int8", "QuantizeLinear", [In(X), f32(0.37), np.int8(-3)], opset=10)
case("quantize-opset10-default-zero-point", "QuantizeLinear", [In(X), f32(0.5)], opset=10)
case("quantize-opset13-axis1-int8", "QuantizeLinear",
     [In(X), scales(4) * 40, ints("int8", 4, low=-9, high=9)], opset=13, axis=1)
case("quantize-opset13-axis0-uint8", "QuantizeLinear",
     [In(X), scales(3) * 40, ints("uint8", 3, high=20)], opset=13, axis=0)
case("quantize-opset13-axis-1-int8", "QuantizeLinear",
     [In(X), scales(5) * 40, ints("int8", 5, low=-9, high=9)], opset=13, axis=-1)
case("quantize-opset19-float16", "QuantizeLinear", [In(half(X)), np.float16(0.5), np.uint8(3)],
     opset=19)
for _dtype in QUANTIZED:
    case(f"quantize-opset21-per-tensor-{_dtype}", "QuantizeLinear",
         [In(X * 300), f32(0.75), np.asarray(7 if _dtype[0] == "u" else -7, _dtype)])
    case(f"quantize-opset21-per-axis-{_dtype}", "QuantizeLinear",
         [In(X * 300), scales(4) * 40, ints(_dtype, 4, low=0, high=9)], axis=1)
    # blocks of 3 along an axis of 5: the last block is short
    case(f"quantize-opset21-blocked-{_dtype}", "QuantizeLinear",
         [In(X * 300), scales(3, 4, 2) * 40, ints(_dtype, 3, 4, 2, low=0, high=9)], axis=2, block_size=3)
case("quantize-opset21-output-dtype-int16", "QuantizeLinear", [In(X * 300), f32(0.5)],
     output_dtype=TensorProto.INT16)
case("quantize-opset23-float16-data-float32-scale", "QuantizeLinear",
     [In(half(X)), f32(0.3), np.uint8(3)], opset=23)
case("quantize-bfloat16", "QuantizeLinear",
     [In(finite(3, 4, 5).astype(BF16)), np.asarray(0.5, BF16), np.uint8(3)], oracle=run_reference)
case("quantize-int32-data", "QuantizeLinear", [In(ints("int32", 3, 4, low=-1000, high=1000)), f32(3.0),
                                               np.int8(3)], opset=23, oracle=run_reference)

# DequantizeLinear
for _dtype in QUANTIZED:
    _q = ints(_dtype, 3, 4, 5)
    case(f"dequantize-per-tensor-{_dtype}", "DequantizeLinear", [In(_q), f32(0.37), np.asarray(3, _dtype)])
    case(f"dequantize-per-axis-{_dtype}", "DequantizeLinear",
         [In(_q), scales(4), ints(_dtype, 4, low=0, high=9)], axis=1)
    case(f"dequantize-blocked-{_dtype}", "DequantizeLinear",
         [In(_q), scales(3, 4, 2), ints(_dtype, 3, 4, 2, low=0, high=9)], axis=2, block_size=3)
case("dequantize-opset10-uint8", "DequantizeLinear", [In(u8(3, 4)), f32(0.0137), np.uint8(3)], opset=10)
case("dequantize-opset13-axis0-int8", "DequantizeLinear", [In(s8(3, 4)), scales(3), s8(3, limit=9)], opset=13,
     axis=0)
case("dequantize-int32", "DequantizeLinear", [In(ints("int32", 3, 4, low=-10**6, high=10**6)), f32(0.0137)])
case("dequantize-float16-scale", "DequantizeLinear",
     [In(u8(3, 4, 5)), np.float16(0.0137), np.uint8(3)], opset=19)
case("dequantize-opset23-output-dtype-float16", "DequantizeLinear",
     [In(u8(3, 4, 5)), f32(0.0137), np.uint8(3)], opset=23, output_dtype=TensorProto.FLOAT16)
case("dequantize-bfloat16-scale", "DequantizeLinear",
     [In(u8(3, 4, 5)), np.asarray(0.0137, BF16), np.uint8(3)], oracle=run_reference)

# DynamicQuantizeLinear (an all-zero tensor: scale 1, as onnxruntime; the spec's formula
# divides by zero)
# rows of 16 values or more: the range pass runs in 16 lanes (37: a tail of 5)
for _label, _data in (("mixed", RNG.normal(0, 3, (4, 7))), ("positive", RNG.uniform(1, 3, (4, 7))),
                      ("negative", -RNG.uniform(1, 3, (4, 7))), ("zeros", np.zeros((4, 7))),
                      ("one-element", np.full((1,), 2.5)), ("lanes", RNG.normal(0, 3, (3, 37))),
                      ("lanes-positive", RNG.uniform(1, 3, (2, 32)))):
    case(f"dynamic-quantize-{_label}", "DynamicQuantizeLinear", [In(_data.astype(np.float32))], outputs=3,
         opset=11)

# MatMulInteger: every operand dtype pair, zero points absent / scalar / per column,
# batches, vectors
for (_la, _a, _za), (_lb, _b, _zb) in (
        (("u8", u8(3, 8), np.uint8(7)), ("u8", u8(8, 5), np.uint8(250))),
        (("u8", u8(3, 8), np.uint8(7)), ("s8", s8(8, 5, limit=64), np.int8(-3))),
        (("s8", s8(3, 8, limit=64), np.int8(-7)), ("u8", u8(8, 5), np.uint8(5))),
        (("s8", s8(3, 8), np.int8(-7)), ("s8", s8(8, 5, limit=64), np.int8(3)))):
    case(f"matmul-integer-{_la}{_lb}", "MatMulInteger", [In(_a), _b, _za, _zb], opset=10)
    case(f"matmul-integer-{_la}{_lb}-no-zero-points", "MatMulInteger", [In(_a), _b], opset=10)
    case(f"matmul-integer-{_la}{_lb}-per-column", "MatMulInteger",
         [In(_a), _b, _za, ints(_b.dtype.name, 5, low=0, high=9)], opset=10)
for _label, _lhs, _rhs in (("batched-3d-2d", In(u8(2, 3, 8)), u8(8, 5)),
                           ("batched-3d-3d", In(u8(2, 3, 8)), In(u8(2, 8, 5))),
                           ("vector-matrix", In(u8(8)), u8(8, 5)), ("matrix-vector", In(u8(3, 8)), u8(8))):
    case(f"matmul-integer-{_label}", "MatMulInteger", [_lhs, _rhs, np.uint8(4), np.uint8(9)], opset=10)

# ConvInteger
_X = u8(2, 4, 9, 8)
case("conv-integer-u8u8", "ConvInteger", [In(_X), u8(6, 4, 3, 3), np.uint8(100), np.uint8(120)], opset=10)
case("conv-integer-u8s8-pads-strides", "ConvInteger",
     [In(_X), s8(6, 4, 3, 3, limit=64), np.uint8(100), np.int8(3)], opset=10, pads=[1, 2, 0, 1],
     strides=[2, 1])
case("conv-integer-dilations-groups", "ConvInteger", [In(_X), u8(6, 2, 3, 2), np.uint8(100), np.uint8(120)],
     opset=10, dilations=[2, 1], group=2)
case("conv-integer-auto-pad", "ConvInteger", [In(_X), u8(6, 4, 3, 3), np.uint8(100), np.uint8(120)], opset=10,
     auto_pad="SAME_UPPER")
case("conv-integer-1d", "ConvInteger", [In(u8(2, 4, 9)), u8(6, 4, 3), np.uint8(100), np.uint8(120)], opset=10,
     pads=[1, 1])
case("conv-integer-s8s8", "ConvInteger",
     [In(s8(2, 4, 9, 8)), s8(6, 4, 3, 3, limit=64), np.int8(-3), np.int8(3)], opset=10)
case("conv-integer-no-zero-points", "ConvInteger", [In(_X), u8(6, 4, 3, 3)], opset=10)
case("conv-integer-per-channel-weight-zero-point", "ConvInteger",
     [In(_X), u8(6, 4, 3, 3), np.uint8(100), ints("uint8", 6, low=100, high=140)], opset=10,
     oracle=run_reference)

# QLinearMatMul: onnxruntime's dtype combinations; the others against the reference
_U8_A, _S8_A = ("u8", u8(3, 8), np.uint8(120)), ("s8", s8(3, 8), np.int8(-5))
_U8_B, _S8_B = ("u8", u8(8, 5), np.uint8(128)), ("s8", s8(8, 5, limit=64), np.int8(0))
_U8_Y, _S8_Y = ("u8", np.uint8(130)), ("s8", np.int8(3))
for (_la, _a, _za), (_lb, _b, _zb), (_ly, _zy), _oracle in (
        (_U8_A, _U8_B, _U8_Y, run_onnxruntime), (_U8_A, _S8_B, _U8_Y, run_onnxruntime),
        (_S8_A, _S8_B, _S8_Y, run_onnxruntime), (_S8_A, _U8_B, _U8_Y, run_reference)):
    case(f"qlinear-matmul-{_la}{_lb}-{_ly}", "QLinearMatMul",
         [In(_a), f32(0.05), _za, _b, f32(0.02), _zb, f32(0.9), _zy], oracle=_oracle)
case("qlinear-matmul-per-column", "QLinearMatMul",
     [In(u8(3, 8)), f32(0.05), np.uint8(120), s8(8, 5, limit=64), scales(5), np.zeros(5, np.int8), f32(0.9),
      np.uint8(128)])
case("qlinear-matmul-opset10-batched", "QLinearMatMul",
     [In(u8(2, 3, 8)), f32(0.05), np.uint8(120), u8(8, 5), f32(0.02), np.uint8(128), f32(0.9), np.uint8(128)],
     opset=10)
case("qlinear-matmul-float16-scales", "QLinearMatMul",
     [In(u8(3, 8)), np.float16(0.05), np.uint8(120), u8(8, 5), np.float16(0.02), np.uint8(128),
      np.float16(0.9), np.uint8(128)])


# QLinearConv
def _qlinear_conv(case_id: str, weight: np.ndarray, w_scale, w_zero, bias=None, data=_X, x_zero=None,
                  y_zero=None, **attrs) -> None:
    x_zero = np.uint8(100) if x_zero is None else x_zero
    y_zero = np.uint8(128) if y_zero is None else y_zero
    args = [In(data), f32(0.03), x_zero, weight, w_scale, w_zero, f32(0.4), y_zero]
    case(case_id, "QLinearConv", args + ([bias] if bias is not None else []), opset=10, **attrs)


_W = s8(6, 4, 3, 3, limit=64)
_qlinear_conv("qlinear-conv-per-tensor", _W, f32(0.02), np.int8(0))
_qlinear_conv("qlinear-conv-per-channel-bias-pads", _W, scales(6), np.zeros(6, np.int8),
              ints("int32", 6, low=-3000, high=3000), pads=[1, 1, 1, 1])
_qlinear_conv("qlinear-conv-strides-groups-dilations", s8(6, 2, 3, 2, limit=64), f32(0.02), np.int8(0),
              strides=[2, 1], group=2, dilations=[1, 2], pads=[0, 1, 2, 0])
_qlinear_conv("qlinear-conv-int8-activations", _W, f32(0.02), np.int8(0), data=s8(2, 4, 9, 8),
              x_zero=np.int8(-4), y_zero=np.int8(-2))
_qlinear_conv("qlinear-conv-uint8-weights", u8(6, 4, 3, 3), f32(0.02), np.uint8(130))
_qlinear_conv("qlinear-conv-depthwise", s8(4, 1, 3, 3, limit=64), scales(4), np.zeros(4, np.int8),
              group=4, pads=[1, 1, 1, 1])
_qlinear_conv("qlinear-conv-1d", s8(6, 4, 3, limit=64), f32(0.02), np.int8(0), data=u8(2, 4, 9), pads=[1, 1])
_qlinear_conv("qlinear-conv-auto-pad", _W, f32(0.02), np.int8(0), auto_pad="SAME_LOWER", strides=[2, 2])

# com.microsoft QLinearAdd / QLinearMul: same shapes, a broadcast row, a scalar on either
# side, a broadcast channel, an outer sum
for _dtype, _zeros in (("uint8", (120, 131, 125)), ("int8", (-3, 5, 1))):
    _make = u8 if _dtype == "uint8" else s8
    _za, _zb, _zc = (np.asarray(z, _dtype) for z in _zeros)
    for _sa, _sb in (((4, 64), (4, 64)), ((4, 64), (64,)), ((4, 64), (1,)), ((1,), (4, 64)),
                     ((2, 8, 4, 4), (8, 1, 1)), ((4, 1), (1, 64))):
        _shapes = "x".join(map(str, _sa)) + "-" + "x".join(map(str, _sb))
        for _op, _out_scale in (("QLinearAdd", 0.047), ("QLinearMul", 0.23)):
            ms_case(f"{_op.lower()}-{_dtype}-{_shapes}", _op,
                    [In(_make(*_sa)), f32(0.031), _za, In(_make(*_sb)), f32(0.017), _zb, f32(_out_scale),
                     _zc], _dtype, within_one=_op == "QLinearAdd")
    _all = np.arange(np.iinfo(_dtype).min, np.iinfo(_dtype).max + 1).astype(_dtype)
    _grid_a, _grid_b = np.repeat(_all, 256).reshape(256, 256), np.tile(_all, 256).reshape(256, 256)
    for _op, _scales in (("QLinearAdd", (0.0123, 0.0456, 0.0789)), ("QLinearMul", (0.031, 0.017, 1.41))):
        ms_case(f"{_op.lower()}-{_dtype}-all-pairs", _op,
                [In(_grid_a), f32(_scales[0]), _za, In(_grid_b), f32(_scales[1]), _zb, f32(_scales[2]), _zc],
                _dtype, within_one=_op == "QLinearAdd")
    ms_case(f"qlinear-add-{_dtype}-no-output-zero-point", "QLinearAdd",
            [In(_make(4, 8)), f32(0.031), _za, In(_make(4, 8)), f32(0.017), _zb, f32(0.047)], _dtype,
            within_one=True)
    # the lookup-table ops over every input value
    _column = _all.reshape(256, 1)
    for _sx in (0.01, 0.11):
        _lowest = np.asarray(np.iinfo(_dtype).min, _dtype)  # sigmoid's range [0, 1) fills the type
        ms_case(f"qlinear-sigmoid-{_dtype}-scale{_sx}", "QLinearSigmoid",
                [In(_column), f32(_sx), _za, f32(1 / 256), _lowest], _dtype, within_one=True)
    ms_case(f"qlinear-leaky-relu-{_dtype}", "QLinearLeakyRelu", [In(_column), f32(0.05), _za, f32(0.03), _zb],
            _dtype, alpha=0.1)
    ms_case(f"qlinear-global-average-pool-{_dtype}", "QLinearGlobalAveragePool",
            [In(_make(2, 8, 5, 7)), f32(0.05), _za, f32(0.03), _zb], _dtype, within_one=True)
    ms_case(f"qlinear-global-average-pool-{_dtype}-channels-last", "QLinearGlobalAveragePool",
            [In(_make(2, 5, 7, 8)), f32(0.05), _za, f32(0.03), _zb], _dtype, within_one=True, channels_last=1)
    # the second input is already in the output's quantization (copied)
    ms_case(f"qlinear-concat-{_dtype}", "QLinearConcat",
            [f32(0.04), _zc, In(_make(2, 3, 4)), f32(0.05), _za, In(_make(2, 5, 4)), f32(0.04), _zc,
             In(_make(2, 1, 4)), f32(0.02), _zb], _dtype, axis=1)
    for _ta, _tb in ((0, 0), (1, 0), (0, 1), (1, 1)):
        _lhs = _make(7, 5) if _ta else _make(5, 7)
        _rhs = s8(6, 7, limit=64) if _tb else s8(7, 6, limit=64)
        ms_case(f"qgemm-{_dtype}-trans{_ta}{_tb}", "QGemm",
                [In(_lhs), f32(0.05), _za, _rhs, f32(0.02), np.int8(0),
                 ints("int32", 6, low=-5000, high=5000), f32(0.3), _zb], _dtype, transA=_ta, transB=_tb,
                alpha=0.75)
    ms_case(f"qgemm-{_dtype}-per-column-float-output", "QGemm",
            [In(_make(5, 7)), f32(0.05), _za, s8(7, 6, limit=64), scales(6), np.zeros(6, np.int8),
             ints("int32", 5, 6, low=-5000, high=5000)], np.float32)
    ms_case(f"qgemm-{_dtype}-per-column-no-bias", "QGemm",
            [In(_make(5, 7)), f32(0.05), _za, s8(7, 6, limit=64), scales(6), np.zeros(6, np.int8), None,
             f32(0.3), _zb], _dtype)


def test_case_ids_are_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("op_case", CASES, ids=[c.id for c in CASES])
def test_op_matches_onnxruntime(op_case: Case):
    """Interpreted and compiled, against onnxruntime (or the reference where it has no kernel)."""
    expected = op_case.oracle(op_case.model, op_case.feeds)
    for how, outputs in run_raypass(op_case.model, op_case.feeds).items():
        assert len(outputs) == len(expected)
        for got, want in zip(outputs, expected):
            assert_same(got, want, op_case.within_one, f"{op_case.id} ({how})")


def _saturated(values: np.ndarray, zero_point: int, dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.clip(np.rint(values) + zero_point, info.min, info.max).astype(dtype)


def _division_not_reciprocal() -> tuple[onnx.ModelProto, dict, np.ndarray]:
    # x / 0.37 and x * (1 / 0.37) round to different integers for these three values
    x = np.concatenate([np.array([12.025000572, 25.714998245, -38.294998169], np.float32), finite(13)])
    model, feeds = node_model("QuantizeLinear", [In(x), f32(0.37), np.uint8(128)], opset=13)
    return model, feeds, _saturated(x * (np.float32(1) / np.float32(0.37)), 128, "uint8")


def _multiplier_order() -> tuple[onnx.ModelProto, dict, np.ndarray]:
    # every product of a uint8 (zero point 128) and an int8 (K = 1: no pair can saturate);
    # (sa * sb) / sy and sa * (sb / sy) differ in float32 here and round 64 products apart
    sa, sb, sy = (np.float32(v) for v in (0.02260841429233551, 0.042575303465127945, 0.09747187793254852))
    lhs = np.arange(256).astype(np.uint8).reshape(256, 1)
    rhs = np.arange(-128, 128).astype(np.int8).reshape(1, 256)
    model, feeds = node_model("QLinearMatMul", [In(lhs), sa, np.uint8(128), In(rhs), sb, np.int8(0), sy,
                                                np.uint8(128)])
    acc = ((lhs.astype(np.int32) - 128) @ rhs.astype(np.int32)).astype(np.float32)
    return model, feeds, _saturated(acc * (sa * (sb / sy)), 128, "uint8")


def _zero_point_before_rounding() -> tuple[onnx.ModelProto, dict, np.ndarray]:
    # QLinearMul adds the output zero point in float32 before rounding; adding it after
    # rounding gives other results for 392 of these products
    scales_ = [np.float32(v) for v in (0.04473862051963806, 0.039062660187482834, 0.576711118221283)]
    grid = np.arange(256).astype(np.uint8)
    lhs, rhs = np.repeat(grid, 256).reshape(256, 256), np.tile(grid, 256).reshape(256, 256)
    model, feeds = node_model("QLinearMul", [In(lhs), scales_[0], np.uint8(128), In(rhs), scales_[1],
                                             np.uint8(128), scales_[2], np.uint8(125)],
                              domain=MS, opset=17, out_types=[TensorProto.UINT8])
    product = (lhs.astype(np.int32) - 128) * (rhs.astype(np.int32) - 128)
    ratio = (scales_[0] * scales_[1]) / scales_[2]
    return model, feeds, _saturated(product.astype(np.float32) * ratio, 125, "uint8")


@pytest.mark.parametrize("scenario", [_division_not_reciprocal, _multiplier_order,
                                      _zero_point_before_rounding],
                         ids=lambda s: s.__name__.strip("_").replace("_", "-"))
def test_onnxruntime_arithmetic_where_the_alternatives_differ(scenario):
    """Inputs on which a plausible other arithmetic (multiplying by a reciprocal, another
    association of the multiplier, the zero point added after rounding) gives other
    results than onnxruntime; raypass gives onnxruntime's."""
    model, feeds, alternative = scenario()
    (expected,) = run_onnxruntime(model, feeds)
    assert not np.array_equal(alternative, expected)  # the inputs do tell the two apart
    for how, (got,) in run_raypass(model, feeds).items():
        assert_same(got, expected, what=how)


def test_per_row_matmul_integer_zero_point():
    """A 1-D a_zero_point of one value per row of A (the spec's per-row form), which
    neither onnxruntime nor the ONNX reference implements: the formula itself."""
    lhs, rhs, lhs_zero, rhs_zero = u8(3, 8), s8(8, 5), ints("uint8", 3, low=0, high=30), np.int8(-2)
    model, feeds = node_model("MatMulInteger", [In(lhs), rhs, lhs_zero, rhs_zero], opset=10)
    expected = (lhs.astype(np.int64) - lhs_zero.astype(np.int64)[:, None]) @ (rhs.astype(np.int64) - rhs_zero)
    for how, (got,) in run_raypass(model, feeds).items():
        assert_same(got, expected.astype(np.int32), what=how)


def test_int8_products_are_exact_over_the_full_range():
    """raypass sums int8 x uint8 products in int32 with no intermediate saturation, for
    operands over the full range (where onnxruntime's AVX2 U8S8 kernel could saturate)."""
    lhs, rhs = np.full((2, 64), 255, np.uint8), np.full((64, 3), -128, np.int8)
    model, feeds = node_model("MatMulInteger", [In(lhs), In(rhs)], opset=10)
    expected = np.full((2, 3), 64 * 255 * -128, np.int32)
    for how, (got,) in run_raypass(model, feeds).items():
        assert_same(got, expected, what=how)


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("where", [(0, 3), (2, 35)])  # in the lanes, in the tail
def test_dynamic_quantize_range_in_lanes_keeps_nan_and_signed_zero(where):
    """The compiled range pass (16 lanes, combined at the end) gives the interpreter's scale,
    zero point and codes: a NaN anywhere makes the scale NaN, and -0.0 is no new minimum."""
    for special in (np.nan, -0.0):
        data = RNG.uniform(0.5, 3, (3, 37)).astype(np.float32)
        data[where] = special
        results = run_raypass(*node_model("DynamicQuantizeLinear", [In(data)], outputs=3, opset=11))
        for compiled, interpreted in zip(results["compiled"], results["interpreted"]):
            np.testing.assert_array_equal(np.asarray(compiled), np.asarray(interpreted))
        assert np.isnan(results["compiled"][1]) == np.isnan(special)


def test_ir_errors_name_the_op_and_the_types():
    x64 = ir.var("x", (2, 3), "float64")
    with pytest.raises(IRTypeError, match=r"op qnn\.quantize: expected the data of dtype float16, bfloat16, "
                                          r"float32 or int32, got Tensor\[\(2, 3\), float64\]"):
        ir.infer_type(ir.Function([x64], op.qnn.quantize(x64, f32(0.5), np.uint8(0))))
    x = ir.var("x", (2, 3))
    with pytest.raises(IRTypeError, match=r"op qnn\.quantize: expected the scale to broadcast to the shape "
                                          r"of the data Tensor\[\(2, 3\), float32\], "
                                          r"got Tensor\[\(2\), float32\]"):
        ir.infer_type(ir.Function([x], op.qnn.quantize(x, scales(2), np.uint8(0))))
    a, b = ir.var("a", (2, 3), "uint8"), ir.var("b", (3, 4), "int8")
    with pytest.raises(IRTypeError, match=r"op qnn\.matmul: expected the right zero point of dtype int8"):
        ir.infer_type(ir.Function([a, b], op.qnn.matmul(a, b, np.uint8(0), np.uint8(0))))


def test_converter_errors_name_the_node():
    data = In(floats(3, 4))
    model, _ = node_model("QuantizeLinear", [data, scales(5), np.zeros(5, np.uint8)], opset=13, axis=1)
    with pytest.raises(OnnxImportError, match=r"QuantizeLinear node .*per-axis y_scale has 5 elements, but "
                                              r"axis 1 of the input has 4"):
        from_onnx(model)
    model, _ = node_model("QuantizeLinear", [data, scales(3, 3), np.zeros((3, 3), np.uint8)], axis=1,
                          block_size=2)
    with pytest.raises(OnnxImportError, match=r"y_scale of shape \(3, 3\) does not fit blocks of 2 along "
                                              r"axis 1"):
        from_onnx(model)
    model, _ = node_model("ConvInteger", [In(u8(1, 2, 4, 4, 4)), u8(3, 2, 2, 2, 2)], opset=10)
    with pytest.raises(OnnxImportError, match=r"ConvInteger node .*only 1-D and 2-D convolutions are "
                                              r"supported"):
        from_onnx(model)


def test_float8_quantization_is_one_line_naming_the_dtype():
    model, _ = node_model("QuantizeLinear", [In(finite(3, 4)), f32(0.5)],
                          output_dtype=TensorProto.FLOAT8E4M3FN)
    with pytest.raises(UnsupportedDtypesError, match=r"^the ONNX model uses 1 unsupported dtype\(s\): "
                                                     r"FLOAT8E4M3FN \(x1\)$"):
        from_onnx(model)


# --------------------------------------------------------------------------- quantized models

F = TensorProto.FLOAT


def _initializer(name: str, *shape: int, scale: float = 0.3) -> onnx.TensorProto:
    return numpy_helper.from_array(RNG.normal(0.0, scale, shape).astype(np.float32), name)


def mlp_model() -> onnx.ModelProto:
    """MatMul, Relu, Gemm with a bias: quantized, only integer kernels and single float32
    operations per element (see :func:`assert_model_outputs`)."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Relu", ["m1"], ["r1"]),
             helper.make_node("Gemm", ["r1", "w2", "b2"], ["y"])]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", F, [4, 16])],
        [helper.make_tensor_value_info("y", F, [4, 10])],
        [_initializer("w1", 16, 32), _initializer("w2", 32, 10), _initializer("b2", 10, scale=0.1)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def cnn_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Conv", ["x", "c1w", "c1b"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "c2w", "c2b"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Add", ["r2", "p1"], ["s"]),
        helper.make_node("Concat", ["s", "p1"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "c3w", "c3b"], ["c3"]),
        helper.make_node("Sigmoid", ["c3"], ["sg"]),
        helper.make_node("Mul", ["sg", "c3"], ["sw"]),
        helper.make_node("LeakyRelu", ["sw"], ["lr"], alpha=0.1),
        helper.make_node("GlobalAveragePool", ["lr"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", F, [2, 3, 12, 12])],
        [helper.make_tensor_value_info("y", F, [2, 10])],
        [_initializer("c1w", 8, 3, 3, 3), _initializer("c1b", 8, scale=0.1),
         _initializer("c2w", 8, 8, 3, 3), _initializer("c2b", 8, scale=0.1),
         _initializer("c3w", 8, 16, 1, 1), _initializer("c3b", 8, scale=0.1),
         _initializer("fw", 10, 8), _initializer("fb", 10, scale=0.1)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


MODELS = {"mlp": (mlp_model, (4, 16)), "cnn": (cnn_model, (2, 3, 12, 12))}


class RandomBatches(quantization.CalibrationDataReader):
    """Calibration data: eight standard-normal batches of the model's input."""

    def __init__(self, shape: tuple[int, ...], seed: int) -> None:
        rng = np.random.default_rng(seed)
        self._batches = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(8)])

    def get_next(self) -> dict | None:
        return next(self._batches, None)


QuantType, QuantFormat = quantization.QuantType, quantization.QuantFormat
# name -> (format or None for dynamic, activation type, per-channel weights)
SCHEMES = {
    "dynamic": (None, None, False),
    "qdq-uint8": (QuantFormat.QDQ, QuantType.QUInt8, False),
    "qdq-int8-per-channel": (QuantFormat.QDQ, QuantType.QInt8, True),
    "qoperator-uint8": (QuantFormat.QOperator, QuantType.QUInt8, False),
    "qoperator-int8": (QuantFormat.QOperator, QuantType.QInt8, False),
    "qoperator-uint8-per-channel": (QuantFormat.QOperator, QuantType.QUInt8, True),
}
# op types onnxruntime's quantizer emits (checked, so the ops these tests cover are the
# ones it really uses)
EXPECTED_OPS = {
    ("mlp", "dynamic"): {"DynamicQuantizeLinear", "MatMulInteger"},
    ("mlp", "qoperator-uint8"): {"QLinearMatMul", f"{MS}.QGemm", "QuantizeLinear", "DequantizeLinear"},
    ("cnn", "dynamic"): {"DynamicQuantizeLinear", "ConvInteger", "MatMulInteger"},
    ("cnn", "qdq-uint8"): {"QuantizeLinear", "DequantizeLinear"},
    ("cnn", "qoperator-uint8"): {"QLinearConv", f"{MS}.QGemm", f"{MS}.QLinearAdd", f"{MS}.QLinearConcat",
                                f"{MS}.QLinearSigmoid", f"{MS}.QLinearMul", f"{MS}.QLinearLeakyRelu",
                                f"{MS}.QLinearGlobalAveragePool", "QuantizeLinear", "DequantizeLinear"},
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("quantized-models")


def quantized_model(model_dir, name: str, scheme: str) -> onnx.ModelProto:
    """``name`` quantized with ``scheme``; the last quantized tensor (the input of the final
    DequantizeLinear) is an extra output, so integer results are compared too."""
    build, shape = MODELS[name]
    source, target = model_dir / f"{name}.onnx", model_dir / f"{name}-{scheme}.onnx"
    onnx.save(build(), source)
    fmt, activations, per_channel = SCHEMES[scheme]
    # reduce_range: 7-bit weights, so onnxruntime's U8S8 kernels never saturate (module docstring)
    if fmt is None:
        quantization.quantize_dynamic(source, target, weight_type=QuantType.QInt8, reduce_range=True)
    else:
        quantization.quantize_static(source, target, RandomBatches(shape, seed=3), quant_format=fmt,
                                     activation_type=activations, weight_type=QuantType.QInt8,
                                     per_channel=per_channel, reduce_range=True)
    model = onnx.load(target)
    final = [n for n in model.graph.node if n.output[0] == "y"]
    if final and final[0].op_type == "DequantizeLinear":
        quantized = final[0].input[0]
        model.graph.output.append(helper.make_tensor_value_info(quantized, 0, None))
        inferred = onnx.shape_inference.infer_shapes(model)
        typed = {v.name: v for v in (*inferred.graph.value_info, *inferred.graph.output)}
        if quantized in typed and typed[quantized].type.tensor_type.elem_type:
            model.graph.output[-1].CopyFrom(typed[quantized])
        else:  # a com.microsoft producer: ONNX cannot infer it; the final DequantizeLinear's input type
            dtype = next(i.data_type for i in model.graph.initializer if i.name == final[0].input[2])
            model.graph.output[-1].type.tensor_type.elem_type = dtype
    return model


def op_types(model: onnx.ModelProto) -> set[str]:
    return {f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in model.graph.node}


def output_step(model: onnx.ModelProto) -> float:
    """The quantization step of the float output: the final DequantizeLinear's scale (0
    for a dynamically quantized model, whose output is not quantized)."""
    final = [n for n in model.graph.node if n.output[0] == "y"][0]
    if final.op_type != "DequantizeLinear":
        return 0.0
    scale = next(i for i in model.graph.initializer if i.name == final.input[1])
    return float(numpy_helper.to_array(scale))


# models whose quantized forms compute only integer kernels and single float32
# operations per element (no float sums, no libm), on every CPU the same: compared exactly
EXACT = {("mlp", "dynamic"), ("mlp", "qoperator-uint8"), ("mlp", "qoperator-int8"),
         ("mlp", "qoperator-uint8-per-channel")}


def assert_model_outputs(got: Sequence[np.ndarray], expected: Sequence[np.ndarray], step: float,
                         what: str, exact: bool) -> None:
    """Model comparisons. ``exact`` (:data:`EXACT`): every output, integer and float,
    identical to onnxruntime's. Otherwise, what can differ and by how much:

    * The last quantized tensor (int): within one step on at most 1% of the elements. The
      CNN uses onnxruntime's CPU-dependent QLinearAdd / logistic / average-pool kernels
      (module docstring), and a QDQ model computes its float ops (raypass runs the graph
      as written; onnxruntime fuses it into integer kernels) with float sums whose
      rounding, near a .5 of the next QuantizeLinear, can move a value by one step.
    * The float output after the final DequantizeLinear is ``step * (q - zp)``: within one
      step, for the same reasons.
    * A dynamically quantized CNN's float output is ``float(acc) * scale + bias``; its
      float ops between the integer kernels (bias add, sigmoid, the average pool's sum)
      may round differently by an ulp (summation order, libm), so it is compared with a
      relative tolerance of 1e-5 of the output's magnitude. (A difference that moved an
      activation across a rounding boundary of the next DynamicQuantizeLinear would
      exceed that; in these models none does.)

    On the machine these tests were written on (x86-64, AVX2 and AVX-512) every compiled
    quantized output was identical to onnxruntime's.
    """
    assert len(got) == len(expected)
    if exact:
        for index, (output, output_expected) in enumerate(zip(got, expected)):
            assert_same(output, output_expected, what=f"{what}: output {index}")
        return
    y, y_expected = got[0], expected[0]
    assert y.dtype == y_expected.dtype and y.shape == y_expected.shape, what
    if step:
        np.testing.assert_allclose(y, y_expected, rtol=0, atol=step * 1.0001, err_msg=what)
    else:
        np.testing.assert_allclose(y, y_expected, rtol=1e-5, atol=1e-5 * float(np.abs(y_expected).max()),
                                   err_msg=what)
    for quantized, quantized_expected in zip(got[1:], expected[1:]):
        assert_same(quantized, quantized_expected, within_one=True, what=f"{what}: quantized output")


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
@pytest.mark.parametrize("name", sorted(MODELS))
def test_quantized_model_matches_onnxruntime(model_dir, name: str, scheme: str):
    model = quantized_model(model_dir, name, scheme)
    assert EXPECTED_OPS.get((name, scheme), set()) <= op_types(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    mod = from_onnx(model)
    lib = passinfra.build(mod)
    step = output_step(model)
    shape = MODELS[name][1]
    for seed in range(3):
        x = np.random.default_rng(100 + seed).standard_normal(shape).astype(np.float32)
        expected = session.run(None, {"x": x})
        for how, result in (("compiled", lib(x)), ("interpreted", evaluate(mod, x))):
            outputs = list(result) if isinstance(result, tuple) else [result]
            assert_model_outputs(outputs, expected, step, f"{name}-{scheme} seed {seed} ({how})",
                                 (name, scheme) in EXACT)

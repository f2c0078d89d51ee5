"""The indexing, scan and integer-arithmetic ONNX ops against onnxruntime: GatherElements,
ScatterElements (and Scatter), GatherND, ScatterND, TopK, CumSum, CumProd, Mod, BitShift,
Einsum, OneHot, EyeLike, Hardmax, IsNaN, IsInf, ReverseSequence, TensorScatter and MaxUnpool.

Every case runs through the reference interpreter (``from_onnx`` then ``evaluate``); the
cases marked ``compiled`` also through ``passinfra.build`` and the loaded library (one
object cache for the module). Floats are compared with tolerances that absorb a different
summation order (onnxruntime's scatter-add or einsum may add in another order); integers
and booleans exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import passinfra
from passinfra import evaluate, ir
from passinfra.errors import EvaluationError, IRTypeError
from passinfra.frontend import OnnxImportError, from_onnx
from passinfra.ir.op import indexing
from passinfra.transform import PassContext

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(17)


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    """One ONNX node as a model: ``feeds`` are graph inputs, ``constants`` initializers."""

    id: str
    op_type: str
    feeds: dict[str, np.ndarray]
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    attrs: dict = field(default_factory=dict)
    opset: int = 18
    outputs: int = 1
    compiled: bool = False
    inputs: tuple[str, ...] | None = None  # node inputs in order (default: feeds then constants)
    unordered: bool = False  # TopK sorted=0: the order of the k results is not specified

    def model(self) -> onnx.ModelProto:
        names = list(self.inputs if self.inputs is not None else [*self.feeds, *self.constants])
        outputs = [f"y{i}" for i in range(self.outputs)]
        node = helper.make_node(self.op_type, names, outputs, **self.attrs)
        graph = helper.make_graph(
            [node], self.id,
            [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
             for n, a in self.feeds.items()],
            [onnx.ValueInfoProto(name=o) for o in outputs],
            initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in self.constants.items()],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 8
        return model


CASES: list[Case] = []


def case(*args, **kwargs) -> None:
    CASES.append(Case(*args, **kwargs))


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def i64(*values) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def unique_positions(count: int, extent: int, lines: int, axis: int) -> np.ndarray:
    """Indices without duplicates along ``axis`` (what reduction "none" requires), some
    negative."""
    picks = [RNG.permutation(extent)[:count] for _ in range(lines)]
    positions = np.stack(picks, axis=1 - axis).astype(np.int64)  # 2-D: count along ``axis``
    return np.where(RNG.random(positions.shape) < 0.3, positions - extent, positions)


# GatherElements
case("gather_elements-axis0-negative", "GatherElements", {"x": f32(3, 4)},
     {"i": np.array([[0, -1, 2, 1], [1, 1, 0, -3]], np.int64)}, {"axis": 0}, opset=13)
case("gather_elements-axis1-smaller-int32", "GatherElements",
     {"x": RNG.integers(-50, 50, (3, 5)).astype(np.int64)}, {"i": np.array([[4, -5], [0, 2]], np.int32)},
     {"axis": 1}, opset=13)
case("gather_elements-axis-1-3d", "GatherElements", {"x": f32(2, 3, 4), "i": RNG.integers(-4, 4, (2, 3, 6))},
     attrs={"axis": -1}, opset=13, compiled=True)

# ScatterElements / Scatter
for _axis in (0, 1, -1):
    _shape = (3, 5) if _axis == 0 else (4, 3)
    case(f"scatter_elements-none-axis{_axis}", "ScatterElements",
         {"x": f32(4, 5), "u": f32(*_shape)},
         {"i": unique_positions(3, 4, 5, 0) if _axis == 0 else unique_positions(3, 5, 4, 1)},
         {"axis": _axis}, inputs=("x", "i", "u"), compiled=_axis == 0)
for _reduction in ("add", "mul", "max", "min"):
    case(f"scatter_elements-{_reduction}-duplicates", "ScatterElements",
         {"x": f32(4, 5), "u": (1 + 0.1 * f32(4, 6)) if _reduction == "mul" else f32(4, 6)},
         {"i": RNG.integers(-5, 5, (4, 6))}, {"axis": 1, "reduction": _reduction},
         inputs=("x", "i", "u"), compiled=_reduction == "add")
case("scatter-opset10", "Scatter", {"x": f32(3, 3), "u": f32(2, 3)},
     {"i": np.array([[1, 0, 2], [0, 2, 1]], np.int64)}, {"axis": 0}, opset=10, inputs=("x", "i", "u"))

# TensorScatter (a KV-cache write) and MaxUnpool are lowered to scatter_elements
case("tensorscatter-linear", "TensorScatter", {"cache": f32(2, 2, 6, 3), "update": f32(2, 2, 2, 3)},
     {"write": i64(1, 4)}, compiled=True, opset=24)
case("tensorscatter-circular", "TensorScatter", {"cache": f32(2, 5, 3), "update": f32(2, 3, 3)},
     {"write": i64(3, 0)}, {"mode": "circular", "axis": 1}, opset=24)
case("tensorscatter-no-write-indices", "TensorScatter", {"cache": f32(3, 4, 2), "update": f32(3, 2, 2)},
     opset=24)


def pooled_positions(batch: int, channels: int, size: int) -> np.ndarray:
    """Flat positions (over N x C x H x W) of one cell in each 2x2 window of a
    size x size image, as MaxPool's Indices output gives them."""
    windows = size // 2
    n, c, y, x = np.meshgrid(*(np.arange(e) for e in (batch, channels, windows, windows)), indexing="ij")
    rows, cols = 2 * y + RNG.integers(0, 2, y.shape), 2 * x + RNG.integers(0, 2, x.shape)
    return ((n * channels + c) * size + rows) * size + cols


case("maxunpool-2x2", "MaxUnpool", {"x": f32(2, 3, 2, 2)}, {"i": pooled_positions(2, 3, 4)},
     {"kernel_shape": [2, 2], "strides": [2, 2]}, opset=11, compiled=True)
case("maxunpool-output-shape", "MaxUnpool", {"x": f32(1, 2, 2, 2)},
     {"i": pooled_positions(1, 2, 4), "shape": i64(1, 2, 5, 5)}, {"kernel_shape": [2, 2], "strides": [2, 2]},
     opset=11)

# GatherND
case("gather_nd-elements", "GatherND", {"x": f32(3, 4)},
     {"i": np.array([[0, 0], [2, -1], [-3, 2]], np.int64)}, opset=13)
case("gather_nd-slices", "GatherND", {"x": RNG.integers(0, 9, (3, 2, 4)).astype(np.int32)},
     {"i": np.array([[[1], [0]], [[-1], [2]]], np.int64)}, opset=13)
case("gather_nd-batch1", "GatherND", {"x": f32(2, 3, 4)},
     {"i": np.array([[[1], [0]], [[2], [-1]]], np.int64)}, {"batch_dims": 1}, opset=13, compiled=True)

# ScatterND
case("scatter_nd-none-elements", "ScatterND", {"x": f32(4, 4, 4), "u": f32(3)},
     {"i": np.array([[0, 1, 2], [3, -1, 0], [1, 1, 1]], np.int64)}, inputs=("x", "i", "u"), compiled=True)
case("scatter_nd-none-slices", "ScatterND", {"x": f32(4, 4, 4), "u": f32(2, 4, 4)},
     {"i": np.array([[0], [-2]], np.int64)}, inputs=("x", "i", "u"))
for _reduction in ("add", "mul", "max", "min"):
    case(f"scatter_nd-{_reduction}-duplicates", "ScatterND",
         {"x": f32(4, 3, 2), "u": (1 + 0.1 * f32(5, 2)) if _reduction == "mul" else f32(5, 2)},
         {"i": np.array([[0, 1], [3, 2], [0, 1], [-4, -2], [2, 0]], np.int64)}, {"reduction": _reduction},
         inputs=("x", "i", "u"), compiled=_reduction == "mul")

# TopK: ties (small integers as floats) and NaN, which onnxruntime also ranks above every number
_TIES = RNG.integers(0, 4, (3, 7)).astype(np.float32)
_TIES_NAN = _TIES.copy()
_TIES_NAN[0, 2] = _TIES_NAN[1, 4] = _TIES_NAN[1, 6] = np.nan
case("topk-largest-ties-nan", "TopK", {"x": _TIES_NAN}, {"k": i64(4)}, opset=11, outputs=2, compiled=True)
case("topk-smallest-axis0-ties-nan", "TopK", {"x": _TIES_NAN}, {"k": i64(2)}, {"axis": 0, "largest": 0},
     opset=11, outputs=2)
case("topk-int64-smallest", "TopK", {"x": RNG.integers(-3, 3, (4, 6))}, {"k": i64(6)},
     {"axis": -1, "largest": 0}, opset=11, outputs=2, compiled=True)
case("topk-unsorted", "TopK", {"x": f32(2, 9)}, {"k": i64(3)}, {"sorted": 0}, opset=11, outputs=2,
     unordered=True)
case("topk-opset1-k-attribute", "TopK", {"x": f32(3, 5)}, attrs={"k": 2, "axis": 0}, opset=1, outputs=2)
case("topk-opset10-k-input", "TopK", {"x": f32(3, 5)}, {"k": i64(3)}, opset=10, outputs=2)

# CumSum / CumProd
for _exclusive in (0, 1):
    for _reverse in (0, 1):
        for _axis_value in (0, 1, -1):
            case(f"cumsum-axis{_axis_value}-exclusive{_exclusive}-reverse{_reverse}", "CumSum",
                 {"x": f32(3, 4)}, {"axis": np.asarray(_axis_value, np.int64 if _axis_value else np.int32)},
                 {"exclusive": _exclusive, "reverse": _reverse}, opset=14,
                 compiled=(_exclusive, _reverse, _axis_value) == (1, 1, 1))
case("cumsum-int32", "CumSum", {"x": RNG.integers(-9, 9, (2, 5)).astype(np.int32)}, {"axis": np.asarray(1)},
     opset=14)
case("cumsum-float64-vector", "CumSum", {"x": RNG.standard_normal(7)}, {"axis": np.asarray(0)},
     {"reverse": 1}, opset=14)
case("cumprod-float32", "CumProd", {"x": 1 + 0.2 * f32(3, 4)}, {"axis": np.asarray(1)},
     {"exclusive": 1}, opset=26)
case("cumprod-int64-reverse", "CumProd", {"x": RNG.integers(-3, 4, (4, 3))}, {"axis": np.asarray(0)},
     {"reverse": 1}, opset=26, compiled=True)

# Mod: fmod=0 is the divisor's sign, fmod=1 the dividend's; floats with fmod=0 need opset 28
_DIVIDENDS = RNG.integers(-30, 30, (3, 8))
_DIVISORS = RNG.integers(1, 7, 8) * np.where(RNG.random(8) < 0.5, -1, 1)
case("mod-int32-fmod0", "Mod", {"a": _DIVIDENDS.astype(np.int32), "b": _DIVISORS.astype(np.int32)},
     opset=13, compiled=True)
case("mod-int64-fmod1", "Mod", {"a": _DIVIDENDS, "b": _DIVISORS}, attrs={"fmod": 1}, opset=13)
case("mod-float32-fmod1", "Mod", {"a": 4 * f32(3, 8), "b": f32(8)}, attrs={"fmod": 1}, opset=13,
     compiled=True)
case("mod-float64-fmod1", "Mod", {"a": 4 * RNG.standard_normal((2, 3)), "b": RNG.standard_normal((2, 1))},
     attrs={"fmod": 1}, opset=13)
_EDGES = np.array([0.0, -0.0, 5.0, -5.0, np.inf, 3.0, 7.5, -7.5, 2.0, np.nan], np.float32)
_EDGE_DIVISORS = np.array([-3.0, 2.0, -np.inf, np.inf, 2.0, 0.0, 2.0, 2.0, -2.0, 1.0], np.float32)
case("mod-float32-fmod0-edge-cases", "Mod", {"a": _EDGES, "b": _EDGE_DIVISORS}, opset=28, compiled=True)
case("mod-float32-fmod0-random", "Mod", {"a": 4 * f32(4, 6), "b": f32(6)}, opset=28)

# BitShift: unsigned since opset 11; signed (arithmetic right shift, sign fill past the width) in 28
for _dtype in (np.uint8, np.uint32, np.uint64):
    for _direction in ("LEFT", "RIGHT"):
        _bits = np.dtype(_dtype).itemsize * 8
        case(f"bitshift-{np.dtype(_dtype).name}-{_direction.lower()}", "BitShift",
             {"x": RNG.integers(0, np.iinfo(_dtype).max, 12, dtype=_dtype, endpoint=True),
              "y": RNG.integers(0, _bits, 12).astype(_dtype)}, attrs={"direction": _direction}, opset=11,
             compiled=_dtype is np.uint64)
for _dtype in (np.int32, np.int64):
    _bits = np.dtype(_dtype).itemsize * 8
    _values = RNG.integers(np.iinfo(_dtype).min, np.iinfo(_dtype).max, 40, dtype=_dtype)
    _values[:4] = [-1, np.iinfo(_dtype).min, np.iinfo(_dtype).max, 1]
    for _direction in ("LEFT", "RIGHT"):
        case(f"bitshift-{np.dtype(_dtype).name}-{_direction.lower()}", "BitShift",
             {"x": _values, "y": RNG.integers(-3, _bits + 3, 40).astype(_dtype)},
             attrs={"direction": _direction}, opset=28, compiled=True)

# Einsum: (equation, operand shapes); compiled ones cover a diagonal, a batch matmul, a
# chain of three operands with a sum, and a reduction to a scalar
_EINSUMS: list[tuple[str, tuple[tuple[int, ...], ...], bool]] = [
    ("ij->ji", ((3, 4),), False),
    ("ij->", ((3, 4),), False),
    ("ij", ((3, 4),), False),
    ("ii->i", ((4, 4),), False),
    ("ii", ((4, 4),), False),
    ("...ii->...i", ((2, 3, 3),), True),
    ("bij,bjk->bik", ((2, 3, 4), (2, 4, 5)), True),
    ("ij,jk", ((3, 4), (4, 2)), False),
    ("i,i", ((5,), (5,)), True),
    ("i,j->ij", ((3,), (4,)), False),
    ("ij,ij->ij", ((3, 4), (3, 4)), False),
    ("...ij,...jk->...ik", ((2, 1, 3, 4), (1, 3, 4, 2)), False),
    ("abc,cd,de->abe", ((2, 3, 4), (4, 5), (5, 3)), True),
    ("bhqd,bhkd->bhqk", ((1, 2, 3, 4), (1, 2, 5, 4)), False),
    ("iij,jk->ik", ((3, 3, 4), (4, 2)), False),
    ("ab,bc,cd", ((2, 3), (3, 4), (4, 2)), False),
    ("ab, bc -> ac", ((2, 3), (3, 2)), False),
]
for _equation, _shapes, _compiled in _EINSUMS:
    case(f"einsum-{_equation.replace(' ', '')}", "Einsum", {f"x{i}": f32(*s) for i, s in enumerate(_shapes)},
         attrs={"equation": _equation}, opset=12, compiled=_compiled)

# OneHot (negative indices count from the end; out of range is all "off")
case("onehot-axis-1", "OneHot", {"i": np.array([[0, 3, -1], [5, -4, 2]], np.int64)},
     {"depth": np.asarray(4, np.int64), "v": np.array([-1.0, 2.0], np.float32)}, opset=11, compiled=True,
     inputs=("i", "depth", "v"))
case("onehot-axis0", "OneHot", {"i": np.array([1, -1, 7], np.int64)},
     {"depth": np.asarray(3, np.int64), "v": np.array([0.0, 1.0], np.float32)}, {"axis": 0}, opset=11,
     inputs=("i", "depth", "v"))
case("onehot-axis1-float-indices", "OneHot", {"i": np.array([[1.7, -1.2], [2.0, 9.0]], np.float32)},
     {"depth": np.asarray(3.0, np.float32), "v": np.array([0.0, 1.0], np.float32)}, {"axis": 1}, opset=11,
     inputs=("i", "depth", "v"))

# EyeLike, Hardmax, IsNaN, IsInf, ReverseSequence
case("eyelike-k1", "EyeLike", {"x": f32(3, 4)}, attrs={"k": 1}, opset=9, compiled=True)
case("eyelike-k-1-int64", "EyeLike", {"x": f32(4, 3)}, attrs={"k": -1, "dtype": onnx.TensorProto.INT64},
     opset=9)
_HARD = RNG.integers(0, 3, (2, 3, 4)).astype(np.float32)  # ties: the first maximum wins
for _axis in (0, 1, -1):
    case(f"hardmax-axis{_axis}", "Hardmax", {"x": _HARD}, attrs={"axis": _axis}, opset=13,
         compiled=_axis == -1)
case("hardmax-opset11-coerced-2d", "Hardmax", {"x": _HARD}, attrs={"axis": 1}, opset=11)
_SPECIAL = np.array([[1.0, np.nan, np.inf], [-np.inf, 0.0, -2.5]], np.float32)
case("isnan", "IsNaN", {"x": _SPECIAL}, opset=20)
for _positive, _negative in ((1, 1), (1, 0), (0, 1)):
    case(f"isinf-positive{_positive}-negative{_negative}", "IsInf", {"x": _SPECIAL},
         attrs={"detect_positive": _positive, "detect_negative": _negative}, opset=20,
         compiled=(_positive, _negative) == (1, 1))
case("reversesequence-time0", "ReverseSequence", {"x": f32(4, 3, 2)}, {"lens": i64(4, 1, 3)},
     {"time_axis": 0, "batch_axis": 1}, opset=10)
case("reversesequence-batch0-runtime-lengths", "ReverseSequence",
     {"x": f32(3, 5), "lens": i64(5, 2, 1)}, attrs={"time_axis": 1, "batch_axis": 0}, opset=10, compiled=True)


# --------------------------------------------------------------------------- running


def onnxruntime_outputs(c: Case) -> list[np.ndarray]:
    session = ort.InferenceSession(c.model().SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, c.feeds)


def as_list(result: object) -> list[np.ndarray]:
    return [np.asarray(r) for r in result] if isinstance(result, tuple) else [np.asarray(result)]


def assert_matches(c: Case, got: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> None:
    assert len(got) == len(expected), c.id
    if c.unordered:  # the same (value, index) pairs, in any order
        got, expected = (sort_pairs(*pair) for pair in (got, expected))
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape, (c.id, g.dtype, e.dtype, g.shape, e.shape)
        if e.dtype.kind == "f":
            rtol, atol = (1e-5, 1e-6) if e.dtype == np.float32 else (1e-12, 1e-12)
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=c.id)
        else:
            np.testing.assert_array_equal(g, e, err_msg=c.id)


def sort_pairs(values: np.ndarray, positions: np.ndarray) -> list[np.ndarray]:
    order = np.argsort(positions, axis=-1)
    return [np.take_along_axis(values, order, -1), np.take_along_axis(positions, order, -1)]


def module_inputs(c: Case) -> list[np.ndarray]:
    return list(c.feeds.values())


@pytest.fixture(scope="module")
def codegen_ctx(tmp_path_factory: pytest.TempPathFactory):
    cache_dir = str(tmp_path_factory.mktemp("codegen_cache_indexing"))
    with PassContext(config={"codegen.cache_dir": cache_dir}) as ctx:
        yield ctx


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_interpreter_matches_onnxruntime(c: Case):
    got = as_list(evaluate(from_onnx(c.model()), *module_inputs(c)))
    assert_matches(c, got, onnxruntime_outputs(c))


COMPILED = [c for c in CASES if c.compiled]


@pytest.mark.parametrize("c", COMPILED, ids=[c.id for c in COMPILED])
def test_compiled_matches_onnxruntime(c: Case, codegen_ctx: PassContext):
    lib = passinfra.build(from_onnx(c.model()))
    got = as_list(lib(*module_inputs(c)))
    assert_matches(c, got, onnxruntime_outputs(c))


def test_every_op_of_the_family_is_compiled_somewhere():
    ops = {c.op_type for c in COMPILED}
    assert {"GatherElements", "ScatterElements", "GatherND", "ScatterND", "TopK", "CumSum", "CumProd", "Mod",
            "BitShift", "Einsum", "OneHot", "EyeLike", "Hardmax", "IsInf", "ReverseSequence", "TensorScatter",
            "MaxUnpool"} <= ops


# --------------------------------------------------------------------------- semantics the spec leaves open


def _build(params: list[ir.Var], body: ir.Expr) -> ir.IRModule:
    return ir.IRModule.from_expr(ir.Function(params, body))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_compiled_shifts_match_numpy_for_every_amount(dtype: str, codegen_ctx: PassContext):
    """Every shift amount from below 0 to past the width, on values with every kind of
    top bits: the arithmetic form of the compute rule is exact everywhere."""
    bits = np.dtype(dtype).itemsize * 8
    amounts = np.arange(-3, bits + 3, dtype=dtype)
    values = np.array([0, 1, -1, 5, -5, 3 << (bits // 2), np.iinfo(dtype).min, np.iinfo(dtype).max,
                       np.iinfo(dtype).min + 1, np.iinfo(dtype).max - 6], dtype=dtype)
    lhs, rhs = (a.reshape(-1).copy() for a in np.meshgrid(values, amounts, indexing="ij"))
    a, b = ir.var("a", lhs.shape, dtype), ir.var("b", rhs.shape, dtype)
    for builder, reference in ((indexing.left_shift, np.left_shift), (indexing.right_shift, np.right_shift)):
        mod = _build([a, b], builder(a, b))
        expected = reference(lhs, rhs)
        np.testing.assert_array_equal(evaluate(mod, lhs, rhs), expected)
        np.testing.assert_array_equal(passinfra.build(mod)(lhs, rhs), expected)


def test_scatter_duplicates_apply_in_row_major_order(codegen_ctx: PassContext):
    """With duplicate indices, "none" keeps the last update and "add" sums in update order;
    compiled code and the interpreter agree bit for bit."""
    data, indices = ir.var("d", (2, 3)), ir.var("i", (2, 4), "int64")
    updates = ir.var("u", (2, 4))
    d = np.zeros((2, 3), np.float32)
    i = np.array([[1, 1, -2, 0], [2, 2, 2, -1]], np.int64)
    u = np.array([[1e8, 1.0, -1e8, 3.0], [0.5, 0.25, 0.125, 7.0]], np.float32)
    last = _build([data, indices, updates], indexing.scatter_elements(data, indices, updates, axis=1))
    expected = np.array([[3.0, -1e8, 0.0], [0.0, 0.0, 7.0]], np.float32)
    np.testing.assert_array_equal(evaluate(last, d, i, u), expected)
    np.testing.assert_array_equal(passinfra.build(last)(d, i, u), expected)
    summed = _build([data, indices, updates],
                    indexing.scatter_elements(data, indices, updates, axis=1, reduction="add"))
    in_order = np.array([[3.0, np.float32(np.float32(1e8) + np.float32(1.0)) - np.float32(1e8), 0.0],
                         [0.0, 0.0, 0.5 + 0.25 + 0.125 + 7.0]], np.float32)
    np.testing.assert_array_equal(evaluate(summed, d, i, u), in_order)
    np.testing.assert_array_equal(passinfra.build(summed)(d, i, u), in_order)


def test_topk_orders_ties_by_index_and_nan_first(codegen_ctx: PassContext):
    x = ir.var("x", (6,))
    values = np.array([2.0, np.nan, 2.0, 5.0, np.nan, -1.0], np.float32)
    mod = _build([x], indexing.topk(x, 6))
    for result in (evaluate(mod, values), passinfra.build(mod)(values)):
        np.testing.assert_array_equal(result[1], [1, 4, 3, 0, 2, 5])
    smallest = _build([x], indexing.topk(x, 6, largest=False))
    for result in (evaluate(smallest, values), passinfra.build(smallest)(values)):
        np.testing.assert_array_equal(result[1], [5, 0, 2, 3, 1, 4])


# --------------------------------------------------------------------------- errors


def _single_node_model(op_type: str, feeds: dict[str, np.ndarray], outputs: int = 1, opset: int = 18,
                       **attrs) -> onnx.ModelProto:
    return Case("error", op_type, feeds, attrs=attrs, opset=opset, outputs=outputs).model()


def test_topk_with_a_runtime_k_names_the_input():
    model = _single_node_model("TopK", {"x": f32(2, 5), "k": i64(2)}, outputs=2, opset=11)
    with pytest.raises(OnnxImportError, match=r"TopK node .*input 1 \(k\) must be known at import time"):
        from_onnx(model)


# a matrix's run-time axis imports (a where over every axis's scan):
# tests/frontend/test_onnx_ops_xfail_fixes.py


def test_cumsum_of_a_vector_accepts_a_runtime_axis():
    c = Case("vector", "CumSum", {"x": f32(6), "axis": np.asarray(-1)}, opset=14)
    assert_matches(c, as_list(evaluate(from_onnx(c.model()), *module_inputs(c))), onnxruntime_outputs(c))


@pytest.mark.parametrize(("equation", "message"), [
    ("ij,jk->ik", r"has 2 operand terms for 1 inputs"),
    ("ijk->i", r"term 'ijk' does not match an input of rank 2"),
    ("ij->iz", r"output label 'z' is in no input"),
    ("i1->i", r"labels must be letters"),
])
def test_einsum_equation_errors_name_the_equation(equation: str, message: str):
    model = _single_node_model("Einsum", {"x": f32(2, 3)}, opset=12, equation=equation)
    with pytest.raises(OnnxImportError, match=r"Einsum node .*" + message):
        from_onnx(model)


def test_ir_type_errors_name_the_op_and_the_problem():
    data, small = ir.var("d", (3, 4)), ir.var("s", (3,), "int64")
    with pytest.raises(IRTypeError, match=r"op gather_elements: expected the indices of the data's rank 2"):
        ir.infer_type(ir.Function([data, small], indexing.gather_elements(data, small)))
    idx = ir.var("i", (3, 4), "int64")
    with pytest.raises(IRTypeError, match=r"op scatter_elements: unknown reduction 'sum'"):
        ir.infer_type(ir.Function([data, idx], indexing.scatter_elements(data, idx, data, reduction="sum")))
    with pytest.raises(IRTypeError, match=r"op topk: k=5 must be an int in \[1, 4\]"):
        ir.infer_type(ir.Function([data], indexing.topk(data, 5)))
    with pytest.raises(IRTypeError, match=r"op left_shift: expected operands of dtype int"):
        ir.infer_type(ir.Function([data], indexing.left_shift(data, data)))
    wide = ir.var("w", (4, 4), "int64")
    with pytest.raises(IRTypeError, match=r"op gather_elements: the indices .* larger than the data"):
        ir.infer_type(ir.Function([data, wide], indexing.gather_elements(data, wide, axis=1)))


def test_reference_errors_name_the_bad_value():
    data, idx = ir.var("d", (3, 4)), ir.var("i", (1, 4), "int64")
    gather = _build([data, idx], indexing.gather_elements(data, idx))
    message = r"gather_elements: index 3 is out of range for an axis of size 3$"
    with pytest.raises(EvaluationError, match=message):
        evaluate(gather, f32(3, 4), np.array([[0, 3, 1, 2]], np.int64))
    a, b = ir.var("a", (3,), "int32"), ir.var("b", (3,), "int32")
    with pytest.raises(EvaluationError, match=r"floor_mod: integer division by zero"):
        evaluate(_build([a, b], indexing.floor_mod(a, b)), np.ones(3, np.int32), np.array([1, 0, 2], "int32"))


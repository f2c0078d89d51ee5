"""BitwiseAnd/Or/Xor/Not, LpPool, LpNormalization and Trilu with a runtime ``k`` against
onnxruntime, each case through the reference interpreter and through the compiled
library (``passinfra.build``, one object cache for the module).

Integers compare exactly. Floats compare with tolerances that absorb a different
summation order over a pooling window (float32: rtol 1e-5) or, for float16, one rounding
of a float32 result against onnxruntime's own float16 arithmetic.

Where onnxruntime has no kernel (float64 LpPool, uint8 Trilu) the ONNX reference
evaluator is the reference. A dilated LpPool with auto_pad SAME has neither: onnxruntime
pads the window as if undilated and the ONNX reference evaluator drops the last windows;
those cases are checked against :func:`lp_pool_by_the_spec`, a direct loop over the
spec's definition.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import passinfra
from passinfra import evaluate, ir
from passinfra.errors import IRTypeError
from passinfra.frontend import OnnxImportError, from_onnx
from passinfra.ir.op import bitwise
from passinfra.transform import PassContext

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(23)
INT_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


@dataclass(frozen=True)
class Graph:
    """A graph of ONNX nodes ``(op_type, inputs, outputs, attrs)`` over the graph inputs
    ``feeds``; its outputs are the outputs of every node."""

    id: str
    nodes: tuple[tuple[str, tuple[str, ...], tuple[str, ...], dict], ...]
    feeds: dict[str, np.ndarray]
    opset: int
    reference: str = "onnxruntime"  # or "onnx": the ONNX reference evaluator; or "spec"
    tolerance: tuple[float, float] = field(default=(1e-5, 1e-6))  # rtol, atol for floats

    def model(self) -> onnx.ModelProto:
        outputs = [name for _, _, outs, _ in self.nodes for name in outs]
        graph = helper.make_graph(
            [helper.make_node(op_type, list(ins), list(outs), **attrs)
             for op_type, ins, outs, attrs in self.nodes],
            self.id,
            [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
             for n, a in self.feeds.items()],
            [onnx.ValueInfoProto(name=o) for o in outputs],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 10
        return model

    def expected(self) -> list[np.ndarray]:
        if self.reference == "onnx":
            return ReferenceEvaluator(self.model()).run(None, self.feeds)
        if self.reference == "spec":
            return [lp_pool_by_the_spec(self.feeds["x"], **self.nodes[0][3])]
        session = ort.InferenceSession(self.model().SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, self.feeds)


def single(id: str, op_type: str, feeds: dict[str, np.ndarray], opset: int, **kwargs) -> Graph:
    attrs = kwargs.pop("attrs", {})
    return Graph(id, ((op_type, tuple(feeds), ("y",), attrs),), feeds, opset, **kwargs)


def full_range(dtype: str, *shape: int) -> np.ndarray:
    """Values over the whole range of an integer dtype, its extremes included."""
    info = np.iinfo(dtype)
    values = RNG.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    flat = values.reshape(-1)
    flat[:4] = [info.min, info.max, 0, info.max if info.min == 0 else -1]
    return values


def floats(dtype: str, *shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def lp_pool_by_the_spec(x: np.ndarray, kernel_shape, p=2, strides=None, dilations=None, auto_pad="NOTSET",
                        pads=None) -> np.ndarray:
    """LpPool as the ONNX spec defines it, one output element at a time (no ceil mode)."""
    rank = len(kernel_shape)
    strides, dilations = strides or [1] * rank, dilations or [1] * rank
    sizes = x.shape[2:]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-n // s) for n, s in zip(sizes, strides)]
        totals = [(o - 1) * s + (k - 1) * d + 1 - n
                  for o, s, k, d, n in zip(out, strides, kernel_shape, dilations, sizes)]
        begins = [t - t // 2 if auto_pad == "SAME_LOWER" else t // 2 for t in totals]
    else:
        begins = list((pads or [0] * 2 * rank)[:rank])
        ends = list((pads or [0] * 2 * rank)[rank:])
        out = [(n + b + e - (k - 1) * d - 1) // s + 1
               for n, b, e, k, d, s in zip(sizes, begins, ends, kernel_shape, dilations, strides)]
    result = np.zeros((*x.shape[:2], *out), np.float64)
    for position in itertools.product(*(range(o) for o in out)):
        total = np.zeros(x.shape[:2])
        for tap in itertools.product(*(range(k) for k in kernel_shape)):
            cell = [o * s + t * d - b for o, s, t, d, b in zip(position, strides, tap, dilations, begins)]
            if all(0 <= c < n for c, n in zip(cell, sizes)):
                total += np.abs(x[(..., *cell)].astype(np.float64)) ** p
        result[(..., *position)] = total ** (1.0 / p)
    return result.astype(x.dtype)


CASES: list[Graph] = []

# --------------------------------------------------------------------------- bitwise

for _dtype in INT_DTYPES:
    # the binary ops with broadcasting both ways, and Not, in one graph per dtype
    CASES.append(Graph(f"bitwise-{_dtype}", (
        ("BitwiseAnd", ("a", "b"), ("and",), {}),
        ("BitwiseOr", ("b", "a"), ("or",), {}),
        ("BitwiseXor", ("a", "c"), ("xor",), {}),
        ("BitwiseNot", ("a",), ("not",), {}),
    ), {"a": full_range(_dtype, 3, 1, 5), "b": full_range(_dtype, 4, 5), "c": full_range(_dtype, 3, 4, 5)},
        18))

# --------------------------------------------------------------------------- LpPool

# onnxruntime pads SAME windows as if undilated (the spec pads for the dilated extent):
# the dilated SAME case is checked against the ONNX reference evaluator
_LP_POOLS: list[tuple[str, tuple[int, ...], dict]] = [
    ("1d-default", (2, 3, 9), {"kernel_shape": [3]}),
    ("1d-p1-pads-strides-ceil", (1, 2, 10), {"kernel_shape": [3], "p": 1, "pads": [1, 2], "strides": [2],
                                              "ceil_mode": 1}),
    ("1d-p3-dilations-same-lower", (1, 2, 11), {"kernel_shape": [2], "p": 3, "dilations": [3],
                                                "auto_pad": "SAME_LOWER"}),
    ("2d-default", (1, 3, 6, 7), {"kernel_shape": [2, 2]}),
    ("2d-p1-asymmetric-pads", (2, 2, 5, 5), {"kernel_shape": [3, 2], "p": 1, "pads": [1, 0, 2, 1]}),
    ("2d-p3-strides-dilations", (1, 2, 9, 8), {"kernel_shape": [2, 3], "p": 3, "strides": [2, 1],
                                               "dilations": [2, 2]}),
    ("2d-same-upper-strides", (1, 2, 7, 6), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER",
                                             "strides": [2, 2]}),
    ("2d-same-lower-p1", (1, 2, 6, 7), {"kernel_shape": [2, 3], "p": 1, "auto_pad": "SAME_LOWER"}),
    ("2d-valid-ceil", (1, 2, 7, 8), {"kernel_shape": [2, 3], "auto_pad": "VALID", "strides": [2, 2],
                                     "ceil_mode": 1}),
    ("2d-ceil-pads-dilations-p4", (1, 1, 8, 9), {"kernel_shape": [2, 2], "p": 4, "pads": [1, 1, 0, 1],
                                                 "strides": [3, 2], "dilations": [2, 1], "ceil_mode": 1}),
    ("3d-default", (1, 2, 4, 5, 4), {"kernel_shape": [2, 2, 2]}),
    ("3d-p1-pads-strides", (1, 2, 5, 4, 6), {"kernel_shape": [2, 3, 2], "p": 1, "strides": [1, 2, 2],
                                             "pads": [0, 1, 1, 1, 0, 1]}),
    ("3d-p3-dilations-ceil", (1, 1, 7, 6, 5), {"kernel_shape": [2, 2, 2], "p": 3, "dilations": [2, 1, 2],
                                               "strides": [2, 2, 1], "ceil_mode": 1}),
]
for _id, _shape, _attrs in _LP_POOLS:
    _reference = "spec" if "auto_pad" in _attrs and "dilations" in _attrs else "onnxruntime"
    CASES.append(single(f"lppool-{_id}", "LpPool", {"x": floats("float32", *_shape)}, 22, attrs=_attrs,
                        reference=_reference))
CASES.append(single("lppool-2d-float16", "LpPool", {"x": floats("float16", 1, 2, 6, 6)}, 22,
                    attrs={"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]},
                    tolerance=(4e-3, 1e-3)))
CASES.append(single("lppool-2d-float64", "LpPool", {"x": floats("float64", 1, 2, 6, 6)}, 22,
                    attrs={"kernel_shape": [3, 2], "p": 3, "pads": [1, 0, 0, 1], "ceil_mode": 1,
                           "strides": [2, 2]},
                    reference="onnx", tolerance=(1e-12, 1e-12)))
CASES.append(single("lppool-opset11", "LpPool", {"x": floats("float32", 1, 2, 6, 6)}, 11,
                    attrs={"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1]}))

# --------------------------------------------------------------------------- LpNormalization


def _with_zero_row(x: np.ndarray, axis: int) -> np.ndarray:
    """``x`` with one slice along ``axis`` all zero (its norm is 0: the output is 0)."""
    x = x.copy()
    np.moveaxis(x, axis, -1)[(0,) * (x.ndim - 1)] = 0
    return x


for (_p, _axis), _dtype in itertools.product(itertools.product((1, 2), (0, 1, -1)), ("float32", "float64")):
    _x = _with_zero_row(floats(_dtype, 3, 4, 5), _axis)
    CASES.append(single(f"lpnorm-p{_p}-axis{_axis}-{_dtype}", "LpNormalization", {"x": _x}, 22,
                        attrs={"p": _p, "axis": _axis},
                        tolerance=(1e-5, 1e-6) if _dtype == "float32" else (1e-12, 0)))
CASES.append(single("lpnorm-default-float16", "LpNormalization", {"x": floats("float16", 2, 6)}, 22,
                    tolerance=(2e-3, 1e-3)))

# --------------------------------------------------------------------------- Trilu with a runtime k

for (_upper, _k), _dtype in zip(itertools.product((0, 1), (-2, 0, 3, 9, -9)), itertools.cycle(
        ("float32", "int64", "uint8", "float64", "int32"))):
    _x = floats(_dtype, 2, 4, 6) if _dtype.startswith("float") else full_range(_dtype, 2, 4, 6)
    CASES.append(single(f"trilu-{'upper' if _upper else 'lower'}-k{_k}-{_dtype}", "Trilu",
                        {"x": _x, "k": np.asarray(_k, np.int64)}, 14, attrs={"upper": _upper},
                        reference="onnx" if _dtype == "uint8" else "onnxruntime"))
CASES.append(single("trilu-k-one-element-float16", "Trilu", {"x": floats("float16", 5, 3),
                                                             "k": np.asarray([-1], np.int64)}, 14))


# --------------------------------------------------------------------------- running


def assert_matches(c: Graph, got: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(got) == len(expected), c.id
    for g, e in zip(got, expected):
        g, e = np.asarray(g), np.asarray(e)
        assert g.dtype == e.dtype and g.shape == e.shape, (c.id, g.dtype, e.dtype, g.shape, e.shape)
        if e.dtype.kind == "f":
            rtol, atol = c.tolerance
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=c.id)
        else:
            np.testing.assert_array_equal(g, e, err_msg=c.id)


def as_list(result: object) -> list[np.ndarray]:
    return [np.asarray(r) for r in result] if isinstance(result, tuple) else [np.asarray(result)]


@pytest.fixture(scope="module")
def codegen_ctx(tmp_path_factory: pytest.TempPathFactory):
    cache_dir = str(tmp_path_factory.mktemp("codegen_cache_bitwise_pool"))
    with PassContext(config={"codegen.cache_dir": cache_dir}):
        yield


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_interpreter_matches_reference(c: Graph):
    assert_matches(c, as_list(evaluate(from_onnx(c.model()), *c.feeds.values())), c.expected())


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_compiled_matches_reference(c: Graph, codegen_ctx):
    lib = passinfra.build(from_onnx(c.model()))
    assert_matches(c, as_list(lib(*c.feeds.values())), c.expected())


def test_trilu_with_a_runtime_k_needs_no_known_k_and_reads_it_at_run_time(codegen_ctx):
    c = single("trilu-runtime", "Trilu", {"x": floats("float32", 4, 4), "k": np.asarray(0, np.int64)}, 14)
    lib = passinfra.build(from_onnx(c.model()))
    x = c.feeds["x"]
    for k in (-3, 0, 2):  # one library, several k
        np.testing.assert_array_equal(lib(x, np.asarray(k, np.int64)), np.triu(x, k))


# --------------------------------------------------------------------------- errors


def test_bitwise_ops_reject_floats_naming_the_op():
    x = ir.var("x", (3,), "float32")
    with pytest.raises(IRTypeError, match=r"op bitwise_and: expected operands of dtype int"):
        ir.infer_type(ir.Function([x], bitwise.bitwise_and(x, x)))
    with pytest.raises(IRTypeError, match=r"op bitwise_not: expected the operand of dtype int"):
        ir.infer_type(ir.Function([x], bitwise.bitwise_not(x)))


@pytest.mark.parametrize(("op_type", "feeds", "attrs", "message"), [
    ("LpNormalization", {"x": floats("float32", 2, 3)}, {"p": 3},
     r"LpNormalization node .*p must be 1 or 2, got 3"),
    ("LpNormalization", {"x": floats("float32", 2, 3)}, {"axis": 2},
     r"axis 2 is out of range for an input of rank 2"),
    ("LpPool", {"x": floats("float32", 1, 1, 4, 4)}, {"kernel_shape": [2, 2], "p": 0},
     r"LpPool node .*p must be a whole number >= 1, got 0"),
    ("Trilu", {"x": floats("float32", 3, 3), "k": np.asarray([1, 2], np.int64)}, {},
     r"Trilu node .*k must be one int64 value, got int64 of shape \(2,\)"),
])
def test_bad_attributes_are_one_clear_import_error(op_type, feeds, attrs, message):
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(single("error", op_type, feeds, 22 if op_type != "Trilu" else 14, attrs=attrs).model())


def test_the_spec_loop_agrees_with_onnxruntime_where_onnxruntime_follows_the_spec():
    """The oracle of the dilated SAME cases, checked where onnxruntime is right."""
    checked = [c for c in CASES if c.id.startswith("lppool-") and c.reference == "onnxruntime"
               and "ceil_mode" not in c.nodes[0][3] and c.feeds["x"].dtype == np.float32]
    assert len(checked) >= 6
    for c in checked:
        spec = lp_pool_by_the_spec(c.feeds["x"], **c.nodes[0][3])
        np.testing.assert_allclose(spec, c.expected()[0], rtol=1e-5, atol=1e-6, err_msg=c.id)

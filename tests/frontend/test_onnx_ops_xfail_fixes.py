"""MaxPool's Indices output, CumSum/CumProd with the axis as a run-time input, and
training-mode BatchNormalization, against onnxruntime, through the reference interpreter
and through the compiled library (``passinfra.build``, one object cache for the module).

Indices are integers and compare exactly (ties included: the data of some cases holds
few distinct values, so windows have several maxima and the first must win). Scans of
integers compare exactly; float scans and batch statistics with rtol 1e-5, which absorbs
a different summation order. A run-time axis is tested as one: each library is built
once and then run with every axis value, negative ones included.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import passinfra
from passinfra import evaluate
from passinfra.frontend import OnnxImportError, from_onnx
from passinfra.transform import PassContext

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(17)


def make_model(op_type: str, feeds: dict[str, np.ndarray], outputs: list[str], opset: int,
               **attrs: object) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node(op_type, list(feeds), outputs, **attrs)],
        op_type.lower(),
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
         for n, a in feeds.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def run_onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def as_list(result: object) -> list[np.ndarray]:
    return [np.asarray(r) for r in result] if isinstance(result, (list, tuple)) else [np.asarray(result)]


def assert_same(got: list[np.ndarray], expected: list[np.ndarray], rtol: float = 1e-5,
                atol: float = 1e-6) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
        if e.dtype.kind in "iub":
            np.testing.assert_array_equal(g, e)
        else:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


@pytest.fixture(scope="module")
def codegen_ctx(tmp_path_factory: pytest.TempPathFactory):
    cache_dir = str(tmp_path_factory.mktemp("codegen-cache"))
    with PassContext(config={"codegen.cache_dir": cache_dir}):
        yield


# --------------------------------------------------------------------------- MaxPool with Indices


def ties(*shape: int) -> np.ndarray:
    """Floats of three distinct values: most windows hold their max more than once."""
    return RNG.integers(0, 3, shape).astype(np.float32)


def normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


MAXPOOL_CASES = {
    "2d-pads-strides": (normal(2, 3, 7, 6), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "2d-pads-strides-column-major": (normal(2, 3, 7, 6), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                              pads=[1, 1, 1, 1], storage_order=1)),
    "2d-dilated-asymmetric-pads": (normal(1, 2, 7, 8), dict(kernel_shape=[2, 3], dilations=[2, 2],
                                                            pads=[1, 0, 0, 1])),
    "2d-ceil-column-major": (normal(2, 2, 6, 7), dict(kernel_shape=[3, 2], strides=[2, 3], ceil_mode=1,
                                                      storage_order=1)),
    "2d-same-upper": (normal(1, 2, 5, 6), dict(kernel_shape=[2, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    "2d-ties": (ties(2, 2, 6, 6), dict(kernel_shape=[3, 3], strides=[1, 2], pads=[1, 1, 1, 0])),
    "2d-ties-column-major": (ties(2, 2, 6, 6), dict(kernel_shape=[3, 3], strides=[1, 2], pads=[1, 1, 1, 0],
                                                    storage_order=1)),
    "1d-pads-ceil": (normal(2, 3, 9), dict(kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1)),
    "1d-dilated-ties-column-major": (ties(1, 2, 10), dict(kernel_shape=[3], dilations=[2], storage_order=1)),
    "3d-pads-strides": (normal(1, 2, 4, 5, 6), dict(kernel_shape=[2, 2, 3], strides=[1, 2, 2],
                                                    pads=[1, 0, 1, 0, 1, 1])),
    "3d-column-major-dilated-ceil": (normal(2, 2, 5, 6, 5), dict(kernel_shape=[2, 2, 2], strides=[2, 2, 1],
                                                                 dilations=[1, 2, 1], ceil_mode=1,
                                                                 storage_order=1)),
    "3d-ties": (ties(1, 2, 4, 4, 4), dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2],
                                          pads=[0, 1, 0, 0, 1, 1])),
}


def maxpool_model(x: np.ndarray, attrs: dict) -> onnx.ModelProto:
    return make_model("MaxPool", {"x": x}, ["y", "indices"], 12, **attrs)


@pytest.mark.parametrize("name", list(MAXPOOL_CASES))
def test_maxpool_indices_interpreted_match_onnxruntime(name: str):
    x, attrs = MAXPOOL_CASES[name]
    model = maxpool_model(x, attrs)
    assert_same(as_list(evaluate(from_onnx(model), x)), run_onnxruntime(model, {"x": x}))


@pytest.mark.parametrize("name", list(MAXPOOL_CASES))
def test_maxpool_indices_compiled_match_onnxruntime(name: str, codegen_ctx):
    x, attrs = MAXPOOL_CASES[name]
    model = maxpool_model(x, attrs)
    assert_same(as_list(passinfra.build(from_onnx(model))(x)), run_onnxruntime(model, {"x": x}))


def test_maxpool_without_the_indices_output_computes_no_indices():
    x, attrs = MAXPOOL_CASES["2d-pads-strides"]
    text = from_onnx(make_model("MaxPool", {"x": x}, ["y"], 12, **attrs)).astext()
    assert "max_pool_indices" not in text
    text = from_onnx(maxpool_model(x, attrs)).astext()
    assert "max_pool_indices" in text


def test_maxpool_rejects_an_unknown_storage_order():
    x = normal(1, 1, 4, 4)
    with pytest.raises(OnnxImportError, match=r"MaxPool node .*storage_order must be 0 or 1, got 2"):
        from_onnx(maxpool_model(x, dict(kernel_shape=[2, 2], storage_order=2)))


# --------------------------------------------------------------------------- CumSum/CumProd, run-time axis


SCAN_CASES = [
    # (op, opset, data dtype, axis dtype, exclusive, reverse)
    ("CumSum", 14, "float32", "int64", 0, 0),
    ("CumSum", 14, "float64", "int32", 1, 0),
    ("CumSum", 14, "int32", "int64", 0, 1),
    ("CumSum", 14, "int64", "int32", 1, 1),
    ("CumProd", 26, "float32", "int32", 0, 0),
    ("CumProd", 26, "float64", "int64", 1, 1),
    ("CumProd", 26, "int32", "int32", 0, 1),
    ("CumProd", 26, "int64", "int64", 1, 0),
]


def scan_data(dtype: str) -> np.ndarray:
    if np.dtype(dtype).kind == "f":
        return RNG.uniform(0.5, 1.5, (2, 3, 4)).astype(dtype) * RNG.choice([-1, 1], (2, 3, 4)).astype(dtype)
    return RNG.integers(-3, 4, (2, 3, 4)).astype(dtype)


def _scan_id(case: tuple) -> str:
    op_type, _, dtype, axis_dtype, exclusive, reverse = case
    return f"{op_type}-{dtype}-axis_{axis_dtype}-exclusive{exclusive}-reverse{reverse}"


@pytest.mark.parametrize("case", SCAN_CASES, ids=_scan_id)
@pytest.mark.parametrize("compiled", [False, True], ids=["interpreted", "compiled"])
def test_scan_with_a_runtime_axis_matches_onnxruntime_for_every_axis(case: tuple, compiled: bool, request):
    op_type, opset, dtype, axis_dtype, exclusive, reverse = case
    x = scan_data(dtype)
    axis = np.asarray(0, axis_dtype)
    model = make_model(op_type, {"x": x, "axis": axis}, ["y"], opset, exclusive=exclusive, reverse=reverse)
    mod = from_onnx(model)
    if compiled:
        request.getfixturevalue("codegen_ctx")
        run = passinfra.build(mod)
    else:
        def run(*args):
            return evaluate(mod, *args)
    for value in range(-x.ndim, x.ndim):  # one build (one import) answers every axis
        feeds = {"x": x, "axis": np.asarray(value, axis_dtype)}
        assert_same(as_list(run(x, feeds["axis"])), run_onnxruntime(model, feeds))


def test_a_runtime_axis_must_be_one_value():
    x = scan_data("float32")
    model = make_model("CumSum", {"x": x, "axis": np.zeros(2, np.int64)}, ["y"], 14)
    message = r"CumSum node .*axis must be one int32 or int64 value, got shape \(2,\) of int64"
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(model)


# --------------------------------------------------------------------------- BatchNormalization, training


BATCHNORM_CASES = {
    "2d-default-momentum": ((8, 3), 15, {}),
    "3d-momentum-0.5": ((2, 4, 5), 15, {"momentum": 0.5, "epsilon": 1e-3}),
    "4d-momentum-0": ((2, 3, 4, 5), 14, {"momentum": 0.0}),
    "4d-momentum-1": ((3, 2, 3, 3), 15, {"momentum": 1.0, "epsilon": 0.1}),
    "5d-momentum-0.3": ((2, 2, 3, 2, 4), 15, {"momentum": 0.3}),
}


def batchnorm_case(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    shape, opset, attrs = BATCHNORM_CASES[name]
    channels = shape[1]
    feeds = {
        "x": (RNG.standard_normal(shape) * 2 + 0.5).astype(np.float32),
        "scale": RNG.uniform(0.5, 1.5, channels).astype(np.float32),
        "bias": RNG.standard_normal(channels).astype(np.float32),
        "mean": RNG.standard_normal(channels).astype(np.float32),
        "var": RNG.uniform(0.5, 2.0, channels).astype(np.float32),
    }
    model = make_model("BatchNormalization", feeds, ["y", "running_mean", "running_var"], opset,
                       training_mode=1, **attrs)
    return model, feeds


@pytest.mark.parametrize("name", list(BATCHNORM_CASES))
@pytest.mark.parametrize("compiled", [False, True], ids=["interpreted", "compiled"])
def test_batchnorm_training_mode_matches_onnxruntime(name: str, compiled: bool, request):
    model, feeds = batchnorm_case(name)
    mod = from_onnx(model)
    if compiled:
        request.getfixturevalue("codegen_ctx")
        got = passinfra.build(mod)(*feeds.values())
    else:
        got = evaluate(mod, *feeds.values())
    assert_same(as_list(got), run_onnxruntime(model, feeds), rtol=1e-5, atol=1e-5)


def test_batchnorm_training_mode_uses_the_biased_batch_variance():
    model, feeds = batchnorm_case("4d-momentum-0")  # momentum 0: the running var is the batch's
    _, running_mean, running_var = as_list(evaluate(from_onnx(model), *feeds.values()))
    x = feeds["x"].astype(np.float64)
    np.testing.assert_allclose(running_mean, x.mean(axis=(0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(running_var, x.var(axis=(0, 2, 3)), rtol=1e-5)


def test_batchnorm_statistics_outputs_without_training_mode_are_an_import_error():
    model, feeds = batchnorm_case("2d-default-momentum")
    for attribute in model.graph.node[0].attribute:
        if attribute.name == "training_mode":
            attribute.i = 0
    message = r"BatchNormalization node .*statistics outputs .* need training_mode=1"
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(model)

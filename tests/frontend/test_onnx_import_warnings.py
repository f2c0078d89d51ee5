"""No NumPy warning escapes from importing an ONNX model (issue 29, part 4).

The importer folds what it knows at import time (initializers, Constants, shape
computations) with NumPy, so NumPy's floating-point warnings would reach the user for
results ONNX defines (a float cast past float16's range is +/- inf, a sum of inf and -inf
is NaN). Those must pass silently; the one conversion ONNX leaves undefined, a float cast
to an integer type it does not fit (NaN, infinities, out of range: T5 exports cast
log(0) = -inf to int64), gets the project's OnnxImportWarning naming the node.

Two parts: every model of ONNX's backend test suite and of ``bench/`` imported (import
only, no pipeline, no C compiler) with every warning recorded, and the Cast cases one by
one. Warnings are recorded rather than turned into errors: an error raised inside the
importer could be caught on the way (by a handler that turns a failed fold into the
project's error, which this test accepts) and hide the warning.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.backend.test.loader import load_model_tests

from passinfra import evaluate
from passinfra.errors import RaypassError
from passinfra.frontend import OnnxImportWarning, from_onnx
from passinfra.ir.expr import Constant

ModelSource = Callable[[], onnx.ModelProto]

# onnx/backend/test/data: the light models' files live there (the "real" group names them)
ONNX_DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
BACKEND_GROUPS = ("node", "real", "simple", "pytorch-converted", "pytorch-operator")
# the light models bench/ also runs with random weights: those three take 4-6 s each to
# fill (hundreds of MB); their graphs are imported in the "real" group, and random
# weights only feed Conv/Gemm weights, which the import never folds
LARGE_LIGHT = ("light_bvlc_alexnet.onnx", "light_vgg19.onnx", "light_zfnet512.onnx")


def import_recording(model: onnx.ModelProto) -> tuple[object, list[warnings.WarningMessage]]:
    """The imported module (None when the import raises the project's own error, which is
    no warning) and every warning the import emitted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            mod = from_onnx(model)
        except RaypassError:
            mod = None
    return mod, list(caught)


def describe(caught: list[warnings.WarningMessage]) -> list[str]:
    return [f"{w.category.__name__} ({os.path.basename(w.filename)}:{w.lineno}): {w.message}" for w in caught]


def _backend_models(kind: str) -> Iterator[tuple[str, ModelSource]]:
    with warnings.catch_warnings():
        # onnx's node-case generators compute their expected outputs with NumPy (log(0),
        # float16 overflow) and warn: those are onnx's, made before anything is imported
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind=kind)
    for case in cases:
        if case.model is not None:  # node tests: built in memory
            yield case.name, lambda model=case.model: model
        else:  # a file: the light models' paths are relative to onnx's parent directory
            if case.model_dir is not None:
                path = os.path.join(case.model_dir, "model.onnx")
            else:
                path = os.path.join(os.path.dirname(os.path.dirname(onnx.__file__)), case.url)
            yield case.name, lambda path=path: onnx.load(path)


def _bench_models() -> Iterator[tuple[str, ModelSource]]:
    """The models bench/ imports, at the sizes its quick runs use: the zoo specs of
    bench/onnx_models.py and bench/codegen.py (the deeper transformers of serial_path.py and
    weights_memory.py repeat the same layers), bench/conv_models.py, and the light models
    with the random weights bench/codegen.py gives them."""
    from bench import codegen, conv_models, onnx_models
    from passinfra.frontend.zoo import zoo_spec

    for spec in dict.fromkeys([*onnx_models.ZOO_SPECS, *codegen.ZOO_MODELS.values()]):
        yield spec, lambda spec=spec: zoo_spec(spec)
    yield from conv_models.MODELS.items()
    for name in sorted(os.listdir(codegen.LIGHT_DIR)):
        if name.endswith(".onnx") and name not in LARGE_LIGHT:
            path = os.path.join(codegen.LIGHT_DIR, name)
            yield f"{name} (random weights)", lambda path=path: codegen.random_light_weights(onnx.load(path))


@pytest.mark.parametrize("group", [*BACKEND_GROUPS, "bench"])
def test_importing_every_model_lets_no_warning_escape(group: str) -> None:
    models = _bench_models() if group == "bench" else _backend_models(group)
    escaped = {}
    count = 0
    for name, load in models:
        _, caught = import_recording(load())
        count += 1
        if caught:
            escaped[name] = describe(caught)
    assert count > 0, f"no models found for {group}"
    assert not escaped, f"warnings escaped from importing {len(escaped)} model(s): {escaped}"


# --------------------------------------------------------------------------- Cast, one case at a time
def constant_model(op_type: str, value: np.ndarray, attrs: dict | None = None,
                   like: np.ndarray | None = None, name: str = "the_cast") -> onnx.ModelProto:
    """``op_type`` (Cast or CastLike) of a Constant: the importer folds it."""
    nodes = [helper.make_node("Constant", [], ["x"], value=numpy_helper.from_array(value))]
    inputs = ["x"]
    if like is not None:
        nodes.append(helper.make_node("Constant", [], ["like"], value=numpy_helper.from_array(like)))
        inputs.append("like")
    nodes.append(helper.make_node(op_type, inputs, ["y"], name=name, **(attrs or {})))
    outputs = [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)]
    graph = helper.make_graph(nodes, "g", [], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def runtime_model(value: np.ndarray, to: int) -> onnx.ModelProto:
    """The same Cast of a graph input: what the interpreter computes at run time."""
    dtype = helper.np_dtype_to_tensor_dtype(value.dtype)
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=to)], "g",
        [helper.make_tensor_value_info("x", dtype, value.shape)],
        [helper.make_tensor_value_info("y", to, value.shape)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def folded(model: onnx.ModelProto) -> tuple[np.ndarray, list[warnings.WarningMessage]]:
    mod, caught = import_recording(model)
    assert mod is not None
    body = mod["main"].body
    assert isinstance(body, Constant), "the cast of a constant is folded at import"
    return body.data, caught


NAN, INF = np.nan, np.inf
DEFINED = [
    # floating point to floating point: "+/- infinity if OOR"
    ("f64 past f32", np.array([1e300, -1e300, NAN, 1.5]), TensorProto.FLOAT,
     np.array([INF, -INF, NAN, 1.5], np.float32)),
    ("f32 past f16", np.array([7e4, -7e4, 65504.0], np.float32), TensorProto.FLOAT16,
     np.array([INF, -INF, 65504.0], np.float16)),
    ("f64 past bf16", np.array([1e300, -1e300]), TensorProto.BFLOAT16,
     np.array([INF, -INF], np.float32)),
    # fixed point to floating point: "+/- infinity if OOR (+ infinity in the case of uint)"
    ("i32 past f16", np.array([70000, -70000], np.int32), TensorProto.FLOAT16,
     np.array([INF, -INF], np.float16)),
    ("u64 past f16", np.array([2**64 - 1], np.uint64), TensorProto.FLOAT16, np.array([INF], np.float16)),
    # fixed point to fixed point: "discard higher bits and reinterpret"
    ("i16 to i8", np.array([200, -129, 256], np.int16), TensorProto.INT8, np.array([-56, 127, 0], np.int8)),
    # floating point to bool: "+/- 0.0 to False; all else to True"
    ("f32 to bool", np.array([0.0, -0.0, NAN, INF, 1e-45], np.float32), TensorProto.BOOL,
     np.array([False, False, True, True, True])),
    # floating point to fixed point within range: truncated toward zero, up to the
    # boundaries (the least value; a fraction below one past the greatest)
    ("f32 to u8 in range", np.array([-0.9, 255.9, 2.5], np.float32), TensorProto.UINT8,
     np.array([0, 255, 2], np.uint8)),
    ("f32 to i32 at the bounds", np.array([-(2.0**31), 2.0**31 - 128], np.float32), TensorProto.INT32,
     np.array([-(2**31), 2**31 - 128], np.int32)),
    ("f64 to i64 at the bounds", np.array([-(2.0**63), 2.0**63 - 1024]), TensorProto.INT64,
     np.array([-(2**63), 2**63 - 1024], np.int64)),
    ("f64 to u64 at the bound", np.array([2.0**64 - 2048]), TensorProto.UINT64,
     np.array([2**64 - 2048], np.uint64)),
]


@pytest.mark.parametrize("value, to, expected", [c[1:] for c in DEFINED], ids=[c[0] for c in DEFINED])
def test_a_cast_onnx_defines_folds_to_its_value_without_a_warning(value: np.ndarray, to: int,
                                                                  expected: np.ndarray) -> None:
    result, caught = folded(constant_model("Cast", value, {"to": to}))
    assert not caught, describe(caught)
    np.testing.assert_array_equal(result.astype(expected.dtype), expected)
    # CastLike takes the target type from its second input
    like = np.zeros((), helper.tensor_dtype_to_np_dtype(to))
    result_like, caught = folded(constant_model("CastLike", value, like=like))
    assert not caught, describe(caught)
    np.testing.assert_array_equal(result_like, result)


UNDEFINED = [
    ("T5 log(0) to i64", np.array([-INF, 0.0, 1.7], np.float32), TensorProto.INT64, 1),
    ("nan inf and float min to i64", np.array([NAN, INF, -3.4028235e38, 2.0], np.float32),
     TensorProto.INT64, 3),
    ("one past i32", np.array([2.0**31, -(2.0**31) - 256], np.float32), TensorProto.INT32, 2),
    ("one past i64", np.array([2.0**63]), TensorProto.INT64, 1),
    ("past u8", np.array([256.0, -1.0, 300.5], np.float16), TensorProto.UINT8, 3),
    ("nan to u64", np.array([NAN, 1.0]), TensorProto.UINT64, 1),
]


@pytest.mark.parametrize("value, to, count", [c[1:] for c in UNDEFINED], ids=[c[0] for c in UNDEFINED])
def test_a_cast_onnx_leaves_undefined_warns_naming_the_node(value: np.ndarray, to: int, count: int) -> None:
    result, caught = folded(constant_model("Cast", value, {"to": to}, name="bucket"))
    # one warning, the project's, naming the node and the number of undefined values
    assert [w.category for w in caught] == [OnnxImportWarning], describe(caught)
    message = str(caught[0].message)
    assert "Cast node 'bucket'" in message and f"{count} of {value.size} value(s)" in message
    # the value is the interpreter's for the same cast at run time: folding and running agree
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        at_run_time = evaluate(from_onnx(runtime_model(value, to)), value)
    np.testing.assert_array_equal(result, np.asarray(at_run_time))


def test_castlike_of_an_undefined_value_warns_naming_the_node() -> None:
    like = np.zeros((), np.int64)
    model = constant_model("CastLike", np.array([NAN], np.float32), like=like, name="mask_like")
    _, caught = folded(model)
    assert [w.category for w in caught] == [OnnxImportWarning], describe(caught)
    assert "CastLike node 'mask_like'" in str(caught[0].message)


def test_folding_constants_gives_ieee_results_without_numpy_warnings() -> None:
    """Ops other than Cast fold through the interpreter: inf - inf in a sum is NaN, as in
    the compiled code, and no NumPy warning says so."""
    infinities = np.array([INF, -INF], np.float32)
    nodes = [
        helper.make_node("Constant", [], ["x"], value=numpy_helper.from_array(infinities)),
        helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0),
    ]
    graph = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    result, caught = folded(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]))
    assert not caught, describe(caught)
    assert np.isnan(result)

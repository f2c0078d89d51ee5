"""The ONNX zoo models, imported with ``from_onnx`` and compiled with ``build``: the native
library's output matches onnxruntime (rtol 1e-4, atol 1e-5).

Small configurations (the larger ones are the benchmark's business): an MLP, a
ResNet-8 with real stride-2 stages and projection shortcuts, and a one- and a two-layer
transformer with the causal mask, layer norms, GELU and attention matmuls. The resnet's
convolutions and the transformers' projections are above ``gemm.MIN_GEMM_MACS``, so the
BLAS path is compiled as well as the loop nests.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import passinfra
from passinfra.frontend import from_onnx, zoo
from passinfra.transform import PassContext

ort = pytest.importorskip("onnxruntime")

RTOL, ATOL = 1e-4, 1e-5

MODELS = {
    "mlp": lambda: zoo.mlp(batch=4, in_features=32, hidden=64, layers=2, classes=10),
    "resnet8": lambda: zoo.resnet(depth=8, batch=2, image=16, width=8, classes=10),
    "transformer-1x32": lambda: zoo.transformer(layers=1, hidden=32, heads=2, seq=8, vocab=64),
    "transformer-2x64": lambda: zoo.transformer(layers=2, hidden=64, heads=4, seq=16, vocab=128),
}


@pytest.fixture(scope="session")
def codegen_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("codegen_cache_models"))


def model_input(model: onnx.ModelProto, seed: int) -> np.ndarray:
    """A random value for the model's one graph input: token ids below the smallest zoo
    vocabulary for int64 inputs, standard normal floats otherwise."""
    graph_input = model.graph.input[0]
    shape = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)
    if graph_input.type.tensor_type.elem_type == onnx.TensorProto.INT64:
        return rng.integers(0, 64, shape).astype(np.int64)
    return rng.standard_normal(shape).astype(np.float32)


def onnxruntime_output(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (output,) = session.run(None, {model.graph.input[0].name: x})
    return output


@pytest.mark.parametrize("name", list(MODELS))
def test_compiled_zoo_model_matches_onnxruntime(name: str, codegen_cache_dir: str):
    model = MODELS[name]()
    with PassContext(config={"codegen.cache_dir": codegen_cache_dir}):
        lib = passinfra.build(from_onnx(model))
    for seed in (0, 1):  # the second input checks nothing is left over from the first call
        x = model_input(model, seed)
        expected = onnxruntime_output(model, x)
        got = lib(x)
        assert got.shape == expected.shape
        assert got.dtype == expected.dtype
        np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


def test_compiled_transformer_is_causal(codegen_cache_dir: str):
    """Changing a later token leaves the compiled logits of earlier positions unchanged
    (the mask survives lowering), and changes the later ones."""
    model = zoo.transformer(layers=1, hidden=32, heads=2, seq=8, vocab=64)
    with PassContext(config={"codegen.cache_dir": codegen_cache_dir}):
        lib = passinfra.build(from_onnx(model))
    tokens = np.arange(8, dtype=np.int64).reshape(1, 8)
    changed = tokens.copy()
    changed[0, 5] = 40
    before, after = lib(tokens), lib(changed)
    np.testing.assert_array_equal(before[:, :5], after[:, :5])
    assert not np.allclose(before[:, 5:], after[:, 5:])

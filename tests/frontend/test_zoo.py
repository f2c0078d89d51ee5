"""The ONNX model zoo: valid models, deterministic from the seed, matching onnxruntime
after import at several sizes, and the ``zoo:`` spec parser."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from passinfra import evaluate
from passinfra.frontend import from_onnx, zoo

ort = pytest.importorskip("onnxruntime")


def _feed(model: onnx.ModelProto) -> np.ndarray:
    graph_input = model.graph.input[0]
    shape = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]
    rng = np.random.default_rng(3)
    if graph_input.type.tensor_type.elem_type == onnx.TensorProto.INT64:
        return rng.integers(0, 64, shape).astype(np.int64)
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "spec",
    [
        "zoo:mlp",
        "zoo:mlp?layers=4&hidden=128&batch=2",
        "zoo:resnet?depth=8",
        "zoo:resnet?depth=14&width=8&image=16",
        "zoo:transformer?layers=1&hidden=32&heads=2&seq=8",
        "zoo:transformer?layers=2&hidden=64&heads=4&seq=16",
    ],
)
def test_zoo_model_matches_onnxruntime(spec):
    model = zoo.zoo_spec(spec)
    x = _feed(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"input": x})
    got = evaluate(from_onnx(model), x)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_same_seed_same_model_other_seed_other_weights():
    a, b, c = zoo.mlp(seed=1), zoo.mlp(seed=1), zoo.mlp(seed=2)
    assert a.SerializeToString() == b.SerializeToString()
    assert a.graph.initializer[0].raw_data != c.graph.initializer[0].raw_data


def test_transformer_has_causal_mask_layer_norm_and_gelu():
    ops = {n.op_type for n in zoo.transformer(layers=1, hidden=32, heads=2, seq=8).graph.node}
    assert {"Trilu", "Where", "LayerNormalization", "Erf", "Softmax", "Shape", "ConstantOfShape"} <= ops


def test_transformer_is_causal():
    # changing a later token must not change the logits of earlier positions
    model = zoo.transformer(layers=1, hidden=32, heads=2, seq=8)
    mod = from_onnx(model)
    tokens = np.arange(8, dtype=np.int64).reshape(1, 8)
    changed = tokens.copy()
    changed[0, 5] = 40
    before, after = evaluate(mod, tokens), evaluate(mod, changed)
    np.testing.assert_array_equal(before[:, :5], after[:, :5])
    assert not np.allclose(before[:, 5:], after[:, 5:])


def test_resnet_depth_sets_the_number_of_convolutions():
    convs = {d: sum(n.op_type == "Conv" for n in zoo.resnet(depth=d).graph.node) for d in (8, 14)}
    # 1 stem + 6n block convs + 2 projection shortcuts
    assert convs == {8: 1 + 6 + 2, 14: 1 + 12 + 2}


def test_save_writes_a_loadable_file(tmp_path):
    path = zoo.save(zoo.mlp(), tmp_path / "mlp.onnx")
    onnx.checker.check_model(onnx.load(path))


@pytest.mark.parametrize(
    "spec,message",
    [
        ("zoo:vgg", "unknown zoo model 'vgg'"),
        ("zoo:resnet?depth=9", "6n \\+ 2"),
        ("zoo:mlp?layers=two", "not an integer"),
        ("zoo:mlp?colour=3", "bad parameters"),
        ("zoo:transformer?hidden=30&heads=4", "multiple of heads"),
    ],
)
def test_bad_specs_name_the_problem(spec, message):
    with pytest.raises(zoo.ZooSpecError, match=message):
        zoo.zoo_spec(spec)

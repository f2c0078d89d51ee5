"""The builder models: their structure, and their outputs against hand-written NumPy
forward passes of the same weights."""

import math

import numpy as np
import pytest

from passinfra import evaluate, ir
from passinfra.errors import IRError
from passinfra.frontend.zoo.ir_models import (
    MODELS,
    demo_cnn,
    demo_cnn_weights,
    mlp,
    mlp_weights,
    transformer_block,
    transformer_block_weights,
)

# -- NumPy reference layers (float64 inside, so they are the more exact side) -----------


def np_conv2d_same_3x3(x, weight):
    """3x3 convolution, stride 1, padding 1, NCHW / OIHW."""
    n, _, height, width = x.shape
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, weight.shape[0], height, width))
    for dy in range(3):
        for dx in range(3):
            window = padded[:, :, dy:dy + height, dx:dx + width]
            out += np.einsum("nchw,oc->nohw", window, weight[:, :, dy, dx].astype(np.float64))
    return out


def np_linear(x, weights, name):
    return x @ weights[f"{name}_weight"].T.astype(np.float64) + weights[f"{name}_bias"]


def np_softmax(x, axis=-1):
    shifted = np.exp(x - x.max(axis=axis, keepdims=True))
    return shifted / shifted.sum(axis=axis, keepdims=True)


def np_layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def np_gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _input(shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


# -- demo CNN -----------------------------------------------------------------------------


def np_demo_cnn(x, w, eps=1e-5):
    y = np_conv2d_same_3x3(x, w["conv_weight"])
    per_channel = lambda v: v.reshape(1, -1, 1, 1)
    y = (y - per_channel(w["bn_mean"])) / np.sqrt(per_channel(w["bn_var"]) + eps)
    y = y * per_channel(w["bn_gamma"]) + per_channel(w["bn_beta"])
    y = np.maximum(y, 0.0).reshape(x.shape[0], -1)
    return np_softmax(np_linear(y, w, "fc"))


@pytest.mark.parametrize("sizes", [
    {},
    {"batch": 2, "channels": 1, "size": 6, "conv_channels": 4, "classes": 3, "seed": 7},
])
def test_demo_cnn_matches_numpy_and_gives_probabilities(sizes):
    kwargs = {"batch": 1, "channels": 3, "size": 16, "conv_channels": 8, "classes": 10, "seed": 0, **sizes}
    mod = demo_cnn(**kwargs)
    x = _input((kwargs["batch"], kwargs["channels"], kwargs["size"], kwargs["size"]))
    out = evaluate(mod, x)
    assert out.shape == (kwargs["batch"], kwargs["classes"]) and out.dtype == np.float32
    weights = demo_cnn_weights(kwargs["channels"], kwargs["size"], kwargs["conv_channels"],
                               kwargs["classes"], kwargs["seed"])
    np.testing.assert_allclose(out, np_demo_cnn(x, weights), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)
    assert (out > 0).all()


def test_demo_cnn_structure():
    mod = demo_cnn(batch=2)
    assert [gv.name_hint for gv in mod.functions] == ["main"]
    main = mod["main"]
    (data,) = main.params
    assert data.name_hint == "data"
    assert data.type_annotation == ir.TensorType((2, 3, 16, 16), "float32")
    ops, constants = [], []
    for node in ir.iter_post_order(main):
        if isinstance(node, ir.Call):
            ops.append(node.op.name)
        elif isinstance(node, ir.Constant):
            constants.append(node)
    assert ops == [
        "nn.conv2d", "nn.batch_norm", "nn.relu", "reshape", "nn.dense", "nn.bias_add", "nn.softmax",
    ]
    assert len(constants) == 7 and all(c.dtype == "float32" for c in constants)


def test_demo_cnn_is_deterministic_per_seed():
    first, again, other = (demo_cnn_weights(seed=s) for s in (3, 3, 4))
    for key in first:
        np.testing.assert_array_equal(first[key], again[key])
    assert not np.array_equal(first["conv_weight"], other["conv_weight"])
    x = _input((1, 3, 16, 16))
    np.testing.assert_array_equal(evaluate(demo_cnn(seed=3), x), evaluate(demo_cnn(seed=3), x))


def test_demo_cnn_types_infer_to_class_probabilities():
    typed = ir.infer_type(demo_cnn(batch=2, classes=5))
    assert typed["main"].checked_type == ir.FuncType(
        [ir.TensorType((2, 3, 16, 16))], ir.TensorType((2, 5))
    )


# -- MLP ----------------------------------------------------------------------------------


def test_mlp_matches_numpy():
    mod = mlp(batch=3, in_features=5, hidden=(7, 6, 4), classes=2, seed=2)
    x = _input((3, 5))
    w = mlp_weights(5, (7, 6, 4), 2, seed=2)
    y = x.astype(np.float64)
    for i in range(3):
        y = np.maximum(np_linear(y, w, f"fc{i}"), 0.0)
    expected = np_softmax(np_linear(y, w, "fc3"))
    out = evaluate(mod, x)
    assert out.shape == (3, 2)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-6)


def test_mlp_without_hidden_layers_is_a_softmax_regression():
    mod = mlp(in_features=4, hidden=(), classes=3)
    ops = [n.op.name for n in ir.iter_post_order(mod["main"]) if isinstance(n, ir.Call)]
    assert ops == ["nn.dense", "nn.bias_add", "nn.softmax"]


# -- transformer block ----------------------------------------------------------------------


def np_transformer_block(x, w, heads):
    seq, hidden = x.shape
    d = hidden // heads
    x = x.astype(np.float64)
    normed = np_layer_norm(x, w["ln1_gamma"], w["ln1_beta"])
    q, k, v = (np_linear(normed, w, name).reshape(seq, heads, d).transpose(1, 0, 2) for name in "qkv")
    attention = np_softmax(q @ k.transpose(0, 2, 1) / math.sqrt(d))  # (heads, seq, seq)
    merged = (attention @ v).transpose(1, 0, 2).reshape(seq, hidden)
    h = x + np_linear(merged, w, "out")
    normed2 = np_layer_norm(h, w["ln2_gamma"], w["ln2_beta"])
    return h + np_linear(np_gelu(np_linear(normed2, w, "ffn1")), w, "ffn2")


@pytest.mark.parametrize("seq, hidden, heads, ffn", [(8, 32, 4, None), (5, 12, 3, 20), (3, 8, 1, 8)])
def test_transformer_block_matches_numpy(seq, hidden, heads, ffn):
    mod = transformer_block(seq=seq, hidden=hidden, heads=heads, ffn=ffn, seed=5)
    x = _input((seq, hidden))
    out = evaluate(mod, x)
    assert out.shape == (seq, hidden) and out.dtype == np.float32
    expected = np_transformer_block(x, transformer_block_weights(hidden, ffn, seed=5), heads)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_transformer_block_uses_the_listed_layers():
    ops = [n.op.name for n in ir.iter_post_order(transformer_block()["main"]) if isinstance(n, ir.Call)]
    for name, count in [("nn.layer_norm", 2), ("nn.dense", 6), ("matmul", 2), ("nn.softmax", 1),
                        ("nn.gelu", 1), ("add", 2), ("transpose", 4), ("reshape", 4)]:
        assert ops.count(name) == count, name


def test_transformer_block_types_infer():
    typed = ir.infer_type(transformer_block(seq=4, hidden=16, heads=2))
    assert typed["main"].checked_type.ret_type == ir.TensorType((4, 16))


# -- arguments and the zoo ---------------------------------------------------------------


def test_heads_must_divide_hidden():
    with pytest.raises(IRError, match=r"hidden \(30\) must be a multiple of heads \(4\)"):
        transformer_block(hidden=30, heads=4)


@pytest.mark.parametrize("builder, kwargs, name", [
    (demo_cnn, {"batch": 0}, "batch"),
    (demo_cnn, {"size": 2.5}, "size"),
    (mlp, {"hidden": (8, -1)}, "layer 2 width"),
    (transformer_block, {"seq": True}, "seq"),
])
def test_bad_sizes_are_named(builder, kwargs, name):
    with pytest.raises(IRError, match=f"model size {name} must be a positive int"):
        builder(**kwargs)


def test_model_zoo_builds_every_model_with_defaults():
    assert set(MODELS) == {"demo_cnn", "mlp", "transformer_block"}
    for name, builder in MODELS.items():
        mod = builder()
        assert isinstance(mod, ir.IRModule) and "main" in mod, name

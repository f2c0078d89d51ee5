"""The zoo's IR builders: small models built with the op builders straight into an
IRModule (no ONNX), for the tests and benchmarks.

Their parameters are Python values (``mlp``'s ``hidden`` is a sequence of widths), not
``zoo:`` spec integers; the ONNX builders of the same families are in ``onnx_models``.

Each model comes as two functions: ``<model>_weights(...)`` draws its weights (float32,
from ``np.random.default_rng(seed)``, so a seed always gives the same model) and
``<model>(...)`` builds an IRModule whose ``main`` takes the input tensor and holds the
weights as Constants. Tests run the weights through a NumPy forward pass of their own
and compare it with the interpreter.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from passinfra.errors import IRError
from passinfra.frontend.zoo.params import (
    DEMO_CNN_PARAMS,
    DEMO_CNN_WEIGHTS_PARAMS,
    IR_MLP_PARAMS,
    IR_MLP_WEIGHTS_PARAMS,
    TRANSFORMER_BLOCK_PARAMS,
    TRANSFORMER_BLOCK_WEIGHTS_PARAMS,
    checked_builder,
)
from passinfra.ir import op
from passinfra.ir.expr import Expr, Function, TupleGetItem, const, var
from passinfra.ir.module import IRModule

__all__ = [
    "MODELS", "demo_cnn", "demo_cnn_weights", "mlp", "mlp_weights", "transformer_block",
    "transformer_block_weights",
]

Weights = dict[str, np.ndarray]


def _normal(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    # He-style scaling keeps activations in a sane range, so softmax outputs are not
    # saturated and numeric comparisons in tests stay meaningful
    return (rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)).astype("float32")


def _small(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return (rng.standard_normal(shape) * 0.1).astype("float32")


def _around_one(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(0.5, 1.5, shape).astype("float32")


def _linear(x: Expr, weights: Weights, name: str) -> Expr:
    """``x @ W.T + b`` with ``W = weights[name + "_weight"]``, ``b = weights[name + "_bias"]``."""
    return op.nn.bias_add(op.nn.dense(x, const(weights[f"{name}_weight"])), const(weights[f"{name}_bias"]))


# -- demo CNN ---------------------------------------------------------------------------


@checked_builder(DEMO_CNN_WEIGHTS_PARAMS, IRError)
def demo_cnn_weights(channels: int = 3, size: int = 16, conv_channels: int = 8, classes: int = 10,
                     seed: int = 0) -> Weights:
    """The weights of :func:`demo_cnn`: a 3x3 conv, its batch norm, and the classifier."""
    rng = np.random.default_rng(seed)
    features = conv_channels * size * size
    return {
        "conv_weight": _normal(rng, (conv_channels, channels, 3, 3), channels * 9),
        "bn_gamma": _around_one(rng, (conv_channels,)),
        "bn_beta": _small(rng, (conv_channels,)),
        "bn_mean": _small(rng, (conv_channels,)),
        "bn_var": _around_one(rng, (conv_channels,)),
        "fc_weight": _normal(rng, (classes, features), features),
        "fc_bias": _small(rng, (classes,)),
    }


@checked_builder(DEMO_CNN_PARAMS, IRError)
def demo_cnn(batch: int = 1, channels: int = 3, size: int = 16, conv_channels: int = 8, classes: int = 10,
             seed: int = 0) -> IRModule:
    """conv2d 3x3 (padding 1) -> batch_norm -> relu -> flatten -> dense -> bias_add -> softmax.

    ``main`` takes ``%data: Tensor[(batch, channels, size, size), float32]`` and returns
    class probabilities of shape (batch, classes).
    """
    w = demo_cnn_weights(channels, size, conv_channels, classes, seed)
    data = var("data", (batch, channels, size, size))
    x = op.nn.conv2d(data, const(w["conv_weight"]), padding=(1, 1))
    norm = op.nn.batch_norm(x, *(const(w[k]) for k in ("bn_gamma", "bn_beta", "bn_mean", "bn_var")))
    x = op.nn.relu(TupleGetItem(norm, 0))
    x = op.reshape(x, (batch, conv_channels * size * size))
    x = op.nn.softmax(_linear(x, w, "fc"))
    return IRModule({"main": Function([data], x)})


# -- MLP --------------------------------------------------------------------------------


@checked_builder(IR_MLP_WEIGHTS_PARAMS, IRError)
def mlp_weights(in_features: int = 16, hidden: Sequence[int] = (32, 32), classes: int = 10,
                seed: int = 0) -> Weights:
    """The weights of :func:`mlp`: ``fc{i}_weight`` / ``fc{i}_bias`` per layer."""
    sizes = [in_features, *hidden, classes]
    rng = np.random.default_rng(seed)
    weights: Weights = {}
    for i, (fan_in, units) in enumerate(zip(sizes, sizes[1:])):
        weights[f"fc{i}_weight"] = _normal(rng, (units, fan_in), fan_in)
        weights[f"fc{i}_bias"] = _small(rng, (units,))
    return weights


@checked_builder(IR_MLP_PARAMS, IRError)
def mlp(batch: int = 1, in_features: int = 16, hidden: Sequence[int] = (32, 32), classes: int = 10,
        seed: int = 0) -> IRModule:
    """(dense -> bias_add -> relu) per hidden width, then dense -> bias_add -> softmax.

    ``main`` takes ``%data: Tensor[(batch, in_features), float32]``.
    """
    w = mlp_weights(in_features, hidden, classes, seed)
    data = var("data", (batch, in_features))
    x: Expr = data
    for i in range(len(hidden)):
        x = op.nn.relu(_linear(x, w, f"fc{i}"))
    x = op.nn.softmax(_linear(x, w, f"fc{len(hidden)}"))
    return IRModule({"main": Function([data], x)})


# -- transformer block ------------------------------------------------------------------


@checked_builder(TRANSFORMER_BLOCK_WEIGHTS_PARAMS, IRError)
def transformer_block_weights(hidden: int = 32, ffn: int | None = None, seed: int = 0) -> Weights:
    """The weights of :func:`transformer_block`: two layer norms (``ln1``, ``ln2``), the
    attention projections (``q``, ``k``, ``v``, ``out``) and the MLP (``ffn1``, ``ffn2``)."""
    ffn = 4 * hidden if ffn is None else ffn
    rng = np.random.default_rng(seed)
    weights: Weights = {"ln1_gamma": _around_one(rng, (hidden,)), "ln1_beta": _small(rng, (hidden,))}
    for name in ("q", "k", "v", "out"):
        weights[f"{name}_weight"] = _normal(rng, (hidden, hidden), hidden)
        weights[f"{name}_bias"] = _small(rng, (hidden,))
    weights["ln2_gamma"] = _around_one(rng, (hidden,))
    weights["ln2_beta"] = _small(rng, (hidden,))
    weights["ffn1_weight"] = _normal(rng, (ffn, hidden), hidden)
    weights["ffn1_bias"] = _small(rng, (ffn,))
    weights["ffn2_weight"] = _normal(rng, (hidden, ffn), ffn)
    weights["ffn2_bias"] = _small(rng, (hidden,))
    return weights


@checked_builder(TRANSFORMER_BLOCK_PARAMS, IRError)
def transformer_block(seq: int = 8, hidden: int = 32, heads: int = 4, ffn: int | None = None,
                      seed: int = 0) -> IRModule:
    """A pre-norm transformer encoder block on ``%x: Tensor[(seq, hidden), float32]``:

    ``h = x + Attention(LayerNorm(x))``, ``out = h + MLP(LayerNorm(h))``, with multi-head
    self-attention (``heads`` heads of ``hidden // heads``, softmax(QK^T / sqrt(d)) V) and
    a GELU MLP of width ``ffn`` (default ``4 * hidden``).
    """
    if hidden % heads:
        raise IRError(f"transformer_block: hidden ({hidden}) must be a multiple of heads ({heads})")
    head_dim = hidden // heads
    w = transformer_block_weights(hidden, ffn, seed)
    x = var("x", (seq, hidden))

    def split_heads(t: Expr, axes: tuple[int, int, int]) -> Expr:
        # (seq, hidden) -> (seq, heads, head_dim) -> permuted by ``axes``
        return op.transpose(op.reshape(t, (seq, heads, head_dim)), axes)

    normed = op.nn.layer_norm(x, const(w["ln1_gamma"]), const(w["ln1_beta"]))
    queries = split_heads(_linear(normed, w, "q"), (1, 0, 2))  # (heads, seq, head_dim)
    keys_t = split_heads(_linear(normed, w, "k"), (1, 2, 0))  # (heads, head_dim, seq)
    values = split_heads(_linear(normed, w, "v"), (1, 0, 2))  # (heads, seq, head_dim)
    scores = op.multiply(op.matmul(queries, keys_t), const(1.0 / math.sqrt(head_dim), "float32"))
    context = op.matmul(op.nn.softmax(scores, axis=-1), values)  # (heads, seq, head_dim)
    merged = op.reshape(op.transpose(context, (1, 0, 2)), (seq, hidden))
    h = op.add(x, _linear(merged, w, "out"))

    normed2 = op.nn.layer_norm(h, const(w["ln2_gamma"]), const(w["ln2_beta"]))
    mlp_out = _linear(op.nn.gelu(_linear(normed2, w, "ffn1")), w, "ffn2")
    return IRModule({"main": Function([x], op.add(h, mlp_out))})


MODELS: dict[str, Callable[..., IRModule]] = {
    "demo_cnn": demo_cnn,
    "mlp": mlp,
    "transformer_block": transformer_block,
}
"""The built-in model zoo by name (each builder takes only keyword arguments with defaults)."""

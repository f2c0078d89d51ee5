"""The zoo's ONNX builders, written with the onnx helper API: ``mlp``, ``resnet``,
``transformer``; these are the models ``zoo:`` specs name (``MODELS``).

Weights are random, drawn from a seeded NumPy generator, so a (builder, parameters,
seed) triple always gives the same model. ``spec.zoo_spec`` parses the command-line
form. Every builder returns an ``onnx.ModelProto``; ``save`` writes one to a file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from passinfra.frontend.zoo.params import (
    MLP_PARAMS,
    RESNET_PARAMS,
    TRANSFORMER_PARAMS,
    ZooSpecError,
    checked_builder,
)

__all__ = ["mlp", "resnet", "transformer", "save", "MODELS", "OPSET", "MAX_WEIGHT_BYTES"]

OPSET = 17  # LayerNormalization is opset 17
# An ONNX model is one protobuf message, which cannot exceed 2 GiB; keep room for the graph.
MAX_WEIGHT_BYTES = 2**31 - 2**26


class _GraphBuilder:
    """Collects nodes and seeded initializers; names are unique by counter."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._counter = 0
        self._weight_bytes = 0

    def _reserve(self, shape: tuple[int, ...], itemsize: int) -> None:
        """Count an initializer's bytes before it is allocated: sizes whose weights no ONNX
        file can hold fail here, at once, rather than after gigabytes of random numbers."""
        self._weight_bytes += math.prod(shape) * itemsize
        if self._weight_bytes > MAX_WEIGHT_BYTES:
            raise ZooSpecError(
                f"the weights would exceed {MAX_WEIGHT_BYTES >> 20} MiB (an ONNX file holds at most "
                "2 GiB); choose smaller sizes"
            )

    def fresh(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}_{self._counter}"

    def weight(self, prefix: str, shape: tuple[int, ...], scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        std = scale if scale is not None else 1.0 / math.sqrt(max(fan_in, 1))
        self._reserve(shape, 4)
        return self._add(prefix, (self.rng.standard_normal(shape) * std).astype(np.float32))

    def constant(self, prefix: str, array: np.ndarray) -> str:
        array = np.asarray(array)
        self._reserve(array.shape, array.itemsize)
        return self._add(prefix, array)

    def _add(self, prefix: str, array: np.ndarray) -> str:
        name = self.fresh(prefix)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def node(self, op_type: str, inputs: list[str], num_outputs: int = 1, **attrs: Any) -> Any:
        outputs = [self.fresh(op_type.lower()) for _ in range(num_outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=self.fresh(op_type), **attrs))
        return outputs[0] if num_outputs == 1 else outputs

    def model(
        self,
        name: str,
        inputs: list[onnx.ValueInfoProto],
        output: str,
        out_shape: list[int],
        out_type: int = TensorProto.FLOAT,
    ) -> onnx.ModelProto:
        self.nodes.append(helper.make_node("Identity", [output], ["output"], name="output"))
        graph = helper.make_graph(
            self.nodes,
            name,
            inputs,
            [helper.make_tensor_value_info("output", out_type, out_shape)],
            initializer=self.initializers,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="raypass.zoo"
        )
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


@checked_builder(MLP_PARAMS, ZooSpecError)
def mlp(
    batch: int = 4, in_features: int = 32, hidden: int = 64, layers: int = 2, classes: int = 10, seed: int = 0
) -> onnx.ModelProto:
    """Gemm + Relu ``layers`` times, then a Gemm to ``classes`` and a Softmax."""
    g = _GraphBuilder(seed)
    x = "input"
    width = in_features
    for _ in range(layers):
        x = g.node("Gemm", [x, g.weight("w", (hidden, width)), g.weight("b", (hidden,), 0.1)], transB=1)
        x = g.node("Relu", [x])
        width = hidden
    x = g.node("Gemm", [x, g.weight("w", (classes, width)), g.weight("b", (classes,), 0.1)], transB=1)
    x = g.node("Softmax", [x], axis=-1)
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, in_features])]
    return g.model("mlp", inputs, x, [batch, classes])


def _conv_bn(g: _GraphBuilder, x: str, in_ch: int, out_ch: int, stride: int, relu: bool) -> str:
    x = g.node(
        "Conv",
        [x, g.weight("conv", (out_ch, in_ch, 3, 3))],
        kernel_shape=[3, 3],
        strides=[stride, stride],
        pads=[1, 1, 1, 1],
    )
    stats = [
        g.constant("gamma", 1 + 0.1 * g.rng.standard_normal(out_ch).astype(np.float32)),
        g.constant("beta", 0.1 * g.rng.standard_normal(out_ch).astype(np.float32)),
        g.constant("mean", 0.1 * g.rng.standard_normal(out_ch).astype(np.float32)),
        g.constant("var", (0.5 + g.rng.random(out_ch)).astype(np.float32)),
    ]
    x = g.node("BatchNormalization", [x, *stats], epsilon=1e-5)
    return g.node("Relu", [x]) if relu else x


@checked_builder(RESNET_PARAMS, ZooSpecError)
def resnet(
    depth: int = 8, batch: int = 1, image: int = 32, width: int = 16, classes: int = 10, seed: int = 0
) -> onnx.ModelProto:
    """A CIFAR-style ResNet: ``depth`` = 6n + 2 (8, 14, 20, 32, 56, ...), three stages of
    n basic blocks at widths (w, 2w, 4w), strides (1, 2, 2), then pooling and a classifier."""
    if depth < 8 or (depth - 2) % 6:
        raise ZooSpecError(f"resnet depth must be 6n + 2 with n >= 1 (8, 14, 20, ...), got {depth}")
    blocks = (depth - 2) // 6
    g = _GraphBuilder(seed)
    x = _conv_bn(g, "input", 3, width, 1, relu=True)
    channels = width
    for stage, out_ch in enumerate((width, 2 * width, 4 * width)):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            y = _conv_bn(g, x, channels, out_ch, stride, relu=True)
            y = _conv_bn(g, y, out_ch, out_ch, 1, relu=False)
            shortcut = x
            if stride != 1 or channels != out_ch:  # 1x1 projection shortcut
                shortcut = g.node(
                    "Conv",
                    [x, g.weight("proj", (out_ch, channels, 1, 1))],
                    kernel_shape=[1, 1],
                    strides=[stride, stride],
                )
            x = g.node("Relu", [g.node("Add", [y, shortcut])])
            channels = out_ch
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    x = g.node("Gemm", [x, g.weight("fc", (classes, channels)), g.weight("fc_b", (classes,), 0.1)], transB=1)
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, image, image])]
    return g.model(f"resnet{depth}", inputs, x, [batch, classes])


def _attention(g: _GraphBuilder, x: str, batch: int, seq: int, hidden: int, heads: int, mask: str) -> str:
    head_dim = hidden // heads
    qkv = g.node("MatMul", [x, g.weight("qkv", (hidden, 3 * hidden))])
    q, k, v = g.node(
        "Split", [qkv, g.constant("split", np.array([hidden] * 3, np.int64))], num_outputs=3, axis=-1
    )
    shape = g.constant("heads_shape", np.array([batch, seq, heads, head_dim], np.int64))

    def split_heads(t: str, perm: list[int]) -> str:
        return g.node("Transpose", [g.node("Reshape", [t, shape])], perm=perm)

    q, v = split_heads(q, [0, 2, 1, 3]), split_heads(v, [0, 2, 1, 3])
    k = split_heads(k, [0, 2, 3, 1])
    scores = g.node(
        "Div", [g.node("MatMul", [q, k]), g.constant("scale", np.array(math.sqrt(head_dim), np.float32))]
    )
    scores = g.node("Where", [mask, scores, g.constant("neg", np.array(-1e9, np.float32))])
    context = g.node("MatMul", [g.node("Softmax", [scores], axis=-1), v])
    context = g.node("Transpose", [context], perm=[0, 2, 1, 3])
    merged = g.node(
        "Reshape", [context, g.constant("merged_shape", np.array([batch, seq, hidden], np.int64))]
    )
    return g.node("MatMul", [merged, g.weight("proj", (hidden, hidden))])


def _gelu(g: _GraphBuilder, x: str) -> str:
    # 0.5 x (1 + erf(x / sqrt 2)), the erf form exporters write before opset 20's Gelu
    scaled = g.node("Div", [x, g.constant("sqrt2", np.array(math.sqrt(2.0), np.float32))])
    one_plus = g.node("Add", [g.node("Erf", [scaled]), g.constant("one", np.array(1.0, np.float32))])
    return g.node("Mul", [g.node("Mul", [x, one_plus]), g.constant("half", np.array(0.5, np.float32))])


def _layer_norm(g: _GraphBuilder, x: str, hidden: int) -> str:
    gamma = g.constant("ln_gamma", 1 + 0.1 * g.rng.standard_normal(hidden).astype(np.float32))
    beta = g.constant("ln_beta", 0.1 * g.rng.standard_normal(hidden).astype(np.float32))
    return g.node("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)


@checked_builder(TRANSFORMER_PARAMS, ZooSpecError)
def transformer(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    seq: int = 16,
    batch: int = 1,
    vocab: int = 128,
    seed: int = 0,
) -> onnx.ModelProto:
    """A GPT-style decoder: token + position embeddings, ``layers`` pre-norm blocks of causal
    multi-head attention and a GELU MLP, a final layer norm and the vocabulary logits.

    The input is int64 token ids (batch, seq); the causal mask is computed in the graph
    from the input's shape (Shape, Gather, Concat, ConstantOfShape, Trilu, Cast), a shape
    subgraph the importer folds.
    """
    if hidden % heads:
        raise ZooSpecError(f"transformer hidden ({hidden}) must be a multiple of heads ({heads})")
    g = _GraphBuilder(seed)
    tokens = g.node("Gather", [g.weight("tok_embed", (vocab, hidden), 0.02), "input"], axis=0)
    positions = g.constant("positions", np.arange(seq, dtype=np.int64))
    x = g.node(
        "Add", [tokens, g.node("Gather", [g.weight("pos_embed", (seq, hidden), 0.02), positions], axis=0)]
    )
    # causal mask: lower triangle of ones over (seq_len, seq_len), from the input's shape
    seq_len = g.node(
        "Gather", [g.node("Shape", ["input"]), g.constant("axis1", np.array([1], np.int64))], axis=0
    )
    square = g.node("Concat", [seq_len, seq_len], axis=0)
    ones = g.node("ConstantOfShape", [square], value=numpy_helper.from_array(np.array([1.0], np.float32)))
    mask = g.node("Cast", [g.node("Trilu", [ones], upper=0)], to=TensorProto.BOOL)
    for _ in range(layers):
        x = g.node("Add", [x, _attention(g, _layer_norm(g, x, hidden), batch, seq, hidden, heads, mask)])
        inner = g.node("MatMul", [_layer_norm(g, x, hidden), g.weight("fc1", (hidden, 4 * hidden))])
        inner = _gelu(g, g.node("Add", [inner, g.weight("fc1_b", (4 * hidden,), 0.02)]))
        x = g.node("Add", [x, g.node("MatMul", [inner, g.weight("fc2", (4 * hidden, hidden))])])
    logits = g.node("MatMul", [_layer_norm(g, x, hidden), g.weight("head", (hidden, vocab))])
    inputs = [helper.make_tensor_value_info("input", TensorProto.INT64, [batch, seq])]
    return g.model(f"transformer{layers}x{hidden}", inputs, logits, [batch, seq, vocab])


MODELS: dict[str, Callable[..., onnx.ModelProto]] = {"mlp": mlp, "resnet": resnet, "transformer": transformer}


def save(model: onnx.ModelProto, path: str | os.PathLike) -> str:
    """Write ``model`` to ``path``; returns the path as a string."""
    onnx.save(model, os.fspath(path))
    return os.fspath(path)

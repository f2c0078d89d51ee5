"""Models with dynamic (``dim_param``) dimensions: the fixtures of issue 31 (dynamic shapes).

Each builder writes, with the onnx helper API, the graph pattern an exporter emits for a
model that is meant to run at any size, with the symbolic dimensions named in the graph's
inputs and outputs. They are not registered as ``zoo:`` models: the importer keeps their dims
symbolic and the reference interpreter runs them at any size, but the C backend does not
compile symbolic sizes yet.

- :func:`gpt_decoder`: a GPT-2 style decoder-only language model as ``torch.onnx.export``
  (through Hugging Face Optimum's ``decoder_with_past`` / merged decoder) emits it for
  generation with a KV cache: inputs ``input_ids`` [batch, seq], ``attention_mask``
  [batch, past + seq] and ``past_key_values.{i}.key`` / ``.value`` [batch, heads, past,
  head_dim]; outputs ``logits`` [batch, seq, vocab] and ``present.{i}.key`` / ``.value``
  [batch, heads, past + seq, head_dim]. Positions start at ``past`` (Shape, Gather, Add,
  Range, as GPT-2's ``arange(past_length, past_length + seq)``), the causal and padding
  masks are built at run time from the shapes into one additive bias of 0 / float32-min
  (as ``_prepare_4d_causal_attention_mask``), the past is concatenated along the sequence
  axis, heads are split by a Reshape whose shape is ``Shape(x)[:-1] ++ [heads, head_dim]``,
  GELU is the Erf form, and the LM head is a weight of its own (untied).
- :func:`bert_encoder`: a Hugging Face BERT encoder as exported by torch: inputs
  ``input_ids`` and ``attention_mask`` [batch, seq], output ``last_hidden_state``
  [batch, seq, hidden]. The position and token-type ids are slices of constant buffers
  (``Slice`` up to the run-time seq, then ``Expand`` to the input's shape), the padding
  mask becomes the additive bias ``(1 - mask[:, None, None, :]) * float32-min`` (Unsqueeze,
  Cast, Sub, Mul), heads are split by a Reshape to a shape gathered from ``Shape`` and
  merged by a constant ``[0, 0, -1]``, and the blocks are post-LayerNorm.
- :func:`cnn`: a small conv net on [batch, 3, 32, 32] with a dynamic batch (Conv with
  BatchNormalization and Conv with a fused bias, Relu, MaxPool, GlobalAveragePool,
  Flatten, Gemm), as exported from an ``nn.Module`` in eval mode without BN folding.
- :func:`mlp`: [rows, in_features] through Gemm / MatMul + Add and Relu to [rows, classes].

:func:`greedy_decode` drives :func:`gpt_decoder`'s graph through any ``run(feed) ->
outputs`` callable (onnxruntime now, a compiled library later): the prompt with an empty
past, then one token at a time with the presents fed back as the pasts.

Opset :data:`OPSET` (17, for LayerNormalization); weights are drawn from a seeded NumPy
generator, so (builder, parameters, seed) always gives the same bytes. Every builder
checks its model with ``onnx.checker.check_model(model, full_check=True)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from passinfra.frontend.zoo.onnx_models import OPSET, _conv_bn, _gelu, _GraphBuilder, _layer_norm
from passinfra.frontend.zoo.params import Param, ZooSpecError, checked_builder

__all__ = ["gpt_decoder", "bert_encoder", "cnn", "mlp", "greedy_decode", "OPSET", "MODELS"]

# The mask value Hugging Face models use (torch.finfo(float32).min): finite, so a fully
# masked row still gives a softmax without NaN, and score + MASK rounds to MASK.
_MASK = float(np.finfo(np.float32).min)
# Upper bounds, as in params.py: they turn a slip (an extra digit) into an error.
_MAX_SIZE = 2**20
_LAYERS = Param("layers", 1, 1024)
_SEED = Param("seed", 0)


def _size(name: str) -> Param:
    return Param(name, 1, _MAX_SIZE)


_GPT_PARAMS = (_LAYERS, _size("hidden"), _size("heads"), _size("vocab"), _SEED, _size("max_positions"))
_BERT_PARAMS = _GPT_PARAMS
_CNN_PARAMS = (_size("width"), _size("classes"), _SEED)
_MLP_PARAMS = (_size("in_features"), _size("hidden"), _LAYERS, _size("classes"), _SEED)


def _i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def _scalar(g: _GraphBuilder, prefix: str, value: float | int, dtype: type = np.float32) -> str:
    return g.constant(prefix, np.array(value, dtype))


def _dim(g: _GraphBuilder, value: str, axis: int) -> str:
    """Scalar int64 size of ``value``'s ``axis``: Shape then Gather with a scalar index,
    which is what torch writes for ``x.size(axis)``."""
    return g.node("Gather", [g.node("Shape", [value]), g.constant("axis", np.array(axis, np.int64))], axis=0)


def _unsqueeze(g: _GraphBuilder, value: str, *axes: int) -> str:
    return g.node("Unsqueeze", [value, g.constant("axes", _i64(*axes))])


def _emit(g: _GraphBuilder, name: str, op_type: str, inputs: list[str], **attrs: object) -> str:
    """A node whose output is the graph value ``name``: exporters name graph outputs after
    the tensor itself, with no Identity in between."""
    g.nodes.append(helper.make_node(op_type, inputs, [name], name=g.fresh(op_type), **attrs))
    return name


def _rename_last(g: _GraphBuilder, value: str, name: str) -> str:
    """Give the last node's output ``value`` (not yet consumed) the graph output's name."""
    assert g.nodes[-1].output[0] == value, "only the newest value can be renamed"
    g.nodes[-1].output[0] = name
    return name


def _finish(
    g: _GraphBuilder, name: str, inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto]
) -> onnx.ModelProto:
    graph = helper.make_graph(g.nodes, name, inputs, outputs, initializer=g.initializers)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="raypass.zoo"
    )
    model.ir_version = 8
    # full_check runs strict shape inference, so the symbolic dims must be consistent
    onnx.checker.check_model(model, full_check=True)
    return model


def _float_info(name: str, shape: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _linear(g: _GraphBuilder, x: str, fan_in: int, fan_out: int, prefix: str) -> str:
    """``nn.Linear`` as torch exports it for a 3-D input: MatMul by the transposed weight
    (folded into the initializer) then Add of the bias."""
    weight = g.weight(prefix, (fan_in, fan_out), 1.0 / math.sqrt(fan_in))
    return g.node("Add", [g.node("MatMul", [x, weight]), g.weight(prefix + "_b", (fan_out,), 0.02)])


def _check_heads(hidden: int, heads: int) -> None:
    if hidden % heads:
        raise ZooSpecError(f"hidden ({hidden}) must be a multiple of heads ({heads})")


def _gpt_block(
    g: _GraphBuilder, x: str, layer: int, hidden: int, heads: int, bias: str
) -> tuple[str, str, str]:
    """One pre-LayerNorm GPT-2 block with the layer's past; returns (x, present key, value)."""
    head_dim = hidden // heads
    h = _layer_norm(g, x, hidden)
    qkv = _linear(g, h, hidden, 3 * hidden, "c_attn")
    q, k, v = g.node(
        "Split", [qkv, g.constant("split", _i64(hidden, hidden, hidden))], num_outputs=3, axis=-1
    )
    # x.size()[:-1] + (heads, head_dim): the leading dims come from the run-time shape
    leading = g.node(
        "Slice", [g.node("Shape", [h]), g.constant("starts", _i64(0)), g.constant("ends", _i64(-1))]
    )
    heads_shape = g.node("Concat", [leading, g.constant("heads", _i64(heads, head_dim))], axis=0)

    def split_heads(t: str) -> str:
        return g.node("Transpose", [g.node("Reshape", [t, heads_shape])], perm=[0, 2, 1, 3])

    past_key, past_value = f"past_key_values.{layer}.key", f"past_key_values.{layer}.value"
    key = _emit(g, f"present.{layer}.key", "Concat", [past_key, split_heads(k)], axis=-2)
    value = _emit(g, f"present.{layer}.value", "Concat", [past_value, split_heads(v)], axis=-2)
    scores = g.node("MatMul", [split_heads(q), g.node("Transpose", [key], perm=[0, 1, 3, 2])])
    scores = g.node("Div", [scores, _scalar(g, "scale", math.sqrt(head_dim))])
    probs = g.node("Softmax", [g.node("Add", [scores, bias])], axis=-1)
    context = g.node("Transpose", [g.node("MatMul", [probs, value])], perm=[0, 2, 1, 3])
    # context.size()[:-2] + (hidden,)
    leading = g.node(
        "Slice", [g.node("Shape", [context]), g.constant("starts", _i64(0)), g.constant("ends", _i64(-2))]
    )
    merged = g.node(
        "Reshape", [context, g.node("Concat", [leading, g.constant("hidden", _i64(hidden))], axis=0)]
    )
    x = g.node("Add", [x, _linear(g, merged, hidden, hidden, "c_proj")])
    inner = _gelu(g, _linear(g, _layer_norm(g, x, hidden), hidden, 4 * hidden, "c_fc"))
    x = g.node("Add", [x, _linear(g, inner, 4 * hidden, hidden, "mlp_proj")])
    return x, key, value


@checked_builder(_GPT_PARAMS, ZooSpecError)
def gpt_decoder(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    vocab: int = 97,
    seed: int = 0,
    max_positions: int = 1024,
) -> onnx.ModelProto:
    """A GPT-2 style decoder with a KV cache (see the module docstring for the pattern).

    Inputs: ``input_ids`` int64 [batch, seq], ``attention_mask`` int64 [batch, past + seq]
    (1 = attend, 0 = padding), ``past_key_values.{i}.key`` / ``.value`` float32 [batch,
    heads, past, head_dim]. Outputs, in this order: ``logits`` [batch, seq, vocab], then
    ``present.{i}.key`` / ``.value`` [batch, heads, past + seq, head_dim] per layer. The
    first call of a generation passes pasts with ``past = 0``; past + seq must not exceed
    ``max_positions``.
    """
    _check_heads(hidden, heads)
    head_dim = hidden // heads
    g = _GraphBuilder(seed)
    wte = g.weight("wte", (vocab, hidden), 0.3)
    wpe = g.weight("wpe", (max_positions, hidden), 0.1)
    seq = _dim(g, "input_ids", 1)
    past = _dim(g, "past_key_values.0.key", 2)
    total = g.node("Add", [past, seq])
    one = _scalar(g, "one", 1, np.int64)
    positions = g.node("Range", [past, total, one])  # arange(past, past + seq)
    x = g.node(
        "Add",
        [
            g.node("Gather", [wte, "input_ids"], axis=0),
            g.node("Gather", [wpe, _unsqueeze(g, positions, 0)], axis=0),
        ],
    )
    # query i (at position past + i) sees key j iff j <= past + i, and key j is not padding
    key_positions = g.node("Range", [_scalar(g, "zero", 0, np.int64), total, one])
    causal = g.node("GreaterOrEqual", [_unsqueeze(g, positions, 1), _unsqueeze(g, key_positions, 0)])
    not_padding = g.node("Cast", [_unsqueeze(g, "attention_mask", 1, 2)], to=TensorProto.BOOL)
    bias = g.node(
        "Where",
        [g.node("And", [causal, not_padding]), _scalar(g, "attend", 0.0), _scalar(g, "masked", _MASK)],
    )  # [batch, 1, seq, past + seq]
    presents: list[str] = []
    for layer in range(layers):
        x, key, value = _gpt_block(g, x, layer, hidden, heads, bias)
        presents += [key, value]
    # an untied head (as GPT-NeoX / Pythia): with random weights a tied head mostly echoes
    # the input token, and a decode that repeats one token would hide cache bugs; the 0.3
    # scale spreads the logits (std ~2), so argmax picks lie far from ties rounding could flip
    lm_head = g.weight("lm_head", (hidden, vocab), 0.3)
    _emit(g, "logits", "MatMul", [_layer_norm(g, x, hidden), lm_head])

    cache = ["batch", heads, "past", head_dim]
    present = ["batch", heads, "past + seq", head_dim]
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "past + seq"]),
    ]
    outputs = [_float_info("logits", ["batch", "seq", vocab])]
    for layer in range(layers):
        for kind in ("key", "value"):
            inputs.append(_float_info(f"past_key_values.{layer}.{kind}", cache))
            outputs.append(_float_info(f"present.{layer}.{kind}", present))
    assert [o.name for o in outputs[1:]] == presents
    return _finish(g, f"gpt_decoder{layers}x{hidden}", inputs, outputs)


def _bert_attention(g: _GraphBuilder, x: str, hidden: int, heads: int, bias: str) -> str:
    head_dim = hidden // heads
    # (x.size(0), x.size(1), heads, head_dim), each size gathered from the run-time shape
    shape = g.node(
        "Concat",
        [
            _unsqueeze(g, _dim(g, x, 0), 0),
            _unsqueeze(g, _dim(g, x, 1), 0),
            g.constant("heads", _i64(heads, head_dim)),
        ],
        axis=0,
    )

    def split_heads(prefix: str, perm: list[int]) -> str:
        return g.node(
            "Transpose", [g.node("Reshape", [_linear(g, x, hidden, hidden, prefix), shape])], perm=perm
        )

    q = split_heads("query", [0, 2, 1, 3])
    k = split_heads("key", [0, 2, 3, 1])
    v = split_heads("value", [0, 2, 1, 3])
    scores = g.node("Div", [g.node("MatMul", [q, k]), _scalar(g, "scale", math.sqrt(head_dim))])
    probs = g.node("Softmax", [g.node("Add", [scores, bias])], axis=-1)
    context = g.node("Transpose", [g.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    merged = g.node("Reshape", [context, g.constant("merged_shape", _i64(0, 0, -1))])
    return _linear(g, merged, hidden, hidden, "attn_out")


@checked_builder(_BERT_PARAMS, ZooSpecError)
def bert_encoder(
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    vocab: int = 97,
    seed: int = 0,
    max_positions: int = 512,
) -> onnx.ModelProto:
    """A BERT encoder (see the module docstring for the pattern).

    Inputs: ``input_ids`` and ``attention_mask`` (1 = token, 0 = padding), int64 [batch,
    seq], seq <= ``max_positions``. Output: ``last_hidden_state`` float32 [batch, seq, hidden].
    """
    _check_heads(hidden, heads)
    g = _GraphBuilder(seed)
    seq = _unsqueeze(g, _dim(g, "input_ids", 1), 0)
    start, axis = g.constant("starts", _i64(0)), g.constant("axes", _i64(1))
    # the registered buffers position_ids = arange(max)[None] and token_type_ids = zeros,
    # sliced to the run-time length; the token types are then expanded over the batch
    position_ids = g.node(
        "Slice", [g.constant("position_ids", np.arange(max_positions)[None]), start, seq, axis]
    )
    token_types = g.node(
        "Slice", [g.constant("token_type_ids", np.zeros((1, max_positions), np.int64)), start, seq, axis]
    )
    token_types = g.node("Expand", [token_types, g.node("Shape", ["input_ids"])])
    embedded = [
        g.node("Gather", [g.weight("word", (vocab, hidden), 0.5), "input_ids"], axis=0),
        g.node("Gather", [g.weight("token_type", (2, hidden), 0.1), token_types], axis=0),
        g.node("Gather", [g.weight("position", (max_positions, hidden), 0.1), position_ids], axis=0),
    ]
    x = _layer_norm(g, g.node("Add", [g.node("Add", embedded[:2]), embedded[2]]), hidden)
    mask = g.node("Cast", [_unsqueeze(g, "attention_mask", 1, 2)], to=TensorProto.FLOAT)
    bias = g.node("Mul", [g.node("Sub", [_scalar(g, "one", 1.0), mask]), _scalar(g, "masked", _MASK)])
    for _ in range(layers):
        x = _layer_norm(g, g.node("Add", [_bert_attention(g, x, hidden, heads, bias), x]), hidden)
        inner = _gelu(g, _linear(g, x, hidden, 4 * hidden, "intermediate"))
        x = _layer_norm(g, g.node("Add", [_linear(g, inner, 4 * hidden, hidden, "output"), x]), hidden)
    _rename_last(g, x, "last_hidden_state")
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])
        for name in ("input_ids", "attention_mask")
    ]
    outputs = [_float_info("last_hidden_state", ["batch", "seq", hidden])]
    return _finish(g, f"bert_encoder{layers}x{hidden}", inputs, outputs)


@checked_builder(_CNN_PARAMS, ZooSpecError)
def cnn(width: int = 8, classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """Input ``input`` float32 [batch, 3, 32, 32] -> output ``output`` [batch, classes]:
    Conv+BN+Relu, MaxPool, Conv(bias)+Relu, MaxPool, Conv+BN+Relu, GlobalAveragePool,
    Flatten, Gemm."""
    g = _GraphBuilder(seed)
    x = _conv_bn(g, "input", 3, width, 1, relu=True)
    x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    # a conv whose BatchNormalization the exporter folded into its bias
    conv = [x, g.weight("conv", (2 * width, width, 3, 3)), g.weight("conv_b", (2 * width,), 0.1)]
    x = g.node("Relu", [g.node("Conv", conv, kernel_shape=[3, 3], pads=[1, 1, 1, 1])])
    x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = _conv_bn(g, x, 2 * width, 2 * width, 2, relu=True)
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    fc = [x, g.weight("fc", (classes, 2 * width)), g.weight("fc_b", (classes,), 0.1)]
    _emit(g, "output", "Gemm", fc, transB=1)
    inputs = [_float_info("input", ["batch", 3, 32, 32])]
    return _finish(g, "cnn", inputs, [_float_info("output", ["batch", classes])])


@checked_builder(_MLP_PARAMS, ZooSpecError)
def mlp(
    in_features: int = 64, hidden: int = 64, layers: int = 2, classes: int = 10, seed: int = 0
) -> onnx.ModelProto:
    """Input ``input`` float32 [rows, in_features] -> output ``output`` [rows, classes]:
    ``layers`` hidden layers with Relu, alternately Gemm (as torch exports ``nn.Linear`` on
    a matrix) and MatMul + Add (as it exports it on other ranks), then a MatMul + Add."""
    g = _GraphBuilder(seed)
    x, width = "input", in_features
    for layer in range(layers):
        if layer % 2 == 0:
            x = g.node("Gemm", [x, g.weight("w", (hidden, width)), g.weight("b", (hidden,), 0.1)], transB=1)
        else:
            x = _linear(g, x, width, hidden, "w")
        x, width = g.node("Relu", [x]), hidden
    weight = g.weight("w", (width, classes), 1.0 / math.sqrt(width))
    _emit(g, "output", "Add", [g.node("MatMul", [x, weight]), g.weight("b", (classes,), 0.1)])
    inputs = [_float_info("input", ["rows", in_features])]
    return _finish(g, "mlp", inputs, [_float_info("output", ["rows", classes])])


MODELS: dict[str, Callable[..., onnx.ModelProto]] = {
    "gpt_decoder": gpt_decoder,
    "bert_encoder": bert_encoder,
    "cnn": cnn,
    "mlp": mlp,
}


def _cache_inputs(model: onnx.ModelProto) -> list[tuple[str, int, int]]:
    """(name, heads, head_dim) of each ``past_key_values`` input, read from its static dims."""
    cache = []
    for value in model.graph.input:
        if value.name.startswith("past_key_values."):
            dims = value.type.tensor_type.shape.dim
            cache.append((value.name, dims[1].dim_value, dims[3].dim_value))
    return cache


def greedy_decode(
    run: Callable[[dict[str, np.ndarray]], Sequence[np.ndarray]],
    model: onnx.ModelProto,
    prompt_ids: np.ndarray,
    steps: int = 10,
) -> np.ndarray:
    """Greedy generation through a :func:`gpt_decoder` graph with its KV cache.

    ``run`` takes a feed dict (the graph's input names) and returns the outputs in graph
    order; ``model`` supplies those names and the cache's head sizes. The prompt (int64
    [batch, prompt_len], no padding) is fed with an empty past, then each argmax token
    alone, with the presents as the next pasts. Returns the ``steps`` new tokens, int64
    [batch, steps].
    """
    prompt_ids = np.asarray(prompt_ids, np.int64)
    batch = prompt_ids.shape[0]
    output_names = [value.name for value in model.graph.output]
    pasts = {
        name: np.zeros((batch, heads, 0, head_dim), np.float32)
        for name, heads, head_dim in _cache_inputs(model)
    }
    ids, length = prompt_ids, 0
    tokens: list[np.ndarray] = []
    for _ in range(steps):
        length += ids.shape[1]
        feed = {"input_ids": ids, "attention_mask": np.ones((batch, length), np.int64), **pasts}
        outputs = dict(zip(output_names, run(feed)))
        ids = np.argmax(outputs["logits"][:, -1, :], axis=-1).astype(np.int64)[:, None]
        tokens.append(ids[:, 0])
        pasts = {name: outputs[name.replace("past_key_values.", "present.")] for name in pasts}
    return np.stack(tokens, axis=1)

"""ONNX RNN, GRU and LSTM: the unrolled converters against onnxruntime over the attribute
combinations the spec lists (directions, layouts, initial states, sequence lengths,
biases, peepholes, every activation with alpha/beta, clip, linear_before_reset,
input_forget, output subsets, weights known or fed at run time, opsets 7/14/22),
interpreted, and a few compiled into the C library, with a small CRNN (convolution, then
a bidirectional LSTM and a bidirectional GRU) built with the onnx helper API.

Weights are drawn small (scale 0.4): with standard-normal weights a GRU of hidden 32 is
chaotic, and any two correct implementations (onnxruntime against a float64 NumPy
reference too) drift apart over a long sequence; small weights keep the recurrence
contracting, so the comparison measures the converters, not the chaos.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import passinfra
from passinfra import evaluate
from passinfra.frontend import OnnxImportError, from_onnx
from passinfra.frontend.onnx_ops import recurrent
from passinfra.ir.expr import Constant
from passinfra.ir.functor import iter_post_order
from passinfra.transform import PassContext, Sequential, get_pass

ort = pytest.importorskip("onnxruntime")

RTOL, ATOL = 1e-4, 1e-5
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
OUTPUT_NAMES = {"RNN": ("Y", "Y_h"), "GRU": ("Y", "Y_h"), "LSTM": ("Y", "Y_h", "Y_c")}
DIRECTIONS = ("forward", "reverse", "bidirectional")
# the node's inputs in schema order; X is always a graph input
INPUT_ORDER = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")


@dataclass(frozen=True)
class Case:
    """One RNN/GRU/LSTM node and its data."""

    op_type: str
    seq: int = 5
    batch: int = 3
    input_size: int = 4
    hidden: int = 3
    direction: str = "forward"
    layout: int = 0
    bias: bool = True
    seq_lens: tuple[int, ...] | None = None
    initial_h: bool = False
    initial_c: bool = False
    peepholes: bool = False
    outputs: tuple[str, ...] | None = None  # a subset of the node's outputs; None: all
    runtime: tuple[str, ...] = ()  # inputs fed as graph inputs instead of initializers
    attrs: dict[str, Any] = field(default_factory=dict)
    opset: int = 14
    dtype: Any = np.float32
    weight_scale: float = 0.4
    seed: int = 0

    @property
    def directions(self) -> int:
        return 2 if self.direction == "bidirectional" else 1


def build(case: Case) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The one-node model of ``case`` and its feeds (graph inputs only)."""
    rng = np.random.default_rng(case.seed)
    d, g, h = case.directions, GATES[case.op_type], case.hidden
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(case.dtype))

    def normal(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(case.dtype)

    x_shape = (
        (case.batch, case.seq, case.input_size) if case.layout else (case.seq, case.batch, case.input_size)
    )
    state_shape = (case.batch, d, h) if case.layout else (d, case.batch, h)
    values: dict[str, np.ndarray] = {
        "X": normal(*x_shape),
        "W": normal(d, g * h, case.input_size, scale=case.weight_scale),
        "R": normal(d, g * h, h, scale=case.weight_scale),
    }
    if case.bias:
        values["B"] = normal(d, 2 * g * h, scale=case.weight_scale)
    if case.seq_lens is not None:
        values["sequence_lens"] = np.asarray(case.seq_lens, dtype=np.int32)
    if case.initial_h:
        values["initial_h"] = normal(*state_shape, scale=0.5)
    if case.initial_c:
        values["initial_c"] = normal(*state_shape, scale=0.5)
    if case.peepholes:
        values["P"] = normal(d, 3 * h, scale=case.weight_scale)
    used = [name if name in values else "" for name in INPUT_ORDER]
    while not used[-1]:
        used.pop()
    wanted = case.outputs or OUTPUT_NAMES[case.op_type]
    node_outputs = [name if name in wanted else "" for name in OUTPUT_NAMES[case.op_type]]
    while not node_outputs[-1]:
        node_outputs.pop()
    attrs = {"hidden_size": h, "direction": case.direction, **case.attrs}
    if case.layout:
        attrs["layout"] = case.layout
    node = helper.make_node(case.op_type, used, node_outputs, **attrs)
    feeds = {n: v for n, v in values.items() if n == "X" or n in case.runtime}
    initializers = [numpy_helper.from_array(v, n) for n, v in values.items() if n not in feeds]
    graph = helper.make_graph(
        [node],
        "recurrent",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in feeds.items()
        ],
        [helper.make_tensor_value_info(n, elem, None) for n in node_outputs if n],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = 7 if case.opset < 15 else 10
    return model, feeds


def onnxruntime_outputs(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """onnxruntime's outputs. It has no batch-first (layout 1) kernels, so a one-node model
    with layout 1 runs as its layout-0 twin: inputs and outputs transposed around it."""
    node = model.graph.node[0]
    if not any(a.name == "layout" and a.i == 1 for a in node.attribute):
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        return session.run(None, feeds)
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    twin_node = twin.graph.node[0]
    kept = [a for a in twin_node.attribute if a.name != "layout"]
    del twin_node.attribute[:]
    twin_node.attribute.extend(kept)
    # X (batch, seq, input) and the initial states (batch, directions, hidden): swap axes 0, 1
    swapped = {name for name in twin_node.input[:1]} | {n for n in twin_node.input[5:7] if n}
    twin_feeds = {n: np.ascontiguousarray(v.swapaxes(0, 1)) if n in swapped else v for n, v in feeds.items()}
    for value_info in twin.graph.input:
        if value_info.name in swapped:
            dims = value_info.type.tensor_type.shape.dim
            dims[0].dim_value, dims[1].dim_value = dims[1].dim_value, dims[0].dim_value
    for init in twin.graph.initializer:
        if init.name in swapped:
            init.CopyFrom(
                numpy_helper.from_array(numpy_helper.to_array(init).swapaxes(0, 1).copy(), init.name)
            )
    session = ort.InferenceSession(twin.SerializeToString(), providers=["CPUExecutionProvider"])
    outputs = session.run(None, twin_feeds)
    names = [o.name for o in twin.graph.output]
    # Y (seq, directions, batch, hidden) -> (batch, seq, directions, hidden); Y_h, Y_c swap 0, 1
    return [
        np.ascontiguousarray(out.transpose(2, 0, 1, 3) if name == twin_node.output[0] else out.swapaxes(0, 1))
        for name, out in zip(names, outputs)
    ]


def as_list(value: Any) -> list[np.ndarray]:
    return list(value) if isinstance(value, tuple) else [value]


def interpreted(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    mod = from_onnx(model)
    return as_list(evaluate(mod, *(feeds[p.name_hint] for p in mod["main"].params)))


def assert_outputs_match(got: list[np.ndarray], expected: list[np.ndarray], rtol=RTOL, atol=ATOL) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


def check(case: Case) -> list[np.ndarray]:
    """The interpreted outputs of ``case``, asserted equal to onnxruntime's."""
    model, feeds = build(case)
    expected = onnxruntime_outputs(model, feeds)
    got = interpreted(model, feeds)
    assert_outputs_match(got, expected)
    return got


# --------------------------------------------------------------------------- directions, layouts, inputs


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op_type", list(GATES))
def test_every_direction_and_layout_with_all_optional_inputs(op_type, direction, layout):
    # entries shorter than the sequence (one of them 1 step), and one full one
    case = Case(
        op_type,
        direction=direction,
        layout=layout,
        seq_lens=(5, 2, 1),
        initial_h=True,
        initial_c=op_type == "LSTM",
        peepholes=op_type == "LSTM",
    )
    y = check(case)[0]
    # past its length an entry's outputs are zero, in both directions
    seq_axis, batch_axis = (1, 0) if layout else (0, 2)
    tail = np.take(np.take(y, [1], axis=batch_axis), range(2, 5), axis=seq_axis)
    assert not tail.any()


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op_type", list(GATES))
def test_without_any_optional_input(op_type, direction):
    check(Case(op_type, direction=direction, bias=False))


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("op_type", list(GATES))
def test_sequence_lens_fed_at_run_time(op_type, direction):
    # onnxruntime's RNN reads before its output for a length-0 entry, so only GRU and
    # LSTM get one (their final states are then zero)
    lens = (4, 0, 2, 5) if op_type != "RNN" else (4, 1, 2, 5)
    case = Case(
        op_type, batch=4, direction=direction, seq_lens=lens, runtime=("sequence_lens",), initial_h=True
    )
    check(case)


def test_sequence_lens_all_full_is_the_same_as_none():
    full = Case("LSTM", direction="bidirectional", seq_lens=(5, 5, 5))
    assert_outputs_match(check(full), interpreted(*build(replace(full, seq_lens=None))), rtol=0, atol=0)


@pytest.mark.parametrize("op_type", list(GATES))
def test_weights_states_and_lengths_all_fed_at_run_time(op_type):
    case = Case(
        op_type,
        direction="bidirectional",
        seq_lens=(3, 5, 1),
        initial_h=True,
        initial_c=op_type == "LSTM",
        peepholes=op_type == "LSTM",
        runtime=INPUT_ORDER[1:],
    )
    check(case)


@pytest.mark.parametrize("opset", [7, 14, 22])
@pytest.mark.parametrize("op_type", list(GATES))
def test_opset_versions(op_type, opset):
    check(Case(op_type, direction="bidirectional", seq_lens=(2, 5, 3), opset=opset))


@pytest.mark.parametrize("op_type", list(GATES))
def test_layout_1_with_initial_states_fed_at_run_time(op_type):
    case = Case(
        op_type,
        layout=1,
        direction="bidirectional",
        initial_h=True,
        initial_c=op_type == "LSTM",
        runtime=("initial_h", "initial_c"),
    )
    check(case)


# --------------------------------------------------------------------------- outputs


def _subsets(names: tuple[str, ...]) -> list[tuple[str, ...]]:
    return [tuple(n for i, n in enumerate(names) if mask >> i & 1) for mask in range(1, 2 ** len(names))]


@pytest.mark.parametrize(
    "op_type, outputs",
    [(op_type, subset) for op_type, names in OUTPUT_NAMES.items() for subset in _subsets(names)],
)
def test_every_subset_of_the_outputs(op_type, outputs):
    case = Case(op_type, direction="bidirectional", layout=1, seq_lens=(4, 5, 2), outputs=outputs)
    got = check(case)
    assert len(got) == len(outputs)


# --------------------------------------------------------------------------- activations

# every activation the spec lists, with alpha/beta for those that take them
ACTIVATIONS = (
    "Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu",
    "ScaledTanh", "HardSigmoid", "Elu", "Softsign", "Softplus",
)  # fmt: skip
ALPHAS = [0.7, 0.3, 0.9, 0.45, 0.6, 0.2]
BETAS = [0.25, 0.8, 0.4, 0.6, 0.3, 0.5]


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_rnn_activation(activation):
    # onnxruntime's RNN reads alpha/beta by direction: one value per direction here
    attrs = {
        "activations": [activation, activation],
        "activation_alpha": ALPHAS[:2],
        "activation_beta": BETAS[:2],
    }
    check(Case("RNN", direction="bidirectional", seq_lens=(5, 3, 2), attrs=attrs))


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_gru_activation_in_each_slot(activation):
    # forward: the gate activation f replaced; reverse: the candidate activation g
    attrs = {
        "activations": [activation, "Tanh", "Sigmoid", activation],
        "activation_alpha": ALPHAS,
        "activation_beta": BETAS,
    }
    check(Case("GRU", direction="bidirectional", seq_lens=(5, 3, 2), attrs=attrs))


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_lstm_activation_in_each_slot(activation):
    # forward: f and h replaced; reverse: g; the values are consumed in order by the
    # activations that take them
    attrs = {
        "activations": [activation, "Tanh", activation, "Sigmoid", activation, "Tanh"],
        "activation_alpha": ALPHAS,
        "activation_beta": BETAS,
    }
    check(Case("LSTM", direction="bidirectional", seq_lens=(5, 3, 2), peepholes=True, attrs=attrs))


@pytest.mark.parametrize("op_type", ["GRU", "LSTM"])
def test_alpha_and_beta_defaults_and_lower_case_names(op_type):
    # LeakyRelu 0.01, HardSigmoid 0.2/0.5, Elu 1.0 when no values are given; names in any case
    names = {"GRU": ["hardsigmoid", "leakyrelu"], "LSTM": ["HARDSIGMOID", "elu", "LeakyRelu"]}[op_type]
    check(Case(op_type, attrs={"activations": names}))


def test_rnn_activation_defaults_follow_the_spec():
    # onnxruntime's RNN defaults every alpha to 0.0; the spec says "the same as of the
    # corresponding ONNX operators": LeakyRelu's alpha is 0.01. Checked against NumPy.
    case = Case("RNN", bias=False, attrs={"activations": ["LeakyRelu"]})
    model, feeds = build(case)
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    h = np.zeros((case.batch, case.hidden), np.float32)
    ys = []
    for x in feeds["X"]:
        pre = x @ weights["W"][0].T + h @ weights["R"][0].T
        h = np.where(pre < 0, 0.01 * pre, pre).astype(np.float32)
        ys.append(h)
    y, y_h = interpreted(model, feeds)
    np.testing.assert_allclose(y[:, 0], np.stack(ys), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y_h[0], h, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- clip and the cell options


@pytest.mark.parametrize("op_type", list(GATES))
def test_clip_bounds_every_gate_input(op_type):
    # large weights, so that the clip changes the result
    case = Case(op_type, direction="bidirectional", seq_lens=(5, 4, 2), weight_scale=2.0, attrs={"clip": 0.5})
    clipped = check(case)
    unclipped = interpreted(*build(replace(case, attrs={})))
    assert not np.allclose(clipped[0], unclipped[0], atol=1e-3)


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_linear_before_reset(linear_before_reset, direction):
    case = Case(
        "GRU",
        direction=direction,
        initial_h=True,
        seq_lens=(5, 2, 3),
        attrs={"linear_before_reset": linear_before_reset},
    )
    check(case)


@pytest.mark.parametrize("peepholes", [False, True])
@pytest.mark.parametrize("input_forget", [0, 1])
def test_lstm_input_forget_and_peepholes(input_forget, peepholes):
    case = Case(
        "LSTM",
        direction="bidirectional",
        initial_h=True,
        initial_c=True,
        peepholes=peepholes,
        seq_lens=(5, 2, 3),
        attrs={"input_forget": input_forget},
    )
    check(case)


def test_hidden_size_is_read_from_r_when_the_attribute_is_absent():
    # onnxruntime insists on the attribute: it runs the model that has it
    model, feeds = build(Case("LSTM", direction="bidirectional"))
    expected = onnxruntime_outputs(model, feeds)
    node = model.graph.node[0]
    del node.attribute[[a.name for a in node.attribute].index("hidden_size")]
    assert_outputs_match(interpreted(model, feeds), expected)


@pytest.mark.parametrize("op_type", list(GATES))
def test_float64_matches_the_onnx_reference(op_type):
    # onnxruntime has no double RNN/GRU/LSTM kernels; the ONNX reference implementation does
    from onnx.reference import ReferenceEvaluator

    model, feeds = build(Case(op_type, dtype=np.float64, initial_h=True))
    expected = ReferenceEvaluator(model).run(None, feeds)
    assert_outputs_match(interpreted(model, feeds), expected, rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------- errors


def _import_error(case: Case, edit=None) -> str:
    model, _ = build(case)
    if edit is not None:
        edit(model.graph.node[0])
    with pytest.raises(OnnxImportError) as info:
        from_onnx(model)
    return str(info.value)


def _set_attr(node: onnx.NodeProto, name: str, value: Any) -> None:
    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute(name, value)])


def test_unknown_activation_is_named():
    message = _import_error(Case("GRU", attrs={"activations": ["Sigmoid", "Swish"]}))
    assert "GRU node" in message and "unknown activation 'Swish'" in message


def test_wrong_number_of_activations():
    message = _import_error(
        Case("LSTM", direction="bidirectional", attrs={"activations": ["Sigmoid", "Tanh", "Tanh"]})
    )
    assert "expects 3 activation(s) per direction (6 for 2 direction(s)), got 3" in message


def test_too_long_a_sequence_is_refused_with_the_limit():
    steps = recurrent.MAX_UNROLLED_STEPS // 2 + 1
    message = _import_error(
        Case("RNN", seq=steps, batch=1, input_size=1, hidden=1, direction="bidirectional")
    )
    assert f"{2 * steps} steps, above the limit of {recurrent.MAX_UNROLLED_STEPS}" in message


def test_known_sequence_lens_out_of_range():
    message = _import_error(Case("RNN", seq_lens=(5, 6, 1)))
    assert "sequence_lens [5, 6, 1] must lie in [0, 5]" in message


def test_weights_of_the_wrong_shape_are_named():
    message = _import_error(Case("LSTM"), lambda node: _set_attr(node, "hidden_size", 4))
    assert "input W must have shape (1, 16, 4), got (1, 12, 4)" in message


def test_unknown_direction():
    message = _import_error(Case("RNN"), lambda node: _set_attr(node, "direction", "sideways"))
    assert "direction must be one of" in message and "'sideways'" in message


# --------------------------------------------------------------------------- IR size


def _fused_functions(model: onnx.ModelProto) -> int:
    passes = ("InferType", "FoldConstant", "EliminateCommonSubexpr", "DeadCodeElimination", "FuseOps")
    with PassContext(opt_level=3):
        return len(Sequential([get_pass(name) for name in passes], opt_level=0)(from_onnx(model)).functions)


@pytest.mark.parametrize("op_type", list(GATES))
def test_step_kernels_are_shared_so_functions_do_not_grow_with_the_sequence(op_type):
    # the per-step index reaches each step's kernel as an argument, and Y is joined by a
    # tree of 16-way concatenations: one function per kind of kernel, whatever the length
    # (40 and 200 steps both end in a group of 8)
    def count(seq: int) -> int:
        case = Case(op_type, seq=seq, batch=4, direction="bidirectional", runtime=("sequence_lens",))
        return _fused_functions(build(replace(case, seq_lens=(seq, 1, 2, seq)))[0])

    assert count(40) == count(200)


@pytest.mark.parametrize("op_type", list(GATES))
def test_each_weight_is_one_constant_whatever_the_sequence_length(op_type):
    # every step reads the same weight expressions: the library holds each weight once
    def weight_bytes(seq: int) -> int:
        case = Case(op_type, seq=seq, direction="bidirectional", initial_h=True, peepholes=op_type == "LSTM")
        body = from_onnx(build(case)[0])["main"].body
        constants = [n for n in iter_post_order(body) if isinstance(n, Constant) and n.data.dtype.kind == "f"]
        return sum(c.data.nbytes for c in constants if c.data.size > 1)

    assert weight_bytes(4) == weight_bytes(40)


def test_long_sequence_through_two_levels_of_the_concatenation_tree():
    check(Case("RNN", seq=300, direction="bidirectional", seq_lens=(300, 17, 256)))


# --------------------------------------------------------------------------- compiled


@pytest.fixture(scope="module")
def codegen_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("codegen_cache_recurrent"))


def compile_model(model: onnx.ModelProto, cache_dir: str):
    """The model's compiled library, and the order of its inputs."""
    mod = from_onnx(model)
    with PassContext(config={"codegen.cache_dir": cache_dir}):
        lib = passinfra.build(mod)
    names = [p.name_hint for p in mod["main"].params]
    return lambda feeds: as_list(lib(*(feeds[n] for n in names)))


COMPILED_CASES = {
    "lstm-bidirectional-peepholes-clip-lengths": Case(
        "LSTM",
        seq=6,
        batch=3,
        direction="bidirectional",
        seq_lens=(6, 0, 3),
        initial_h=True,
        initial_c=True,
        peepholes=True,
        runtime=("sequence_lens", "initial_h"),
        attrs={"clip": 0.8},
    ),
    "gru-reverse-layout1-linear-before-reset-40-steps": Case(
        "GRU", seq=40, direction="reverse", layout=1, seq_lens=(2, 40, 23), attrs={"linear_before_reset": 1}
    ),
    "rnn-bidirectional-activations": Case(
        "RNN",
        seq=6,
        direction="bidirectional",
        initial_h=True,
        attrs={
            "activations": ["Relu", "ScaledTanh"],
            "activation_alpha": [0.0, 0.9],
            "activation_beta": [0.0, 1.5],
        },
    ),
}


@pytest.mark.parametrize("name", list(COMPILED_CASES))
def test_compiled_matches_onnxruntime(name, codegen_cache_dir):
    model, feeds = build(COMPILED_CASES[name])
    run = compile_model(model, codegen_cache_dir)
    assert_outputs_match(run(feeds), onnxruntime_outputs(model, feeds))


def crnn_model(batch: int = 2, height: int = 8, width: int = 16, classes: int = 7) -> onnx.ModelProto:
    """A small CRNN: conv + relu + max pool over an image, its columns as a sequence, a
    bidirectional LSTM, a bidirectional GRU, and per-column class log-probabilities."""
    rng = np.random.default_rng(7)

    def weight(name: str, *shape: int, scale: float = 0.4) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    channels, hidden = 4, 8
    features = channels * (height // 2)  # per column, after the 2x2 pool
    steps = width // 2
    nodes = [
        helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("MaxPool", ["relu"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
        # (N, C, H, W) -> (W, N, C, H) -> (W, N, C*H): the columns are the sequence
        helper.make_node("Transpose", ["pool"], ["columns"], perm=[3, 0, 1, 2]),
        helper.make_node("Reshape", ["columns", "seq_shape"], ["sequence"]),
        helper.make_node(
            "LSTM", ["sequence", "lstm_w", "lstm_r", "lstm_b"], ["lstm_y", "lstm_h"],
            hidden_size=hidden, direction="bidirectional",
        ),
        # (W, 2, N, hidden) -> (W, N, 2, hidden) -> (W, N, 2*hidden): both directions' features
        helper.make_node("Transpose", ["lstm_y"], ["lstm_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["lstm_t", "gru_in_shape"], ["gru_in"]),
        helper.make_node(
            "GRU", ["gru_in", "gru_w", "gru_r", "gru_b"], ["gru_y"],
            hidden_size=hidden, direction="bidirectional", linear_before_reset=1,
        ),
        # (W, 2, N, hidden) -> (N, W, 2, hidden) -> (N, W, 2*hidden): per image, per column
        helper.make_node("Transpose", ["gru_y"], ["gru_t"], perm=[2, 0, 1, 3]),
        helper.make_node("Reshape", ["gru_t", "head_shape"], ["gru_flat"]),
        helper.make_node("MatMul", ["gru_flat", "head_w"], ["logits"]),
        helper.make_node("LogSoftmax", ["logits"], ["log_probs"], axis=-1),
    ]  # fmt: skip
    initializers = [
        weight("conv_w", channels, 1, 3, 3),
        weight("conv_b", channels),
        numpy_helper.from_array(np.array([steps, batch, features], np.int64), "seq_shape"),
        weight("lstm_w", 2, 4 * hidden, features),
        weight("lstm_r", 2, 4 * hidden, hidden),
        weight("lstm_b", 2, 8 * hidden),
        numpy_helper.from_array(np.array([steps, batch, 2 * hidden], np.int64), "gru_in_shape"),
        numpy_helper.from_array(np.array([batch, steps, 2 * hidden], np.int64), "head_shape"),
        weight("gru_w", 2, 3 * hidden, 2 * hidden),
        weight("gru_r", 2, 3 * hidden, hidden),
        weight("gru_b", 2, 6 * hidden),
        weight("head_w", 2 * hidden, classes),
    ]
    graph = helper.make_graph(
        nodes,
        "crnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 1, height, width])],
        [
            helper.make_tensor_value_info("log_probs", TensorProto.FLOAT, [batch, steps, classes]),
            helper.make_tensor_value_info("lstm_h", TensorProto.FLOAT, [2, batch, hidden]),
        ],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_crnn_interpreted_and_compiled_match_onnxruntime(codegen_cache_dir):
    model = crnn_model()
    run = compile_model(model, codegen_cache_dir)
    for seed in (0, 1):  # the second input checks nothing is left over from the first call
        feeds = {"image": np.random.default_rng(seed).standard_normal((2, 1, 8, 16)).astype(np.float32)}
        expected = onnxruntime_outputs(model, feeds)
        assert_outputs_match(interpreted(model, feeds), expected)
        assert_outputs_match(run(feeds), expected)

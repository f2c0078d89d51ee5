"""from_onnx: per-converter checks against onnxruntime over opset variants, static shapes,
shape-subgraph folding, errors, and the light models with random weights."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from passinfra import evaluate
from passinfra.frontend import UnsupportedOpsError, from_onnx
from passinfra.frontend.onnx_backend import RaypassBackend
from passinfra.ir.expr import Call, Constant, Tuple

ort = pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def make_model(nodes, inputs, outputs, opset, initializers=()):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7 if opset < 15 else 8
    return model


def run_both(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    mod = from_onnx(model)
    names = [p.name_hint for p in mod["main"].params]
    got = evaluate(mod, *(feeds[n] for n in names))
    got = list(got) if isinstance(got, tuple) else [got]
    return got, expected


def check(model, feeds, rtol=1e-4, atol=1e-5):
    got, expected = run_both(model, feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


X = RNG.standard_normal((2, 3, 4)).astype(np.float32)


@pytest.mark.parametrize("opset", [7, 11, 13, 18, 21])
def test_reshape_shape_as_attribute_or_input(opset):
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = make_model(nodes, [("x", F, [2, 3, 4])], [("y", F, None)], opset, [const("shape", [0, -1, 2])])
    check(model, {"x": X})


@pytest.mark.parametrize("opset", [7, 11, 13, 21])
def test_unsqueeze_squeeze_axes_attribute_vs_input(opset):
    if opset < 13:
        nodes = [
            helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0, 3]),
            helper.make_node("Squeeze", ["u"], ["y"], axes=[0]),
        ]
        inits = []
    else:
        nodes = [
            helper.make_node("Unsqueeze", ["x", "ua"], ["u"]),
            helper.make_node("Squeeze", ["u", "sa"], ["y"]),
        ]
        inits = [const("ua", np.array([0, 3], np.int64)), const("sa", np.array([0], np.int64))]
    model = make_model(nodes, [("x", F, [2, 3, 4])], [("y", F, None)], opset, inits)
    check(model, {"x": X})


@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_sum_and_mean_axes(opset, keepdims):
    if opset < 13:
        nodes = [helper.make_node("ReduceSum", ["x"], ["s"], axes=[1, -1], keepdims=keepdims)]
        inits = []
    else:
        nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=keepdims)]
        inits = [const("axes", np.array([1, -1], np.int64))]
    if opset < 18:
        nodes.append(helper.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=keepdims))
    else:
        nodes.append(helper.make_node("ReduceMean", ["x", "axes0"], ["m"], keepdims=keepdims))
        inits.append(const("axes0", np.array([0], np.int64)))
    model = make_model(nodes, [("x", F, [2, 3, 4])], [("s", F, None), ("m", F, None)], opset, inits)
    check(model, {"x": X})


@pytest.mark.parametrize("opset", [7, 11, 13])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_softmax_axis_semantics_before_and_after_13(opset, axis):
    # before opset 13 the input is coerced to 2-D at axis; from 13 it is a plain axis
    nodes = [
        helper.make_node("Softmax", ["x"], ["y"], axis=axis),
        helper.make_node("LogSoftmax", ["x"], ["z"], axis=axis),
    ]
    model = make_model(nodes, [("x", F, [2, 3, 4])], [("y", F, None), ("z", F, None)], opset)
    check(model, {"x": X})


@pytest.mark.parametrize("opset", [7, 9, 14, 15])
def test_batch_normalization_versions(opset):
    stats = [const(n, (RNG.random(3) + 0.5).astype(np.float32)) for n in ("s", "b", "m", "v")]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)]
    model = make_model(nodes, [("x", F, [2, 3, 4])], [("y", F, None)], opset, stats)
    check(model, {"x": X})


@pytest.mark.parametrize("opset", [7, 11, 12, 13])
def test_clip_bounds_as_attributes_or_inputs(opset):
    if opset < 11:
        nodes = [helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.7)]
        model = make_model(nodes, [("x", F, [2, 3, 4])], [("y", F, None)], opset)
    else:
        nodes = [
            helper.make_node("Clip", ["x", "lo", ""], ["y"]),
            helper.make_node("Clip", ["x", "", "hi"], ["z"]),
        ]
        model = make_model(
            nodes,
            [("x", F, [2, 3, 4])],
            [("y", F, None), ("z", F, None)],
            opset,
            [const("lo", np.float32(-0.5)), const("hi", np.float32(0.7))],
        )
    check(model, {"x": X})


@pytest.mark.parametrize("opset", [7, 13, 18])
def test_split_sizes_as_attribute_input_or_num_outputs(opset):
    if opset < 13:
        nodes = [helper.make_node("Split", ["x"], ["a", "b"], axis=2, split=[1, 3])]
        inits = []
    elif opset < 18:
        nodes = [helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=2)]
        inits = [const("sizes", np.array([1, 3], np.int64))]
    else:
        nodes = [helper.make_node("Split", ["x"], ["a", "b"], axis=2, num_outputs=2)]
        inits = []
    model = make_model(nodes, [("x", F, [2, 3, 4])], [("a", F, None), ("b", F, None)], opset, inits)
    check(model, {"x": X})


@pytest.mark.parametrize("opset", [7, 10, 13])
def test_slice_attributes_or_inputs_with_steps_and_clamping(opset):
    if opset < 10:
        nodes = [helper.make_node("Slice", ["x"], ["y"], starts=[1, -3], ends=[100, -1], axes=[1, 2])]
        inits = []
    else:
        nodes = [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])]
        inits = [
            const("st", np.array([-1, 0], np.int64)),
            const("en", np.array([-100, 9999], np.int64)),
            const("ax", np.array([1, 2], np.int64)),
            const("sp", np.array([-1, 2], np.int64)),
        ]
    model = make_model(nodes, [("x", F, [2, 3, 4])], [("y", F, None)], opset, inits)
    check(model, {"x": X})


@pytest.mark.parametrize(
    "opset,mode",
    [(7, "constant"), (7, "reflect"), (11, "constant"), (11, "edge"), (18, "constant"), (19, "wrap")],
)
def test_pad_versions_and_modes(opset, mode):
    pads = [0, 1, 2, 0, 2, 1]
    if opset < 11:
        nodes = [helper.make_node("Pad", ["x"], ["y"], pads=pads, mode=mode, value=1.5)]
        inits = []
    else:
        nodes = [helper.make_node("Pad", ["x", "pads", "value"], ["y"], mode=mode)]
        inits = [const("pads", np.array(pads, np.int64)), const("value", np.float32(1.5))]
    model = make_model(nodes, [("x", F, [2, 3, 4])], [("y", F, None)], opset, inits)
    check(model, {"x": X})


@pytest.mark.parametrize("trans_a,trans_b,alpha,beta", [(0, 0, 1.0, 1.0), (1, 1, 0.5, 2.0), (0, 1, 1.0, 0.0)])
def test_gemm(trans_a, trans_b, alpha, beta):
    a = RNG.standard_normal((4, 3) if trans_a else (3, 4)).astype(np.float32)
    b = RNG.standard_normal((5, 4) if trans_b else (4, 5)).astype(np.float32)
    nodes = [
        helper.make_node(
            "Gemm", ["a", "b", "c"], ["y"], transA=trans_a, transB=trans_b, alpha=alpha, beta=beta
        )
    ]
    model = make_model(
        nodes,
        [("a", F, list(a.shape))],
        [("y", F, None)],
        13,
        [const("b", b), const("c", RNG.standard_normal(5).astype(np.float32))],
    )
    check(model, {"a": a})


def _conv_pool_model() -> onnx.ModelProto:
    weight = RNG.standard_normal((6, 2, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "bias"], ["c"], group=2, strides=[2, 1], auto_pad="SAME_UPPER"),
        helper.make_node("MaxPool", ["c"], ["p"], kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1),
        helper.make_node(
            "AveragePool", ["x"], ["a"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1
        ),
        helper.make_node(
            "ConvTranspose", ["x", "wt"], ["t"], strides=[2, 2], pads=[1, 0, 0, 1], output_padding=[1, 1]
        ),
        helper.make_node("LRN", ["x"], ["l"], size=3, alpha=1e-3, beta=0.75, bias=2.0),
        helper.make_node("InstanceNormalization", ["x", "s", "b4"], ["n"]),
        helper.make_node(
            "ConvTranspose", ["x", "wg"], ["tg"], group=2, strides=[1, 2], dilations=[2, 1], pads=[0, 1, 1, 0]
        ),
        helper.make_node("MaxPool", ["x"], ["pd"], kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 0, 0, 1]),
    ]
    inits = [
        const("w", weight),
        const("bias", RNG.standard_normal(6).astype(np.float32)),
        const("wt", RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)),
        const("s", RNG.standard_normal(4).astype(np.float32)),
        const("b4", RNG.standard_normal(4).astype(np.float32)),
        const("wg", RNG.standard_normal((4, 2, 2, 3)).astype(np.float32)),
    ]
    outs = [(n, F, None) for n in ("p", "a", "t", "l", "n", "tg", "pd")]
    return make_model(nodes, [("x", F, [1, 4, 9, 9])], outs, 13, inits)


def test_conv_pool_variants():
    check(_conv_pool_model(), {"x": RNG.standard_normal((1, 4, 9, 9)).astype(np.float32)})


def test_conv_pool_variants_compiled_match_onnxruntime(tmp_path):
    # ConvTranspose (grouped, dilated, strided), LRN and dilated MaxPool through their
    # compute rules and the C library
    model = _conv_pool_model()
    feeds = {"x": RNG.standard_normal((1, 4, 9, 9)).astype(np.float32)}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected_outputs = session.run(None, feeds)
    # the backend's model checker wants shaped graph outputs
    for output, array in zip(model.graph.output, expected_outputs):
        output.CopyFrom(helper.make_tensor_value_info(output.name, F, array.shape))
    rep = RaypassBackend.prepare(model, config={"codegen.cache_dir": str(tmp_path)})
    for got, expected in zip(rep.run(feeds), expected_outputs, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_transformer_ops_and_shape_subgraph_fold_to_static_shapes():
    # Shape -> Gather -> Concat -> ConstantOfShape -> Trilu -> Cast -> Where, plus Expand,
    # Tile, Range, LayerNormalization, Gelu and Pow: the shape part must fold away
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["n"], axis=0),
        helper.make_node("Concat", ["n", "n"], ["nn"], axis=0),
        helper.make_node("ConstantOfShape", ["nn"], ["ones"], value=helper.make_tensor("v", F, [1], [1.0])),
        helper.make_node("Trilu", ["ones"], ["tri"], upper=0),
        helper.make_node("Cast", ["tri"], ["mask"], to=TensorProto.BOOL),
        helper.make_node("Where", ["mask", "x", "neg"], ["w"]),
        helper.make_node("LayerNormalization", ["w", "g", "b"], ["ln"], axis=-1),
        helper.make_node("Gelu", ["ln"], ["ge"]),
        helper.make_node("Pow", ["ge", "two"], ["pw"]),
        helper.make_node("Range", ["zero", "n0", "onef"], ["r"]),
        helper.make_node("Add", ["pw", "r"], ["sum"]),
        helper.make_node("Expand", ["sum", "big"], ["ex"]),
        helper.make_node("Tile", ["ex", "reps"], ["y"]),
    ]
    inits = [
        const("one", np.array([1], np.int64)),
        const("neg", np.float32(-1e4)),
        const("g", RNG.standard_normal(4).astype(np.float32)),
        const("b", RNG.standard_normal(4).astype(np.float32)),
        const("two", np.float32(2.0)),
        const("zero", np.float32(0)),
        const("n0", np.float32(4)),
        const("onef", np.float32(1)),
        const("big", np.array([2, 4, 4], np.int64)),
        const("reps", np.array([1, 2, 1], np.int64)),
    ]
    model = make_model(nodes, [("x", F, [4, 4])], [("y", F, None)], 20, inits)
    x = RNG.standard_normal((4, 4)).astype(np.float32)
    check(model, {"x": x})
    ops = set()
    from passinfra.ir.functor import iter_post_order

    for node in iter_post_order(from_onnx(model)["main"].body):
        if isinstance(node, Call):
            ops.add(node.op.name)
    assert ops.isdisjoint({"trilu", "cast", "concatenate", "take"})  # folded at import
    assert {"where", "nn.layer_norm", "nn.gelu", "broadcast_to", "tile"} <= ops


def test_entry_function_params_outputs_and_names():
    nodes = [helper.make_node("Relu", ["a"], ["r"]), helper.make_node("Add", ["r", "b"], ["s"])]
    model = make_model(
        nodes,
        [("a", F, [3]), ("b", F, [3]), ("w", F, [3])],
        [("s", F, None), ("r", F, None)],
        13,
        [const("w", np.ones(3, np.float32))],
    )
    mod = from_onnx(model)
    func = mod["main"]
    assert [p.name_hint for p in func.params] == ["a", "b"]  # initializer-inputs excluded
    assert isinstance(func.body, Tuple) and len(func.body.fields) == 2


def test_dynamic_dimension_is_symbolic_unless_shapes_fix_it():
    nodes = [helper.make_node("Relu", ["tokens"], ["y"])]
    model = make_model(nodes, [("tokens", F, ["batch", 4])], [("y", F, None)], 13)
    assert str(from_onnx(model)["main"].params[0].type_annotation) == "Tensor[(batch, 4), float32]"
    mod = from_onnx(model, shapes={"tokens": (2, 4)})
    assert mod["main"].params[0].type_annotation.shape == (2, 4)


def test_unsupported_ops_are_all_listed_with_counts():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Unique", ["a"], ["b"]),  # data-dependent output shape: never static
        helper.make_node("Unique", ["b"], ["c"]),
        helper.make_node("NonZero", ["c"], ["d"]),
        helper.make_node("Foo", ["c"], ["e"], domain="com.example"),
    ]
    model = make_model(nodes, [("x", F, [3])], [("e", F, None)], 13)
    with pytest.raises(UnsupportedOpsError) as info:
        from_onnx(model)
    assert info.value.counts == {"Unique": 2, "NonZero": 1, "com.example.Foo": 1}
    assert "Unique (x2)" in str(info.value) and "NonZero (x1)" in str(info.value)


def test_folded_output_becomes_a_constant():
    nodes = [helper.make_node("Shape", ["x"], ["y"])]
    mod = from_onnx(make_model(nodes, [("x", F, [2, 5])], [("y", TensorProto.INT64, None)], 13))
    assert isinstance(mod["main"].body, Constant)
    np.testing.assert_array_equal(mod["main"].body.data, [2, 5])


def test_long_chain_imports_under_default_recursion_limit(default_recursion_limit):
    count = 3000
    nodes = [helper.make_node("Relu" if i % 2 else "Neg", [f"t{i}"], [f"t{i + 1}"]) for i in range(count)]
    model = make_model(nodes, [("t0", F, [2])], [(f"t{count}", F, None)], 13)
    mod = from_onnx(model)
    x = np.array([1.0, -2.0], np.float32)
    expected = x
    for i in range(count):
        expected = np.maximum(expected, 0) if i % 2 else -expected
    np.testing.assert_array_equal(evaluate(mod, x), expected)


LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
# the interpreter runs these in a few seconds each; all nine are also compiled
LIGHT_SMALL = [
    "light_bvlc_alexnet",
    "light_squeezenet",
    "light_shufflenet",
    "light_zfnet512",
    "light_inception_v1",
]
# deeper or wider: these go through the compiled library (passinfra.build), where the
# interpreter's NumPy loops over convolution windows would take minutes
LIGHT_LARGE = [
    "light_densenet121",
    "light_inception_v2",
    "light_resnet50",
    "light_vgg19",
]
# ops a weight reaches its consumer through unchanged (DenseNet unsqueezes its scales)
_PASS_THROUGH = {"Unsqueeze", "Reshape", "Squeeze", "Identity"}


def _consumers(model: onnx.ModelProto) -> dict[str, tuple[onnx.NodeProto, int]]:
    """tensor name -> (first consumer that is not a pass-through op, input index)."""
    direct: dict[str, tuple[onnx.NodeProto, int]] = {}
    for node in model.graph.node:
        for index, name in enumerate(node.input):
            direct.setdefault(name, (node, index))
    resolved = {}
    for name in direct:
        node, index = direct[name]
        seen = 0
        while node.op_type in _PASS_THROUGH and node.output[0] in direct and seen < 8:
            node, index = direct[node.output[0]]
            seen += 1
        resolved[name] = (node, index)
    return resolved


def _random_weight(rng: np.random.Generator, shape: tuple[int, ...], use: tuple[onnx.NodeProto, int] | None):
    """Values that keep activations of order one through a deep net: He-scaled conv and
    dense weights, positive scales and variances near one, small shifts."""
    node, index = use if use is not None else (None, -1)
    op = node.op_type if node is not None else ""
    if op == "Conv" and index == 1:
        fan_in = int(np.prod(shape[1:]))
        return rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
    if op in ("Gemm", "MatMul") and index == 1:
        trans_b = any(a.name == "transB" and a.i for a in node.attribute)
        fan_in = shape[1] if trans_b else shape[0]
        # no ReLU after the classifier: a smaller scale keeps its softmax from saturating
        return rng.standard_normal(shape) * np.sqrt(1.0 / fan_in)
    if (op == "BatchNormalization" and index in (1, 4)) or op == "Mul":
        return rng.uniform(0.5, 1.5, shape)
    return rng.standard_normal(shape) * 0.1


def _randomize_weights(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """Replace every ConstantOfShape weight (constant fills) by a seeded random initializer."""
    rng = np.random.default_rng(seed)
    kept, inits = [], list(model.graph.initializer)
    shapes = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    uses = _consumers(model)
    new_inputs = []
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in shapes:
            shape = tuple(int(d) for d in shapes[node.input[0]])
            values = _random_weight(rng, shape, uses.get(node.output[0]))
            inits.append(numpy_helper.from_array(values.astype(np.float32), node.output[0]))
            if model.ir_version < 4:  # before IR 4 every initializer must be a graph input too
                new_inputs.append(helper.make_tensor_value_info(node.output[0], F, shape))
        else:
            kept.append(node)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(kept)
    del out.graph.initializer[:]
    out.graph.initializer.extend(inits)
    out.graph.input.extend(new_inputs)
    return out


def _without_final_softmax(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with a trailing Softmax removed, so the logits are compared: with random
    weights some nets' softmax saturates to exact 0/1, which would hide small errors."""
    last = model.graph.node[-1]
    if last.op_type != "Softmax" or last.output[0] != model.graph.output[0].name:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[-1]
    out.graph.output[0].name = last.input[0]  # same shape and dtype: softmax keeps both
    return out


def _light_case(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], list[np.ndarray]]:
    """The light model with seeded random weights, an input, and onnxruntime's outputs."""
    model = _randomize_weights(onnx.load(os.path.join(LIGHT_DIR, name + ".onnx")), seed=7)
    model = _without_final_softmax(model)
    inits = {i.name for i in model.graph.initializer}
    graph_input = next(i for i in model.graph.input if i.name not in inits)
    shape = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]
    feeds = {graph_input.name: np.random.default_rng(1).random(shape, np.float32)}
    options = ort.SessionOptions()
    options.log_severity_level = 3  # the light models carry unused initializers ort warns about
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    for array in expected:  # the weights must give a comparison that can fail
        assert np.isfinite(array).all() and np.ptp(array) > 1e-3
    return model, feeds, expected


def _assert_outputs_match(got, expected) -> None:
    """rtol 1e-4; the absolute tolerance is 1e-5 of the output's largest magnitude, since
    logits of order 1e5 (residual nets with random weights) carry float32 rounding of
    order 1e-1 on their elements near zero (measured: errors are ~1e-6 of the scale)."""
    got = list(got) if isinstance(got, tuple) else [got]
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5 * float(np.abs(e).max()))


@pytest.fixture(scope="module", params=LIGHT_SMALL + LIGHT_LARGE)
def light_case(request: pytest.FixtureRequest) -> tuple[onnx.ModelProto, dict, list[np.ndarray]]:
    """One light model's case, shared by the interpreted and the compiled test: pytest runs
    the tests of one parameter of a module-scoped fixture together, so each model's random
    weights (VGG-19: 9 s of filling 140 M floats) and onnxruntime's run happen once, and
    one model at a time is held."""
    if not os.path.isdir(LIGHT_DIR):
        pytest.skip("the onnx package ships no light models")
    return _light_case(request.param)


def test_light_model_with_random_weights_matches_onnxruntime(light_case):
    model, feeds, expected = light_case
    mod = from_onnx(model)
    names = [p.name_hint for p in mod["main"].params]
    _assert_outputs_match(evaluate(mod, *(feeds[n] for n in names)), expected)


@pytest.fixture(scope="module")
def object_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("light-objects"))


def test_light_model_with_random_weights_compiled_matches_onnxruntime(light_case, object_cache):
    model, feeds, expected = light_case
    rep = RaypassBackend.prepare(model, config={"codegen.cache_dir": object_cache})
    _assert_outputs_match(rep.run(feeds), expected)

"""ONNX ops defined by functions (passinfra/frontend/onnx_functions.py): imported by
expanding the node into the function's body.

The schema-function ops (Attention, RMSNormalization, RotaryEmbedding,
GroupNormalization, Mish, Celu, Swish) are compiled with ``passinfra.build`` and compared
with onnxruntime; the expansion rules (attribute references and defaults, fresh names,
the function's own opset, model-local and nested functions) and the one-line error for a
body with an unsupported op run on the reference interpreter.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import passinfra
from passinfra import evaluate
from passinfra.frontend import OnnxImportError, from_onnx
from passinfra.frontend.onnx import UnsupportedOpsError, unsupported_ops
from passinfra.frontend.onnx_functions import ModelFunctions
from passinfra.transform import PassContext

ort = pytest.importorskip("onnxruntime")

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RTOL, ATOL = 1e-5, 1e-5
RNG = np.random.default_rng(23)


def make_model(nodes, inputs, outputs, opset, functions=(), extra_opsets=()) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
    )
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, v) for d, v in extra_opsets)]
    model = helper.make_model(graph, opset_imports=opsets, functions=list(functions))
    model.ir_version = 10
    return model


def random(shape, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def onnxruntime_outputs(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def interpreted(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    mod = from_onnx(model)
    got = evaluate(mod, *(feeds[p.name_hint] for p in mod["main"].params))
    return list(got) if isinstance(got, tuple) else [got]


@pytest.fixture(scope="module")
def object_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("codegen-cache"))


def compiled(model: onnx.ModelProto, feeds: dict, cache_dir: str) -> list[np.ndarray]:
    mod = from_onnx(model)
    with PassContext(config={"codegen.cache_dir": cache_dir}):
        lib = passinfra.build(mod, opt_level=3)
    got = lib(*(feeds[p.name_hint] for p in mod["main"].params))
    return list(got) if isinstance(got, (tuple, list)) else [got]


def assert_compiled_matches_onnxruntime(model, feeds, cache_dir, rtol=RTOL, atol=ATOL) -> None:
    assert unsupported_ops(model) == {}
    expected = onnxruntime_outputs(model, feeds)
    got = compiled(model, feeds, cache_dir)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


# --------------------------------------------------------------------------- schema functions, compiled


ATTENTION_CASES = {
    # name: (q, k, v shapes, extra inputs {name: array}, attributes)
    "plain_4d": ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 8), {}, {}),
    "scaled_causal": ((1, 2, 5, 4), (1, 2, 5, 4), (1, 2, 5, 4), {}, {"is_causal": 1, "scale": 0.3}),
    "float_mask": ((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 6), {"mask": random((3, 5))}, {}),
    "bool_mask": ((2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 4),
                  {"mask": RNG.random((2, 1, 3, 5)) < 0.7}, {}),
    "gqa_4d_causal": ((1, 4, 3, 8), (1, 2, 3, 8), (1, 2, 3, 8), {}, {"is_causal": 1}),
    "gqa_3d": ((2, 3, 4 * 6), (2, 5, 2 * 6), (2, 5, 2 * 6), {}, {"q_num_heads": 4, "kv_num_heads": 2}),
}


@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_attention_compiled(case, object_cache):
    q, k, v, extra, attrs = ATTENTION_CASES[case]
    feeds = {"q": random(q), "k": random(k), "v": random(v)}
    inputs = [("q", F, q), ("k", F, k), ("v", F, v)]
    names = ["q", "k", "v"]
    for name, array in extra.items():
        feeds[name] = array
        inputs.append((name, BOOL if array.dtype == bool else F, array.shape))
        names.append(name)
    node = helper.make_node("Attention", names, ["y"], **attrs)
    model = make_model([node], inputs, [("y", F, None)], 23)
    assert_compiled_matches_onnxruntime(model, feeds, object_cache)


def test_normalizations_compiled(object_cache):
    """RMSNormalization (last axis; from axis 1 with epsilon) and GroupNormalization in
    one library."""
    nodes = [
        helper.make_node("RMSNormalization", ["x", "s_last"], ["rms_last"]),
        helper.make_node("RMSNormalization", ["x", "s_from1"], ["rms_from1"], axis=1, epsilon=1e-3),
        helper.make_node("GroupNormalization", ["g", "gs", "gb"], ["group"], num_groups=2, epsilon=1e-4),
    ]
    feeds = {"x": random((2, 3, 5)), "s_last": random((5,)), "s_from1": random((3, 5)),
             "g": random((2, 6, 3, 3)), "gs": random((6,)), "gb": random((6,))}
    inputs = [(name, F, array.shape) for name, array in feeds.items()]
    outputs = [("rms_last", F, None), ("rms_from1", F, None), ("group", F, None)]
    model = make_model(nodes, inputs, outputs, 23)
    assert_compiled_matches_onnxruntime(model, feeds, object_cache)


def test_rotary_embedding_compiled(object_cache):
    """4-D input with position ids (halves and interleaved), and 3-D input with num_heads
    and a partial rotary dimension."""
    positions = np.array([[0, 5, 2], [7, 1, 3]], dtype=np.int64)
    feeds = {
        "x4": random((2, 2, 3, 8)), "x3": random((2, 3, 2 * 8)),
        "cos": random((8, 4)), "sin": random((8, 4)), "cos2": random((8, 2)), "sin2": random((8, 2)),
        "pos": positions,
    }
    nodes = [
        helper.make_node("RotaryEmbedding", ["x4", "cos", "sin", "pos"], ["halves"]),
        helper.make_node("RotaryEmbedding", ["x4", "cos", "sin", "pos"], ["interleaved"], interleaved=1),
        helper.make_node("RotaryEmbedding", ["x3", "cos2", "sin2", "pos"], ["partial"],
                         num_heads=2, rotary_embedding_dim=4),
    ]
    inputs = [(name, I64 if name == "pos" else F, array.shape) for name, array in feeds.items()]
    outputs = [("halves", F, None), ("interleaved", F, None), ("partial", F, None)]
    model = make_model(nodes, inputs, outputs, 23)
    assert_compiled_matches_onnxruntime(model, feeds, object_cache)


def test_activations_compiled(object_cache):
    """Mish, Celu (default and given alpha) and Swish (alpha given): plain function bodies
    and a context-dependent one, with attribute references."""
    nodes = [
        helper.make_node("Mish", ["x"], ["mish"]),
        helper.make_node("Celu", ["x"], ["celu"]),
        helper.make_node("Celu", ["x"], ["celu2"], alpha=2.0),
        helper.make_node("Swish", ["x"], ["swish"], alpha=0.5),
    ]
    feeds = {"x": random((4, 7)) * 3}
    outputs = [(name, F, None) for name in ("mish", "celu", "celu2", "swish")]
    model = make_model(nodes, [("x", F, (4, 7))], outputs, 24)
    assert_compiled_matches_onnxruntime(model, feeds, object_cache)


def test_function_versions_follow_the_opset():
    """MeanVarianceNormalization has one body for opsets 13-17 and another (ReduceMean
    axes as an input) from 18: each opset imports with its own."""
    feeds = {"x": random((2, 3, 4, 4))}
    for opset in (13, 18):
        model = make_model([helper.make_node("MeanVarianceNormalization", ["x"], ["y"], axes=[0, 2, 3])],
                           [("x", F, (2, 3, 4, 4))], [("y", F, None)], opset)
        model.ir_version = 8
        body = ModelFunctions(model).expand(model.graph.node[0], opset, [])
        assert body is not None and body.opset == opset
        np.testing.assert_allclose(interpreted(model, feeds)[0], onnxruntime_outputs(model, feeds)[0],
                                   rtol=RTOL, atol=ATOL)


# --------------------------------------------------------------------------- model-local functions


def scale_function(domain: str = "custom") -> onnx.FunctionProto:
    """``y = x * factor + shift``: ``factor`` is an attribute defaulting to 2.0 (the
    function's attribute_proto); ``t`` and ``c`` are internal names."""
    factor = helper.make_node("Constant", [], ["c"])
    factor.attribute.append(
        helper.make_attribute_ref("value_float", onnx.AttributeProto.FLOAT, ref_attr_name="factor")
    )
    function = helper.make_function(
        domain, "Scale", ["x", "shift"], ["y"],
        [factor, helper.make_node("Mul", ["x", "c"], ["t"]), helper.make_node("Add", ["t", "shift"], ["y"])],
        [helper.make_opsetid("", 18)],
    )
    function.attribute_proto.append(helper.make_attribute("factor", 2.0))
    return function


def test_local_function_attributes_and_defaults():
    """The node's attribute replaces the reference; without it the function's default
    applies; a graph value named like a body's internal value (``t``) is left alone."""
    nodes = [
        helper.make_node("Scale", ["x", "b"], ["t"], domain="custom", factor=3.0),
        helper.make_node("Scale", ["t", "b"], ["y"], domain="custom"),
    ]
    model = make_model(nodes, [("x", F, (3,)), ("b", F, (3,))], [("y", F, None), ("t", F, None)], 18,
                       functions=[scale_function()], extra_opsets=[("custom", 1)])
    x, b = random((3,)), random((3,))
    assert unsupported_ops(model) == {}
    y, t = interpreted(model, {"x": x, "b": b})
    np.testing.assert_allclose(t, x * 3 + b, rtol=1e-6)
    np.testing.assert_allclose(y, (x * 3 + b) * 2 + b, rtol=1e-6)


def test_fresh_names_avoid_the_graph_names():
    """A graph value named as the first expansion's internal value would be (``Scale#0/t``),
    defined before the expansion and read after it, keeps its own value."""
    nodes = [
        helper.make_node("Relu", ["x"], ["Scale#0/t"]),
        helper.make_node("Scale", ["x", "b"], ["s"], domain="custom"),
        helper.make_node("Add", ["Scale#0/t", "s"], ["y"]),
    ]
    model = make_model(nodes, [("x", F, (4,)), ("b", F, (4,))], [("y", F, None)], 18,
                       functions=[scale_function()], extra_opsets=[("custom", 1)])
    x, b = random((4,)), random((4,))
    expected = np.maximum(x, 0) + x * 2 + b
    np.testing.assert_allclose(interpreted(model, {"x": x, "b": b})[0], expected, rtol=1e-6)


def test_reference_without_value_or_default_leaves_the_attribute_out():
    """Softmax's ``axis`` refers to a function attribute the node does not give and that
    has no default: the body node gets no axis, so Softmax's own default (-1) applies."""
    softmax = helper.make_node("Softmax", ["x"], ["y"])
    softmax.attribute.append(helper.make_attribute_ref("axis", onnx.AttributeProto.INT, ref_attr_name="axis"))
    function = helper.make_function("custom", "Soft", ["x"], ["y"], [softmax], [helper.make_opsetid("", 18)],
                                    attributes=["axis"])
    model = make_model([helper.make_node("Soft", ["x"], ["y"], domain="custom")], [("x", F, (2, 5))],
                       [("y", F, None)], 18, functions=[function], extra_opsets=[("custom", 1)])
    body = ModelFunctions(model).expand(model.graph.node[0], 18, [])
    assert [a.name for a in body.nodes[0].attribute] == []
    x = random((2, 5))
    expected = np.exp(x) / np.exp(x).sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(interpreted(model, {"x": x})[0], expected, rtol=1e-5)


def test_nested_functions_expand_recursively():
    """A local function calling another local function and a schema-function op (Mish),
    with its body at its own opset (18) inside a model at opset 22."""
    inner = helper.make_function("custom", "Inner", ["a"], ["b"],
                                 [helper.make_node("Mish", ["a"], ["b"])], [helper.make_opsetid("", 22)])
    outer = helper.make_function(
        "custom", "Outer", ["x"], ["y"],
        [helper.make_node("Inner", ["x"], ["m"], domain="custom"),
         helper.make_node("ReduceSum", ["m", "axes"], ["y"], keepdims=0),
         helper.make_node("Constant", [], ["axes"], value_ints=[1])],
        [helper.make_opsetid("", 18), helper.make_opsetid("custom", 1)],
    )
    # the Constant after its use: a body is a set of nodes; put it first as ONNX requires
    outer.node.insert(0, outer.node.pop())
    model = make_model([helper.make_node("Outer", ["x"], ["y"], domain="custom")], [("x", F, (2, 6))],
                       [("y", F, None)], 22, functions=[inner, outer], extra_opsets=[("custom", 1)])
    x = random((2, 6))
    mish = x * np.tanh(np.log1p(np.exp(x)))
    assert unsupported_ops(model) == {}
    np.testing.assert_allclose(interpreted(model, {"x": x})[0], mish.sum(axis=1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(interpreted(model, {"x": x})[0], onnxruntime_outputs(model, {"x": x})[0],
                               rtol=1e-5, atol=1e-6)


def test_schema_function_counts_as_supported():
    model = make_model([helper.make_node("Attention", ["q", "k", "v"], ["y"])],
                       [("q", F, (1, 2, 3, 4)), ("k", F, (1, 2, 3, 4)), ("v", F, (1, 2, 3, 4))],
                       [("y", F, None)], 23)
    assert unsupported_ops(model) == {}


def test_unsupported_op_inside_a_body_is_named_with_its_function():
    """The one-line error names the op the body needs, with the op it was found in, and
    still counts the plain unsupported ops of the graph."""
    wrapper = helper.make_function(
        "custom", "Wrapper", ["x"], ["y"],
        [helper.make_node("Frobnicate", ["x"], ["t"], domain="acme"),
         helper.make_node("Frobnicate", ["t"], ["y"], domain="acme")],
        [helper.make_opsetid("", 18), helper.make_opsetid("acme", 1)],
    )
    nodes = [
        helper.make_node("Wrapper", ["x"], ["a"], domain="custom"),
        helper.make_node("Wrapper", ["a"], ["b"], domain="custom"),
        helper.make_node("Relu", ["b"], ["c"]),
        helper.make_node("Widget", ["c"], ["y"], domain="acme"),
    ]
    model = make_model(nodes, [("x", F, (3,))], [("y", F, None)], 18, functions=[wrapper],
                       extra_opsets=[("custom", 1), ("acme", 1)])
    assert unsupported_ops(model) == {"acme.Frobnicate (in custom.Wrapper)": 4, "acme.Widget": 1}
    with pytest.raises(UnsupportedOpsError) as info:
        from_onnx(model)
    message = str(info.value)
    assert "\n" not in message
    assert message == ("the ONNX model uses 2 unsupported op type(s): "
                       "acme.Frobnicate (in custom.Wrapper) (x4), acme.Widget (x1)")


def test_recursive_local_function_is_reported_not_expanded_forever():
    function = helper.make_function("custom", "Rec", ["x"], ["y"],
                                    [helper.make_node("Rec", ["x"], ["y"], domain="custom")],
                                    [helper.make_opsetid("", 18), helper.make_opsetid("custom", 1)])
    model = make_model([helper.make_node("Rec", ["x"], ["y"], domain="custom")], [("x", F, (2,))],
                       [("y", F, None)], 18, functions=[function], extra_opsets=[("custom", 1)])
    expected = r"custom.Rec \(in custom.Rec\), nested over 64 deep \(x1\)$"
    with pytest.raises(UnsupportedOpsError, match=expected):
        from_onnx(model)


def test_error_in_a_body_names_the_function_node():
    """A body node the converters reject is reported through the node that expanded."""
    function = helper.make_function(
        "custom", "BadReshape", ["x"], ["y"],
        [helper.make_node("Constant", [], ["shape"], value_ints=[7]),
         helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [helper.make_opsetid("", 18)],
    )
    model = make_model([helper.make_node("BadReshape", ["x"], ["y"], domain="custom", name="r0")],
                       [("x", F, (2, 3))], [("y", F, None)], 18, functions=[function],
                       extra_opsets=[("custom", 1)])
    expected = (r"BadReshape node 'r0' \(opset 18\), expanded into its ONNX function: "
                r"Reshape node 'BadReshape#0/Reshape'")
    with pytest.raises(OnnxImportError, match=expected):
        from_onnx(model)

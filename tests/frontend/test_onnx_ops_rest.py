"""DeformConv, ai.onnx.ml.TreeEnsemble, TfIdfVectorizer and ai.onnx.preview.FlexAttention:
from_onnx against onnxruntime (the ONNX reference evaluator where onnxruntime lacks the
op), on the reference interpreter and through the compiled library (one model holding
every attribute combination of a group, so a group compiles once).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import passinfra
from passinfra import evaluate
from passinfra.frontend import OnnxImportError, from_onnx

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(29)
ONNX_TYPE = {np.float16: TensorProto.FLOAT16, np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
             np.int32: TensorProto.INT32, np.int64: TensorProto.INT64}
# float16: both sides round the float32 result once, but sum in different orders
TOLERANCE = {np.float16: 5e-3, np.float32: 1e-5, np.float64: 1e-9}


def make_model(nodes, inputs: dict[str, np.ndarray], outputs: dict[str, int],
               opsets: dict[str, int]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(name, ONNX_TYPE[a.dtype.type], a.shape) for name, a in inputs.items()],
        [helper.make_tensor_value_info(name, elem, None) for name, elem in outputs.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    model.ir_version = 10
    return model


def onnxruntime_outputs(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def reference_outputs(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    return list(ReferenceEvaluator(model).run(None, feeds))


def raypass_outputs(model: onnx.ModelProto, feeds: dict, compiled: bool) -> list[np.ndarray]:
    mod = from_onnx(model)
    args = [feeds[p.name_hint] for p in mod["main"].params]
    got = passinfra.build(mod)(*args) if compiled else evaluate(mod, *args)
    return list(got) if isinstance(got, tuple) else [got]


def assert_close(got: list, expected: list, tolerance: float) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=tolerance, atol=tolerance)


COMPILED = pytest.mark.parametrize("compiled", (False, True), ids=("interpreted", "compiled"))


# --------------------------------------------------------------------------- DeformConv

# (label, X shape, W shape, attributes, with bias, with mask)
DEFORM_CASES = [
    ("plain", (1, 1, 4, 4), (1, 1, 2, 2), {}, False, False),
    ("padded", (1, 1, 4, 4), (1, 1, 2, 2), {"pads": [1, 1, 1, 1]}, False, False),
    ("asymmetric-pads", (2, 2, 5, 4), (3, 2, 3, 2), {"pads": [1, 0, 2, 1]}, True, False),
    ("strided-dilated", (1, 3, 7, 6), (2, 3, 2, 3), {"strides": [2, 1], "dilations": [2, 1],
                                                      "kernel_shape": [2, 3]}, True, False),
    ("masked", (1, 2, 5, 5), (2, 2, 2, 2), {}, True, True),
    ("mask-without-bias", (1, 2, 5, 5), (2, 2, 2, 2), {"pads": [1, 1, 0, 0]}, False, True),
    ("groups", (1, 4, 5, 5), (6, 2, 2, 2), {"group": 2}, True, False),
    ("offset-groups", (1, 4, 5, 5), (2, 4, 2, 2), {"offset_group": 2}, False, True),
    ("groups-and-offset-groups", (2, 6, 5, 4), (4, 3, 3, 2),
     {"group": 2, "offset_group": 3, "pads": [1, 1, 1, 1], "strides": [1, 2]}, True, True),
]


def _deform_shapes(x_shape, w_shape, attrs) -> tuple[int, int]:
    pads, strides = attrs.get("pads", [0] * 4), attrs.get("strides", [1, 1])
    dilations = attrs.get("dilations", [1, 1])
    return tuple((x_shape[2 + a] + pads[a] + pads[2 + a] - dilations[a] * (w_shape[2 + a] - 1) - 1)
                 // strides[a] + 1 for a in range(2))


def deform_model(cases, dtype=np.float32, opset: int = 22) -> tuple[onnx.ModelProto, dict]:
    nodes, feeds, outputs = [], {}, {}
    for i, (_, x_shape, w_shape, attrs, bias, mask) in enumerate(cases):
        out = _deform_shapes(x_shape, w_shape, attrs)
        og = attrs.get("offset_group", 1)
        taps = w_shape[2] * w_shape[3]
        # offsets up to +-3 cells: many samples fall partly or wholly outside the image
        feeds[f"x{i}"] = RNG.standard_normal(x_shape).astype(dtype)
        feeds[f"w{i}"] = RNG.standard_normal(w_shape).astype(dtype)
        feeds[f"o{i}"] = RNG.uniform(-3, 3, (x_shape[0], og * taps * 2, *out)).astype(dtype)
        names = [f"x{i}", f"w{i}", f"o{i}"]
        if bias:
            feeds[f"b{i}"] = RNG.standard_normal(w_shape[0]).astype(dtype)
        if bias or mask:
            names.append(f"b{i}" if bias else "")
        if mask:
            feeds[f"m{i}"] = RNG.uniform(0, 1, (x_shape[0], og * taps, *out)).astype(dtype)
            names.append(f"m{i}")
        nodes.append(helper.make_node("DeformConv", names, [f"y{i}"], **attrs))
        outputs[f"y{i}"] = ONNX_TYPE[dtype]
    return make_model(nodes, feeds, outputs, {"": opset}), feeds


@pytest.mark.parametrize("case", DEFORM_CASES, ids=[c[0] for c in DEFORM_CASES])
def test_deform_conv_interpreted(case):
    model, feeds = deform_model([case])
    expected = onnxruntime_outputs(model, feeds)
    assert_close(raypass_outputs(model, feeds, False), expected, TOLERANCE[np.float32])


@pytest.mark.parametrize("opset", (19, 22))
def test_deform_conv_compiled_every_combination(opset):
    model, feeds = deform_model(DEFORM_CASES, opset=opset)
    expected = onnxruntime_outputs(model, feeds)
    assert_close(raypass_outputs(model, feeds, True), expected, TOLERANCE[np.float32])


@pytest.mark.parametrize("dtype", (np.float64, np.float16), ids=("float64", "float16"))
@COMPILED
def test_deform_conv_dtypes(dtype, compiled):
    model, feeds = deform_model(DEFORM_CASES, dtype)
    assert_close(raypass_outputs(model, feeds, compiled), onnxruntime_outputs(model, feeds), TOLERANCE[dtype])


def test_deform_conv_offsets_far_outside_read_zero():
    # every sample lands beyond the image: the result is the bias alone
    model, feeds = deform_model([DEFORM_CASES[2]])
    feeds["o0"] = np.full_like(feeds["o0"], 1e6)
    expected = np.broadcast_to(feeds["b0"][None, :, None, None], onnxruntime_outputs(model, feeds)[0].shape)
    for compiled in (False, True):
        np.testing.assert_allclose(raypass_outputs(model, feeds, compiled)[0], expected, rtol=1e-6)


def test_deform_conv_rejects_other_ranks():
    model, _ = deform_model([DEFORM_CASES[0]])
    node = model.graph.node[0]
    model = make_model([node], {"x0": np.zeros((1, 1, 4), np.float32), "w0": np.zeros((1, 1, 2), np.float32),
                                "o0": np.zeros((1, 2, 3), np.float32)}, {"y0": TensorProto.FLOAT}, {"": 22})
    with pytest.raises(OnnxImportError, match="only 2-D images"):
        from_onnx(model)


def test_deform_conv_rejects_an_offset_of_the_wrong_shape():
    model, feeds = deform_model([DEFORM_CASES[6]])
    bad = {**feeds, "o0": feeds["o0"][:, :4]}
    model = make_model(list(model.graph.node), bad, {"y0": TensorProto.FLOAT}, {"": 22})
    with pytest.raises(OnnxImportError, match=r"DeformConv node .*offset of shape \(1, 8, 4, 4\)"):
        from_onnx(model)


def test_deform_conv_rejects_a_kernel_shape_other_than_the_weights():
    model, feeds = deform_model([("k", (1, 1, 4, 4), (1, 1, 2, 2), {"kernel_shape": [3, 3]}, False, False)])
    with pytest.raises(OnnxImportError, match="kernel_shape"):
        from_onnx(model)


# --------------------------------------------------------------------------- TreeEnsemble

def tree_node(aggregate: int = 1, post: int = 0, dtype=np.float32, roots=(0, 5)) -> onnx.NodeProto:
    """Two trees over 3 features: every comparison mode, a member set, NaN tracking true
    at the root, a one-leaf tree; target 2 is never reached."""
    return helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", aggregate_function=aggregate, post_transform=post,
        n_targets=3, tree_roots=list(roots),
        nodes_featureids=[0, 1, 2, 0, 1, 2],
        nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [6], [0, 6, 3, 5, 1, 4]),
        nodes_splits=helper.make_tensor("s", ONNX_TYPE[dtype], [6], [0.5, 0.0, -1.0, 2.0, 0.25, 0.0]),
        nodes_truenodeids=[1, 0, 1, 4, 2, 4], nodes_trueleafs=[0, 1, 1, 0, 1, 1],
        nodes_falsenodeids=[2, 3, 2, 0, 3, 4], nodes_falseleafs=[0, 0, 1, 1, 1, 1],
        nodes_missing_value_tracks_true=[1, 0, 0, 1, 0, 0],
        membership_values=helper.make_tensor("v", ONNX_TYPE[dtype], [3], [1.0, -1.0, np.nan]),
        leaf_targetids=[0, 1, 0, 1, 1], leaf_weights=helper.make_tensor("w", ONNX_TYPE[dtype], [5],
                                                                         [1.5, -2.0, 3.0, 0.25, 0.75]))


def tree_feeds(dtype=np.float32) -> dict[str, np.ndarray]:
    x = RNG.integers(-2, 3, (12, 3)).astype(dtype) / 2  # hits the splits and members exactly
    x[0, 0] = x[1, 1] = x[2, 2] = np.nan
    return {"x": x}


def tree_model(aggregate: int = 1, post: int = 0, dtype=np.float32, roots=(0, 5)) -> onnx.ModelProto:
    feeds = tree_feeds(dtype)
    return make_model([tree_node(aggregate, post, dtype, roots)], feeds, {"y": ONNX_TYPE[dtype]},
                      {"": 21, "ai.onnx.ml": 5})


@pytest.mark.parametrize("aggregate", (0, 1, 2, 3), ids=("average", "sum", "min", "max"))
@COMPILED
def test_tree_ensemble_aggregates(aggregate, compiled):
    model, feeds = tree_model(aggregate), tree_feeds()
    assert_close(raypass_outputs(model, feeds, compiled), onnxruntime_outputs(model, feeds), 1e-6)


@pytest.mark.parametrize("dtype", (np.float64, np.float16), ids=("float64", "float16"))
@COMPILED
def test_tree_ensemble_dtypes(dtype, compiled):
    # onnxruntime 1.32 rejects float16 TreeEnsemble models ("nodes_splits must have same
    # type as input" for float16 splits): float16 is checked against the ONNX reference,
    # without the one-leaf tree (the reference reads a one-leaf root's leaf at the root's
    # node index, not at its branches' leaf index as onnxruntime)
    roots = (0, 5) if dtype == np.float64 else (0,)
    model, feeds = tree_model(0, dtype=dtype, roots=roots), tree_feeds(dtype)
    expected = onnxruntime_outputs(model, feeds) if dtype == np.float64 else reference_outputs(model, feeds)
    assert_close(raypass_outputs(model, feeds, compiled), expected, TOLERANCE[dtype])


def _softmax(v: np.ndarray) -> np.ndarray:
    e = np.exp(v - v.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _softmax_zero(v: np.ndarray) -> np.ndarray:
    e = np.where(v == 0, 0, np.exp(v - v.max(axis=-1, keepdims=True)))
    return e / e.sum(axis=-1, keepdims=True)


# the spec's numbering (onnxruntime 1.32 swaps SOFTMAX and LOGISTIC): checked against NumPy
# applied to onnxruntime's scores without a transform
POST_TRANSFORMS = {1: _softmax, 2: lambda v: 1 / (1 + np.exp(-v)), 3: _softmax_zero}


@pytest.mark.parametrize("post", sorted(POST_TRANSFORMS), ids=("softmax", "logistic", "softmax_zero"))
@COMPILED
def test_tree_ensemble_post_transforms(post, compiled):
    feeds = tree_feeds()
    feeds["x"][3] = [5.0, 5.0, 5.0]  # a row whose scores hold zeros and non-zeros
    scores = onnxruntime_outputs(tree_model(3, 0), feeds)[0].astype(np.float64)
    got = raypass_outputs(tree_model(3, post), feeds, compiled)[0]
    with np.errstate(invalid="ignore"):
        expected = POST_TRANSFORMS[post](scores)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_tree_ensemble_rejects_probit_and_bad_references():
    with pytest.raises(OnnxImportError, match="PROBIT"):
        from_onnx(tree_model(1, 4))
    model = tree_model()
    for attr in model.graph.node[0].attribute:
        if attr.name == "nodes_truenodeids":
            attr.ints[0] = 17
    with pytest.raises(OnnxImportError, match="tree reference 17 is out of range"):
        from_onnx(model)


# --------------------------------------------------------------------------- TfIdfVectorizer

POOL = {"pool_int64s": [2, 3, 5, 4, 5, 6, 7, 8, 6, 7], "ngram_counts": [0, 4],
        "ngram_indexes": [0, 1, 2, 3, 4, 5, 6]}
# (label, attributes): every mode, with and without weights, skips, only-bigrams, unigrams only
TFIDF_CASES = [
    ("tf-uni-bi-skip0", {"mode": "TF", "min_gram_length": 1, "max_gram_length": 2, "max_skip_count": 0}),
    ("tf-bi-skip3", {"mode": "TF", "min_gram_length": 2, "max_gram_length": 2, "max_skip_count": 3}),
    ("idf-uni-bi-skip2", {"mode": "IDF", "min_gram_length": 1, "max_gram_length": 2, "max_skip_count": 2}),
    ("idf-weighted", {"mode": "IDF", "min_gram_length": 1, "max_gram_length": 2, "max_skip_count": 1,
                      "weights": [0.5, 1.0, 2.0, 1.5, 3.0, 0.25, 4.0]}),
    ("tfidf-unweighted-uni", {"mode": "TFIDF", "min_gram_length": 1, "max_gram_length": 1,
                              "max_skip_count": 4}),
    ("tfidf-weighted-skip5", {"mode": "TFIDF", "min_gram_length": 1, "max_gram_length": 2,
                              "max_skip_count": 5, "weights": [0.5, 1.0, 2.0, 1.5, 3.0, 0.25, 4.0]}),
]


def tfidf_model(cases, dtype=np.int64, shape=(3, 12)) -> tuple[onnx.ModelProto, dict]:
    feeds = {"x": RNG.integers(2, 9, shape).astype(dtype)}
    nodes = [helper.make_node("TfIdfVectorizer", ["x"], [f"y{i}"], **POOL, **attrs)
             for i, (_, attrs) in enumerate(cases)]
    return make_model(nodes, feeds, {f"y{i}": TensorProto.FLOAT for i in range(len(cases))}, {"": 9}), feeds


@pytest.mark.parametrize("case", TFIDF_CASES, ids=[c[0] for c in TFIDF_CASES])
def test_tfidf_interpreted(case):
    model, feeds = tfidf_model([case])
    assert_close(raypass_outputs(model, feeds, False), onnxruntime_outputs(model, feeds), 0)


@pytest.mark.parametrize(("dtype", "shape"), [(np.int64, (3, 12)), (np.int32, (3, 12)), (np.int32, (10,))],
                         ids=("int64-batch", "int32-batch", "int32-row"))
def test_tfidf_compiled_every_combination(dtype, shape):
    model, feeds = tfidf_model(TFIDF_CASES, dtype, shape)
    assert_close(raypass_outputs(model, feeds, True), onnxruntime_outputs(model, feeds), 0)


def test_tfidf_rejects_string_pools():
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=1, max_gram_length=1,
                            max_skip_count=0, pool_strings=["a", "b"], ngram_counts=[0],
                            ngram_indexes=[0, 1])
    model = make_model([node], {"x": np.zeros((4,), np.int64)}, {"y": TensorProto.FLOAT}, {"": 9})
    with pytest.raises(OnnxImportError, match="string tokens"):
        from_onnx(model)


# --------------------------------------------------------------------------- FlexAttention

def test_flex_attention_expands_its_preview_domain_function():
    # ai.onnx.preview.FlexAttention has only a context-dependent function, versioned in its
    # own domain: it is expanded and compiled (checked against the ONNX reference)
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview", scale=0.3)
    feeds = {"q": RNG.standard_normal((2, 4, 3, 8)).astype(np.float32),
             "k": RNG.standard_normal((2, 2, 5, 8)).astype(np.float32),
             "v": RNG.standard_normal((2, 2, 5, 6)).astype(np.float32)}
    model = make_model([node], feeds, {"y": TensorProto.FLOAT}, {"": 26, "ai.onnx.preview": 1})
    expected = reference_outputs(model, feeds)
    for compiled in (False, True):
        assert_close(raypass_outputs(model, feeds, compiled), expected, 1e-5)

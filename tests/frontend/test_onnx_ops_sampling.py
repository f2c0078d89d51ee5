"""GridSample, RoiAlign and Col2Im: from_onnx against onnxruntime over the attribute combinations
of the ONNX spec, on the reference interpreter and through the compiled library (one
model holding every combination per group, so a group compiles once).

onnxruntime has no RoiAlign-22 kernel: RoiAlign-22 (the same semantics as 16 with more
dtypes) is checked against the ONNX reference evaluator.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import passinfra
from passinfra import evaluate, ir
from passinfra.errors import EvaluationError, IRTypeError
from passinfra.frontend import OnnxImportError, from_onnx
from passinfra.ir.op.col2im import col2im
from passinfra.ir.op.grid_sample import grid_sample
from passinfra.ir.type_infer import infer_type

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(23)
ONNX_TYPE = {np.float16: TensorProto.FLOAT16, np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
             np.int64: TensorProto.INT64}
# float16: both sides compute in float32 and round once, but may round a value near a
# float16 tie differently (1 ulp of float16 at magnitudes up to ~4)
TOLERANCE = {np.float16: 4e-3, np.float32: 1e-5, np.float64: 1e-6}


def make_model(nodes, inputs: dict[str, np.ndarray], outputs: list[str], opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(name, ONNX_TYPE[a.dtype.type], a.shape) for name, a in inputs.items()],
        # every op here returns the data's dtype
        [helper.make_tensor_value_info(name, ONNX_TYPE[inputs["x"].dtype.type], None) for name in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def onnxruntime_outputs(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def raypass_outputs(model: onnx.ModelProto, feeds: dict, compiled: bool) -> list[np.ndarray]:
    mod = from_onnx(model)
    args = [feeds[p.name_hint] for p in mod["main"].params]
    got = passinfra.build(mod)(*args) if compiled else evaluate(mod, *args)
    return list(got) if isinstance(got, tuple) else [got]


def assert_close(got: list, expected: list, dtype=np.float32) -> None:
    assert len(got) == len(expected)
    tolerance = TOLERANCE[dtype]
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), rtol=tolerance, atol=tolerance)


def check(model: onnx.ModelProto, feeds: dict, compiled: bool = False, dtype=np.float32) -> None:
    assert_close(raypass_outputs(model, feeds, compiled), onnxruntime_outputs(model, feeds), dtype)


# --------------------------------------------------------------------------- GridSample

MODES, PADDINGS = ("linear", "nearest", "cubic"), ("zeros", "border", "reflection")
SHAPES = {2: ((2, 3, 5, 4), (2, 3, 4, 2)), 3: ((1, 2, 3, 4, 5), (1, 2, 3, 4, 3))}


def grid_feeds(rank: int, dtype=np.float32) -> dict[str, np.ndarray]:
    data_shape, grid_shape = SHAPES[rank]
    grid = RNG.uniform(-2.6, 2.6, grid_shape)  # several reflection folds on these short axes
    # exact borders, centre, half-cell ties for nearest (0.25 on a 4-cell axis is 1.5 - 1)
    grid.reshape(-1)[:8] = [-1.0, 1.0, 0.0, -0.5, 0.5, 0.25, -0.25, 1.2]
    return {"x": RNG.standard_normal(data_shape).astype(dtype), "grid": grid.astype(dtype)}


def grid_combinations(rank: int) -> list[tuple[str, str, int]]:
    # onnxruntime implements cubic for 2-D data only, as the spec's description of it
    return [(mode, padding, align) for mode, padding, align in itertools.product(MODES, PADDINGS, (0, 1))
            if rank == 2 or mode != "cubic"]


def grid_model(combinations, opset: int = 22, feeds=None, rank: int = 2) -> onnx.ModelProto:
    nodes = [helper.make_node("GridSample", ["x", "grid"], [f"y{i}"], mode=mode, padding_mode=padding,
                              align_corners=align)
             for i, (mode, padding, align) in enumerate(combinations)]
    return make_model(nodes, feeds or grid_feeds(rank), [f"y{i}" for i in range(len(nodes))], opset)


@pytest.mark.parametrize(("rank", "mode", "padding", "align"),
                         [(rank, *combination) for rank in (2, 3) for combination in grid_combinations(rank)])
def test_grid_sample_interpreted(rank, mode, padding, align):
    feeds = grid_feeds(rank)
    check(grid_model([(mode, padding, align)], feeds=feeds), feeds)


@pytest.mark.parametrize("rank", (2, 3))
def test_grid_sample_compiled_every_combination(rank):
    feeds = grid_feeds(rank)
    check(grid_model(grid_combinations(rank), feeds=feeds), feeds, compiled=True)


@pytest.mark.parametrize("dtype", (np.float64, np.float16), ids=("float64", "float16"))
@pytest.mark.parametrize("compiled", (False, True), ids=("interpreted", "compiled"))
def test_grid_sample_dtypes(dtype, compiled):
    feeds = grid_feeds(2, dtype)
    check(grid_model(grid_combinations(2), feeds=feeds), feeds, compiled, dtype)


def test_grid_sample_16_names_its_modes_bilinear_and_bicubic():
    feeds = grid_feeds(2)
    nodes = [helper.make_node("GridSample", ["x", "grid"], [f"y{i}"], mode=mode, padding_mode="border")
             for i, mode in enumerate(("bilinear", "nearest", "bicubic"))]
    check(make_model(nodes, feeds, ["y0", "y1", "y2"], 16), feeds)


def test_grid_sample_16_rejects_volumetric_data():
    model = grid_model([("bilinear", "zeros", 0)], opset=16, rank=3)
    with pytest.raises(OnnxImportError, match="GridSample-16 takes 4-D data"):
        from_onnx(model)


def test_grid_sample_unknown_mode_is_named():
    with pytest.raises(OnnxImportError, match="unknown padding_mode 'wrap'"):
        from_onnx(grid_model([("linear", "wrap", 0)]))


def test_grid_sample_grid_of_the_wrong_shape_is_a_type_error():
    feeds = {"x": np.zeros((1, 2, 4, 4), np.float32), "grid": np.zeros((1, 3, 3, 3), np.float32)}
    with pytest.raises(OnnxImportError, match=r"grid_sample: expected a grid of shape \(N, O1..O2, 2\)"):
        from_onnx(grid_model([("linear", "zeros", 0)], feeds=feeds))
    data, grid = ir.var("x", (1, 2, 4, 4)), ir.var("grid", (1, 3, 3, 3))
    with pytest.raises(IRTypeError, match=r"op grid_sample: expected a grid of shape"):
        infer_type(ir.IRModule.from_expr(ir.Function([data, grid], grid_sample(data, grid))))


# --------------------------------------------------------------------------- RoiAlign

ROI_MODES, ROI_COORDINATES = ("avg", "max"), ("half_pixel", "output_half_pixel")


def roi_feeds(dtype=np.float32) -> dict[str, np.ndarray]:
    rois = np.array([[0, 0, 9, 9], [1.3, 2.2, 6.1, 4.9], [-3, -2, 4, 12], [5, 5, 5.2, 5.1],
                     [7, 8, 2, 1], [0.5, 0.5, 30, 30]])  # whole, inside, past the edges, tiny, reversed, huge
    return {"x": RNG.standard_normal((2, 3, 10, 9)).astype(dtype), "rois": rois.astype(dtype),
            "batch": np.array([0, 1, 1, 0, 1, 0], np.int64)}


def roi_model(combinations, opset: int = 16, feeds=None) -> onnx.ModelProto:
    nodes = []
    for i, (mode, coordinates, ratio, scale) in enumerate(combinations):
        attrs = dict(mode=mode, sampling_ratio=ratio, spatial_scale=scale, output_height=3, output_width=4)
        if coordinates is not None:
            attrs["coordinate_transformation_mode"] = coordinates
        nodes.append(helper.make_node("RoiAlign", ["x", "rois", "batch"], [f"y{i}"], **attrs))
    return make_model(nodes, feeds or roi_feeds(), [f"y{i}" for i in range(len(nodes))], opset)


ROI_COMBINATIONS = list(itertools.product(ROI_MODES, ROI_COORDINATES, (0, 2, 3), (1.0, 0.5)))


@pytest.mark.parametrize(("mode", "coordinates", "ratio", "scale"), ROI_COMBINATIONS)
def test_roi_align_interpreted(mode, coordinates, ratio, scale):
    feeds = roi_feeds()
    check(roi_model([(mode, coordinates, ratio, scale)], feeds=feeds), feeds)


def test_roi_align_compiled_every_combination():
    feeds = roi_feeds()
    check(roi_model(ROI_COMBINATIONS, feeds=feeds), feeds, compiled=True)


@pytest.mark.parametrize("dtype", (np.float64, np.float16), ids=("float64", "float16"))
@pytest.mark.parametrize("compiled", (False, True), ids=("interpreted", "compiled"))
def test_roi_align_dtypes(dtype, compiled):
    feeds = roi_feeds(dtype)
    check(roi_model(ROI_COMBINATIONS[::3], feeds=feeds), feeds, compiled, dtype)


def test_roi_align_10_is_output_half_pixel():
    feeds = roi_feeds()
    check(roi_model([(mode, None, 2, 1.0) for mode in ROI_MODES], opset=10, feeds=feeds), feeds)


@pytest.mark.parametrize("compiled", (False, True), ids=("interpreted", "compiled"))
def test_roi_align_22_matches_the_onnx_reference(compiled):
    # onnxruntime has no RoiAlign-22 kernel; the reference evaluator follows onnxruntime's
    # algorithm; its max mode keeps the first sample's value (no -inf start), as ours
    feeds = roi_feeds()
    combinations = [(mode, coordinates, 2, 1.0) for mode, coordinates in itertools.product(ROI_MODES,
                                                                                             ROI_COORDINATES)]
    model = roi_model(combinations, opset=22, feeds=feeds)
    expected = ReferenceEvaluator(model).run(None, feeds)
    assert_close(raypass_outputs(model, feeds, compiled), expected)


def test_roi_align_batch_index_out_of_range_is_an_evaluation_error():
    feeds = roi_feeds()
    feeds["batch"][2] = 2
    with pytest.raises(EvaluationError, match="batch index 2 is out of range for data of batch size 2"):
        raypass_outputs(roi_model([("avg", "half_pixel", 2, 1.0)], feeds=feeds), feeds, compiled=False)


# --------------------------------------------------------------------------- Col2Im

# (image_shape, block_shape, attributes): the node tests' cases with static shapes, and
# every attribute at once in 2-D and 3-D
COL2IM_CASES = {
    "plain": ((5, 5), (2, 2), {}),
    "strides": ((5, 5), (3, 2), {"strides": [2, 1]}),
    "pads-dilations": ((5, 6), (2, 3), {"pads": [0, 1, 2, 1], "dilations": [2, 1]}),
    "all": ((6, 5), (2, 2), {"strides": [2, 3], "pads": [1, 0, 1, 2], "dilations": [1, 2]}),
    "3d": ((3, 4, 5), (2, 1, 2), {"strides": [1, 2, 1], "pads": [0, 1, 0, 1, 0, 1]}),
}


def col2im_model(image, block, attrs, dtype=np.float32) -> tuple[onnx.ModelProto, dict]:
    rank = len(image)
    strides, pads = attrs.get("strides", [1] * rank), attrs.get("pads", [0] * 2 * rank)
    dilations = attrs.get("dilations", [1] * rank)
    counts = [(image[i] + pads[i] + pads[rank + i] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1
              for i in range(rank)]
    feeds = {"x": RNG.standard_normal((2, 3 * int(np.prod(block)), int(np.prod(counts)))).astype(dtype)}
    shapes = [helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(v, np.int64)))
              for name, v in (("image", image), ("block", block))]
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)
    return make_model([*shapes, node], feeds, ["y"], 18), feeds


@pytest.mark.parametrize("compiled", (False, True), ids=("interpreted", "compiled"))
@pytest.mark.parametrize("name", COL2IM_CASES)
def test_col2im(name, compiled):
    model, feeds = col2im_model(*COL2IM_CASES[name])
    check(model, feeds, compiled)


@pytest.mark.parametrize("compiled", (False, True), ids=("interpreted", "compiled"))
def test_col2im_float16(compiled):
    model, feeds = col2im_model(*COL2IM_CASES["all"], dtype=np.float16)
    check(model, feeds, compiled, np.float16)


@pytest.mark.parametrize("compiled", (False, True), ids=("interpreted", "compiled"))
def test_col2im_float64_matches_the_onnx_reference(compiled):
    # onnxruntime's Col2Im takes float32 and float16 only
    model, feeds = col2im_model(*COL2IM_CASES["all"], dtype=np.float64)
    expected = ReferenceEvaluator(model).run(None, feeds)
    assert_close(raypass_outputs(model, feeds, compiled), expected, np.float64)


def test_col2im_shape_inputs_must_be_known_at_import():
    model, _ = col2im_model(*COL2IM_CASES["plain"])
    graph = model.graph
    graph.node.pop(0)  # image_shape becomes a graph input
    graph.input.append(helper.make_tensor_value_info("image", TensorProto.INT64, [2]))
    with pytest.raises(OnnxImportError, match=r"input 1 \(image_shape\) must be known at import time"):
        from_onnx(model)


def test_col2im_columns_that_do_not_match_the_blocks_are_a_type_error():
    data = ir.var("x", (1, 4, 10))
    with pytest.raises(IRTypeError, match=r"op col2im: expected data of shape \(N, C \* 4, 16\)"):
        infer_type(ir.IRModule.from_expr(ir.Function([data], col2im(data, (5, 5), (2, 2)))))

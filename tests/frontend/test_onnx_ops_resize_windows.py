"""Resize (and Upsample), 3-D and 1-D-transposed windows, dilated average pooling:
from_onnx against onnxruntime over the attribute combinations of the ONNX spec, on the
reference interpreter; a few models with many nodes each through the compiled library.

Nearest-neighbour resizing must pick exactly onnxruntime's cells (ties included:
half-pixel downscaling by 2 lands every coordinate on a .5); interpolation agrees to
float32 rounding.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from passinfra import evaluate, ir
from passinfra.errors import IRTypeError
from passinfra.frontend import OnnxImportError, from_onnx
from passinfra.frontend.onnx_backend import RaypassBackend
from passinfra.ir import op
from passinfra.ir.types import TensorType

ort = pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT
RNG = np.random.default_rng(17)
RTOL, ATOL = 1e-5, 1e-5


def make_model(nodes, inputs, outputs, opset, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7 if opset < 15 else 8
    return model


def onnxruntime_outputs(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def interpreted_outputs(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    mod = from_onnx(model)
    got = evaluate(mod, *(feeds[p.name_hint] for p in mod["main"].params))
    return list(got) if isinstance(got, tuple) else [got]


def assert_matches(got, expected, exact: bool = False) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        if exact:
            np.testing.assert_array_equal(g, e)
        else:
            np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)


def check(model: onnx.ModelProto, feeds: dict, exact: bool = False) -> None:
    assert_matches(interpreted_outputs(model, feeds), onnxruntime_outputs(model, feeds), exact)


def data(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# --------------------------------------------------------------------------- Resize


def resize_model(shape, *, scales=None, sizes=None, roi=None, opset=19, **attrs) -> onnx.ModelProto:
    """One Resize node whose roi / scales / sizes are initializers (static)."""
    names, inits = ["x", "", "", ""], []
    for position, name, value, dtype in ((1, "roi", roi, np.float32), (2, "scales", scales, np.float32),
                                         (3, "sizes", sizes, np.int64)):
        if value is not None:
            names[position] = name
            inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
    if opset == 10:
        names = ["x", "scales"]
    while names[-1] == "":
        names.pop()
    node = helper.make_node("Resize", names, ["y"], **attrs)
    return make_model([node], [("x", F, list(shape))], [("y", F, None)], opset, inits)


NCHW = (2, 3, 6, 5)
# per-axis scales of NCHW data: up, down (ties at half pixels), mixed, non-integer
SCALES = {
    "up2x3": (1, 1, 2.0, 3.0),
    "down-half": (1, 1, 0.5, 0.6),
    "mixed": (1, 1, 1.5, 0.75),
    "odd": (1, 1, 1.3, 2.7),
}
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric")


@pytest.mark.parametrize("scales", SCALES, ids=list(SCALES))
@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES)
@pytest.mark.parametrize("nearest_mode", ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"))
def test_nearest_picks_onnxruntimes_cells(scales, coordinate_mode, nearest_mode):
    model = resize_model(NCHW, scales=SCALES[scales], mode="nearest",
                         coordinate_transformation_mode=coordinate_mode, nearest_mode=nearest_mode)
    check(model, {"x": data(*NCHW)}, exact=True)


@pytest.mark.parametrize("scales", SCALES, ids=list(SCALES))
@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES)
@pytest.mark.parametrize("mode", ("linear", "cubic"))
def test_linear_and_cubic_from_scales(scales, coordinate_mode, mode):
    model = resize_model(NCHW, scales=SCALES[scales], mode=mode,
                         coordinate_transformation_mode=coordinate_mode)
    check(model, {"x": data(*NCHW)})


@pytest.mark.parametrize("sizes", [(2, 3, 12, 4), (2, 3, 3, 9), (2, 3, 7, 8), (2, 3, 1, 1), (2, 3, 6, 1)])
@pytest.mark.parametrize("mode", ("nearest", "linear", "cubic"))
@pytest.mark.parametrize("coordinate_mode", COORDINATE_MODES)
def test_from_sizes(sizes, mode, coordinate_mode):
    model = resize_model(NCHW, sizes=sizes, mode=mode, coordinate_transformation_mode=coordinate_mode)
    check(model, {"x": data(*NCHW)}, exact=mode == "nearest")


@pytest.mark.parametrize("cubic_coeff_a", (-0.75, -0.5, -0.6))
@pytest.mark.parametrize("exclude_outside", (0, 1))
@pytest.mark.parametrize("scales", ("up2x3", "down-half", "odd"))
def test_cubic_coefficient_and_exclude_outside(cubic_coeff_a, exclude_outside, scales):
    model = resize_model(NCHW, scales=SCALES[scales], mode="cubic", cubic_coeff_a=cubic_coeff_a,
                         exclude_outside=exclude_outside)
    check(model, {"x": data(*NCHW)})


@pytest.mark.parametrize("mode", ("nearest", "linear", "cubic"))
@pytest.mark.parametrize("roi, sizes", [
    ((0, 0, 0.4, 0.6, 1, 1, 0.6, 0.8), (2, 3, 3, 3)),
    ((0, 0, -0.3, 0.2, 1, 1, 1.2, 0.7), (2, 3, 5, 4)),  # reaches outside: extrapolated
    ((0, 0, 0.25, 0.5, 1, 1, 0.75, 0.5), (2, 3, 4, 1)),  # one output column
])
@pytest.mark.parametrize("extrapolation_value", (0.0, -7.5))
def test_tf_crop_and_resize(mode, roi, sizes, extrapolation_value):
    model = resize_model(NCHW, roi=roi, sizes=sizes, mode=mode,
                         coordinate_transformation_mode="tf_crop_and_resize",
                         extrapolation_value=extrapolation_value)
    check(model, {"x": data(*NCHW)}, exact=mode == "nearest")


@pytest.mark.parametrize("axes", ([2, 3], [3, 2], [-1, -2]))
@pytest.mark.parametrize("mode", ("nearest", "linear"))
def test_axes_with_scales_sizes_and_roi(axes, mode):
    x = {"x": data(*NCHW)}
    factors = dict(zip((2, 3), (1.5, 0.8)))
    scales = [factors[a % 4] for a in axes]
    check(resize_model(NCHW, scales=scales, axes=axes, mode=mode), x, exact=mode == "nearest")
    lengths = dict(zip((2, 3), (9, 3)))
    check(resize_model(NCHW, sizes=[lengths[a % 4] for a in axes], axes=axes, mode=mode), x,
          exact=mode == "nearest")
    starts, ends = dict(zip((2, 3), (0.1, 0.3))), dict(zip((2, 3), (0.9, 1.1)))
    roi = [starts[a % 4] for a in axes] + [ends[a % 4] for a in axes]
    model = resize_model(NCHW, roi=roi, sizes=[lengths[a % 4] for a in axes], axes=axes, mode=mode,
                         coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=2.5)
    check(model, x, exact=mode == "nearest")


@pytest.mark.parametrize("policy", ("stretch", "not_larger", "not_smaller"))
@pytest.mark.parametrize("sizes, axes", [((10, 4), None), ((10, 4), [2, 3]), ((3, 20), [2, 3]), ((7,), [3])])
def test_keep_aspect_ratio_policy(policy, sizes, axes):
    full = sizes if axes else (2, 3, *sizes)
    attrs = {"axes": axes} if axes else {}
    model = resize_model(NCHW, sizes=full, mode="nearest", keep_aspect_ratio_policy=policy, **attrs)
    check(model, {"x": data(*NCHW)}, exact=True)


@pytest.mark.parametrize("mode", ("linear", "cubic"))
@pytest.mark.parametrize("exclude_outside", (0, 1))
@pytest.mark.parametrize("resize", [
    {"scales": (1, 1, 0.5, 0.4)},
    {"scales": (1, 1, 0.3, 0.7)},
    {"sizes": (2, 3, 4, 2)},
    {"scales": (1, 1, 2.0, 1.6)},  # upscaling: the filter keeps its width
])
def test_antialias(mode, exclude_outside, resize):
    shape = (2, 3, 13, 11)
    model = resize_model(shape, mode=mode, antialias=1, exclude_outside=exclude_outside, **resize)
    check(model, {"x": data(*shape)})


def test_antialias_with_another_cubic_coefficient_and_extrapolation():
    shape = (1, 2, 12, 12)
    x = {"x": data(*shape)}
    check(resize_model(shape, scales=(1, 1, 0.45, 0.5), mode="cubic", antialias=1, cubic_coeff_a=-0.5), x)
    check(resize_model(shape, roi=(0, 0, -0.2, 0.1, 1, 1, 0.9, 1.3), sizes=(1, 2, 5, 4), mode="linear",
                       antialias=1, coordinate_transformation_mode="tf_crop_and_resize",
                       extrapolation_value=3.0), x)


def test_nearest_ignores_antialias():
    # the spec applies antialiasing to linear and cubic only (onnxruntime rejects it)
    shape = (1, 1, 6, 6)
    plain = resize_model(shape, scales=(1, 1, 0.5, 0.5), mode="nearest")
    filtered = resize_model(shape, scales=(1, 1, 0.5, 0.5), mode="nearest", antialias=1)
    x = {"x": data(*shape)}
    np.testing.assert_array_equal(interpreted_outputs(filtered, x)[0], onnxruntime_outputs(plain, x)[0])


@pytest.mark.parametrize("shape, scales, mode", [
    ((7,), (2.5,), "nearest"),
    ((4, 6), (0.5, 1.5), "linear"),
    ((4, 6), (1.75, 0.5), "cubic"),
    ((3, 4, 5), (1.5, 0.5, 2.0), "linear"),  # trilinear
    ((2, 2, 3, 4, 5), (1, 1, 1.5, 0.5, 2.0), "linear"),
    ((2, 2, 3, 4, 5), (1, 2.0, 0.7, 1.5, 0.5), "nearest"),
    ((1, 5, 6, 3), (1, 1.5, 0.5, 1), "linear"),  # NHWC
])
def test_other_ranks_and_layouts(shape, scales, mode):
    check(resize_model(shape, scales=scales, mode=mode), {"x": data(*shape)}, exact=mode == "nearest")


@pytest.mark.parametrize("opset", (10, 11, 13, 18))
@pytest.mark.parametrize("mode", ("nearest", "linear"))
@pytest.mark.parametrize("scales", [(1, 1, 2.0, 3.0), (1, 1, 0.5, 0.6), (1, 1, 1.7, 0.35)])
def test_opset_versions(opset, mode, scales):
    if opset == 11:  # roi and scales are required inputs there (sizes unused)
        model = resize_model(NCHW, roi=[], scales=scales, opset=11, mode=mode)
    else:
        model = resize_model(NCHW, scales=scales, opset=opset, mode=mode)
    check(model, {"x": data(*NCHW)}, exact=mode == "nearest")


def test_opset_11_sizes_with_empty_scales():
    model = resize_model(NCHW, roi=[], scales=[], sizes=(2, 3, 4, 9), opset=11, mode="cubic")
    check(model, {"x": data(*NCHW)})
    tf_half = resize_model(NCHW, roi=[], scales=(1, 1, 2.0, 0.5), opset=11, mode="nearest",
                           coordinate_transformation_mode="tf_half_pixel_for_nn")
    check(tf_half, {"x": data(*NCHW)}, exact=True)


@pytest.mark.parametrize("opset", (7, 9))
@pytest.mark.parametrize("mode", ("nearest", "linear"))
def test_upsample(opset, mode):
    scales = [1.0, 1.0, 2.0, 2.5]
    if opset == 7:
        node = helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=scales)
        inits = []
    else:
        node = helper.make_node("Upsample", ["x", "s"], ["y"], mode=mode)
        inits = [numpy_helper.from_array(np.asarray(scales, np.float32), "s")]
    model = make_model([node], [("x", F, list(NCHW))], [("y", F, None)], opset, inits)
    check(model, {"x": data(*NCHW)}, exact=mode == "nearest")


def test_unchanged_shape_is_a_copy_and_unit_scale_axes_are_kept():
    x = {"x": data(*NCHW)}
    # output shape == input shape: onnxruntime copies, even for tf_crop_and_resize
    check(resize_model(NCHW, roi=(0, 0, 0.2, 0.2, 1, 1, 0.8, 0.8), sizes=NCHW, mode="linear",
                       coordinate_transformation_mode="tf_crop_and_resize"), x)
    check(resize_model(NCHW, scales=(1, 1, 1.1, 1.0), mode="cubic"), x)


def test_integer_data_nearest():
    shape = (1, 2, 4, 5)
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest")
    model = make_model([node], [("x", TensorProto.INT32, list(shape))], [("y", TensorProto.INT32, None)], 19,
                       [numpy_helper.from_array(np.asarray((1, 1, 1.5, 0.6), np.float32), "s")])
    check(model, {"x": RNG.integers(-100, 100, shape).astype(np.int32)}, exact=True)


def _node_suite_resize_cases() -> dict:
    """The ONNX node suite's Resize and Upsample cases (importing their modules runs only
    those exports, not the whole suite)."""
    import onnx.backend.test.case.node.resize  # noqa: F401  (registers the cases)
    import onnx.backend.test.case.node.upsample  # noqa: F401
    from onnx.backend.test.case.node import _NodeTestCases

    prefixes = ("test_resize", "test_upsample")
    return {case.name: case for case in _NodeTestCases if case.name.startswith(prefixes)}


NODE_SUITE_RESIZE = _node_suite_resize_cases()
# align_corners downscaling by a scale whose output length is not scale * input: the
# suite's reference divides by scale * input - 1, onnxruntime (and raypass) by the real
# output length - 1; these compare against onnxruntime
ONNXRUNTIME_DIFFERS = {"test_resize_downsample_scales_linear_align_corners",
                       "test_resize_downsample_scales_cubic_align_corners"}


@pytest.mark.parametrize("name", sorted(NODE_SUITE_RESIZE))
def test_node_suite_resize_cases_with_their_shape_inputs_static(name):
    """The suite feeds scales / sizes / roi as graph inputs, so its output shapes are not
    static (the backend test lists them as expected failures). Made initializers, every
    case matches the suite's expected output."""
    case = NODE_SUITE_RESIZE[name]
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    (inputs, outputs), *_ = case.data_sets
    feeds = {}
    graph_inputs = list(model.graph.input)
    del model.graph.input[:]
    for value_info, array in zip(graph_inputs, inputs):
        if value_info.name == model.graph.node[0].input[0]:
            model.graph.input.append(value_info)
            feeds[value_info.name] = array
        else:
            model.graph.initializer.append(numpy_helper.from_array(array, value_info.name))
    if name in ONNXRUNTIME_DIFFERS:
        reference = outputs
        outputs = onnxruntime_outputs(model, feeds)
        assert not np.allclose(outputs[0], reference[0], rtol=1e-3), "onnxruntime agrees with the suite now"
    got = interpreted_outputs(model, feeds)
    for g, e in zip(got, outputs, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=max(case.rtol, RTOL), atol=max(case.atol, ATOL))


def test_resize_errors_name_what_is_wrong():
    runtime_scales = make_model([helper.make_node("Resize", ["x", "", "s"], ["y"])],
                                [("x", F, list(NCHW)), ("s", F, [4])], [("y", F, None)], 19)
    message = r"Resize node .*input 2 \(scales\) must be known at import time"
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(runtime_scales)
    both = resize_model(NCHW, scales=(1, 1, 2, 2), sizes=(2, 3, 12, 10))
    with pytest.raises(OnnxImportError, match="exactly one of scales and sizes"):
        from_onnx(both)
    with pytest.raises(OnnxImportError, match="unknown coordinate_transformation_mode 'bogus'"):
        from_onnx(resize_model(NCHW, scales=(1, 1, 2, 2), coordinate_transformation_mode="bogus"))
    with pytest.raises(OnnxImportError, match=r"scales has 3 values for 4 axes"):
        from_onnx(resize_model(NCHW, scales=(1, 2, 2)))
    ints = make_model([helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")],
                      [("x", TensorProto.INT32, [1, 1, 2, 2])], [("y", TensorProto.INT32, None)], 19,
                      [numpy_helper.from_array(np.asarray((1, 1, 2, 2), np.float32), "s")])
    message = (r"Resize node .*op resize: expected the data of a linear resize of dtype .*float32.*, "
               r"got Tensor\[\(1, 1, 2, 2\), int32\]")
    with pytest.raises(OnnxImportError, match=message):
        from_onnx(ints)


# --------------------------------------------------------------------------- windows


def conv_model(op_type, x_shape, w_shape, opset=19, bias=True, **attrs) -> tuple[onnx.ModelProto, dict]:
    inits = [numpy_helper.from_array(data(*w_shape), "w")]
    inputs = ["x", "w"]
    if bias:
        out_channels = w_shape[0] if op_type == "Conv" else w_shape[1] * attrs.get("group", 1)
        inits.append(numpy_helper.from_array(data(out_channels), "b"))
        inputs.append("b")
    node = helper.make_node(op_type, inputs, ["y"], **attrs)
    model = make_model([node], [("x", F, list(x_shape))], [("y", F, None)], opset, inits)
    return model, {"x": data(*x_shape)}


CONV3D = {
    "plain": ((1, 2, 5, 6, 7), (3, 2, 3, 3, 3), {}),
    "pads-strides": ((2, 2, 6, 5, 7), (4, 2, 2, 3, 2), {"pads": [1, 0, 2, 0, 1, 1], "strides": [2, 1, 3]}),
    "dilated-groups": ((1, 4, 7, 7, 6), (6, 2, 2, 2, 3), {"group": 2, "dilations": [2, 3, 1]}),
    "depthwise": ((1, 3, 4, 5, 6), (3, 1, 3, 3, 3), {"group": 3, "pads": [1, 1, 1, 1, 1, 1]}),
    "same-upper": ((1, 2, 5, 6, 7), (2, 2, 3, 2, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2, 1]}),
    "same-lower": ((1, 2, 5, 6, 7), (2, 2, 2, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [1, 2, 2]}),
    "valid": ((1, 2, 5, 6, 7), (2, 2, 2, 3, 3), {"auto_pad": "VALID", "strides": [2, 1, 2]}),
}


@pytest.mark.parametrize("case", CONV3D, ids=list(CONV3D))
@pytest.mark.parametrize("bias", (True, False))
def test_conv3d(case, bias):
    x_shape, w_shape, attrs = CONV3D[case]
    check(*conv_model("Conv", x_shape, w_shape, bias=bias, **attrs))


CONV_TRANSPOSE = {
    "1d": ((1, 3, 5), (3, 2, 3), {"strides": [2]}),
    "1d-pads-output-padding": ((2, 2, 6), (2, 3, 4), {"strides": [3], "pads": [1, 2], "output_padding": [1]}),
    "1d-groups-dilations": ((1, 4, 5), (4, 1, 3), {"group": 2, "dilations": [2]}),
    "1d-output-shape": ((1, 2, 5), (2, 2, 3), {"strides": [2], "output_shape": [12]}),
    "1d-same-lower": ((1, 2, 5), (2, 2, 3), {"strides": [2], "auto_pad": "SAME_LOWER"}),
    "1d-same-upper-short": ((1, 2, 5), (2, 2, 1), {"strides": [3], "auto_pad": "SAME_UPPER"}),
    "1d-output-shape-odd-crop": ((1, 2, 5), (2, 2, 4), {"strides": [2], "output_shape": [10],
                                                        "auto_pad": "SAME_LOWER"}),
    "1d-output-shape-upper": ((1, 2, 5), (2, 2, 4), {"strides": [2], "output_shape": [10],
                                                     "auto_pad": "SAME_UPPER"}),
    "3d": ((1, 2, 3, 4, 3), (2, 3, 3, 3, 3), {}),
    "3d-strides-pads": ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2),
                        {"strides": [2, 1, 3], "pads": [1, 0, 1, 0, 1, 1], "output_padding": [1, 0, 2]}),
    "3d-groups-dilations": ((2, 4, 3, 3, 4), (4, 2, 2, 2, 3), {"group": 2, "dilations": [2, 1, 2]}),
    "3d-output-shape": ((1, 2, 3, 3, 3), (2, 1, 3, 3, 3), {"strides": [2, 2, 2], "output_shape": [7, 8, 6]}),
    "3d-same-upper": ((1, 2, 3, 4, 3), (2, 2, 3, 2, 3), {"strides": [2, 2, 1], "auto_pad": "SAME_UPPER"}),
}


@pytest.mark.parametrize("case", CONV_TRANSPOSE, ids=list(CONV_TRANSPOSE))
@pytest.mark.parametrize("bias", (True, False))
def test_conv_transpose_1d_and_3d(case, bias):
    x_shape, w_shape, attrs = CONV_TRANSPOSE[case]
    check(*conv_model("ConvTranspose", x_shape, w_shape, bias=bias, **attrs))


def pool_model(op_type, x_shape, **attrs) -> tuple[onnx.ModelProto, dict]:
    node = helper.make_node(op_type, ["x"], ["y"], **attrs)
    return make_model([node], [("x", F, list(x_shape))], [("y", F, None)], 19), {"x": data(*x_shape)}


# kernel, strides, pads, dilations per rank; every combination with ceil_mode and (for
# the average) count_include_pad runs
POOLS = {
    "1d": ((11,), [3], [2], [1, 2], [2]),
    "2d": ((9, 8), [3, 2], [2, 3], [1, 0, 1, 1], [2, 2]),
    "2d-undilated": ((9, 8), [3, 3], [2, 2], [1, 1, 1, 1], [1, 1]),
    "3d": ((7, 8, 9), [2, 3, 2], [2, 1, 3], [1, 0, 1, 0, 1, 1], [2, 1, 2]),
    "3d-undilated": ((6, 7, 5), [3, 2, 2], [2, 2, 1], [1, 1, 0, 1, 0, 1], [1, 1, 1]),
}


@pytest.mark.parametrize("case", POOLS, ids=list(POOLS))
@pytest.mark.parametrize("ceil_mode", (0, 1))
@pytest.mark.parametrize("op_type, count_include_pad", [("MaxPool", None), ("AveragePool", 0),
                                                        ("AveragePool", 1)])
def test_pools_with_dilations_ceil_mode_and_padding(case, ceil_mode, op_type, count_include_pad):
    spatial, kernel, strides, pads, dilations = POOLS[case]
    attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads, "dilations": dilations,
             "ceil_mode": ceil_mode}
    if count_include_pad is not None:
        attrs["count_include_pad"] = count_include_pad
    check(*pool_model(op_type, (2, 3, *spatial), **attrs))


@pytest.mark.parametrize("op_type", ("MaxPool", "AveragePool"))
@pytest.mark.parametrize("auto_pad", ("SAME_UPPER", "SAME_LOWER", "VALID"))
def test_3d_pools_auto_pad(op_type, auto_pad):
    check(*pool_model(op_type, (1, 2, 7, 6, 5), kernel_shape=[3, 2, 3], strides=[2, 2, 1], auto_pad=auto_pad))


def test_window_and_resize_type_errors_name_the_types():
    x = ir.var("x", (1, 4, 5, 6, 7))

    def infer(call, *types):
        return call.op.infer_type(list(types), call.attrs)

    data = TensorType((1, 4, 5, 6, 7), "float32")
    with pytest.raises(IRTypeError, match=r"op nn.conv3d: expected the weight to have 2 input channels "
                                          r"\(data channels 4 / groups 2\), got Tensor\[\(6, 4, 3, 3, 3\)"):
        infer(op.nn.conv3d(x, x, groups=2), data, TensorType((6, 4, 3, 3, 3), "float32"))
    with pytest.raises(IRTypeError, match=r"op nn.max_pool3d: depth: window of extent 9 .* input extent 5"):
        infer(op.nn.max_pool3d(x, (5, 1, 1), dilation=(2, 1, 1)), data)
    with pytest.raises(IRTypeError, match=r"op nn.avg_pool3d: expected the data of rank 5 \(NCDHW\)"):
        infer(op.nn.avg_pool3d(x, 2), TensorType((1, 4, 5, 6), "float32"))
    with pytest.raises(IRTypeError, match=r"op resize: sizes must hold 5 positive ints"):
        infer(op.resize.resize(x, (1, 4, 10, 12), (1, 1, 2, 2, 1)), data)
    assert infer(op.resize.resize(x, (1, 4, 10, 12, 7), (1, 1, 2, 2, 1), mode="cubic"), data) == \
        TensorType((1, 4, 10, 12, 7), "float32")


def test_window_rank_errors_name_the_shape():
    model, _ = pool_model("MaxPool", (1, 1, 3, 3, 3, 3), kernel_shape=[2, 2, 2, 2])
    with pytest.raises(OnnxImportError, match=r"only 1-D, 2-D and 3-D windows .* shape \(1, 1, 3, 3, 3, 3\)"):
        from_onnx(model)


# --------------------------------------------------------------------------- compiled


@pytest.fixture(scope="module")
def object_cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("codegen-cache"))


def compiled_matches_onnxruntime(model: onnx.ModelProto, feeds: dict, cache_dir: str,
                                 exact_outputs: tuple[str, ...] = ()) -> None:
    expected = onnxruntime_outputs(model, feeds)
    # the backend's model checker wants shaped graph outputs
    for output, array in zip(model.graph.output, expected):
        output.CopyFrom(helper.make_tensor_value_info(output.name, F, array.shape))
    rep = RaypassBackend.prepare(model, config={"codegen.cache_dir": cache_dir})
    for name, got, want in zip((o.name for o in model.graph.output), rep.run(feeds), expected, strict=True):
        assert got.shape == want.shape, name
        if name in exact_outputs:
            np.testing.assert_array_equal(got, want, err_msg=name)
        else:
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=name)


def test_resize_modes_compiled(object_cache):
    """Every interpolation, rounding and extrapolation path of the compute rule, in one
    library (one Resize node per output)."""
    shape = (1, 2, 9, 8)
    variants = {
        "nearest_floor_ties": ({"scales": (1, 1, 0.5, 2.0)},
                               {"mode": "nearest", "nearest_mode": "round_prefer_floor"}),
        "nearest_ceil_asym": ({"scales": (1, 1, 1.5, 0.5)},
                              {"mode": "nearest", "nearest_mode": "round_prefer_ceil",
                               "coordinate_transformation_mode": "asymmetric"}),
        "nearest_crop": ({"roi": (0, 0, -0.2, 0.3, 1, 1, 0.8, 1.2), "sizes": (1, 2, 5, 6)},
                         {"mode": "nearest", "coordinate_transformation_mode": "tf_crop_and_resize",
                          "extrapolation_value": -3.0}),
        "linear_align": ({"sizes": (1, 2, 5, 13)},
                         {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
        "linear_sym": ({"scales": (1, 1, 1.7, 0.6)},
                       {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}),
        "cubic_exclude": ({"scales": (1, 1, 2.0, 0.75)}, {"mode": "cubic", "exclude_outside": 1,
                                                         "cubic_coeff_a": -0.5}),
        "cubic_crop": ({"roi": (0, 0, 0.1, -0.2, 1, 1, 0.7, 0.9), "sizes": (1, 2, 4, 7)},
                       {"mode": "cubic", "coordinate_transformation_mode": "tf_crop_and_resize",
                        "extrapolation_value": 1.5}),
        "linear_antialias": ({"scales": (1, 1, 0.4, 0.5)}, {"mode": "linear", "antialias": 1}),
        "cubic_antialias": ({"sizes": (1, 2, 4, 3)}, {"mode": "cubic", "antialias": 1, "exclude_outside": 1}),
    }
    nodes, inits = [], []
    for name, (inputs, attrs) in variants.items():
        names = ["x", "", "", ""]
        for position, key, dtype in ((1, "roi", np.float32), (2, "scales", np.float32),
                                     (3, "sizes", np.int64)):
            if key in inputs:
                names[position] = f"{name}_{key}"
                inits.append(numpy_helper.from_array(np.asarray(inputs[key], dtype), names[position]))
        while names[-1] == "":
            names.pop()
        nodes.append(helper.make_node("Resize", names, [name], **attrs))
    model = make_model(nodes, [("x", F, list(shape))], [(n, F, None) for n in variants], 19, inits)
    exact = [n for n in variants if n.startswith("nearest")]
    compiled_matches_onnxruntime(model, {"x": data(*shape)}, object_cache, exact)


def test_windows_compiled(object_cache):
    """3-D convolution, 1-D and 3-D transposed convolutions, 3-D pools and the 2-D
    average pools the 2-D op cannot express, through their compute rules."""
    x3, x2, x1 = "x3", "x2", "x1"
    nodes = [
        helper.make_node("Conv", [x3, "w3", "b3"], ["conv3d"], group=2, strides=[1, 2, 1],
                         dilations=[2, 1, 1], pads=[1, 0, 1, 1, 1, 0]),
        helper.make_node("ConvTranspose", [x3, "wt3"], ["convt3d"], strides=[2, 1, 2],
                         pads=[1, 0, 0, 0, 1, 1], output_padding=[1, 0, 0]),
        helper.make_node("ConvTranspose", [x1, "wt1", "bt1"], ["convt1d"], strides=[2], group=2,
                         dilations=[2]),
        helper.make_node("MaxPool", [x3], ["maxpool3d"], kernel_shape=[2, 3, 2], strides=[2, 2, 1],
                         dilations=[1, 1, 2], pads=[0, 1, 1, 1, 1, 0], ceil_mode=1),
        helper.make_node("AveragePool", [x3], ["avgpool3d"], kernel_shape=[3, 2, 2], strides=[2, 2, 2],
                         pads=[1, 1, 0, 1, 0, 1], ceil_mode=1, count_include_pad=1),
        helper.make_node("AveragePool", [x3], ["avgpool3d_dilated"], kernel_shape=[2, 2, 2],
                         dilations=[2, 2, 1], pads=[1, 0, 1, 0, 1, 1]),
        helper.make_node("AveragePool", [x2], ["avgpool2d_dilated"], kernel_shape=[3, 2], dilations=[2, 2],
                         strides=[1, 2], pads=[1, 1, 2, 0], ceil_mode=1),
        helper.make_node("AveragePool", [x2], ["avgpool2d_ceil_counting_pads"], kernel_shape=[3, 3],
                         strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1, count_include_pad=1),
    ]
    inits = [numpy_helper.from_array(array, name) for name, array in (
        ("w3", data(4, 1, 2, 3, 2)), ("b3", data(4)), ("wt3", data(2, 3, 2, 2, 3)),
        ("wt1", data(4, 2, 3)), ("bt1", data(4)))]
    outputs = [n.output[0] for n in nodes]
    model = make_model(nodes, [(x3, F, [1, 2, 5, 6, 7]), (x2, F, [2, 3, 8, 9]), (x1, F, [1, 4, 6])],
                       [(o, F, None) for o in outputs], 19, inits)
    feeds = {x3: data(1, 2, 5, 6, 7), x2: data(2, 3, 8, 9), x1: data(1, 4, 6)}
    compiled_matches_onnxruntime(model, feeds, object_cache)


def test_every_resize_attribute_combination_imports():
    """The grid of the spec's enumerated attributes all imports and type-checks (the
    ones onnxruntime can run are compared above)."""
    for mode, coordinate_mode, nearest_mode in itertools.product(
            ("nearest", "linear", "cubic"),
            ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
             "tf_crop_and_resize"),
            ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")):
        model = resize_model(NCHW, sizes=(2, 3, 4, 7), roi=(0, 0, 0.1, 0.2, 1, 1, 0.9, 0.8), mode=mode,
                             coordinate_transformation_mode=coordinate_mode, nearest_mode=nearest_mode)
        out = interpreted_outputs(model, {"x": data(*NCHW)})[0]
        assert out.shape == (2, 3, 4, 7) and np.isfinite(out).all()

"""The Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions (passinfra/codegen/compute/conv_winograd.py,
the C runtime's ``rp_winograd_f32``, the weight transform of passinfra/ir/op/winograd_weights.py).

Winograd computes another sum than the direct convolution (transformed patches times a
transformed weight), so its results are checked against the exact one (float64) within a
bound derived for its own arithmetic: every operation of the algorithm rounds once, and
the same computation on absolute values (``|A|^T [(|G| |g| |G|^T) * (|B|^T |d| |B|)] |A|``,
summed over the channels) bounds what the roundings can add up to (Higham's gamma(n) with
``n`` the operations on any path: the C products' sum, the transforms' adds, the weight's
rounding). A dropped or misplaced tap moves an output by a term's size, far beyond it.
"""

from __future__ import annotations

import numpy as np
import pytest

import passinfra
from passinfra import ir, tir
from passinfra.build import COMPILE_PIPELINE
from passinfra.codegen.compute.conv_direct import ConvGeometry
from passinfra.codegen.compute.conv_plan import CONV_KERNEL_CONFIG, WINOGRAD_CONFIG, choose_kernel
from passinfra.codegen.compute.conv_winograd import (
    MIN_CHANNELS,
    MIN_SIZE,
    TILE_CONFIG,
    TILES,
    applies,
    winograd_tile,
)
from passinfra.errors import IRTypeError
from passinfra.frontend import from_onnx
from passinfra.ir.op import winograd_weights
from passinfra.runtime.module import CONV_ISA_LEVELS
from passinfra.tir.evaluator import run_prim_func
from passinfra.tir.intrinsics import is_conv, is_winograd
from passinfra.transform import PassContext, Sequential, get_pass
from passinfra.transform.errors import PassConfigError
from tests.codegen.test_cg_conv_kernels import _compiled_functions, _nodes, build, conv_model
from tests.codegen.test_cg_conv_microkernel import _levels
from tests.numerics import gamma

# (name, data shape NCHW, out channels, Conv attributes): odd sizes (a last tile of one
# row or column), asymmetric padding, channels past no vector of 8, outputs in a part of
# a panel, a batch; few tile rows (units split the outputs into parts); a transform over
# 1 MiB (units of the whole image, parts for the threads)
CASES = [
    ("pad1_odd_sizes_tails", (1, 35, 9, 11), 37, {"pads": [1, 1, 1, 1]}),
    ("asymmetric_pads_batch2", (2, 32, 10, 9), 40, {"pads": [0, 2, 1, 0]}),
    ("valid_wide_image", (1, 40, 12, 33), 32, {}),
    ("few_tile_rows_output_parts", (1, 32, 8, 8), 160, {"pads": [1, 1, 1, 1]}),
    ("large_transform_whole_image_parts", (1, 136, 9, 10), 136, {"pads": [1, 1, 1, 1]}),
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("codegen_cache_conv_winograd"))


def _case(name: str):
    return next(case for case in CASES if case[0] == name)


def _model(name: str):
    _, data_shape, out_channels, attrs = _case(name)
    return conv_model(data_shape, out_channels, (3, 3), **attrs), data_shape


def _conv_exact(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, pads: list[int]) -> np.ndarray:
    """The convolution in float64 (NCHW data, OIHW weight)."""
    top, left, bottom, right = pads
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    out_h, out_w = padded.shape[2] - 2, padded.shape[3] - 2
    result = np.zeros((x.shape[0], weight.shape[0], out_h, out_w))
    for ky in range(3):
        for kx in range(3):
            window = padded[:, :, ky:ky + out_h, kx:kx + out_w]
            result += np.einsum("nchw,oc->nohw", window, weight[:, :, ky, kx].astype(np.float64))
    return result + bias.astype(np.float64)[None, :, None, None]


def _winograd_magnitude(x: np.ndarray, weight: np.ndarray, pads: list[int], tile: int) -> np.ndarray:
    """Winograd's computation on absolute values: per output, what its roundings scale with."""
    matrices = winograd_weights.transform(tile)
    abs_g, abs_b, abs_a = np.abs(matrices.g), np.abs(matrices.b_t.T), np.abs(matrices.a_t.T)
    m, alpha = tile, tile + 2
    top, left, bottom, right = pads
    padded = np.abs(np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right))))
    out_h, out_w = padded.shape[2] - 2, padded.shape[3] - 2
    tiles_h, tiles_w = -(-out_h // m), -(-out_w // m)
    padded = np.pad(padded, ((0, 0), (0, 0), (0, m * tiles_h + 2 - padded.shape[2]),
                             (0, m * tiles_w + 2 - padded.shape[3])))
    u = np.einsum("ai,ocij,bj->ocab", abs_g, np.abs(weight.astype(np.float64)), abs_g)
    result = np.zeros((x.shape[0], weight.shape[0], m * tiles_h, m * tiles_w))
    for ty in range(tiles_h):
        for tx in range(tiles_w):
            patch = padded[:, :, m * ty:m * ty + alpha, m * tx:m * tx + alpha]
            v = np.einsum("ia,ncij,jb->ncab", abs_b, patch, abs_b)
            products = np.einsum("ncab,ocab->noab", v, u)
            outputs = np.einsum("ia,noij,jb->noab", abs_a, products, abs_a)
            result[:, :, m * ty:m * ty + m, m * tx:m * tx + m] = outputs
    return result[:, :, :out_h, :out_w]


def _assert_winograd_close(got: np.ndarray, x: np.ndarray, model, pads: list[int], tile: int) -> None:
    weight, bias = (np.asarray(onnx_array) for onnx_array in _initializers(model))
    exact = _conv_exact(x, weight, bias, pads)
    # the channels' sum, the data transform's levels of operations (2 a side for F(2x2),
    # 4 for F(4x4)), the output's as many, the weight's rounding, the bias add
    steps = x.shape[1] + (6 if tile == 2 else 10)
    bound = gamma(steps) * (_winograd_magnitude(x, weight, pads, tile) + np.abs(bias)[None, :, None, None])
    error = np.abs(got.astype(np.float64) - exact)
    assert got.shape == exact.shape
    worst = error.argmax()
    assert np.all(error <= bound), f"max error {error.max():.3g}, bound there {bound.flat[worst]:.3g}"


def _initializers(model):
    from onnx import numpy_helper

    return [numpy_helper.to_array(init) for init in model.graph.initializer]


def _pads(name: str) -> list[int]:
    return list(_case(name)[3].get("pads", [0, 0, 0, 0]))


def _built(cache_dir: str, name: str, tile: int):
    model, data_shape = _model(name)
    mod = from_onnx(model)
    x = np.random.default_rng(3).standard_normal(data_shape).astype(np.float32)
    config = {"codegen.cache_dir": cache_dir, CONV_KERNEL_CONFIG: "winograd", TILE_CONFIG: tile}
    with PassContext(config=config):
        return model, x, passinfra.build(mod)


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("name", [case[0] for case in CASES])
def test_winograd_matches_the_exact_convolution_on_every_isa(cache_dir, name, tile):
    model, x, lib = _built(cache_dir, name, tile)
    try:
        for level in _levels(lib):
            assert lib.conv_isa(level) == level
            _assert_winograd_close(lib(x), x, model, _pads(name), tile)
    finally:
        lib.conv_isa(CONV_ISA_LEVELS[-1])


@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("name", ["pad1_odd_sizes_tails", "few_tile_rows_output_parts",
                                  "large_transform_whole_image_parts"])
def test_bit_identical_for_any_thread_count_and_vector_isa(cache_dir, name, tile):
    _, x, lib = _built(cache_dir, name, tile)
    results = {}
    for threads in (1, 2, 3):
        lib.set_num_threads(threads)
        results[threads] = lib(x)
    np.testing.assert_array_equal(results[2], results[1])
    np.testing.assert_array_equal(results[3], results[1])
    if lib.conv_isa() == "avx512":  # the transforms are adds, the GEMMs the pointwise tiles'
        try:
            assert lib.conv_isa("avx2") == "avx2"
            np.testing.assert_array_equal(lib(x), results[3])
        finally:
            lib.conv_isa("avx512")


def _conv_function(cache_dir: str, name: str, tile: int):
    model, _ = _model(name)
    names = COMPILE_PIPELINE[:COMPILE_PIPELINE.index("CodegenC")]
    config = {"codegen.cache_dir": cache_dir, CONV_KERNEL_CONFIG: "winograd", TILE_CONFIG: tile}
    with PassContext(opt_level=3, config=config):
        lowered = Sequential([get_pass(n) for n in names])(from_onnx(model))
    functions = [f for f in lowered.functions.values() if isinstance(f, tir.PrimFunc)]
    (conv,) = [f for f in functions if "nn.conv2d" in f.attrs["op_names"]]
    return conv


@pytest.mark.parametrize("tile", TILES)
def test_the_kernel_calls_the_runtime_with_the_transform_and_runs_in_the_tir_interpreter(cache_dir, tile):
    conv = _conv_function(cache_dir, "asymmetric_pads_batch2", tile)
    calls = [n.value for n in _nodes(conv.body) if isinstance(n, tir.Evaluate)]
    assert [c.name for c in calls if is_winograd(c)] == ["rp_winograd"] and not any(is_conv(c) for c in calls)
    assert "winograd_weights.unpack" in conv.attrs["op_names"] and conv.attrs["uses_conv_runtime"]
    model, data_shape = _model("asymmetric_pads_batch2")
    x = np.random.default_rng(3).standard_normal(data_shape).astype(np.float32)
    weight, bias = _initializers(model)
    transform = winograd_weights.to_winograd(np.ascontiguousarray(weight.transpose(2, 3, 1, 0)), tile)
    assert transform.shape == (2, (tile + 2) ** 2 * 32, 32)  # [ceil(40/32), (tile + 2)^2 * C, 32]
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    by_size = {nhwc.size: nhwc, transform.size: transform, bias.size: bias}  # the parameters, whatever order
    params = conv.params[:conv.attrs["num_inputs"]]
    inputs = [by_size[int(np.prod([int(d) for d in p.shape]))] for p in params]
    got = np.asarray(run_prim_func(conv, *inputs)).reshape(2, 9, 9, 40)  # pads top 0, bottom 1
    _assert_winograd_close(got.transpose(0, 3, 1, 2), x, model, _pads("asymmetric_pads_batch2"), tile)


def test_a_weight_that_is_no_constant_runs_on_the_microkernels(cache_dir):
    """Only a constant weight is stored as its transform; a weight computed in the graph
    reaches the kernel as it is, which then calls the microkernels (same results)."""
    data = ir.var("x", (1, 9, 10, 32))
    weight = ir.var("w", (3, 3, 32, 40))
    call = ir.op.nn.conv2d(data, weight, padding=(1, 1), data_layout="NHWC", kernel_layout="HWIO")
    mod = ir.IRModule.from_expr(ir.Function([data, weight], call))
    lib = build(mod, cache_dir, "winograd")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 9, 10, 32)).astype(np.float32)
    w = rng.standard_normal((3, 3, 32, 40)).astype(np.float32)
    zero_bias = np.zeros(40, np.float32)
    nchw = _conv_exact(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), zero_bias, [1, 1, 1, 1])
    np.testing.assert_allclose(lib(x, w), nchw.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("tile", "rows"), [(2, 16 * 5), (4, 36 * 5)])
def test_the_transform_round_trips_and_checks_its_shape(tile, rows):
    from passinfra.ir.type_infer import infer_type

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((3, 3, 5, 45)).astype(np.float32)
    panels = winograd_weights.to_winograd(weight, tile)
    assert panels.shape == winograd_weights.winograd_shape(5, 45, tile) == (2, rows, 32)
    assert not panels[1, :, 13:].any()  # zeros past the 45 outputs
    # the weight back from its rounded transform: within a few roundings of each element
    back = winograd_weights.from_winograd(panels, weight.shape, tile)
    np.testing.assert_allclose(back, weight, rtol=0, atol=4e-6)
    var = ir.var("u", panels.shape)
    unpacked = infer_type(ir.Function([var], winograd_weights.unpack(var, weight.shape, tile)))
    assert tuple(unpacked.ret_type.shape) == weight.shape
    with pytest.raises(IRTypeError, match="is stored as"):
        infer_type(ir.Function([var], winograd_weights.unpack(var, (3, 3, 6, 45), tile)))
    with pytest.raises(IRTypeError, match="no Winograd transform for tiles of 3"):
        infer_type(ir.Function([var], winograd_weights.unpack(var, weight.shape, 3)))


def test_a_bad_tile_setting_is_one_clear_error():
    with PassContext(config={TILE_CONFIG: 3}), pytest.raises(PassConfigError, match=TILE_CONFIG):
        winograd_tile()


def _geometry(channels, out_channels, size=14, strides=(1, 1), kernel=3):
    attrs = {"strides": strides, "dilation": (1, 1), "padding": (1, 1, 1, 1), "groups": 1}
    out = (size - 1) // strides[0] + 1 if kernel == 3 else size
    return ConvGeometry.of(attrs, (1, size, size, channels), (kernel, kernel, channels, out_channels),
                           (1, out, out, out_channels))


@pytest.mark.parametrize("tile", TILES)
def test_the_rule_runs_winograd_on_the_avx2_and_avx512_targets_only_where_it_pays(tile):
    with PassContext(config={TILE_CONFIG: tile}):
        assert applies(_geometry(64, 64), tile)
        assert choose_kernel(_geometry(64, 64), True, "avx2") == "winograd"
        assert choose_kernel(_geometry(64, 64), True, "portable") != "winograd"
        # AVX-512: from 32 input channels, 10M multiply-adds (ResNet-50's 64 at 56x56, not
        # resnet20's 2.4M) and tiles that cover the output without much waste (not 13x13)
        assert choose_kernel(_geometry(64, 64, size=56), True, "avx512") == "winograd"
        assert choose_kernel(_geometry(256, 256, size=14), True, "avx512") == "winograd"
        assert choose_kernel(_geometry(64, 64), True, "avx512") == "microkernel"  # 7.2M
        assert choose_kernel(_geometry(16, 64, size=56), True, "avx512") == "microkernel"
    assert choose_kernel(_geometry(64, 256, size=13), True, "avx2") == "winograd"
    assert choose_kernel(_geometry(64, 256, size=13), True, "avx512") == "microkernel"  # 16x16 of tiles
    least = MIN_CHANNELS[tile]
    assert applies(_geometry(least, least, size=16), tile)
    assert not applies(_geometry(least - 1, 64), tile) and not applies(_geometry(64, least - 1), tile)
    assert not applies(_geometry(64, 64, size=MIN_SIZE[tile] - 1), tile)
    assert not applies(_geometry(64, 64, strides=(2, 2)), tile)
    assert not applies(_geometry(64, 64, kernel=1), tile)
    # a transform the output's pixels do not pay for: 256 channels at 7x7 (F(4x4): 9 MiB for 49)
    assert not applies(_geometry(256, 256, size=7), tile)
    assert applies(_geometry(256, 256, size=14), tile)
    with PassContext(config={WINOGRAD_CONFIG: False, TILE_CONFIG: tile}):
        assert choose_kernel(_geometry(64, 64), True, "avx2") == "microkernel"


def test_tiles_of_four_pay_from_fewer_channels_and_smaller_images_than_tiles_of_two():
    assert applies(_geometry(16, 16, size=32), 4) and not applies(_geometry(16, 16, size=32), 2)
    assert applies(_geometry(128, 128, size=7), 4) and not applies(_geometry(128, 128, size=7), 2)


def test_forced_where_it_does_not_apply_the_rule_decides(cache_dir):
    model = conv_model((1, 8, 8, 8), 8, (3, 3), pads=[1, 1, 1, 1])  # too few channels for either tile
    functions = _compiled_functions(from_onnx(model), "winograd", cache_dir)
    calls = [n.value for f in functions for n in _nodes(f.body) if isinstance(n, tir.Evaluate)]
    assert any(is_conv(c) for c in calls) and not any(is_winograd(c) for c in calls)


def test_a_weight_in_the_microkernels_panels_reaches_them_under_a_winograd_plan():
    """A function whose weight PanelWeights stored for the microkernels (planned under
    another config) lowers under the Winograd plan to the microkernels, panels in place."""
    from passinfra.codegen.lower import lower_primitive_function
    from passinfra.ir.op import weight_panels
    from passinfra.runtime.interpreter import evaluate

    shapes = ((1, 9, 9, 32), (3, 3, 32, 40))
    x, panels = ir.var("x", shapes[0]), ir.var("p", (2, 9 * 32, 32))
    conv = ir.op.nn.conv2d(x, weight_panels.unpack(panels, shapes[1]), padding=(1, 1), data_layout="NHWC",
                           kernel_layout="HWIO")
    func = ir.Function([x, panels], conv)
    rng = np.random.default_rng(0)
    data, weight = (rng.standard_normal(shape).astype(np.float32) for shape in shapes)
    packed = weight_panels.to_panels(weight, 32)
    with PassContext(config={CONV_KERNEL_CONFIG: "winograd"}):
        lowered = lower_primitive_function(func, "kernel")
    calls = [n.value for n in _nodes(lowered.body) if isinstance(n, tir.Evaluate)]
    assert [c.args[1].buffer.name for c in calls if is_conv(c)] == [lowered.params[1].name]
    assert not any(is_winograd(c) for c in calls)
    expected = evaluate(ir.IRModule({"main": func}), data, packed)
    got = np.asarray(run_prim_func(lowered, data, packed)).reshape(expected.shape)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)

"""The convolution microkernels (passinfra/codegen/conv_runtime.py, the C runtime, and
passinfra/codegen/compute/conv_microkernel.py, the calls): convolutions with one group,
channels-last, against the reference interpreter.

Shapes cover what the ONNX spec allows a Conv with one group: strides, dilations,
explicit asymmetric pads, ``auto_pad``, even kernels, a window beyond the padding, 1-D
and 2-D, batches; output channels that fill no vector, part of one or several (tails of
the masked loads), input channels past one chunk of the runtime's channel loop; weights
small enough for calls per row of output and large enough for one call per image that
the runtime splits over the threads. Every case runs with each instruction set the CPU
has. The AVX-512 and AVX2 kernels must give identical bits, any thread count must too.
"""

from __future__ import annotations

import numpy as np
import pytest

import passinfra
from passinfra import ir, tir
from passinfra.build import COMPILE_PIPELINE
from passinfra.codegen import conv_runtime
from passinfra.codegen.cc_driver import CompilerSettings
from passinfra.codegen.compute.conv_direct import ConvGeometry
from passinfra.codegen.compute.conv_microkernel import CACHED_WEIGHT_BYTES, rows_per_block
from passinfra.codegen.compute.conv_plan import CONV_KERNEL_CONFIG, WINOGRAD_CONFIG, choose_kernel
from passinfra.codegen.conv_runtime import CHANNEL_CHUNK
from passinfra.codegen.lower import lower_primitive_function
from passinfra.codegen.passes.link_library import uses_conv_runtime
from passinfra.errors import RaypassError
from passinfra.frontend import from_onnx
from passinfra.ir import op
from passinfra.runtime.interpreter import evaluate
from passinfra.runtime.module import CONV_ISA_LEVELS, MAX_ISA_ENV, load_module
from passinfra.tir.evaluator import run_prim_func
from passinfra.tir.intrinsics import conv_sizes, is_conv, is_gemm
from passinfra.transform import PassContext, Sequential, get_pass
from tests.codegen.test_cg_conv_kernels import _compiled_functions, _nodes, assert_close, build, conv_model
from tests.graph_sums import graph_sums
from tests.numerics import assert_sums_close

# (name, data shape, out channels, kernel, Conv attributes)
CASES = [
    ("3x3_pad1_small_channels", (1, 8, 9, 11), 8, (3, 3), {"pads": [1, 1, 1, 1]}),
    ("strided_dilated_asymmetric_tail37_batch2", (2, 20, 11, 13), 37, (3, 2),
     {"pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2]}),
    ("pointwise_channels_past_one_chunk", (1, CHANNEL_CHUNK + 44, 5, 5), 40, (1, 1), {}),
    ("tail17_same_upper_even_kernel", (1, 16, 7, 7), 17, (4, 4),
     {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("tail5_same_lower", (1, 24, 6, 7), 5, (2, 2), {"auto_pad": "SAME_LOWER"}),
    ("valid_33_outputs", (1, 32, 8, 9), 33, (3, 3), {"auto_pad": "VALID"}),
    # AVX2's 3-pixel tiles of 4 vectors and of 3, whole and with the last vector masked
    # (61 = 32 + 29, 29 = 3 x 8 + 5; 21 = 2 x 8 + 5)
    ("tail61_three_pixel_tiles", (1, 20, 6, 9), 61, (3, 3), {"pads": [1, 1, 1, 1]}),
    ("tail21_three_vectors", (1, 12, 5, 8), 21, (3, 3), {"pads": [1, 1, 1, 1]}),
    # pointwise (1x1, stride 1, no padding): AVX2 reads pixel q's channels at q * stride
    # without a tap setup; whole and masked blocks of 32, a grouped one of 12, a batch
    ("pointwise_short_sum_tail61", (1, 20, 5, 7), 61, (1, 1), {}),
    ("pointwise_grouped_batch2_tail12", (2, 32, 4, 5), 24, (1, 1), {"group": 2}),
    # AVX-512 row tiles of a pointwise convolution span output rows (7x7: 4 x 12 + 1)
    ("pointwise_row_tiles_span_rows", (2, 40, 7, 7), 48, (1, 1), {}),
    ("window_beyond_the_padding", (1, 16, 3, 3), 16, (3, 3), {"pads": [2, 2, 2, 2], "strides": [3, 3]}),
    ("one_pixel_wide", (1, 16, 9, 1), 24, (3, 1), {"pads": [1, 0, 1, 0]}),
    ("conv1d_strided_dilated", (2, 16, 30), 48, (3,), {"strides": [2], "dilations": [3], "pads": [1, 2]}),
    # weight above CACHED_WEIGHT_BYTES: one call per image, split by the runtime
    ("large_weight_whole_image", (1, 128, 7, 7), 160, (3, 3), {"pads": [1, 1, 1, 1]}),
    # past one chunk of channels: every tile of a span sums a chunk, then adds the next
    # one's products to its partial sums in the output (a whole block of 32 and a masked
    # one of 29, tiles at the borders and inside, a last chunk of 20 channels)
    ("chunk_by_chunk_tail61", (1, CHANNEL_CHUNK + 20, 5, 7), 61, (3, 3), {"pads": [1, 1, 1, 1]}),
    # AVX-512 row tiles (16 pixels of one vector of channels, 12 of two) on rows of 16+
    # output pixels: at the borders (a copy of the window with zeros), inside, strided and
    # dilated (one tap at a time), grouped (the columns of a group's channels are apart),
    # past one chunk of channels, a window past the copy's limit (the 8-pixel tiles), a
    # window wholly in the padding; 8-pixel tiles for the rest of a row
    ("row_tiles_one_vector_borders", (1, 16, 5, 40), 16, (3, 3), {"pads": [1, 1, 1, 1]}),
    ("row_tiles_two_vectors_and_a_tail_strided_dilated", (1, 24, 7, 53), 40, (3, 3),
     {"pads": [1, 3, 1, 2], "strides": [1, 2], "dilations": [1, 2]}),
    ("row_tiles_grouped", (2, 32, 4, 37), 32, (3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    ("row_tiles_channels_past_one_chunk", (1, CHANNEL_CHUNK + 20, 3, 20), 16, (3, 3), {"pads": [1, 1, 1, 1]}),
    ("row_tiles_window_past_the_copy", (1, CHANNEL_CHUNK + 8, 2, 100), 40, (1, 7),
     {"pads": [0, 3, 0, 3], "strides": [1, 4]}),
    ("row_tiles_window_in_the_padding", (1, 16, 3, 3), 12, (3, 3), {"pads": [2, 20, 2, 20]}),
    ("row_tiles_conv1d", (1, 20, 100), 24, (5,), {"pads": [2, 2]}),
    # depthwise (rp_dwconv2d): rows of four-pixel tiles for widths 3, 5, 7 and strides 1, 2,
    # one pixel at a time otherwise and past the last tile; channel tails
    ("depthwise_3x3_tail40", (1, 40, 9, 11), 40, (3, 3), {"group": 40, "pads": [1, 1, 1, 1]}),
    ("depthwise_5x5_stride2_batch2", (2, 24, 13, 12), 24, (5, 5), {"group": 24, "pads": [2, 2, 2, 2],
                                                                    "strides": [2, 2]}),
    ("depthwise_7x7_asymmetric", (1, 17, 10, 9), 17, (7, 7), {"group": 17, "pads": [3, 1, 2, 4]}),
    ("depthwise_dilated_even_kernel", (1, 32, 11, 12), 32, (4, 3), {"group": 32, "dilations": [2, 2],
                                                                     "pads": [3, 2, 3, 2]}),
    ("depthwise_3x3_stride3_beyond_padding", (1, 16, 5, 5), 16, (3, 3), {"group": 16, "pads": [2, 2, 2, 2],
                                                                          "strides": [3, 3]}),
    ("conv1d_depthwise", (1, 48, 37), 48, (5,), {"group": 48, "pads": [2, 2]}),
    # AVX2's eight-pixel tiles inside the image's columns (rows of 22-40 pixels), with a
    # channel tail (20 = 8 + 8 + 4), strided, 7 wide; four-pixel tiles at the borders
    ("depthwise_8px_3x3_tail20", (1, 20, 5, 22), 20, (3, 3), {"group": 20, "pads": [1, 1, 1, 1]}),
    ("depthwise_8px_5x5_stride2", (1, 16, 6, 40), 16, (5, 5), {"group": 16, "pads": [2, 2, 2, 2],
                                                                              "strides": [2, 2]}),
    ("depthwise_8px_7x7", (1, 8, 4, 24), 8, (7, 7), {"group": 8, "pads": [3, 3, 3, 3]}),
    # grouped: each group's input channels, weight columns and output columns
    ("grouped_16_per_group_tail", (1, 48, 9, 8), 72, (3, 3), {"group": 3, "pads": [1, 1, 1, 1],
                                                               "strides": [2, 1]}),
    ("channel_multiplier_as_groups", (1, 8, 7, 7), 24, (3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("codegen_cache_conv_microkernel"))


def _case(name: str):
    return next(case for case in CASES if case[0] == name)


def _built(cache_dir: str, name: str, seed: int = 1):
    _, data_shape, out_channels, kernel_shape, attrs = _case(name)
    mod = from_onnx(conv_model(data_shape, out_channels, kernel_shape, **attrs))
    x = np.random.default_rng(seed).standard_normal(data_shape).astype(np.float32)
    return mod, x, build(mod, cache_dir, "microkernel")


def _levels(lib) -> list[str]:
    """The instruction sets this CPU runs: the one picked first, and every lower one."""
    best = lib.conv_isa()
    return list(CONV_ISA_LEVELS[:CONV_ISA_LEVELS.index(best) + 1])


@pytest.mark.parametrize("name", [case[0] for case in CASES])
def test_microkernel_matches_interpreter_on_every_isa(cache_dir, name):
    mod, x, lib = _built(cache_dir, name)
    expected = evaluate(mod, x)
    sums = graph_sums(mod, x)  # the microkernels sum in their own order, per instruction set
    try:
        for level in _levels(lib):
            assert lib.conv_isa(level) == level
            assert_close(lib(x), expected, *sums)
    finally:
        lib.conv_isa(CONV_ISA_LEVELS[-1])  # back to the best the CPU has


@pytest.mark.parametrize("name", ["strided_dilated_asymmetric_tail37_batch2", "large_weight_whole_image",
                                  "tail61_three_pixel_tiles", "pointwise_short_sum_tail61",
                                  "pointwise_grouped_batch2_tail12", "pointwise_row_tiles_span_rows",
                                  "pointwise_channels_past_one_chunk",
                                  "depthwise_3x3_tail40", "depthwise_7x7_asymmetric",
                                  "grouped_16_per_group_tail", "row_tiles_one_vector_borders",
                                  "row_tiles_two_vectors_and_a_tail_strided_dilated", "row_tiles_grouped",
                                  "row_tiles_channels_past_one_chunk", "row_tiles_window_past_the_copy",
                                  "chunk_by_chunk_tail61", "depthwise_8px_3x3_tail20",
                                  "depthwise_8px_5x5_stride2", "depthwise_8px_7x7"])
def test_avx512_and_avx2_give_identical_bits(cache_dir, name):
    mod, x, lib = _built(cache_dir, name)
    if lib.conv_isa() != "avx512":
        pytest.skip("this CPU has no AVX-512: there is only one vector kernel to run")
    try:
        wide = lib(x)
        assert lib.conv_isa("avx2") == "avx2"
        np.testing.assert_array_equal(lib(x), wide)
    finally:
        lib.conv_isa("avx512")


@pytest.mark.parametrize("name", ["3x3_pad1_small_channels", "large_weight_whole_image",
                                  "depthwise_5x5_stride2_batch2", "grouped_16_per_group_tail",
                                  "row_tiles_two_vectors_and_a_tail_strided_dilated", "row_tiles_grouped",
                                  "chunk_by_chunk_tail61", "depthwise_8px_3x3_tail20"])
def test_bit_identical_for_any_thread_count(cache_dir, name):
    mod, x, lib = _built(cache_dir, name)
    results = {}
    for threads in (1, 2, 3):
        lib.set_num_threads(threads)
        results[threads] = lib(x)
    np.testing.assert_array_equal(results[2], results[1])
    np.testing.assert_array_equal(results[3], results[1])


def test_runtime_splits_a_large_weight_over_the_threads(cache_dir):
    """One call per image; its units run on the library's pool (the pool's counters)."""
    mod, x, lib = _built(cache_dir, "large_weight_whole_image")
    lib.set_num_threads(2)
    before = lib.thread_stats()
    lib(x)
    after = lib.thread_stats()
    assert after["parallel_loops"] > before["parallel_loops"]


def _conv_function(cache_dir: str, name: str) -> tir.PrimFunc:
    _, data_shape, out_channels, kernel_shape, attrs = _case(name)
    mod = from_onnx(conv_model(data_shape, out_channels, kernel_shape, **attrs))
    functions = _compiled_functions(mod, "microkernel", cache_dir)
    (conv,) = [f for f in functions if "nn.conv2d" in f.attrs["op_names"]]
    return conv


def test_calls_per_row_or_per_image(cache_dir):
    per_row = _conv_function(cache_dir, "valid_33_outputs")
    calls = [n for n in _nodes(per_row.body) if isinstance(n, tir.Evaluate) and is_conv(n.value)]
    assert len(calls) == 1 and not [n for n in _nodes(per_row.body) if isinstance(n, tir.Evaluate)
                                    and is_gemm(n.value)]
    loops = [n for n in _nodes(per_row.body) if isinstance(n, tir.For)]
    assert loops[0].extent.value == 6  # one call per output row (8 - 3 + 1)
    assert per_row.attrs["uses_conv_runtime"] and not per_row.attrs.get("uses_blas", False)

    whole = _conv_function(cache_dir, "large_weight_whole_image")
    call = next(n for n in _nodes(whole.body) if isinstance(n, tir.Evaluate) and is_conv(n.value))
    assert conv_sizes(call.value)[-3].value == 49  # all 49 pixels of the 7x7 output in one call


def test_rows_per_block_and_the_rule():
    def geometry(channels, out_channels, kernel=3, size=14):
        attrs = {"strides": (1, 1), "dilation": (1, 1), "padding": (1, 1, 1, 1), "groups": 1}
        return ConvGeometry.of(attrs, (1, size, size, channels), (kernel, kernel, channels, out_channels),
                               (1, size, size, out_channels))
    assert rows_per_block(geometry(64, 64)) == 1
    assert rows_per_block(geometry(64, 64, size=2)) == 2  # a block of at least 4 pixels
    big = geometry(256, 256)
    assert 9 * 256 * 256 * 4 > CACHED_WEIGHT_BYTES and rows_per_block(big) == 14
    assert choose_kernel(geometry(64, 64, size=56), use_blas=True) == "winograd"  # a stride-1 3x3
    with PassContext(config={WINOGRAD_CONFIG: False}):
        assert choose_kernel(geometry(64, 64, size=56), use_blas=True) == "microkernel"
        assert choose_kernel(geometry(64, 64, size=56), use_blas=False) == "microkernel"  # needs no BLAS
    # fewer than MICROKERNEL_MIN_REDUCTION products per output (a 3x3 RGB stem): the
    # microkernels into one row tile's channels, else the blocked GEMM (with BLAS)
    assert choose_kernel(geometry(3, 16, size=112), use_blas=True) == "microkernel"
    assert choose_kernel(geometry(3, 32, size=112), use_blas=True) == "microkernel"
    assert choose_kernel(geometry(3, 64, size=112), use_blas=True) == "group_gemm"
    assert choose_kernel(geometry(3, 64, size=112), use_blas=False) == "microkernel"
    assert choose_kernel(geometry(3, 64, kernel=7, size=112), use_blas=True) == "microkernel"  # 147
    # a 1x1: the microkernels from 128 input channels into 32+ outputs without a short tail
    assert choose_kernel(geometry(128, 96, kernel=1, size=56), use_blas=True) == "microkernel"
    assert choose_kernel(geometry(512, 1000, kernel=1, size=13), use_blas=True) == "microkernel"  # 8 of 1008
    assert choose_kernel(geometry(144, 24, kernel=1, size=56), use_blas=True) == "group_gemm"  # 8 of 32
    assert choose_kernel(geometry(128, 16, kernel=1, size=56), use_blas=True) == "group_gemm"
    assert choose_kernel(geometry(96, 96, kernel=1, size=56), use_blas=True) == "group_gemm"
    assert choose_kernel(geometry(96, 576, kernel=1, size=7), use_blas=True) == "none"  # a large weight
    assert choose_kernel(geometry(96, 96, kernel=1, size=56), use_blas=False) == "microkernel"
    assert choose_kernel(geometry(16, 96, kernel=1, size=112), use_blas=False) == "none"


@pytest.mark.parametrize("strides, padding, dilation", [((1, 1), (1, 1, 1, 1), (1, 1)),
                                                     ((2, 1), (2, 0, 1, 3), (1, 2))],
                         ids=["same", "strided_dilated_asymmetric"])
def test_lowered_call_runs_in_the_tir_interpreter(strides, padding, dilation):
    """The intrinsic's reference meaning (passinfra.tir.intrinsics.evaluate_conv), run by
    the loop-level interpreter, agrees with the graph interpreter."""
    rng = np.random.default_rng(2)
    shapes = ((2, 9, 10, 12), (3, 3, 12, 20), (20,))
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    x, w, b = (ir.var(name, shape) for name, shape in zip("xwb", shapes))
    conv = op.nn.conv2d(x, w, strides=strides, padding=padding, dilation=dilation, data_layout="NHWC",
                        kernel_layout="HWIO")
    func = ir.Function([x, w, b], op.nn.relu(op.add(conv, b)))
    expected = evaluate(ir.IRModule({"main": func}), *arrays)
    with PassContext(config={CONV_KERNEL_CONFIG: "microkernel"}):
        lowered = lower_primitive_function(func, "kernel")
    assert any(isinstance(n, tir.Evaluate) and is_conv(n.value) for n in _nodes(lowered.body))
    got = run_prim_func(lowered, *arrays)
    sums = graph_sums(ir.IRModule({"main": func}), *arrays)
    assert_sums_close(got.reshape(expected.shape), expected, *sums)


def _matmul(shapes):
    x, w, b = (ir.var(name, shape) for name, shape in zip("xwb", shapes))
    return ir.Function([x, w, b], op.nn.relu(op.add(op.matmul(x, w), b)))


@pytest.mark.parametrize("shapes, on_microkernel", [
    (((2, 16, 64), (64, 40), (40,)), True),  # 32 rows: one call, the weight [k, n] as it is
    (((3, 600), (600, 17), (17,)), False),  # too few rows: BLAS (sgemm)
    (((40, 600), (600, 5), (5,)), False),  # too few columns
], ids=["batched_rows", "three_rows", "five_columns"])
def test_matmul_runs_on_the_microkernels(tmp_path, shapes, on_microkernel):
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    func = _matmul(shapes)
    mod = ir.IRModule({"main": func})
    expected = evaluate(mod, *arrays)
    lowered = lower_primitive_function(func, "kernel", use_blas=True)
    calls = [n.value for n in _nodes(lowered.body) if isinstance(n, tir.Evaluate)]
    assert any(is_conv(c) for c in calls) is on_microkernel
    assert any(is_gemm(c) for c in calls) is not on_microkernel
    sums = graph_sums(mod, *arrays)  # up to 600 products, summed in each path's own order
    assert_sums_close(run_prim_func(lowered, *arrays), expected, *sums)
    with PassContext(config={"codegen.matmul_microkernel": False}):
        off = lower_primitive_function(func, "k", use_blas=True)
    assert not any(is_conv(n.value) for n in _nodes(off.body) if isinstance(n, tir.Evaluate))
    with PassContext(config={"codegen.cache_dir": str(tmp_path)}):
        lib = passinfra.build(mod)
    results = []
    for threads in (1, 2, 3):
        lib.set_num_threads(threads)
        results.append(lib(*arrays))
    assert_close(results[0], expected, *sums)
    np.testing.assert_array_equal(results[1], results[0])
    np.testing.assert_array_equal(results[2], results[0])


@pytest.fixture
def runtime_cache_per_build(monkeypatch):
    """The runtime cached in each build's own cache directory (the test session shares one
    across builds: RAYPASS_RUNTIME_CACHE_DIR), so a test sees its own build start it."""
    monkeypatch.delenv(conv_runtime.RUNTIME_CACHE_ENV, raising=False)


def test_the_runtime_compiles_while_the_kernels_do(tmp_path, runtime_cache_per_build):
    """CompileC starts the runtime's object in the background at the first kernel that
    calls it; LinkLibrary only waits for it."""
    _, data_shape, out_channels, kernel_shape, attrs = _case("valid_33_outputs")
    mod = from_onnx(conv_model(data_shape, out_channels, kernel_shape, **attrs))
    names = COMPILE_PIPELINE  # up to CompileC; the link (LINK_PIPELINE) does not run
    assert names[-1] == "CompileC"
    config = {"codegen.cache_dir": str(tmp_path), "codegen.conv_kernel": "microkernel"}
    with PassContext(opt_level=3, config=config) as ctx:
        Sequential([get_pass(name) for name in names])(mod)
        settings = CompilerSettings.from_context(ctx)
    assert conv_runtime.runtime_settings(settings) in conv_runtime._compiles  # started before any link
    assert conv_runtime.runtime_object(settings).object_code


def test_the_linking_process_starts_the_runtime_compile_before_the_kernels(monkeypatch, tmp_path,
                                                                           runtime_cache_per_build):
    """StreamWeights (a module pass: it runs where the library is linked) starts the
    runtime's compile when the module has a convolution, even when the kernels compile
    elsewhere (workers do not start it)."""
    from passinfra.codegen.passes import compile_c
    from passinfra.codegen.weights_stream import streaming_weights

    monkeypatch.setattr(compile_c, "prefetch_runtime_compile", lambda settings: None)  # as on workers
    _, data_shape, out_channels, kernel_shape, attrs = _case("valid_33_outputs")
    mod = from_onnx(conv_model(data_shape, out_channels, kernel_shape, **attrs))
    names = COMPILE_PIPELINE[:COMPILE_PIPELINE.index("StreamWeights") + 1]
    with PassContext(opt_level=3, config={"codegen.cache_dir": str(tmp_path)}) as ctx, streaming_weights():
        Sequential([get_pass(name) for name in names])(mod)
        settings = CompilerSettings.from_context(ctx)
    assert conv_runtime.runtime_settings(settings) in conv_runtime._compiles
    assert conv_runtime.runtime_object(settings).object_code


def test_workers_never_compile_the_runtime_ahead_of_the_link(monkeypatch, tmp_path, runtime_cache_per_build):
    """A scheduler's Ray worker does not prefetch the runtime: the driver links, and a
    worker killed at shutdown mid-compile would leave the compiler's directory behind."""
    from workers import actor

    monkeypatch.setattr(conv_runtime, "_prefetch", True)
    actor.FunctionWorker(0)  # in the driver: prefetching stays on
    assert conv_runtime._prefetch
    monkeypatch.setattr(actor, "_inside_ray_actor", lambda: True)
    actor.FunctionWorker(0)
    settings = CompilerSettings(cache_dir=str(tmp_path))
    conv_runtime.prefetch_runtime_compile(settings)
    assert conv_runtime.runtime_settings(settings) not in conv_runtime._compiles


def test_unknown_isa_is_one_clear_error(cache_dir):
    _, _, lib = _built(cache_dir, "3x3_pad1_small_channels")
    with pytest.raises(RaypassError, match="sse9"):
        lib.conv_isa("sse9")


def test_the_environment_caps_the_instruction_set_a_library_picks(cache_dir, tmp_path, monkeypatch):
    """RAYPASS_MAX_ISA makes a library pick what a CPU without the higher sets picks (the
    suite's AVX2-only mode, tests/avx2_only.py), read when the library first looks."""
    mod, x, lib = _built(cache_dir, "row_tiles_one_vector_borders")
    best = lib.conv_isa()  # what this CPU has (or a cap already in force: an AVX2-only run)
    path = str(tmp_path / "conv.so")
    lib.export_library(path)
    for cap in CONV_ISA_LEVELS[:CONV_ISA_LEVELS.index(best) + 1]:
        monkeypatch.setenv(MAX_ISA_ENV, cap)
        capped = load_module(path)  # a fresh copy of the library: it has not looked yet
        assert capped.conv_isa() == cap
        assert capped.conv_isa("avx512") == cap  # forcing a level stays under the cap too
        assert_close(capped(x), evaluate(mod, x), *graph_sums(mod, x))
    monkeypatch.setenv(MAX_ISA_ENV, "avx3")
    with pytest.raises(RaypassError, match="RAYPASS_MAX_ISA='avx3'"):
        load_module(path)


def test_libraries_without_microkernels_do_not_link_them(cache_dir):
    _, data_shape, _, kernel_shape, attrs = _case("3x3_pad1_small_channels")
    mod = from_onnx(conv_model(data_shape, 16, kernel_shape, group=8, **attrs))
    lib = build(mod, cache_dir, "auto")  # a channel multiplier: the direct kernel
    assert lib.conv_isa() is None
    assert not uses_conv_runtime(mod)


def test_builds_with_different_cache_dirs_share_the_runtime_in_its_own_cache(monkeypatch, tmp_path):
    """RAYPASS_RUNTIME_CACHE_DIR: the runtime compiled for one build's cache directory is a
    cache hit for a build with another, and neither directory holds it."""
    runtime_dir, first, second = tmp_path / "runtime", tmp_path / "first", tmp_path / "second"
    monkeypatch.setenv(conv_runtime.RUNTIME_CACHE_ENV, str(runtime_dir))
    monkeypatch.setattr(conv_runtime, "_compiles", {})  # nothing started in this process yet
    compiled = conv_runtime.runtime_object(CompilerSettings(cache_dir=str(first)))
    monkeypatch.setattr(conv_runtime, "_compiles", {})  # as another process would start
    found = conv_runtime.runtime_object(CompilerSettings(cache_dir=str(second), use_cache=False))
    assert not compiled.cache_hit and found.cache_hit
    assert found.object_code == compiled.object_code
    assert list(runtime_dir.rglob("*.o")) and not first.exists() and not second.exists()

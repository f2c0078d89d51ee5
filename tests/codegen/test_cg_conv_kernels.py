"""The convolution kernels chosen per shape (passinfra/codegen/compute/conv_plan.py): the
direct register-tiled kernel (conv_direct.py, group and channel modes), one GEMM per
group (conv_group_gemm.py) and the microkernels (conv_microkernel.py; their own tests:
test_cg_conv_microkernel.py), compiled, against the reference interpreter.

Shapes and attributes cover what the ONNX spec allows a Conv: groups (depthwise, channel
multipliers, groups with one output each), strides, dilations, explicit asymmetric pads,
``auto_pad`` SAME_UPPER / SAME_LOWER / VALID, even kernels, 1-D and 2-D, batches; each
model is imported from ONNX (AlterOpLayout then runs the convolution channels-last) and
built with every kernel forced (config ``codegen.conv_kernel``) and with the rule.
Fused epilogues (bias, activations, residual add, a per-channel scale) must stay in the
kernel. Outputs are bit-identical with 1, 2 and 3 threads.

Floats are compared within the bound for sums added in any order (tests/numerics.py:
the kernels sum in another order than NumPy and OpenBLAS, whose order depends on the
CPU), never exactly, except thread counts against each other.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import passinfra
from passinfra import ir, tir
from passinfra.build import COMPILE_PIPELINE
from passinfra.codegen.compute.conv_direct import CHANNEL_MODE, GROUP_MODE, ConvGeometry, tile_mode
from passinfra.codegen.compute.conv_group_gemm import is_pointwise, rows_per_block
from passinfra.codegen.compute.conv_plan import (
    CONV_KERNEL_CONFIG,
    WINOGRAD_CONFIG,
    choose_kernel,
    plan_conv2d,
)
from passinfra.codegen.gemm import blas_library
from passinfra.frontend import from_onnx
from passinfra.ir import op
from passinfra.ir.attrs import Attrs
from passinfra.runtime.interpreter import evaluate
from passinfra.runtime.module import Module
from passinfra.tir.intrinsics import is_gemm
from passinfra.transform import PassContext, Sequential, get_pass
from passinfra.transform.errors import PassConfigError
from tests.graph_sums import graph_sums
from tests.numerics import assert_sums_close

HAVE_BLAS = blas_library() is not None
KERNELS = ("direct", "group_gemm", "microkernel", "auto")
THREAD_COUNTS = (1, 2, 3)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("codegen_cache_conv_kernels"))


def build(mod: ir.IRModule, cache_dir: str, kernel: str = "auto") -> Module:
    with PassContext(config={"codegen.cache_dir": cache_dir, CONV_KERNEL_CONFIG: kernel}):
        return passinfra.build(mod)


def assert_close(got: np.ndarray, expected: np.ndarray, terms: int, magnitude: np.ndarray) -> None:
    """``got`` and ``expected`` are the same convolution sums of ``terms`` terms, whose
    absolute values sum to ``magnitude`` (tests/graph_sums.py), added in two orders.
    A dropped, doubled or misplaced tap moves an output by about one term, |x * w| ~ 0.6
    for standard-normal inputs and weights, far beyond the bound 2 * gamma(n) * magnitude
    (under 1e-3 for the windows of up to 72 taps here; ~0.015 for 432 taps)."""
    assert_sums_close(got, expected, terms, magnitude)


# --------------------------------------------------------------------------- ONNX Conv models


def conv_model(data_shape: tuple[int, ...], out_channels: int, kernel: tuple[int, ...], bias: bool = True,
               seed: int = 0, **attrs) -> onnx.ModelProto:
    """One ONNX Conv (+ bias) with the given attributes; weights seeded."""
    rng = np.random.default_rng(seed)
    group = attrs.get("group", 1)
    weight = rng.standard_normal((out_channels, data_shape[1] // group, *kernel)).astype(np.float32)
    initializers = [numpy_helper.from_array(weight, "w")]
    inputs = ["x", "w"]
    if bias:
        bias_values = rng.standard_normal(out_channels).astype(np.float32)
        initializers.append(numpy_helper.from_array(bias_values, "b"))
        inputs.append("b")
    node = helper.make_node("Conv", inputs, ["y"], kernel_shape=list(kernel), **attrs)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, data_shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "conv", [x], [y], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# (name, data shape, out channels, kernel, Conv attributes)
ONNX_CASES = [
    ("depthwise_3x3_pad1", (1, 8, 9, 11), 8, (3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
    ("depthwise_multiplier2_strided_asymmetric", (2, 6, 10, 9), 12, (3, 3),
     {"group": 6, "strides": [2, 2], "pads": [1, 0, 1, 2]}),
    ("depthwise_multiplier8", (1, 3, 6, 7), 24, (3, 3), {"group": 3, "pads": [1, 1, 1, 1]}),
    ("depthwise_dilated_5x5", (1, 16, 12, 12), 16, (5, 5),
     {"group": 16, "dilations": [2, 2], "pads": [4, 4, 4, 4]}),
    ("grouped_cg4_og8", (1, 16, 8, 8), 32, (3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    ("grouped_odd_group_outputs_even_kernel", (1, 10, 7, 6), 15, (2, 3), {"group": 5, "strides": [1, 2]}),
    ("grouped_same_upper_strided", (1, 12, 7, 7), 12, (4, 4),
     {"group": 3, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("grouped_same_lower", (1, 12, 7, 7), 12, (4, 4), {"group": 3, "auto_pad": "SAME_LOWER"}),
    ("grouped_valid_dilated_rows", (1, 8, 11, 9), 16, (3, 3),
     {"group": 2, "auto_pad": "VALID", "dilations": [2, 1]}),
    ("grouped_pointwise_batch2", (2, 24, 5, 5), 36, (1, 1), {"group": 3}),
    ("grouped_pointwise_strided", (1, 24, 6, 6), 24, (1, 1), {"group": 4, "strides": [2, 2]}),
    ("groups_with_one_output_each", (1, 12, 6, 6), 4, (3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    ("window_beyond_the_padding", (1, 4, 3, 3), 4, (3, 3),
     {"group": 4, "pads": [2, 2, 2, 2], "strides": [3, 3]}),
    ("groups_1_small_channels", (1, 3, 9, 9), 8, (3, 3), {"pads": [1, 1, 1, 1]}),
    ("conv1d_depthwise", (1, 16, 37), 16, (7,), {"group": 16, "pads": [3, 3]}),
    ("conv1d_grouped_positional_even_kernel", (1, 32, 20), 32, (8,), {"group": 4, "pads": [4, 4]}),
    ("conv1d_strided_dilated_batch2", (2, 8, 30), 16, (3,), {"group": 2, "strides": [2], "dilations": [3],
                                                             "pads": [1, 2]}),
]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("name, data_shape, out_channels, kernel_shape, attrs", ONNX_CASES,
                         ids=[case[0] for case in ONNX_CASES])
def test_conv_kernels_match_interpreter(cache_dir, kernel, name, data_shape, out_channels, kernel_shape,
                                        attrs):
    mod = from_onnx(conv_model(data_shape, out_channels, kernel_shape, **attrs))
    x = np.random.default_rng(1).standard_normal(data_shape).astype(np.float32)
    expected = evaluate(mod, x)
    assert_close(build(mod, cache_dir, kernel)(x), expected, *graph_sums(mod, x))


def test_without_bias_and_large_values(cache_dir):
    mod = from_onnx(conv_model((1, 8, 6, 6), 8, (3, 3), bias=False, group=8, pads=[1, 1, 1, 1]))
    x = (np.random.default_rng(2).standard_normal((1, 8, 6, 6)) * 1e4).astype(np.float32)
    expected = evaluate(mod, x)
    for kernel in ("direct", "auto"):
        assert_close(build(mod, cache_dir, kernel)(x), expected, *graph_sums(mod, x))


# --------------------------------------------------------------------------- fused epilogues


# how far each activation may move an error of its argument (its Lipschitz constant):
# x * sigmoid(x) at most 1.1 times; x * clip(x + 3, 0, 6) |2x + 3| <= 9 times on [-3, 3]
# and 6 times above
ACTIVATION_GAIN = {"relu": 1.0, "sigmoid_gate": 1.1, "hard_swish": 9.0, "none": 1.0}


def _epilogue_case(activation: str, residual: bool, scale: bool, groups: int, channels: int = 16,
                   magnitude: bool = False):
    """conv (NCHW) -> bias -> activation (-> + residual) (-> * per-channel scale).

    With ``magnitude``: the graph that bounds the outputs' sums (tests/numerics.py), the
    same on the absolute values of the inputs and constants, the activation replaced by
    its gain (``ACTIVATION_GAIN``): how far the outputs of two summation orders may be
    apart is that times 2 * gamma(n)."""
    fix = np.abs if magnitude else (lambda array: array)
    rng = np.random.default_rng(3)
    x = ir.var("x", (1, channels, 8, 8))
    params, inputs = [x], [fix(rng.standard_normal((1, channels, 8, 8)).astype(np.float32))]
    weight = ir.const(fix(rng.standard_normal((channels, channels // groups, 3, 3)).astype(np.float32)))
    y = op.nn.bias_add(op.nn.conv2d(x, weight, padding=(1, 1), groups=groups),
                       ir.const(fix(rng.standard_normal(channels).astype(np.float32))))
    if magnitude:
        y = op.multiply(y, ir.const(np.float32(ACTIVATION_GAIN[activation])))
    else:
        y = {"relu": op.nn.relu, "sigmoid_gate": lambda v: op.multiply(v, op.sigmoid(v)),
             "hard_swish": lambda v: op.multiply(v, op.clip(op.add(v, ir.const(np.float32(3))), 0.0, 6.0)),
             "none": lambda v: v}[activation](y)
    if residual:
        r = ir.var("r", (1, channels, 8, 8))
        params.append(r)
        inputs.append(fix(rng.standard_normal((1, channels, 8, 8)).astype(np.float32)))
        y = op.add(y, r)
    if scale:  # squeeze-excite: a per-channel scale computed elsewhere
        s = ir.var("s", (1, channels, 1, 1))
        params.append(s)
        inputs.append(rng.random((1, channels, 1, 1)).astype(np.float32))
        y = op.multiply(y, s)
    return ir.IRModule.from_expr(ir.Function(params, y)), inputs


def _compiled_functions(mod: ir.IRModule, kernel: str, cache_dir: str) -> list[tir.PrimFunc]:
    """The PrimFuncs of ``mod`` after the loop passes (before C), at opt_level 3."""
    names = COMPILE_PIPELINE[:COMPILE_PIPELINE.index("CodegenC")]
    with PassContext(opt_level=3, config={"codegen.cache_dir": cache_dir, CONV_KERNEL_CONFIG: kernel}):
        lowered = Sequential([get_pass(n) for n in names])(mod)
    return [f for f in lowered.functions.values() if isinstance(f, tir.PrimFunc)]


def _conv_functions(mod: ir.IRModule, kernel: str, cache_dir: str) -> list[tir.PrimFunc]:
    return [f for f in _compiled_functions(mod, kernel, cache_dir) if "nn.conv2d" in f.attrs["op_names"]]


def _nodes(stmt: tir.Stmt) -> list:
    out, stack = [], [stmt]
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, tir.SeqStmt):
            stack.extend(node.stmts)
        elif isinstance(node, (tir.For, tir.Allocate, tir.LetStmt)):
            stack.append(node.body)
        elif isinstance(node, tir.IfThenElse):
            stack.extend(s for s in (node.then_case, node.else_case) if s is not None)
    return out


EPILOGUES = [
    ("relu", False, False), ("sigmoid_gate", False, False), ("hard_swish", True, False),
    ("relu", True, False), ("none", False, True), ("relu", True, True),
]


@pytest.mark.parametrize("groups", [16, 4], ids=["depthwise", "grouped"])
@pytest.mark.parametrize("activation, residual, scale", EPILOGUES,
                         ids=["-".join(str(p) for p in case) for case in EPILOGUES])
def test_epilogues_fuse_into_the_kernel(cache_dir, groups, activation, residual, scale):
    mod, inputs = _epilogue_case(activation, residual, scale, groups)
    expected = evaluate(mod, *inputs)
    # a window of 16 / groups * 9 taps, the bias, and at most 6 more rounded operations
    # after it (sigmoid's exp and division, the multiplies, the residual add); an
    # activation's own rounding, a few ulps of its output, is within its gain times
    # the argument's magnitude
    terms = 16 // groups * 9 + 1 + 6
    bound_mod, abs_inputs = _epilogue_case(activation, residual, scale, groups, magnitude=True)
    magnitude = evaluate(bound_mod, *abs_inputs)
    for kernel in ("direct", "group_gemm"):
        assert_close(build(mod, cache_dir, kernel)(*inputs), expected, terms, magnitude)
        (conv,) = _conv_functions(mod, kernel, cache_dir)
        ops = conv.attrs["op_names"]
        assert "nn.bias_add" in ops or "add" in ops  # the bias is in the convolution's kernel
        # the convolution writes the kernel's output: it is never materialized in a buffer
        # of its own (the lowering names such a buffer after the op)
        scratch = [n.buffer.name for n in _nodes(conv.body) if isinstance(n, tir.Allocate)]
        assert not [name for name in scratch if name.startswith("conv2d")], scratch


# --------------------------------------------------------------------------- threads


THREAD_CASES = [
    ("depthwise", (1, 32, 24, 24), 32, (3, 3), {"group": 32, "pads": [1, 1, 1, 1]}),
    ("grouped", (1, 32, 24, 24), 64, (3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    ("conv1d_grouped", (1, 64, 200), 64, (9,), {"group": 8, "pads": [4, 4]}),
]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("name, data_shape, out_channels, kernel_shape, attrs", THREAD_CASES,
                         ids=[case[0] for case in THREAD_CASES])
def test_bit_identical_for_any_thread_count(cache_dir, kernel, name, data_shape, out_channels, kernel_shape,
                                            attrs):
    mod = from_onnx(conv_model(data_shape, out_channels, kernel_shape, **attrs))
    x = np.random.default_rng(4).standard_normal(data_shape).astype(np.float32)
    lib = build(mod, cache_dir, kernel)
    results = {}
    for threads in THREAD_COUNTS:
        lib.set_num_threads(threads)
        results[threads] = lib(x)
    for threads in THREAD_COUNTS[1:]:
        np.testing.assert_array_equal(results[threads], results[1])
    assert_close(results[1], evaluate(mod, x), *graph_sums(mod, x))


@pytest.mark.parametrize("kernel", ["direct", "group_gemm"])
def test_kernels_have_parallel_loops(cache_dir, kernel):
    """Enough work: the kernel's outer loops are split over threads."""
    name, data_shape, out_channels, kernel_shape, attrs = THREAD_CASES[1]
    mod = from_onnx(conv_model(data_shape, out_channels, kernel_shape, **attrs))
    (conv,) = _conv_functions(mod, kernel, cache_dir)
    kinds = {n.kind for n in _nodes(conv.body) if isinstance(n, tir.For)}
    assert tir.ForKind.PARALLEL in kinds
    if kernel == "direct":
        assert tir.ForKind.VECTORIZED in kinds  # the tile's channel lanes


# --------------------------------------------------------------------------- the rule


def _geometry(channels, out_channels, groups, kernel=3, size=14):
    attrs = {"strides": (1, 1), "dilation": (1, 1), "padding": (1, 1, 1, 1), "groups": groups}
    weight_shape = (kernel, kernel, channels // groups, out_channels)
    return ConvGeometry.of(attrs, (1, size, size, channels), weight_shape, (1, size, size, out_channels))


def test_rule_chooses_per_shape():
    assert choose_kernel(_geometry(64, 64, 64), use_blas=True) == "microkernel"  # depthwise
    assert choose_kernel(_geometry(64, 128, 64), use_blas=True) == "direct"  # channel multiplier
    assert choose_kernel(_geometry(64, 64, 4, size=28), use_blas=True) == "group_gemm"  # grouped
    # a 14x14 output is one block of rows: per-group GEMMs would not split over threads
    assert choose_kernel(_geometry(64, 64, 4), use_blas=True) == "microkernel"
    assert choose_kernel(_geometry(32, 32, 4), use_blas=True) == "group_gemm"  # 8 channels per group
    assert choose_kernel(_geometry(32, 32, 4), use_blas=False) == "direct"  # no BLAS library
    assert choose_kernel(_geometry(64, 64, 4, size=28), use_blas=False) == "microkernel"
    assert choose_kernel(_geometry(256, 256, 2, size=28), use_blas=True) == "microkernel"  # wide groups
    # one group: a stride-1 3x3 by Winograd where it applies, else on the microkernels,
    # which need no BLAS
    assert choose_kernel(_geometry(64, 64, 1, size=56), use_blas=True) == "winograd"
    assert choose_kernel(_geometry(64, 64, 1), use_blas=True) == "microkernel"  # too little work (AVX-512)
    with PassContext(config={WINOGRAD_CONFIG: False}):
        assert choose_kernel(_geometry(64, 64, 1, size=56), use_blas=True) == "microkernel"
        assert choose_kernel(_geometry(16, 16, 1, size=32), use_blas=False) == "microkernel"
    # a 1x1 over too few input channels for the microkernel: the BLAS paths, the blocked
    # GEMM for a small weight at any image size, one im2col + GEMM per image for a large one
    small_weight = _geometry(16, 16, 1, kernel=1, size=32)
    assert choose_kernel(small_weight, use_blas=True) == "group_gemm"
    assert choose_kernel(_geometry(16, 16, 1, kernel=1, size=14), use_blas=True) == "group_gemm"
    assert choose_kernel(_geometry(96, 192, 1, kernel=1, size=14), use_blas=True) == "none"
    # but an expansion of 64 channels or more to 4x them runs on the microkernels, which
    # apply its epilogue as they store (a bottleneck's 64->256, an inverted residual's
    # 96->576) into an output of 14x14 or more; fewer channels, or a 7x7 output, stay on BLAS
    assert choose_kernel(_geometry(64, 256, 1, kernel=1, size=56), use_blas=True) == "microkernel"
    assert choose_kernel(_geometry(96, 576, 1, kernel=1, size=14), use_blas=True) == "microkernel"
    assert choose_kernel(_geometry(96, 576, 1, kernel=1, size=7), use_blas=True) == "none"
    assert choose_kernel(_geometry(40, 240, 1, kernel=1, size=28), use_blas=True) == "group_gemm"
    assert choose_kernel(_geometry(16, 16, 1, kernel=1, size=32), use_blas=False) == "none"
    assert tile_mode(_geometry(64, 64, 64)) == CHANNEL_MODE
    assert tile_mode(_geometry(64, 64, 4)) == GROUP_MODE


def test_group_gemm_blocks():
    assert not is_pointwise(_geometry(64, 64, 4, kernel=1))  # padded
    assert is_pointwise(ConvGeometry(1, 14, 14, 64, 14, 14, 64, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 4))
    geometry = _geometry(64, 64, 4, size=28)
    rows = rows_per_block(geometry)
    assert geometry.out_height % rows == 0 and rows * geometry.out_width >= 128


def _conv_attrs(groups, layouts=("NHWC", "HWIO")):
    return Attrs({"strides": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": groups,
                  "data_layout": layouts[0], "kernel_layout": layouts[1], "out_dtype": ""})


def test_plan_leaves_other_layouts_and_dtypes_alone():
    shapes = [(1, 8, 8, 16), (3, 3, 1, 16)]
    assert plan_conv2d(_conv_attrs(16), shapes, "float32", (1, 8, 8, 16), True).kind == "microkernel"
    assert plan_conv2d(_conv_attrs(16), shapes, "float64", (1, 8, 8, 16), True) is None
    nchw = [(1, 16, 8, 8), (16, 1, 3, 3)]
    assert plan_conv2d(_conv_attrs(16, ("NCHW", "OIHW")), nchw, "float32", (1, 16, 8, 8), True) is None


@pytest.mark.skipif(not HAVE_BLAS, reason="scipy-openblas32 is not installed")
def test_group_gemm_calls_blas_and_direct_does_not(cache_dir):
    mod = from_onnx(conv_model((1, 16, 8, 8), 32, (3, 3), group=4, pads=[1, 1, 1, 1]))
    for kernel, calls_blas in (("group_gemm", True), ("direct", False)):
        (conv,) = _conv_functions(mod, kernel, cache_dir)
        gemms = [n for n in _nodes(conv.body) if isinstance(n, tir.Evaluate) and is_gemm(n.value)]
        assert bool(gemms) is calls_blas
        assert bool(conv.attrs.get("uses_blas", False)) is calls_blas


def test_bad_kernel_setting_is_one_clear_error():
    mod = from_onnx(conv_model((1, 8, 6, 6), 8, (3, 3), group=8, pads=[1, 1, 1, 1]))
    with PassContext(config={CONV_KERNEL_CONFIG: "fft"}), pytest.raises(PassConfigError) as info:
        passinfra.build(mod)
    assert CONV_KERNEL_CONFIG in str(info.value) and "fft" in str(info.value)


# --------------------------------------------------------------------------- small windows


POOLS = [
    ("max_nhwc_padded_strided", lambda x: op.nn.max_pool2d(x, (3, 3), (2, 2), (1, 1), layout="NHWC")),
    ("avg_nhwc_exclude_pad", lambda x: op.nn.avg_pool2d(x, (3, 3), (2, 2), (1, 1), layout="NHWC")),
    ("avg_nhwc_include_pad", lambda x: op.nn.avg_pool2d(x, (2, 2), (1, 1), (1, 0, 0, 1), layout="NHWC",
                                                        count_include_pad=True)),
    ("max_nchw", lambda x: op.nn.max_pool2d(x, (3, 3), (2, 2), (0, 0))),
]


@pytest.mark.parametrize("name, make", POOLS, ids=[case[0] for case in POOLS])
def test_small_windows_are_one_vectorizable_store(cache_dir, name, make):
    """A pool's taps are combined in one expression per output element; over NHWC data
    the channel loop is then vectorized. Values match the interpreter, NaN included."""
    x = ir.var("x", (1, 9, 10, 24))
    mod = ir.IRModule.from_expr(ir.Function([x], make(x)))
    data = np.random.default_rng(5).standard_normal((1, 9, 10, 24)).astype(np.float32)
    data[0, 4, 5, 3] = np.nan
    expected = evaluate(mod, data)
    if name.startswith("avg"):  # sums of at most 3 x 3 taps, / their count, in another order
        magnitude = np.nan_to_num(evaluate(mod, np.abs(data)))  # NaN where both must be NaN
        assert_sums_close(build(mod, cache_dir)(data), expected, terms=9, magnitude=magnitude)
    else:  # a maximum rounds nothing
        np.testing.assert_array_equal(build(mod, cache_dir)(data), expected)
    (pool,) = _compiled_functions(mod, "auto", cache_dir)
    loops = [n for n in _nodes(pool.body) if isinstance(n, tir.For)]
    if "nhwc" in name:
        assert any(loop.kind is tir.ForKind.VECTORIZED and loop.extent.value == 24 for loop in loops)
        assert not [n for n in _nodes(pool.body) if isinstance(n, tir.Allocate)]  # no accumulator

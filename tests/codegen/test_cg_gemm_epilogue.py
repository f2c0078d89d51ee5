"""GEMM epilogues run in place, channels-last im2col runs in row blocks, and small
reduction windows are unrolled: each stays allclose to the interpreter (lowered and
built), and the lowered code has the intended shape."""

from __future__ import annotations

import pytest
from cg_gemm_support import function_of as _func
from cg_gemm_support import random_arrays as _arrays
from cg_gemm_support import statements as _nodes

import passinfra
from passinfra import tir
from passinfra.build import compile_pipeline
from passinfra.codegen import gemm
from passinfra.codegen.compute.conv_plan import CONV_KERNEL_CONFIG
from passinfra.codegen.gemm import blas_library, is_gemm
from passinfra.codegen.lower import MAX_UNROLLED_REDUCTION_STEPS, lower_primitive_function
from passinfra.ir import op
from passinfra.ir.module import IRModule
from passinfra.runtime.interpreter import evaluate
from passinfra.tir.evaluator import run_prim_func
from passinfra.transform import PassContext
from tests.graph_sums import graph_sums
from tests.numerics import assert_sums_close

needs_blas = pytest.mark.skipif(blas_library() is None, reason="scipy-openblas32 is not installed")

# BLAS sums in the order of its kernel for this CPU, the interpreter in NumPy's: outputs
# are compared within the bound for any order (tests/numerics.py, tests/graph_sums.py);
# a misplaced tap or epilogue moves them by whole terms (|x * w| ~ 0.6), far past it


def _allocated(stmt) -> list[str]:
    return [n.buffer.name for n in _nodes(stmt) if isinstance(n, tir.Allocate)]


def _gemm_loops(stmt) -> list[int]:
    """Extents of the loops that directly or indirectly hold a GEMM call."""
    extents = []
    for node in _nodes(stmt):
        if isinstance(node, tir.For) and any(isinstance(n, tir.Evaluate) and is_gemm(n.value)
                                             for n in _nodes(node.body)):
            extents.append(node.extent.value)
    return extents


# the convolutions here test the im2col + BLAS path: the microkernels
# (test_cg_conv_microkernel.py) would take those with one group otherwise
IM2COL = {CONV_KERNEL_CONFIG: "none"}


def _check(func, shapes, seed=0):
    """The lowered function (BLAS on) and the built library both match the interpreter."""
    args = _arrays(shapes, seed)
    expected = evaluate(IRModule({"main": func}), *args)
    with PassContext(config=IM2COL):
        lowered = lower_primitive_function(func, "kernel", use_blas=True)
    assert_sums_close(run_prim_func(lowered, *args), expected, *graph_sums(IRModule({"main": func}), *args))
    return lowered, args, expected


def _check_built(func, args, expected, tmp_path):
    with PassContext(config={"codegen.cache_dir": str(tmp_path), **IM2COL}):
        compiled = passinfra.build(IRModule({"main": func}))
    assert_sums_close(compiled(*args), expected, *graph_sums(IRModule({"main": func}), *args))


def nhwc_conv_bias_relu(strides=(1, 1), padding=(1, 1), dilation=(1, 1)):
    def make(x, w, b):
        conv = op.nn.conv2d(x, w, strides=strides, padding=padding, dilation=dilation,
                            data_layout="NHWC", kernel_layout="HWIO")
        return op.nn.relu(op.add(conv, b))
    return make


@needs_blas
@pytest.mark.parametrize("strides, padding, dilation", [
    ((1, 1), (1, 1), (1, 1)),
    ((2, 2), (2, 1, 0, 2), (1, 1)),
    ((1, 1), (2, 2), (2, 2)),
], ids=["same", "strided_asymmetric_pad", "dilated"])
def test_channels_last_conv_in_row_blocks_with_epilogue(monkeypatch, tmp_path, strides, padding, dilation):
    # a tiny block budget and no minimum GEMM height force several row blocks per image
    # (and 2 images)
    monkeypatch.setattr(gemm, "IM2COL_BLOCK_BYTES", 4 * 1024)
    monkeypatch.setattr(gemm, "MIN_GEMM_ROWS", 1)
    shapes = [(2, 12, 10, 8), (3, 3, 8, 16), (16,)]
    func = _func(shapes, nhwc_conv_bias_relu(strides, padding, dilation))
    lowered, args, expected = _check(func, shapes)
    blocks = _gemm_loops(lowered.body)
    assert 2 in blocks and any(extent > 1 for extent in blocks if extent != 2)  # images, then row blocks
    # the epilogue rewrote the output in place: the only scratch is the im2col block
    assert all(name.startswith("im2col") for name in _allocated(lowered.body))
    _check_built(func, args, expected, tmp_path)


@needs_blas
@pytest.mark.parametrize("strides, padding, dilation, whole_rows", [
    ((1, 1), (1, 1), (1, 1), True),
    ((1, 1), (0, 0), (1, 1), True),
    ((2, 2), (1, 1), (1, 1), False),
    ((1, 1), (2, 2), (2, 2), False),
], ids=["same", "valid", "strided", "dilated"])
def test_stride_one_windows_copy_a_row_of_taps_at_once(tmp_path, strides, padding, dilation, whole_rows):
    # stride and dilation 1: a window's row of 3 taps x 8 channels is one contiguous run
    # of the input and of the columns, copied as one block (96 bytes) inside the image
    shapes = [(1, 9, 10, 8), (3, 3, 8, 16), (16,)]
    func = _func(shapes, nhwc_conv_bias_relu(strides, padding, dilation))
    _, args, expected = _check(func, shapes)
    with PassContext(opt_level=3, config={"codegen.cache_dir": str(tmp_path), **IM2COL}):
        compiled = passinfra.build(IRModule({"main": func}))
        lowered = compile_pipeline()(IRModule({"main": func}))
    assert_sums_close(compiled(*args), expected, *graph_sums(IRModule({"main": func}), *args))
    sources = "".join(f.attrs["c_source"] for f in lowered.functions.values() if isinstance(f, tir.PrimFunc))
    row_copies = [line for line in sources.splitlines() if "memcpy(" in line and line.endswith(", 96);")]
    assert bool(row_copies) == whole_rows


def test_rows_per_block_divides_the_height_and_fits_the_budget(monkeypatch):
    monkeypatch.setattr(gemm, "IM2COL_BLOCK_BYTES", 1000)
    monkeypatch.setattr(gemm, "MIN_GEMM_ROWS", 1)
    # (height, width, bytes per output pixel, weight bytes): a row is width * pixel bytes
    assert gemm._rows_per_block(12, 1, 300, 0) == 3
    assert gemm._rows_per_block(7, 1, 300, 0) == 1  # 7 is prime: one row per block
    assert gemm._rows_per_block(5, 1, 5000, 0) == 1  # one row is over budget: still one row
    monkeypatch.setattr(gemm, "IM2COL_BLOCK_BYTES", 10 ** 9)
    assert gemm._rows_per_block(56, 1, 4096, 0) == 56


def test_rows_per_block_grows_to_the_weight_and_to_a_minimum_gemm_height(monkeypatch):
    monkeypatch.setattr(gemm, "IM2COL_BLOCK_BYTES", 1000)
    monkeypatch.setattr(gemm, "MIN_GEMM_ROWS", 1)
    # a weight bigger than the budget is re-read by every block: blocks grow to its size
    assert gemm._rows_per_block(12, 1, 300, 2000) == 6
    # each block's GEMM has at least MIN_GEMM_ROWS rows (pixels), even over the budget
    monkeypatch.setattr(gemm, "MIN_GEMM_ROWS", 40)
    assert gemm._rows_per_block(12, 10, 300, 0) == 4  # 4 rows of 10 pixels
    assert gemm._rows_per_block(7, 7, 300, 0) == 7  # the whole image is under 40 pixels
    # ResNet-50's last 3x3 convolution (7x7 output, 512 channels): one block, one GEMM
    monkeypatch.setattr(gemm, "IM2COL_BLOCK_BYTES", 512 * 1024)
    monkeypatch.setattr(gemm, "MIN_GEMM_ROWS", 128)
    assert gemm._rows_per_block(7, 7, 4608 * 4, 4608 * 512 * 4) == 7


def dense_bias_relu(x, w, b):
    return op.nn.relu(op.add(op.nn.dense(x, w), b))


def matmul_batched_add(a, b, c):
    return op.add(op.matmul(a, b), c)


def conv1x1_residual(x, w, r):
    return op.add(op.nn.conv2d(x, w, data_layout="NHWC", kernel_layout="HWIO"), r)


def nchw_conv_bias(x, w, b):
    return op.nn.bias_add(op.nn.conv2d(x, w, padding=(1, 1)), b)


@needs_blas
@pytest.mark.parametrize("shapes, make", [
    ([(16, 64), (48, 64), (48,)], dense_bias_relu),
    ([(2, 3, 16, 32), (2, 3, 32, 24), (2, 3, 16, 24)], matmul_batched_add),
    ([(2, 8, 8, 32), (1, 1, 32, 24), (2, 8, 8, 24)], conv1x1_residual),
    ([(2, 8, 12, 12), (16, 8, 3, 3), (16,)], nchw_conv_bias),
], ids=["dense", "matmul_batched", "conv1x1_nhwc", "conv_nchw"])
def test_gemm_epilogue_in_place(tmp_path, shapes, make):
    func = _func(shapes, make)
    lowered, args, expected = _check(func, shapes, seed=2)
    assert not any(name.startswith(("dense", "matmul", "conv2d")) for name in _allocated(lowered.body))
    _check_built(func, args, expected, tmp_path)


@needs_blas
def test_epilogue_changing_dtype_keeps_an_intermediate():
    shapes = [(16, 64), (48, 64)]
    func = _func(shapes, lambda x, w: op.cast(op.nn.dense(x, w), "float64"))
    lowered, _, _ = _check(func, shapes)
    assert any(name.startswith("dense") for name in _allocated(lowered.body))


@needs_blas
def test_consumer_reading_elsewhere_is_not_an_epilogue():
    shapes = [(16, 64), (48, 64)]
    func = _func(shapes, lambda x, w: op.transpose(op.nn.dense(x, w)))
    lowered, _, _ = _check(func, shapes)
    assert any(name.startswith("dense") for name in _allocated(lowered.body))


@pytest.mark.parametrize("make", [
    lambda x: op.nn.max_pool2d(x, (3, 3), strides=(2, 2), padding=(1, 1)),
    lambda x: op.nn.avg_pool2d(x, (2, 2), strides=(2, 2)),
    lambda x: op.nn.relu(op.nn.max_pool2d(x, (3, 3), padding=(1, 1))),
], ids=["max_padded", "avg", "max_fused_relu"])
def test_pool_windows_are_unrolled(tmp_path, make):
    shapes = [(1, 4, 9, 9)]
    func = _func(shapes, make)
    lowered, args, expected = _check(func, shapes, seed=3)
    kinds = {node.extent.value: node.kind for node in _nodes(lowered.body) if isinstance(node, tir.For)
             and node.loop_var.name.startswith("r")}
    assert kinds and all(kind is tir.ForKind.UNROLLED for kind in kinds.values())
    _check_built(func, args, expected, tmp_path)


def test_long_reductions_stay_loops():
    shapes = [(4, 64)]
    func = _func(shapes, lambda x: op.sum(x, axis=1))
    lowered, _, _ = _check(func, shapes)
    loops = [node for node in _nodes(lowered.body) if isinstance(node, tir.For)]
    reduction = [node for node in loops if node.extent.value == 64]
    assert 64 > MAX_UNROLLED_REDUCTION_STEPS and reduction[0].kind is tir.ForKind.SERIAL

"""Contractions through BLAS (passinfra/codegen/gemm.py): dense, matmul and conv2d become
``rp_sgemm`` calls above a size threshold, and stay allclose to the interpreter."""

from __future__ import annotations

import numpy as np
import pytest
from cg_gemm_support import function_of as _func
from cg_gemm_support import random_arrays as _arrays
from cg_gemm_support import statements

import passinfra
from passinfra import tir
from passinfra.codegen.compute.conv_plan import CONV_KERNEL_CONFIG
from passinfra.codegen.gemm import (
    BLAS_SYMBOL,
    GEMM_INTRINSIC,
    MIN_GEMM_MACS,
    blas_library,
    blas_prototype,
    is_gemm,
    plan_contraction,
)
from passinfra.codegen.lower import lower_primitive_function
from passinfra.codegen.passes import LowerToPrimFunc
from passinfra.ir import op
from passinfra.ir.attrs import Attrs
from passinfra.ir.module import IRModule
from passinfra.runtime.interpreter import evaluate
from passinfra.tir.evaluator import run_prim_func
from passinfra.transform import PassContext
from tests.graph_sums import graph_sums
from tests.numerics import assert_sums_close

pytestmark = pytest.mark.skipif(blas_library() is None, reason="scipy-openblas32 is not installed")

# BLAS sums in the order of its kernel for this CPU (OPENBLAS_CORETYPE), the interpreter
# in NumPy's: results are compared within the bound for any order (tests/numerics.py); a
# wrong stride or transposition moves them by whole terms (|a * b| ~ 0.6), past it


def _gemm_calls(stmt) -> int:
    """How many GEMM intrinsics a statement tree holds."""
    return sum(is_gemm(n.value) for n in statements(stmt) if isinstance(n, tir.Evaluate))


def conv(layout, kernel_layout, **kw):
    def make(x, w):
        return op.nn.conv2d(x, w, data_layout=layout, kernel_layout=kernel_layout, **kw)
    return make


def conv_bias_relu(x, w, b):
    return op.nn.relu(op.nn.bias_add(op.nn.conv2d(x, w, padding=(1, 1)), b))


# (name, input shapes, graph) -- every one big enough for BLAS
CASES = [
    ("dense", [(16, 64), (48, 64)], op.nn.dense),
    ("dense_3d_data", [(2, 8, 64), (40, 64)], op.nn.dense),
    ("matmul_2d", [(24, 64), (64, 32)], op.matmul),
    ("matmul_batched_rhs_2d", [(3, 16, 32), (32, 40)], op.matmul),
    ("matmul_batched", [(2, 3, 16, 32), (2, 3, 32, 24)], op.matmul),
    ("matmul_broadcast_batch", [(2, 1, 16, 32), (3, 32, 24)], op.matmul),
    ("matmul_lhs_2d", [(16, 32), (4, 32, 24)], op.matmul),
    ("conv_nchw_pad", [(2, 8, 12, 12), (16, 8, 3, 3)], conv("NCHW", "OIHW", padding=(1, 1))),
    ("conv_nchw_stride_dilation", [(1, 8, 15, 15), (16, 8, 3, 3)],
     conv("NCHW", "OIHW", strides=(2, 2), dilation=(2, 2), padding=(2, 1))),
    ("conv_nchw_1x1", [(2, 32, 8, 8), (24, 32, 1, 1)], conv("NCHW", "OIHW")),
    ("conv_nhwc_hwio", [(2, 12, 12, 8), (3, 3, 8, 16)], conv("NHWC", "HWIO", padding=(1, 1))),
    ("conv_nhwc_hwio_strided", [(1, 13, 13, 8), (5, 5, 8, 16)],
     conv("NHWC", "HWIO", strides=(2, 2), padding=(2, 2, 1, 1))),
    ("conv_nhwc_1x1", [(2, 8, 8, 32), (1, 1, 32, 24)], conv("NHWC", "HWIO")),
    ("conv_bias_relu_epilogue", [(1, 8, 12, 12), (16, 8, 3, 3), (16,)], conv_bias_relu),
]


# the convolutions and matmuls among the cases go through BLAS only when the microkernels
# (test_cg_conv_microkernel.py) are off
BLAS_ONLY = {CONV_KERNEL_CONFIG: "none", "codegen.matmul_microkernel": False}


@pytest.mark.parametrize("name, shapes, make", CASES, ids=[c[0] for c in CASES])
def test_lowered_gemm_matches_interpreter(name, shapes, make):
    func = _func(shapes, make)
    args = _arrays(shapes)
    expected = evaluate(IRModule({"main": func}), *args)
    with PassContext(config=BLAS_ONLY):
        lowered = lower_primitive_function(func, name, use_blas=True)
    assert lowered.attrs["uses_blas"] is True
    assert _gemm_calls(lowered.body) >= 1
    assert_sums_close(run_prim_func(lowered, *args), expected, *graph_sums(IRModule({"main": func}), *args))


@pytest.mark.parametrize("name, shapes, make", CASES[::2], ids=[c[0] for c in CASES[::2]])
def test_built_gemm_matches_interpreter(name, shapes, make, tmp_path):
    mod = IRModule({"main": _func(shapes, make)})
    args = _arrays(shapes, seed=1)
    with PassContext(config={"codegen.cache_dir": str(tmp_path), **BLAS_ONLY}):
        compiled = passinfra.build(mod)
    assert_sums_close(compiled(*args), evaluate(mod, *args), *graph_sums(mod, *args))


# one row or one column: rp_gemm calls sgemv (both layouts of B each); a wrong stride or
# transposition there gives wrong values, so matching the interpreter checks every branch
VECTOR_CASES = [
    ("one_row_dense", [(1, 512), (256, 512)], op.nn.dense),
    ("one_row_matmul", [(1, 256), (256, 300)], op.matmul),
    ("one_column_dense", [(300, 256), (1, 256)], op.nn.dense),
    ("one_column_matmul", [(300, 256), (256, 1)], op.matmul),
    ("one_row_batched_matmul", [(3, 1, 128), (3, 128, 200)], op.matmul),
]


@pytest.mark.parametrize("name, shapes, make", VECTOR_CASES, ids=[c[0] for c in VECTOR_CASES])
def test_products_with_one_row_or_column_match_the_interpreter_on_any_thread_count(name, shapes, make,
                                                                                   tmp_path):
    mod = IRModule({"main": _func(shapes, make)})
    args = _arrays(shapes, seed=2)
    assert lower_primitive_function(mod["main"], name, use_blas=True).attrs["uses_blas"] is True
    with PassContext(config={"codegen.cache_dir": str(tmp_path)}):
        compiled = passinfra.build(mod)
    results = []
    for threads in (1, 2, 3):
        compiled.set_num_threads(threads)
        results.append(compiled(*args))
    assert_sums_close(results[0], evaluate(mod, *args), *graph_sums(mod, *args))
    for other in results[1:]:
        assert np.array_equal(other, results[0])


def test_small_contractions_stay_loops():
    shapes = [(2, 4), (3, 4)]
    assert 2 * 3 * 4 < MIN_GEMM_MACS
    lowered = lower_primitive_function(_func(shapes, op.nn.dense), "small", use_blas=True)
    assert "uses_blas" not in lowered.attrs and _gemm_calls(lowered.body) == 0


def test_unsupported_layouts_and_dtypes_have_no_plan():
    attrs = Attrs({"data_layout": "NCHW", "kernel_layout": "HWIO", "groups": 1, "strides": (1, 1),
                   "padding": (0, 0, 0, 0), "dilation": (1, 1)})
    assert plan_contraction("nn.conv2d", attrs, [(1, 8, 16, 16), (3, 3, 8, 16)], "float32",
                            (1, 16, 14, 14)) is None
    grouped = Attrs({**attrs, "kernel_layout": "OIHW", "groups": 2})
    assert plan_contraction("nn.conv2d", grouped, [(1, 8, 16, 16), (16, 4, 3, 3)], "float32",
                            (1, 16, 14, 14)) is None
    assert plan_contraction("nn.dense", Attrs({}), [(64, 64), (64, 64)], "float64", (64, 64)) is None
    assert plan_contraction("nn.dense", Attrs({}), [(64, 64), (64, 64)], "float32", (64, 64)) is not None
    assert plan_contraction("matmul", Attrs({}), [(64,), (64, 64)], "float32", (64,)) is None


def test_blas_config_off_lowers_loops():
    mod = IRModule({"main": _func([(16, 64), (48, 64)], op.nn.dense).with_attr("Primitive", 1)})
    with PassContext(config={"codegen.blas": False}):
        off = LowerToPrimFunc()(mod)["main"]
    on = LowerToPrimFunc()(mod)["main"]
    assert _gemm_calls(off.body) == 0 and "uses_blas" not in off.attrs
    assert _gemm_calls(on.body) == 1 and on.attrs["uses_blas"] is True


def test_c_source_calls_prefixed_sgemm_and_sets_threads(tmp_path):
    mod = IRModule({"main": _func([(16, 64), (48, 64)], op.nn.dense).with_attr("Primitive", 1)})
    seq = passinfra.transform.Sequential([passinfra.transform.get_pass(n) for n in
                                          ("LowerToPrimFunc", "StorageFlatten", "CodegenC")])
    with PassContext(config={"codegen.blas_threads": 3}):
        source = seq(mod)["main"].attrs["c_source"]
    assert f"{BLAS_SYMBOL}(101, 111, " in source
    assert "scipy_openblas_set_num_threads(3)" in source
    assert GEMM_INTRINSIC not in source
    assert "set_num_threads(" not in blas_prototype(0).split("rp_blas_threads")[1]


def test_library_links_blas_with_rpath(tmp_path):
    mod = IRModule({"main": _func([(16, 64), (48, 64)], op.nn.dense)})
    with PassContext(config={"codegen.cache_dir": str(tmp_path)}):
        compiled = passinfra.build(mod)
    path = tmp_path / "dense.so"
    compiled.export_library(str(path))
    data = path.read_bytes()
    assert blas_library().lib_dir.encode() in data  # the rpath
    assert BLAS_SYMBOL.encode() in data

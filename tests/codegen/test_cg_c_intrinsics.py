"""Intrinsics plug into the C renderer: a kernel declared in a test renders, compiles and
runs with no edit to the renderer, and what a function needs besides its kernel (the C
declarations, the libraries to link) comes from the function, not from rendering it."""

from __future__ import annotations

import numpy as np
import pytest
from cg_c_support import CompiledKernel, loop, prim_func

from passinfra import tir
from passinfra.codegen import c_intrinsics
from passinfra.codegen.c_intrinsics import IntrinsicRenderer, KernelLibrary, kernel_libraries
from passinfra.codegen.c_renderer import render_prim_func
from passinfra.codegen.cc_driver import CompilerSettings
from passinfra.codegen.conv_runtime import CONV_RUNTIME_LIBRARY
from passinfra.codegen.gemm import BLAS_LIBRARY
from passinfra.errors import IRError
from passinfra.tir.intrinsics import CONV_INTRINSIC, GEMM_INTRINSIC

I64 = "int64"
# a "library" of one static function, declared in front of the kernels that call it
STEP_LIBRARY = KernelLibrary("test_step", lambda options: (
    "static int64_t rp_test_step(int64_t* counter) { return ++*counter; }"))


@pytest.fixture
def test_intrinsics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two intrinsics the renderer has never heard of, registered for this test only."""
    monkeypatch.setattr(c_intrinsics, "_RENDERERS", dict(c_intrinsics._RENDERERS))
    c_intrinsics.register_intrinsic_renderer(
        "test_triple", IntrinsicRenderer(lambda renderer, node, args: f"(3 * {args[0]})"))
    step = IntrinsicRenderer(lambda renderer, node, args: f"rp_test_step(&{args[0]})", STEP_LIBRARY)
    c_intrinsics.register_intrinsic_renderer("test_step", step)


def _stepping_kernel() -> tir.PrimFunc:
    """out[i] = 3 * x[i] for each i, and counter[0] stepped once per element."""
    x, out = tir.Buffer("x", (5,), I64), tir.Buffer("out", (5,), I64)
    counter = tir.Buffer("counter", (1,), I64)
    i = tir.TVar("i")
    body = tir.SeqStmt((
        tir.BufferStore(out, tir.Intrinsic("test_triple", (x.load(i),), I64), (i,)),
        tir.Evaluate(tir.Intrinsic("test_step", (counter.load(0),), I64)),
    ))
    return prim_func([x, counter, out], loop(i, 5, body, tir.ForKind.SERIAL), 1, "stepping")


def test_a_registered_kernel_renders_compiles_and_runs(test_intrinsics, tmp_path) -> None:
    func = _stepping_kernel()
    assert kernel_libraries(func.body) == [STEP_LIBRARY]
    kernel = CompiledKernel(func, tmp_path, CompilerSettings(cache_dir=str(tmp_path / "cache")))
    # the declaration comes once, before the kernel, though the call is inside a loop
    assert kernel.source.count("static int64_t rp_test_step(") == 1
    assert kernel.source.index("rp_test_step(int64_t*") < kernel.source.index("static int stepping(")
    x, counter, out = np.arange(5, dtype=I64), np.zeros(1, I64), np.zeros(5, I64)
    assert kernel(x, counter, out) == 0
    np.testing.assert_array_equal(out, 3 * x)
    assert counter[0] == 5


def test_a_call_that_needs_a_library_must_be_a_statement(test_intrinsics) -> None:
    x, out = tir.Buffer("x", (1,), I64), tir.Buffer("out", (1,), I64)
    hidden = tir.BufferStore(out, tir.Intrinsic("test_step", (x.load(0),), I64) + 1, (tir.IntImm(0),))
    assert kernel_libraries(hidden) == []  # not a statement of its own: nothing would declare it
    with pytest.raises(IRError, match="a test_step call must be a statement of its own"):
        render_prim_func(prim_func([x, out], hidden, 1, "hidden"))


def test_unknown_intrinsics_name_what_the_backend_knows() -> None:
    x, out = tir.Buffer("x", (1,), I64), tir.Buffer("out", (1,), I64)
    body = tir.BufferStore(out, tir.Intrinsic("frobnicate", (x.load(0),), I64), (tir.IntImm(0),))
    with pytest.raises(IRError, match=r"unknown intrinsic 'frobnicate'; the C backend knows: .*\bexp\b"):
        render_prim_func(prim_func([x, out], body, 1, "unknown"))


def test_kernel_calls_name_their_libraries_in_one_order() -> None:
    """The GEMM and convolution modules register their calls; a body calling both needs
    both, sorted by name, whatever order the calls come in (attrs and declarations are
    the same bytes wherever the function is lowered)."""
    gemm = tir.Evaluate(tir.Intrinsic(GEMM_INTRINSIC, (), "float32"))
    conv = tir.Evaluate(tir.Intrinsic(CONV_INTRINSIC, (), "float32"))
    assert kernel_libraries(tir.SeqStmt((conv, gemm))) == [BLAS_LIBRARY, CONV_RUNTIME_LIBRARY]
    assert kernel_libraries(tir.SeqStmt((gemm, conv, gemm))) == [BLAS_LIBRARY, CONV_RUNTIME_LIBRARY]
    assert [library.attr for library in kernel_libraries(conv)] == ["uses_conv_runtime"]

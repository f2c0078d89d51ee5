"""Vector math through glibc's libmvec: loops calling exp/erf/tanh/... call the SIMD
variants when it is on (and linkable), keep C's results to a few ULP (special values
included), and stay scalar when it is off."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cg_c_support import CompiledKernel, loop, prim_func

from passinfra import tir
from passinfra.codegen import vector_math
from passinfra.codegen.cc_driver import DEFAULT_CC, DEFAULT_CFLAGS, CompilerSettings, compile_c
from passinfra.codegen.object_cache import compile_stats, reset_compile_stats

AVAILABLE = vector_math.vector_math_available(DEFAULT_CC, DEFAULT_CFLAGS)
needs_libmvec = pytest.mark.skipif(not AVAILABLE, reason="the C library has no libmvec (glibc < 2.35)")

SPECIAL = [0.0, -0.0, 1e-30, -1e-30, 0.5, -0.5, 1.0, 3.0, -3.0, 20.0, -20.0, 88.0, 100.0, -100.0,
           math.inf, -math.inf, math.nan]
FUNCTIONS = {
    "exp": np.exp,
    "tanh": np.tanh,
    "erf": np.vectorize(math.erf, otypes=[np.float64]),
    "log": np.log,
}


def _math_kernel(name: str, n: int, dtype: str, symbol: str) -> tir.PrimFunc:
    x, out = tir.Buffer("x", (n,), dtype), tir.Buffer("out", (n,), dtype)
    i = tir.TVar("i")
    body = loop(i, n, tir.BufferStore(out, tir.Intrinsic(name, (x.load(i),), dtype), (i,)))
    return prim_func([x, out], body, 1, symbol)


def _inputs(n: int, dtype: str) -> np.ndarray:
    values = np.linspace(-6, 6, n - len(SPECIAL))
    return np.concatenate([np.array(SPECIAL), values]).astype(dtype)


@needs_libmvec
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_math_loops_call_the_vector_variants_and_keep_the_results(tmp_path, name, dtype):
    n = 64
    settings = CompilerSettings(cache_dir=str(tmp_path / "cache"))
    kernel = CompiledKernel(_math_kernel(name, n, dtype, f"vm_{name}"), tmp_path, settings)
    c_name = name + ("f" if dtype == "float32" else "")
    lanes = 4 if dtype == "float32" else 2
    assert f"_ZGVbN{lanes}v_{c_name}".encode() in compile_c(kernel.source, settings)
    data = _inputs(n, dtype)
    result = np.zeros(n, dtype)
    kernel(data, result)
    with np.errstate(all="ignore"):
        expected = FUNCTIONS[name](data.astype(np.float64)).astype(dtype)
    # a few ULP of the float type, and the same NaN/infinity/sign pattern
    np.testing.assert_allclose(result, expected, rtol=8 * np.finfo(dtype).eps, atol=0, equal_nan=True)
    assert np.array_equal(np.signbit(result[~np.isnan(result)]), np.signbit(expected[~np.isnan(expected)]))


@needs_libmvec
def test_off_keeps_the_scalar_calls_and_is_a_different_cache_entry(tmp_path):
    reset_compile_stats()
    on = CompilerSettings(cache_dir=str(tmp_path / "cache"))
    off = CompilerSettings(cache_dir=str(tmp_path / "cache"), vector_math=False)
    assert on.uses_vector_math and not off.uses_vector_math
    assert vector_math.MACRO in on.effective_cflags and vector_math.MACRO not in off.effective_cflags
    kernel_on = CompiledKernel(_math_kernel("exp", 64, "float32", "vm_on"), tmp_path, on)
    kernel_off = CompiledKernel(_math_kernel("exp", 64, "float32", "vm_off"), tmp_path, off)
    source = kernel_on.source.replace("vm_on", "vm_off")
    assert source == kernel_off.source  # the C text is the same either way
    assert compile_stats()["compiles"] == 2  # the flags are part of the key: no shared entry
    assert b"_ZGV" not in compile_c(kernel_off.source, off)
    data = _inputs(64, "float32")
    got_on, got_off = np.zeros(64, np.float32), np.zeros(64, np.float32)
    kernel_on(data, got_on)
    kernel_off(data, got_off)
    np.testing.assert_allclose(got_on, got_off, rtol=8 * np.finfo(np.float32).eps, equal_nan=True)


def test_declarations_cover_every_vectorized_function_and_are_guarded():
    text = vector_math.declarations()
    assert text.startswith(f"#ifdef {vector_math.MACRO}") and text.rstrip().endswith("#endif")
    for name in (*vector_math.UNARY, *vector_math.BINARY):
        assert f"float {name}f(" in text and f"double {name}(" in text
    assert "double pow(double, double)" in text


def test_a_compiler_that_cannot_link_it_turns_it_off():
    assert not vector_math.vector_math_available("raypass-no-such-compiler", DEFAULT_CFLAGS)
    settings = CompilerSettings(cc="raypass-no-such-compiler")
    assert not settings.uses_vector_math and vector_math.MACRO not in settings.effective_cflags

"""The C renderer and compiler driver on hand-written flattened PrimFuncs, run via ctypes."""

from __future__ import annotations

import os
import shutil
import signal

import numpy as np
import pytest
from cg_c_support import CompiledKernel, loop, prim_func

from passinfra import tir
from passinfra.codegen.c_renderer import CRenderer, RenderOptions, render_prim_func
from passinfra.codegen.cc_driver import CompileError, CompilerSettings, compile_c
from passinfra.codegen.passes import CodegenC, CompileC
from passinfra.codegen.thread_pool import PARALLEL_FOR
from passinfra.errors import IRError
from passinfra.ir import op
from passinfra.ir.expr import Function, var
from passinfra.ir.module import IRModule
from passinfra.transform import PassContext
from tests.fake_compilers import compiler_stopped_by
from tests.numerics import assert_sums_close

F32 = "float32"


@pytest.fixture
def settings(tmp_path) -> CompilerSettings:
    return CompilerSettings(cache_dir=str(tmp_path / "cache"))


def vector_add(n: int = 37, symbol: str = "vadd", kind: tir.ForKind = tir.ForKind.VECTORIZED) -> tir.PrimFunc:
    a, b, out = tir.Buffer("a", (n,), F32), tir.Buffer("b", (n,), F32), tir.Buffer("out", (n,), F32)
    i = tir.TVar("i")
    body = loop(i, n, tir.BufferStore(out, a.load(i) + b.load(i), (i,)), kind)
    return prim_func([a, b, out], body, 2, symbol)


def test_vector_add_matches_numpy(tmp_path, settings):
    kernel = CompiledKernel(vector_add(), tmp_path, settings)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(37).astype(F32), rng.standard_normal(37).astype(F32)
    out = np.zeros(37, F32)
    assert kernel(a, b, out) == 0
    np.testing.assert_array_equal(out, a + b)
    assert "#pragma GCC ivdep" in kernel.source
    signature = "static int vadd(const float* restrict a, const float* restrict b, float* restrict out)"
    assert signature in kernel.source


def test_row_sum_reduction_with_local_accumulator(tmp_path, settings):
    # out[i] = sum_j x[i, j] over a flattened (5, 7) input, accumulating in a local buffer
    rows, cols = 5, 7
    x, out = tir.Buffer("x", (rows * cols,), F32), tir.Buffer("out", (rows,), F32)
    acc = tir.Buffer("acc", (1,), F32, scope="local")
    i, j = tir.TVar("i"), tir.TVar("j")
    body = loop(i, rows, tir.Allocate(acc, tir.SeqStmt((
        tir.BufferStore(acc, tir.FloatImm(0.0), (tir.IntImm(0),)),
        loop(j, cols, tir.BufferStore(acc, acc.load(0) + x.load(i * cols + j), (tir.IntImm(0),)),
             tir.ForKind.UNROLLED),
        tir.BufferStore(out, acc.load(0), (i,)),
    ))))
    kernel = CompiledKernel(prim_func([x, out], body, 1, "row_sum"), tmp_path, settings)
    data = np.random.default_rng(1).standard_normal((rows, cols)).astype(F32)
    result = np.zeros(rows, F32)
    kernel(np.ascontiguousarray(data.reshape(-1)), result)
    # the kernel adds left to right, NumPy pairwise: within the bound for any order
    assert_sums_close(result, data.sum(axis=1), terms=cols, magnitude=np.abs(data).sum(axis=1))
    assert "#pragma GCC unroll 7" in kernel.source


def test_two_dimensional_transpose_with_let_and_intrinsics(tmp_path, settings):
    rows, cols = 4, 6
    x, out = tir.Buffer("x", (rows * cols,), F32), tir.Buffer("out", (cols * rows,), F32)
    i, j, v = tir.TVar("i"), tir.TVar("j"), tir.TVar("v", F32)
    value = tir.Intrinsic("tanh", (v,), F32) + tir.Intrinsic("exp", (v,), F32)
    inner = tir.LetStmt(v, x.load(i * cols + j), tir.BufferStore(out, value, (j * rows + i,)))
    kernel = CompiledKernel(prim_func([x, out], loop(i, rows, loop(j, cols, inner)), 1, "transpose2d"),
                            tmp_path, settings)
    data = np.random.default_rng(2).standard_normal((rows, cols)).astype(F32)
    result = np.zeros(rows * cols, F32)
    kernel(data.reshape(-1).copy(), result)
    np.testing.assert_allclose(result.reshape(cols, rows), (np.tanh(data) + np.exp(data)).T, rtol=1e-5)
    assert "tanhf(" in kernel.source and "expf(" in kernel.source  # float variants for float32


def test_integer_floordiv_floormod_min_max_follow_python(tmp_path, settings):
    n = 9
    a, b = tir.Buffer("a", (n,), "int64"), tir.Buffer("b", (n,), "int64")
    outs = [tir.Buffer(name, (n,), "int64") for name in ("q", "r", "lo", "hi")]
    i = tir.TVar("i")
    x, y = a.load(i), b.load(i)
    values = [tir.FloorDiv(x, y), tir.FloorMod(x, y), tir.Min(x, y), tir.Max(x, y)]
    body = loop(i, n, tir.SeqStmt(tuple(tir.BufferStore(o, val, (i,)) for o, val in zip(outs, values))))
    kernel = CompiledKernel(prim_func([a, b, *outs], body, 2, "intops"), tmp_path, settings)
    xs = np.array([-7, 7, -7, 7, 0, -1, 5, -9, 12], dtype=np.int64)
    ys = np.array([2, -2, -2, 2, 3, 4, -3, 3, 5], dtype=np.int64)
    results = [np.zeros(n, np.int64) for _ in outs]
    kernel(xs, ys, *results)
    for got, want in zip(results, (xs // ys, xs % ys, np.minimum(xs, ys), np.maximum(xs, ys))):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [F32, "float64"])
def test_float_min_max_propagate_nan_from_either_side_like_numpy(tmp_path, settings, dtype):
    """A loop marked for vectorization (rp_vmin/rp_vmax) and strided scalar loops
    (rp_min/rp_max): the two forms of the helpers give NumPy's results."""
    pairs = [(np.nan, 1.0), (1.0, np.nan), (np.nan, np.nan), (-0.0, 0.0), (0.0, -0.0), (2.0, -3.0),
             (-np.inf, np.inf), (5.0, 5.0)] * 4
    n = len(pairs)
    a, b = tir.Buffer("a", (n,), dtype), tir.Buffer("b", (n,), dtype)
    lo, hi = tir.Buffer("lo", (n,), dtype), tir.Buffer("hi", (n,), dtype)
    i = tir.TVar("i")
    contiguous = tir.SeqStmt((tir.BufferStore(lo, tir.Min(a.load(i), b.load(i)), (i,)),
                              tir.BufferStore(hi, tir.Max(a.load(i), b.load(i)), (i,))))
    half = n // 2  # the second half strided: element 2k then 2k+1, one at a time
    k = tir.TVar("k")
    strided = tir.SeqStmt(tuple(
        tir.BufferStore(out, op(a.load(k * 2 + r), b.load(k * 2 + r)), (k * 2 + r,))
        for r in (0, 1) for out, op in ((lo, tir.Min), (hi, tir.Max))))
    body = tir.SeqStmt((loop(i, half, contiguous, tir.ForKind.VECTORIZED), loop(k, n // 4, strided)))
    body = tir.SeqStmt((body, loop(k, half // 2, tir.SeqStmt(tuple(
        tir.BufferStore(out, op(a.load(k * 2 + r + half), b.load(k * 2 + r + half)), (k * 2 + r + half,))
        for r in (0, 1) for out, op in ((lo, tir.Min), (hi, tir.Max)))))))
    kernel = CompiledKernel(prim_func([a, b, lo, hi], body, 2, f"minmax_{dtype}"), tmp_path, settings)
    suffix = "f32" if dtype == F32 else "f64"
    assert f"rp_vmin_{suffix}(a[" in kernel.source and f"rp_max_{suffix}(a[" in kernel.source
    xs, ys = (np.array(column, dtype=dtype) for column in zip(*pairs))
    got_lo, got_hi = np.zeros(n, dtype), np.zeros(n, dtype)
    kernel(xs, ys, got_lo, got_hi)
    np.testing.assert_array_equal(got_lo, np.minimum(xs, ys))  # NaN == NaN for assert_array_equal
    np.testing.assert_array_equal(got_hi, np.maximum(xs, ys))
    assert np.array_equal(np.signbit(got_lo), np.signbit(np.minimum(xs, ys)))


def _two_operand(kind: str, a: float, b: float) -> float:
    """rp_vmin/rp_vmax: a where it wins or is NaN, else b (ties and signed zeros: b)."""
    return a if (a < b if kind == "min" else a > b) or a != a else b


@pytest.mark.parametrize("dtype", [F32, "float64"])
def test_a_tree_of_float_extrema_in_a_vector_loop_is_the_two_operand_forms_result(tmp_path, settings, dtype):
    """Three or more leaves of min (max) in a VECTORIZED loop become one expression (ordered
    extrema and one unordered check, a max pool's taps); its value is the nested two-operand
    helpers' in every tree shape, signed zeros included, NaN wherever a leaf is NaN; the
    identity a max reduction starts from (-inf) is dropped."""
    n, rng = 96, np.random.default_rng(5)
    pool = np.array([np.nan, -0.0, 0.0, 1.0, -1.0, np.inf, -np.inf, 2.5], dtype)
    data = [pool[rng.integers(0, len(pool), n)] for _ in range(5)]
    data[0][:8] = pool  # every special value in the first leaf, against random others
    ins = [tir.Buffer(f"x{j}", (n,), dtype) for j in range(5)]
    i = tir.TVar("i")
    x = [b.load(i) for b in ins]
    shapes = {  # name -> (tir tree builder, reference over five values)
        "left": (lambda f: f(f(f(f(x[0], x[1]), x[2]), x[3]), x[4]),
                 lambda g, v: g(g(g(g(v[0], v[1]), v[2]), v[3]), v[4])),
        "right": (lambda f: f(x[0], f(x[1], f(x[2], f(x[3], x[4])))),
                  lambda g, v: g(v[0], g(v[1], g(v[2], g(v[3], v[4]))))),
        "balanced": (lambda f: f(f(x[0], x[1]), f(f(x[2], x[3]), x[4])),
                     lambda g, v: g(g(v[0], v[1]), g(g(v[2], v[3]), v[4]))),
    }
    outs, stores, wants = [], [], []
    for kind, node in (("min", tir.Min), ("max", tir.Max)):
        for name, (build, reference) in shapes.items():
            out = tir.Buffer(f"{kind}_{name}", (n,), dtype)
            tree = build(node)
            if kind == "max" and name == "left":
                tree = node(tir.FloatImm(-np.inf, dtype), tree)
            outs.append(out)
            stores.append(tir.BufferStore(out, tree, (i,)))
            wants.append(np.array([reference(lambda a, b, k=kind: _two_operand(k, a, b), column)
                                   for column in zip(*data)], dtype))
    body = loop(i, n, tir.SeqStmt(tuple(stores)), tir.ForKind.VECTORIZED)
    kernel = CompiledKernel(prim_func([*ins, *outs], body, 5, f"extrema_{dtype}"), tmp_path, settings)
    suffix = "f32" if dtype == F32 else "f64"
    assert f"rp_omax_{suffix}(" in kernel.source and f"rp_omin_{suffix}(" in kernel.source
    assert "INFINITY" not in kernel.source.split("/* rp-kernel */")[-1]
    got = [np.zeros(n, dtype) for _ in outs]
    kernel(*data, *got)
    for result, want in zip(got, wants):
        np.testing.assert_array_equal(np.isnan(result), np.isnan(want))
        assert np.array_equal(result.view(f"u{result.itemsize}")[~np.isnan(want)],
                              want.view(f"u{want.itemsize}")[~np.isnan(want)])


def test_select_cast_if_and_float64(tmp_path, settings):
    n = 8
    x, out = tir.Buffer("x", (n,), "float64"), tir.Buffer("out", (n,), "int32")
    i = tir.TVar("i")
    value = tir.Select(tir.GT(x.load(i), tir.FloatImm(0.0, "float64")),
                       tir.Cast("int32", tir.Intrinsic("floor", (x.load(i) * 10.0,), "float64")),
                       tir.IntImm(-1, "int32"))
    body = loop(i, n, tir.IfThenElse(tir.LT(i, tir.IntImm(6)), tir.BufferStore(out, value, (i,)),
                                     tir.BufferStore(out, tir.IntImm(99, "int32"), (i,))))
    kernel = CompiledKernel(prim_func([x, out], body, 1, "select_cast"), tmp_path, settings)
    data = np.linspace(-1, 1, n)
    result = np.zeros(n, np.int32)
    kernel(data, result)
    expected = np.where(data > 0, np.floor(data * 10).astype(np.int32), -1)
    expected[6:] = 99
    np.testing.assert_array_equal(result, expected)
    assert "floor(" in kernel.source and "floorf(" not in kernel.source.split("int select_cast(")[1]


def test_float_selects_evaluate_both_sides_integer_selects_stay_lazy(tmp_path, settings):
    # a float Select is a call (both sides evaluated, so the compiler may blend and
    # vectorize); an integer one keeps C's lazy ?: (a side may divide by zero)
    n = 8
    x, fout, iout = tir.Buffer("x", (n,), F32), tir.Buffer("f", (n,), F32), tir.Buffer("g", (n,), "int64")
    i = tir.TVar("i")
    clamped = tir.Max(tir.Sub(i, tir.IntImm(1)), tir.IntImm(0))
    float_select = tir.Select(tir.GE(i, tir.IntImm(1)), x.load(clamped), tir.FloatImm(-1.0))
    int_select = tir.Select(tir.NE(i, tir.IntImm(0)), tir.FloorDiv(tir.IntImm(12), i), tir.IntImm(-1))
    stores = (tir.BufferStore(fout, float_select, (i,)), tir.BufferStore(iout, int_select, (i,)))
    body = loop(i, n, tir.SeqStmt(stores))
    kernel = CompiledKernel(prim_func([x, fout, iout], body, 1, "selects"), tmp_path, settings)
    assert "rp_select_f32(" in kernel.source and " ? " in kernel.source.split("int selects(")[1]
    data = np.arange(1, n + 1, dtype=np.float32)
    got_f, got_i = np.zeros(n, np.float32), np.zeros(n, np.int64)
    kernel(data, got_f, got_i)
    np.testing.assert_array_equal(got_f, np.concatenate([[-1.0], data[:-1]]).astype(np.float32))
    np.testing.assert_array_equal(got_i, [-1] + [12 // k for k in range(1, n)])


def test_large_local_buffer_goes_to_the_heap(tmp_path, settings):
    n = 10_000  # 40 KB: too big for the stack
    x, out = tir.Buffer("x", (n,), F32), tir.Buffer("out", (n,), F32)
    tmp = tir.Buffer("tmp", (n,), F32, scope="local")
    i, j = tir.TVar("i"), tir.TVar("j")
    body = tir.Allocate(tmp, tir.SeqStmt((
        loop(i, n, tir.BufferStore(tmp, x.load(i) * 2.0, (i,))),
        loop(j, n, tir.BufferStore(out, tmp.load(n - 1 - j), (j,))),
    )))
    kernel = CompiledKernel(prim_func([x, out], body, 1, "reverse_double"), tmp_path, settings)
    data = np.arange(n, dtype=F32)
    result = np.zeros(n, F32)
    assert kernel(data, result) == 0
    np.testing.assert_array_equal(result, (data * 2)[::-1])
    assert "malloc(40000)" in kernel.source and "free(tmp);" in kernel.source


def test_same_prim_func_renders_byte_identical_and_names_clashing_vars_apart():
    n = 4
    a, out = tir.Buffer("a", (n,), F32), tir.Buffer("a", (n,), F32)  # same name on purpose
    i1, i2 = tir.TVar("i"), tir.TVar("i")
    body = tir.SeqStmt((loop(i1, n, tir.BufferStore(out, a.load(i1), (i1,))),
                        loop(i2, n, tir.BufferStore(out, a.load(i2) * 2.0, (i2,)))))
    func = prim_func([a, out], body, 1, "clash")
    first, second = render_prim_func(func), render_prim_func(func)
    assert first == second
    assert "const float* restrict a, float* restrict a_1" in first
    assert "for (int64_t i = 0;" in first and "for (int64_t i_1 = 0;" in first


def test_float_literals_round_trip_and_special_values():
    renderer = CRenderer()
    assert renderer.expr(tir.FloatImm(0.1)) == "0.1f"
    assert renderer.expr(tir.FloatImm(3.0, "float64")) == "3.0"
    assert renderer.expr(tir.FloatImm(-2.5)) == "(-2.5f)"
    assert renderer.expr(tir.FloatImm(float("inf"))) == "(float)INFINITY"
    assert renderer.expr(tir.FloatImm(float("-inf"), "float64")) == "(-(double)INFINITY)"
    assert renderer.expr(tir.IntImm(2**40)) == f"INT64_C({2**40})"


def test_openmp_pragmas_only_when_the_flags_enable_them():
    func = vector_add(kind=tir.ForKind.VECTORIZED)
    assert "omp simd" not in render_prim_func(func)
    assert "#pragma omp simd" in render_prim_func(func, RenderOptions.from_cflags("-O2 -fopenmp-simd"))
    # PARALLEL loops never become `omp parallel`, whatever the flags: the runtime's own
    # thread pool runs them (one thread count, set at run time, fork-safe)
    parallel = vector_add(kind=tir.ForKind.PARALLEL)
    for options in (None, RenderOptions.from_cflags("-fopenmp")):
        source = render_prim_func(parallel) if options is None else render_prim_func(parallel, options)
        assert "omp parallel" not in source and f"{PARALLEL_FOR}(" in source


def test_unflattened_access_is_rejected_with_a_clear_message():
    x, out = tir.Buffer("x", (2, 3), F32), tir.Buffer("out", (2, 3), F32)
    i, j = tir.TVar("i"), tir.TVar("j")
    body = loop(i, 2, loop(j, 3, tir.BufferStore(out, x.load(i, j), (i, j))))
    with pytest.raises(IRError, match=r"flattened .*'out'.*StorageFlatten"):
        render_prim_func(prim_func([x, out], body, 1, "not_flat"))


def test_store_into_input_and_unknown_intrinsic_and_missing_symbol_are_errors():
    a, out = tir.Buffer("a", (2,), F32), tir.Buffer("out", (2,), F32)
    i = tir.TVar("i")
    with pytest.raises(IRError, match="input buffer 'a'"):
        render_prim_func(prim_func([a, out], loop(i, 2, tir.BufferStore(a, a.load(i), (i,))), 1, "bad"))
    bogus = tir.BufferStore(out, tir.Intrinsic("frobnicate", (a.load(i),), F32), (i,))
    with pytest.raises(IRError, match="unknown intrinsic 'frobnicate'"):
        render_prim_func(prim_func([a, out], loop(i, 2, bogus), 1, "bad"))
    with pytest.raises(IRError, match="global_symbol"):
        render_prim_func(tir.PrimFunc([a, out], loop(i, 2, tir.BufferStore(out, a.load(i), (i,)))))
    unbound = tir.BufferStore(out, a.load(tir.TVar("k")), (i,))
    with pytest.raises(IRError, match="variable 'k' is used but not bound"):
        render_prim_func(prim_func([a, out], loop(i, 2, unbound), 1, "bad"))


def test_compile_error_shows_stderr_and_keeps_the_c_file(settings):
    with pytest.raises(CompileError) as info:
        compile_c("int broken(void) { return undeclared_name; }\n", settings, name="broken_kernel")
    message = str(info.value)
    assert "undeclared_name" in message  # the compiler's own diagnostic
    path = message.split("C file kept at: ")[1].splitlines()[0]
    assert path.endswith("broken_kernel.c")
    try:
        with open(path) as kept:
            assert "undeclared_name" in kept.read()
    finally:  # kept for a user to read; the test leaves no directory behind
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def test_missing_compiler_is_a_compile_error(settings):
    with pytest.raises(CompileError, match="no-such-cc-raypass"):
        compile_c("int f(void) { return 0; }\n", CompilerSettings(cc="no-such-cc-raypass"))


@pytest.mark.parametrize("probe", [False, True])
@pytest.mark.parametrize(("stop", "interrupted"), [(signal.SIGINT, True), (signal.SIGKILL, False)])
def test_a_compiler_stopped_by_ctrl_c_is_an_interruption_and_by_another_signal_an_error(stop, interrupted,
                                                                                       probe, tmp_path):
    """A Ctrl-C reaches every process of the terminal's group, a worker's compilers too: a
    compiler that SIGINT stopped (compiling, or probing for the vector math library) is
    CompileInterrupted (``raypass tune`` and the CLI end as interrupted, exit 130); one
    the kernel killed (SIGKILL) a plain CompileError."""
    from passinfra.codegen.cc_driver import CompileInterrupted

    fake = compiler_stopped_by(stop, tmp_path)
    settings = CompilerSettings(cc=str(fake), use_cache=False, vector_math=probe)
    with pytest.raises(CompileError, match=f"stopped by signal {int(stop)}") as info:
        compile_c("int f(void) { return 0; }\n", settings)
    assert isinstance(info.value, CompileInterrupted) == interrupted
    assert ("vector-math probe" in str(info.value)) == probe


def test_codegen_and_compile_passes_touch_prim_funcs_only(tmp_path):
    x = var("x", (3,))
    graph_func = Function([x], op.exp(x))
    mod = IRModule({"main": graph_func, "vadd": vector_add(symbol="vadd")})
    with PassContext(config={"codegen.cache_dir": str(tmp_path / "cache")}):
        compiled = CompileC()(CodegenC()(mod))
    assert compiled["main"] is graph_func
    kernel = compiled["vadd"]
    assert "int vadd_packed(void** args)" in kernel.attrs["c_source"]
    assert kernel.attrs["object_code"].startswith(b"\x7fELF")
    with pytest.raises(IRError, match="run CodegenC before CompileC"):
        with PassContext(config={"codegen.cache_dir": str(tmp_path / "cache")}):
            CompileC()(mod)

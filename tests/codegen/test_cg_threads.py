"""Threads in the generated code: the Parallelize pass, the library's thread pool, the
thread count (config ``codegen.num_threads``, ``lib.set_num_threads``, ``raypass run
--threads``, the CPU-affinity and cgroup-quota rule), and the promise that matters most:
a library computes bit-identical results with 1, 2 or 3 threads.

What ran in parallel is read from the pool's counters (``lib.thread_stats()``), never
from wall-clock times, so no assertion here depends on the machine's speed or load.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import passinfra
from passinfra import ir, tir
from passinfra.build import compile_pipeline
from passinfra.codegen.artifacts import kernel_c_source
from passinfra.codegen.c_renderer import render_prim_func
from passinfra.codegen.cc_driver import CompilerSettings, compile_c, link_shared
from passinfra.codegen.gemm import gemm_call, library_splits_blas
from passinfra.codegen.passes.link_library import thread_pool_object
from passinfra.codegen.thread_pool import CHUNKS_PER_THREAD, SPIN_MICROSECONDS, pool_source
from passinfra.codegen.transform.parallelize import (
    TARGET_ITERATIONS,
    gemm_work,
    independent_iterations,
    parallel_nest,
    parallelize_prim_func,
    split_gemm,
)
from passinfra.frontend import from_onnx, zoo
from passinfra.runtime.cpus import available_cpus, cgroup_cpu_quota
from passinfra.runtime.module import Module, load_module
from passinfra.runtime.threads import LibraryThreads, ThreadCountError
from passinfra.tir.evaluator import run_prim_func
from passinfra.transform import PassContext
from passinfra.transform.errors import PassConfigError, PassConfigTypeError
from tests.strategies import program_inputs, programs

F32 = "float32"
THREAD_COUNTS = (1, 2, 3)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("codegen_cache_threads"))


def build(mod: ir.IRModule, cache_dir: str, **config: object) -> Module:
    with PassContext(config={"codegen.cache_dir": cache_dir, **config}):
        return passinfra.build(mod)


def flat(result: object) -> list[np.ndarray]:
    if isinstance(result, tuple):
        return [leaf for item in result for leaf in flat(item)]
    return [np.asarray(result)]


def outputs_by_threads(lib, args: list[np.ndarray]) -> dict[int, list[np.ndarray]]:
    """The library's outputs with each thread count, and how many loops ran on several
    threads with each (the pool's counter, read before and after the call)."""
    results = {}
    for threads in THREAD_COUNTS:
        lib.set_num_threads(threads)
        results[threads] = flat(lib(*args))
    return results


def assert_bit_identical(results: dict[int, list[np.ndarray]]) -> None:
    reference = results[1]
    for threads, outputs in results.items():
        assert len(outputs) == len(reference)
        for got, expected in zip(outputs, reference):
            assert got.dtype == expected.dtype and got.shape == expected.shape
            # bytes, not values: -0.0 vs 0.0 or two NaN payloads would differ too
            assert got.tobytes() == expected.tobytes(), f"{threads} threads differ from 1 thread"


def parallel_loops_with(lib, threads: int, args: list[np.ndarray]) -> int:
    """How many loops one call ran on several threads with ``threads`` threads."""
    lib.set_num_threads(threads)
    before = lib.thread_stats()["parallel_loops"]
    lib(*args)
    return lib.thread_stats()["parallel_loops"] - before


def random_args(lib, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    args = []
    for spec in lib.metadata["inputs"]:
        if np.issubdtype(np.dtype(spec["dtype"]), np.integer):
            args.append(rng.integers(0, 16, spec["shape"]).astype(spec["dtype"]))
        else:
            args.append(rng.standard_normal(spec["shape"]).astype(spec["dtype"]))
    return args


# --------------------------------------------------------------------------- zoo models

# every zoo builder (ONNX and IR), at sizes whose kernels have work for several threads
ZOO_MODELS = {
    "onnx:mlp": lambda: from_onnx(zoo.mlp(batch=128, in_features=256, hidden=1024, layers=2, classes=10)),
    "onnx:resnet": lambda: from_onnx(zoo.resnet(depth=8, batch=2, image=32, width=16, classes=10)),
    "onnx:transformer": lambda: from_onnx(zoo.transformer(layers=2, hidden=128, heads=4, seq=64, vocab=128)),
    "ir:demo_cnn": lambda: zoo.IR_MODELS["demo_cnn"](batch=4, size=32, conv_channels=32),
    "ir:mlp": lambda: zoo.IR_MODELS["mlp"](batch=64, in_features=256, hidden=(512, 512)),
    "ir:transformer_block": lambda: zoo.IR_MODELS["transformer_block"](seq=128, hidden=128, heads=4),
}


def test_every_zoo_builder_is_covered():
    covered = {name.split(":", 1)[1] for name in ZOO_MODELS if name.startswith("onnx:")}
    assert covered == set(zoo.MODELS)
    covered = {name.split(":", 1)[1] for name in ZOO_MODELS if name.startswith("ir:")}
    assert covered == set(zoo.IR_MODELS)


@pytest.mark.parametrize("name", list(ZOO_MODELS))
def test_zoo_model_is_bit_identical_for_1_2_and_3_threads(name: str, cache_dir: str):
    mod = ZOO_MODELS[name]()
    lib = build(mod, cache_dir)
    args = random_args(lib)
    assert parallel_loops_with(lib, 2, args) > 0, "the model has loops worth splitting"
    assert parallel_loops_with(lib, 1, args) == 0
    results = outputs_by_threads(lib, args)
    assert_bit_identical(results)
    expected = flat(passinfra.evaluate(mod, *args))
    for got, want in zip(results[1], expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_zoo_model_split_into_every_independent_loop_is_bit_identical(cache_dir: str):
    """With codegen.min_parallel_work=1 every independent loop and every GEMM big enough
    to split is parallel, however little work it has: the most splitting there can be."""
    mod = ZOO_MODELS["onnx:resnet"]()
    lib = build(mod, cache_dir, **{"codegen.min_parallel_work": 1})
    args = random_args(lib)
    assert parallel_loops_with(lib, 3, args) > parallel_loops_with(build(mod, cache_dir), 3, args)
    assert_bit_identical(outputs_by_threads(lib, args))


# --------------------------------------------------------------------------- random programs


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mod=programs(max_nodes=30, max_functions=1, allow_control_flow=False, allow_closures=False),
       seed=st.integers(0, 2**16))
def test_random_program_is_bit_identical_for_1_2_and_3_threads(cache_dir: str, mod: ir.IRModule, seed: int):
    """Random programs are small: min_parallel_work=1 splits every loop that can be split."""
    inputs = program_inputs(mod, seed)
    lib = build(mod, cache_dir, **{"codegen.min_parallel_work": 1})
    assert_bit_identical(outputs_by_threads(lib, inputs))


def test_a_fixed_random_style_program_runs_loops_on_threads(cache_dir: str):
    """The property above cannot tell whether a program had parallel loops; this one has."""
    x, w = ir.var("x", (6, 40)), ir.var("w", (24, 40))
    body = ir.op.tanh(ir.op.add(ir.op.nn.dense(x, w), ir.op.sum(x, axis=1, keepdims=True)))
    mod = ir.IRModule.from_expr(ir.Function([x, w], ir.Tuple([body, ir.op.exp(x)])))
    lib = build(mod, cache_dir, **{"codegen.min_parallel_work": 1})
    inputs = program_inputs(mod, 0)
    assert parallel_loops_with(lib, 3, inputs) > 0
    results = outputs_by_threads(lib, inputs)
    assert_bit_identical(results)
    for got, expected in zip(results[3], flat(passinfra.evaluate(mod, *inputs))):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- the pass


def loop(var: tir.TVar, extent: int, body: tir.Stmt, kind: tir.ForKind = tir.ForKind.SERIAL) -> tir.For:
    return tir.For(var, tir.IntImm(0), tir.IntImm(extent), kind, body)


def test_independent_rows_are_parallel_and_the_outer_loops_fuse():
    x, out = tir.Buffer("x", (4 * 8 * 64,), F32), tir.Buffer("out", (4 * 8 * 64,), F32)
    n, c, k = tir.TVar("n"), tir.TVar("c"), tir.TVar("k")
    index = n * 512 + c * 64 + k
    nest = loop(n, 4, loop(c, 8, loop(k, 64, tir.BufferStore(out, tir.Intrinsic("exp", (x.load(index),), F32),
                                                                    (index,)))))
    result = parallel_nest(nest, min_work=1)
    assert isinstance(result, tir.For) and result.kind is tir.ForKind.PARALLEL
    assert result.extent.value == 32 and 32 < TARGET_ITERATIONS  # n and c fused; k stays inside
    assert isinstance(result.body, tir.LetStmt)
    func = tir.PrimFunc([x, out], nest, {"global_symbol": "rows", "num_inputs": 1})
    data = np.random.default_rng(0).standard_normal(4 * 8 * 64).astype(np.float32)
    np.testing.assert_array_equal(run_prim_func(func.with_body(result), data), run_prim_func(func, data))


def test_a_reduction_into_one_element_or_a_scan_is_not_split():
    x, total = tir.Buffer("x", (1024,), F32), tir.Buffer("total", (1,), F32)
    i = tir.TVar("i")
    accumulate = loop(i, 1024, tir.BufferStore(total, total.load(0) + x.load(i), (tir.IntImm(0),)))
    assert parallel_nest(accumulate, min_work=1) is accumulate
    out = tir.Buffer("out", (1024,), F32)
    j = tir.TVar("j")
    scan = loop(j, 1023, tir.BufferStore(out, out.load(j) + x.load(j + 1), (j + 1,)))
    assert not independent_iterations([j], [1023], scan.body)
    assert parallel_nest(scan, min_work=1) is scan


def test_a_shared_scratch_buffer_blocks_the_split_and_a_private_one_does_not():
    x, out = tir.Buffer("x", (64, 32), F32), tir.Buffer("out", (64 * 32,), F32)
    flat_x = tir.Buffer("x", (64 * 32,), F32)
    scratch = tir.Buffer("scratch", (32,), F32)
    i, j, k = tir.TVar("i"), tir.TVar("j"), tir.TVar("k")
    body = tir.SeqStmt((
        loop(j, 32, tir.BufferStore(scratch, flat_x.load(i * 32 + j) * 2.0, (j,))),
        loop(k, 32, tir.BufferStore(out, scratch.load(k), (i * 32 + k,))),
    ))
    assert not independent_iterations([i], [64], body)
    assert independent_iterations([i], [64], tir.Allocate(scratch, body))
    del x


def test_transposed_writes_are_independent_when_their_slabs_are_disjoint():
    out = tir.Buffer("out", (16 * 16,), F32)
    i, j = tir.TVar("i"), tir.TVar("j")
    # iteration (i, j) writes out[j * 16 + i]: disjoint for every (i, j)
    assert independent_iterations([i, j], [16, 16], tir.BufferStore(out, tir.FloatImm(1.0), (j * 16 + i,)))
    # out[i + j]: (0, 1) and (1, 0) write the same element
    assert not independent_iterations([i, j], [16, 16], tir.BufferStore(out, tir.FloatImm(1.0), (i + j,)))


def test_tiny_loops_stay_serial_at_the_default_threshold():
    x, out = tir.Buffer("x", (64,), F32), tir.Buffer("out", (64,), F32)
    i = tir.TVar("i")
    nest = loop(i, 64, tir.BufferStore(out, x.load(i) + 1.0, (i,)))
    assert parallel_nest(nest) is nest
    assert parallel_nest(nest, min_work=1).kind is tir.ForKind.PARALLEL  # only the work kept it serial


def gemm_func(m: int, n: int, k: int) -> tir.PrimFunc:
    a, b, c = tir.Buffer("a", (m * k,), F32), tir.Buffer("b", (k * n,), F32), tir.Buffer("c", (m * n,), F32)
    first = tir.IntImm(0)
    call = gemm_call(a.load(first), b.load(first), c.load(first), m, n, k, trans_b=False)
    return tir.PrimFunc([a, b, c], call, {"global_symbol": "gemm", "num_inputs": 2})


@pytest.mark.parametrize("shape", [(1000, 24, 16), (3, 700, 16)])
def test_a_split_gemm_computes_the_same_product(shape: tuple[int, int, int]):
    m, n, k = shape
    func = gemm_func(m, n, k)
    split = split_gemm(func.body, min_work=1)
    assert isinstance(split, tir.For) and split.kind is tir.ForKind.PARALLEL and split.extent.value >= 2
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(m * k).astype(np.float32), rng.standard_normal(k * n).astype(np.float32)
    whole = run_prim_func(func, a, b)
    parts = run_prim_func(func.with_body(split), a, b)
    np.testing.assert_array_equal(parts, whole)


def test_the_gemm_parts_do_not_depend_on_the_thread_count():
    """The split is made at compile time: one PrimFunc, one set of BLAS calls, any threads."""
    first = parallelize_prim_func(gemm_func(1024, 64, 64), min_work=1)
    again = parallelize_prim_func(gemm_func(1024, 64, 64), min_work=1)
    assert render_prim_func(first) == render_prim_func(again)


def test_a_split_gemm_tells_the_pool_the_work_of_a_part():
    """The pool sizes its thread count by the work the renderer passes: a part's, whose
    row count is a min() the renderer must see through."""
    source = render_prim_func(parallelize_prim_func(gemm_func(1000, 64, 64), min_work=1))
    extent, work = source.split("rp_parallel_for(")[-1].split(")")[0].split(", ")[-2:]
    assert int(work) == round(gemm_work(-(-1000 // int(extent)), 64, 64))


def test_blas_threads_rule():
    assert library_splits_blas(PassContext())
    for value in (0, 2, 4):
        assert not library_splits_blas(PassContext(config={"codegen.blas_threads": value}))
    func = gemm_func(1024, 64, 64).with_attr("uses_blas", True)
    assert parallelize_prim_func(func, split_blas=False, min_work=1) is func  # BLAS has the threads


def test_a_kernel_calling_a_threaded_blas_has_no_threads_of_its_own(cache_dir: str):
    mod = ZOO_MODELS["onnx:mlp"]()
    for blas_threads, expect_parallel in ((1, True), (2, False)):
        # every layer on BLAS (the microkernels would run the wide ones, DenseAsMatmul)
        config = {"codegen.cache_dir": cache_dir, "codegen.blas_threads": blas_threads,
                  "codegen.matmul_microkernel": False}
        with PassContext(opt_level=3, config=config):
            compiled = compile_pipeline()(mod)
        blas_kernels = [kernel_c_source(f) for _, f in compiled.items()
                        if isinstance(f, tir.PrimFunc) and f.attrs.get("uses_blas", False)]
        assert blas_kernels
        assert any("rp_parallel_for(" in src for src in blas_kernels) == expect_parallel


# --------------------------------------------------------------------------- the renderer


def test_a_parallel_loop_is_outlined_with_its_allocation_made_once_per_chunk():
    x, out = tir.Buffer("x", (64 * 8192,), F32), tir.Buffer("out", (64 * 8192,), F32)
    scratch = tir.Buffer("scratch", (8192,), F32)  # 32 KB: on the heap
    i, j, k = tir.TVar("i"), tir.TVar("j"), tir.TVar("k")
    body = tir.Allocate(scratch, tir.SeqStmt((
        loop(j, 8192, tir.BufferStore(scratch, x.load(i * 8192 + j) * 2.0, (j,))),
        loop(k, 8192, tir.BufferStore(out, scratch.load(k) + 1.0, (i * 8192 + k,))),
    )))
    func = tir.PrimFunc([x, out], loop(i, 64, body, tir.ForKind.PARALLEL),
                        {"global_symbol": "twice", "num_inputs": 1})
    source = render_prim_func(func)
    assert "static int twice_parallel(void* rp_context, int64_t rp_begin, int64_t rp_end)" in source
    assert "rp_parallel_for(twice_parallel, &rp_parallel_args, 64," in source
    chunk = source.split("static int twice_parallel_body(")[1].split("struct twice_parallel_args")[0]
    malloc_at, loop_at = chunk.index("malloc("), chunk.index("for (int64_t i = rp_begin")
    assert chunk.count("malloc(") == 1 and malloc_at < loop_at, "one allocation per chunk, before its loop"


def test_an_outlined_loop_runs_on_the_pool_and_a_nested_parallel_loop_runs_serially(tmp_path: Path):
    """A hand-made kernel (a parallel loop with a heap scratch buffer and a parallel loop
    inside), compiled and linked with the pool, matches the loop-level interpreter."""
    rows, width = 6, 4200  # a row of scratch is 16.8 KB: on the heap
    x, out = tir.Buffer("x", (rows * width,), F32), tir.Buffer("out", (rows * width,), F32)
    scratch = tir.Buffer("scratch", (width,), F32)
    i, j, k = tir.TVar("i"), tir.TVar("j"), tir.TVar("k")
    body = tir.Allocate(scratch, tir.SeqStmt((
        loop(j, width, tir.BufferStore(scratch, x.load(i * width + j) * 2.0, (j,)), tir.ForKind.PARALLEL),
        loop(k, width, tir.BufferStore(out, scratch.load(k) + tir.Cast(F32, i), (i * width + k,))),
    )))
    func = tir.PrimFunc([x, out], loop(i, rows, body, tir.ForKind.PARALLEL),
                        {"global_symbol": "nested", "num_inputs": 1})
    source = render_prim_func(func)
    assert source.count("rp_parallel_for(nested_parallel") == 1, "the inner loop is not outlined again"
    settings = CompilerSettings(cache_dir=str(tmp_path / "cache"))
    with PassContext(config={"codegen.min_parallel_work": 1}) as ctx:
        objects = [("nested", compile_c(source, settings, name="nested")), ("pool", thread_pool_object(ctx))]
    (tmp_path / "nested.so").write_bytes(link_shared(objects, settings, ("-pthread",)))
    library = ctypes.CDLL(str(tmp_path / "nested.so"))
    threads = LibraryThreads(library)
    data = np.random.default_rng(0).standard_normal(rows * width).astype(np.float32)
    expected = run_prim_func(func, data)
    for count in THREAD_COUNTS:
        threads.set(count)
        got = np.zeros(rows * width, np.float32)
        pointers = (ctypes.c_void_p * 2)(data.ctypes.data, got.ctypes.data)
        assert library.nested_packed(pointers) == 0
        np.testing.assert_array_equal(got, expected)
    stats = threads.stats()
    # every chunk beyond the caller's own range (a few a thread, at most one a row) run by a
    # worker or taken by the caller, and at most every chunk
    counts = [count for count in THREAD_COUNTS if count > 1]
    others = sum(others_chunks(library, count, rows, 1) for count in counts)
    assert stats["parallel_loops"] == len(counts)
    run_elsewhere = stats["worker_chunks"] + stats["stolen_chunks"]
    assert others <= run_elsewhere <= sum(chunk_count(library, count, rows, 1) for count in counts)


# --------------------------------------------------------------------------- the pool

# loops on the pool, driven from C: every iteration marks its own counter, so a chunk run
# twice or never shows; a chunk that fails, and a parallel loop inside a chunk
POOL_DRIVER_C = r"""
#define _GNU_SOURCE
#include <stdint.h>
#include <unistd.h>
typedef int (*rp_chunk_fn)(void* ctx, int64_t begin, int64_t end);
extern int rp_parallel_for(rp_chunk_fn fn, void* ctx, int64_t extent, int64_t work_per_iteration);
#define BIG (1LL << 30)

static int mark(void* ctx, int64_t begin, int64_t end) {
  int32_t* hits = ctx;
  for (int64_t i = begin; i < end; ++i) __atomic_fetch_add(&hits[i], 1, __ATOMIC_RELAXED);
  return 0;
}

/* ``loops`` loops of ``extent`` iterations; before every ``gap_every``-th a pause */
int run_loops(int32_t* hits, int64_t extent, int loops, int gap_every, int gap_us) {
  for (int loop = 0; loop < loops; ++loop) {
    if (gap_every > 0 && loop % gap_every == 0) usleep(gap_us);
    if (rp_parallel_for(mark, hits + loop * extent, extent, BIG) != 0) return -1;
  }
  return 0;
}

static int fail_but_first(void* ctx, int64_t begin, int64_t end) {
  (void)ctx; (void)end;
  return begin > 0 ? -1 : 0;
}
static int fail_first(void* ctx, int64_t begin, int64_t end) {
  (void)ctx; (void)end;
  return begin == 0 ? -1 : 0;
}
int run_failing(int first, int64_t extent) {
  return rp_parallel_for(first ? fail_first : fail_but_first, 0, extent, BIG);
}

/* each iteration writes the id of the thread that ran it (spinning a little, so that
   every thread of the job has the time to take chunks) */
static int who(void* ctx, int64_t begin, int64_t end) {
  int64_t* ids = ctx;
  for (int64_t i = begin; i < end; ++i) {
    ids[i] = (int64_t)gettid();
    for (volatile int spin = 0; spin < 20000; ++spin) {}
  }
  return 0;
}
int run_who(int64_t* ids, int64_t extent) { return rp_parallel_for(who, ids, extent, BIG); }

static int nested(void* ctx, int64_t begin, int64_t end) {
  return rp_parallel_for(mark, (int32_t*)ctx + begin, end - begin, BIG);
}
int run_nested(int32_t* hits, int64_t extent) { return rp_parallel_for(nested, hits, extent, BIG); }
"""


def pool_driver(tmp_path: Path, name: str, **pool: int) -> tuple[ctypes.CDLL, LibraryThreads]:
    """A library of POOL_DRIVER_C and a pool made by ``pool_source(**pool)``."""
    settings = CompilerSettings(cache_dir=str(tmp_path / "cache"))
    objects = [("driver", compile_c(POOL_DRIVER_C, settings, name="driver")),
               ("pool", compile_c(pool_source(**pool), settings, name="pool"))]
    path = tmp_path / f"{name}.so"
    path.write_bytes(link_shared(objects, settings, ("-Wl,-Bsymbolic", "-pthread")))
    library = ctypes.CDLL(str(path))
    library.run_loops.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    library.run_failing.argtypes = [ctypes.c_int, ctypes.c_int64]
    library.run_nested.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    library.run_who.argtypes = [ctypes.c_void_p, ctypes.c_int64]
    return library, LibraryThreads(library)


def chunk_count(library: ctypes.CDLL, threads: int, extent: int, work: int) -> int:
    """The chunks the pool cuts a loop into (its own rule, raypass_chunk_count)."""
    library.raypass_chunk_count.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    return library.raypass_chunk_count(threads, extent, work)


def test_a_loop_runs_on_no_more_threads_than_set_after_the_count_was_lowered(tmp_path: Path):
    """Four threads start three workers; set to two, a loop of many chunks still runs on
    at most two threads, every iteration once (the workers left over skip its chunks)."""
    library, threads = pool_driver(tmp_path, "lowered")
    extent = 64
    for count, most in ((4, 4), (2, 2), (1, 1), (3, 3)):
        threads.set(count)
        for _ in range(20):
            ids = np.zeros(extent, np.int64)
            assert library.run_who(ids.ctypes.data, extent) == 0
            assert (ids != 0).all() and len(set(ids.tolist())) <= most


def others_chunks(library: ctypes.CDLL, threads: int, extent: int, work: int) -> int:
    """The chunks of a loop outside the caller's own range (thread 0 of ``threads`` owns
    the first ``chunks // threads``): each is run by a worker or taken by the caller, and
    counted so (worker_chunks, stolen_chunks); a worker may take some of the caller's too."""
    chunks = chunk_count(library, threads, extent, work)
    return chunks - chunks // threads


def counters_after(threads: LibraryThreads, run) -> dict[str, int]:
    before = threads.stats()
    assert run() == 0
    after = threads.stats()
    return {key: after[key] - before[key] for key in after}


@pytest.mark.parametrize("spin", [0, SPIN_MICROSECONDS])
def test_every_chunk_runs_once_whoever_runs_it(tmp_path: Path, spin: int):
    """Back to back and after pauses, with workers that spin or block at once: every
    iteration runs exactly once, and every chunk beyond the caller's own range is counted,
    as run by a worker or taken by the caller (a worker may take some of the caller's)."""
    library, threads = pool_driver(tmp_path, f"spin{spin}", spin_microseconds=spin)
    extent, loops = 7, 300
    for count in (2, 3, 4):
        threads.set(count)
        hits = np.zeros(loops * extent, np.int32)
        # a 2 ms pause before every 50th loop: the workers have blocked by then
        counts = counters_after(threads, lambda h=hits: library.run_loops(h.ctypes.data, extent, loops, 50,
                                                                          2000))
        np.testing.assert_array_equal(hits, 1)
        assert counts["parallel_loops"] == loops and counts["serial_loops"] == counts["busy_loops"] == 0
        assert chunk_count(library, count, extent, 1 << 30) == min(extent, CHUNKS_PER_THREAD * count)
        others = others_chunks(library, count, extent, 1 << 30)
        chunks = chunk_count(library, count, extent, 1 << 30)
        assert loops * others <= counts["worker_chunks"] + counts["stolen_chunks"] <= loops * chunks
    if spin == 0:  # the loops above found the workers blocked: each was woken, or its chunk stolen
        assert threads.stats()["worker_sleeps"] > 0


def test_a_failing_chunk_fails_the_loop_whichever_thread_ran_it(tmp_path: Path):
    library, threads = pool_driver(tmp_path, "failing")
    for count in (1, 2, 3):
        threads.set(count)
        for _ in range(20):
            assert library.run_failing(1, 6) == -1  # the caller's own chunk
            assert library.run_failing(0, 6) == (-1 if count > 1 else 0)  # another chunk


def test_a_loop_inside_a_chunk_runs_serially_in_that_chunk(tmp_path: Path):
    """The pool is busy while its loop runs: the loop of each chunk is a busy loop."""
    library, threads = pool_driver(tmp_path, "nested")
    threads.set(3)
    hits = np.zeros(30, np.int32)
    counts = counters_after(threads, lambda: library.run_nested(hits.ctypes.data, 30))
    np.testing.assert_array_equal(hits, 1)
    assert counts["parallel_loops"] == 1 and counts["busy_loops"] == chunk_count(library, 3, 30, 1 << 30)


def wait_for_sleeps(threads: LibraryThreads, count: int) -> int:
    """The pool's worker_sleeps once it reached ``count`` (a loaded machine may be slow to
    run the workers at all), or after 10 s."""
    for _ in range(1000):
        if threads.stats()["worker_sleeps"] >= count:
            break
        time.sleep(0.01)
    return threads.stats()["worker_sleeps"]


def test_idle_workers_block(tmp_path: Path):
    """After a loop, workers spin SPIN_MICROSECONDS for the next one, then block (they do
    not keep a core busy, as libgomp's do for milliseconds): the sleep counter shows it.
    A loop that finds them blocked wakes one (which wakes the next while chunks are left)."""
    library, threads = pool_driver(tmp_path, "idle")
    threads.set(3)
    hits = np.zeros(3, np.int32)
    assert library.run_loops(hits.ctypes.data, 3, 1, 0, 0) == 0  # starts both workers
    assert wait_for_sleeps(threads, 2) >= 2, "both workers blocked"
    assert library.run_loops(hits.ctypes.data, 3, 1, 0, 0) == 0  # wakes at least one
    assert wait_for_sleeps(threads, 3) >= 3, "the woken worker blocked again"
    np.testing.assert_array_equal(hits, 2)


# --------------------------------------------------------------------------- thread counts


def test_num_threads_config_key_and_set_num_threads(cache_dir: str):
    mod = ZOO_MODELS["onnx:resnet"]()
    assert build(mod, cache_dir).num_threads == available_cpus()
    lib = build(mod, cache_dir, **{"codegen.num_threads": 3})
    assert lib.num_threads == 3
    lib.set_num_threads(1)
    assert lib.num_threads == 1
    for bad in (0, -2, 1.5, True, "2", 257):
        with pytest.raises(ThreadCountError, match="thread count must be an integer from 1 to 256"):
            lib.set_num_threads(bad)  # type: ignore[arg-type]
    assert lib.num_threads == 1
    with pytest.raises(PassConfigTypeError, match="codegen.num_threads"):
        PassContext(config={"codegen.num_threads": "2"})
    with pytest.raises(PassConfigError, match="'codegen.num_threads' must be between 0"):
        build(mod, cache_dir, **{"codegen.num_threads": -1})
    with pytest.raises(PassConfigError, match="'codegen.min_parallel_work' must be at least 1"):
        build(mod, cache_dir, **{"codegen.min_parallel_work": 0})


def test_an_exported_library_loads_with_its_thread_count(cache_dir: str, tmp_path: Path):
    lib = build(ZOO_MODELS["onnx:resnet"](), cache_dir, **{"codegen.num_threads": 2})
    lib.export_library(tmp_path / "m.so")
    loaded = load_module(tmp_path / "m.so")
    assert loaded.num_threads == 2
    args = random_args(loaded)
    assert parallel_loops_with(loaded, 2, args) > 0


def test_raypass_run_threads_flag(cache_dir: str, tmp_path: Path, capsys: pytest.CaptureFixture,
                                  monkeypatch: pytest.MonkeyPatch):
    from raypass_cli import main as cli

    lib = build(ZOO_MODELS["onnx:mlp"](), cache_dir)
    lib.export_library(tmp_path / "m.so")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "m.so", "--threads", "3"]) == 0
    assert "threads 3" in capsys.readouterr().out
    assert cli.main(["run", "m.so"]) == 0
    assert f"threads {available_cpus()}" in capsys.readouterr().out
    assert cli.main(["run", "m.so", "--threads", "0"]) == 2
    assert "raypass: error: --threads must be an integer from 1 to 256, got 0" in capsys.readouterr().err


def test_concurrent_calls_from_two_python_threads_agree(cache_dir: str):
    lib = build(ZOO_MODELS["onnx:resnet"](), cache_dir)
    lib.set_num_threads(2)
    args = random_args(lib)
    expected = flat(lib(*args))
    results: list[list[np.ndarray]] = []

    def call() -> None:
        for _ in range(5):
            results.append(flat(lib(*args)))

    threads = [threading.Thread(target=call) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 10
    for outputs in results:
        assert all(a.tobytes() == b.tobytes() for a, b in zip(outputs, expected))


def _call_in_child(lib, args: list[np.ndarray], queue) -> None:
    queue.put([a.tobytes() for a in flat(lib(*args))])


def test_a_forked_child_runs_the_library_on_fresh_threads(cache_dir: str):
    """libgomp's pool hangs in a forked child once the parent has used it; ours starts anew."""
    lib = build(ZOO_MODELS["onnx:resnet"](), cache_dir)
    args = random_args(lib)
    assert parallel_loops_with(lib, 2, args) > 0  # the parent's workers exist now
    expected = [a.tobytes() for a in flat(lib(*args))]
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_call_in_child, args=(lib, args, queue))
    child.start()
    try:
        got = queue.get(timeout=120)
    finally:
        child.join(timeout=120)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0 and got == expected


# --------------------------------------------------------------------------- the CPU rule


def fake_cgroup(tmp_path: Path, proc_lines: list[str], files: dict[str, str]) -> tuple[str, str]:
    """A /proc/self/cgroup with ``proc_lines`` and a cgroup mount with ``files``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    proc = tmp_path / "proc_cgroup"
    proc.write_text("\n".join(proc_lines) + "\n")
    root = tmp_path / "cgroup"
    root.mkdir()
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(proc), str(root)


EIGHT = set(range(8))


def test_cgroup_v2_quota_caps_the_affinity_mask_rounding_up(tmp_path: Path):
    files = {"app/cpu.max": "150000 100000\n", "cpu.max": "max 100000"}
    proc, root = fake_cgroup(tmp_path, ["0::/app"], files)
    assert cgroup_cpu_quota(proc, root) == 1.5
    assert available_cpus(proc, root, affinity=EIGHT) == 2
    assert available_cpus(proc, root, affinity={3}) == 1  # the mask is tighter


def test_cgroup_v2_without_a_limit_and_a_parent_limit(tmp_path: Path):
    files = {"a/b/cpu.max": "max 100000", "a/cpu.max": "300000 100000"}
    proc, root = fake_cgroup(tmp_path, ["0::/a/b"], files)
    assert available_cpus(proc, root, affinity=EIGHT) == 3  # the parent's limit binds its child
    proc, root = fake_cgroup(tmp_path / "free", ["0::/a"], {"a/cpu.max": "max 100000"})
    assert cgroup_cpu_quota(proc, root) is None
    assert available_cpus(proc, root, affinity=EIGHT) == 8


def test_cgroup_v1_quota_and_the_unlimited_value(tmp_path: Path):
    lines = ["12:memory:/docker/x", "4:cpu,cpuacct:/docker/x", "0::/"]
    where = "cpu,cpuacct/docker/x/"
    files = {where + "cpu.cfs_quota_us": "50000", where + "cpu.cfs_period_us": "100000"}
    proc, root = fake_cgroup(tmp_path, lines, files)
    assert cgroup_cpu_quota(proc, root) == 0.5
    assert available_cpus(proc, root, affinity=EIGHT) == 1  # never below one
    files = {where + "cpu.cfs_quota_us": "-1", where + "cpu.cfs_period_us": "100000"}
    proc, root = fake_cgroup(tmp_path / "unlimited", lines, files)
    assert available_cpus(proc, root, affinity=EIGHT) == 8


def test_container_view_host_path_missing_under_the_mount(tmp_path: Path):
    """Without a cgroup namespace the process's path names the host's cgroup, while the
    container sees its own cgroup mounted at the root: the root's limit applies."""
    proc, root = fake_cgroup(tmp_path, ["0::/kubepods/pod1/abc"], {"cpu.max": "200000 100000"})
    assert available_cpus(proc, root, affinity=EIGHT) == 2


def test_missing_or_garbled_cgroup_files_mean_no_limit(tmp_path: Path):
    assert cgroup_cpu_quota(str(tmp_path / "absent"), str(tmp_path)) is None
    proc, root = fake_cgroup(tmp_path, ["0::/x", "garbage line"], {"x/cpu.max": "lots of cpus"})
    assert cgroup_cpu_quota(proc, root) is None
    assert available_cpus(proc, root, affinity={0, 1}) == 2


def test_this_process_uses_its_affinity_mask():
    assert 1 <= available_cpus() <= len(os.sched_getaffinity(0))


def test_a_vectorized_pick_among_loaded_values_is_estimated_as_the_memory_it_moves():
    """A max pool's vectorized store (the max of loaded values) costs what a copy of its
    elements costs, loads and store, not its arithmetic divided by the vector speed-up;
    a store that computes keeps the arithmetic estimate."""
    from passinfra.codegen.transform.parallelize import (
        COPY_WORK,
        NODE_WORK,
        STORE_WORK,
        VECTOR_SPEEDUP,
        statement_work,
    )

    i = tir.TVar("i")
    data, out = tir.Buffer("a", (64,), "float32"), tir.Buffer("out", (32,), "float32")
    zero, one, two = tir.FloatImm(0.0, "float32"), tir.FloatImm(1.0, "float32"), tir.FloatImm(2.0, "float32")

    def loop(value: tir.PrimExpr) -> tir.For:
        store = tir.BufferStore(out, value, (i,))
        return tir.For(i, tir.IntImm(0), tir.IntImm(32), tir.ForKind.VECTORIZED, store)

    window = (data.load(i * tir.IntImm(2)), data.load(i * tir.IntImm(2) + tir.IntImm(1)))
    assert statement_work(loop(tir.Max(tir.Max(*window), zero))) == 32 * COPY_WORK * (2 + 1) / 2
    # a load, a multiply, an add and two constants: five nodes of arithmetic
    arithmetic = 32 * (STORE_WORK + 5 * NODE_WORK) / VECTOR_SPEEDUP
    assert statement_work(loop(data.load(i) * two + one)) == arithmetic

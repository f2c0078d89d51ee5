"""Issue 31: the loop passes on kernels of symbolic sizes. Parallel nests proved
independent for every size (and only then), loops over a run-time size cut into
vectorized blocks and a remainder in their original order, and work estimates computed
from the sizes at run time."""

from __future__ import annotations

import numpy as np
import pytest

from passinfra import tir
from passinfra.codegen.symbolic_nests import parallel_symbolic_nest
from passinfra.codegen.transform.parallelize import work_expression
from passinfra.codegen.transform.vectorize_loop import vectorize_prim_func
from passinfra.ir.dims import DimVar, evaluate, prove_le, relax_floordivs
from passinfra.tir.evaluator import run_prim_func
from passinfra.tir.functor import iter_stmts

N, M = tir.TVar("n"), tir.TVar("m")


def _loop(var: tir.TVar, extent, body: tir.Stmt, kind: tir.ForKind = tir.ForKind.SERIAL) -> tir.For:
    return tir.For(var, tir.IntImm(0), tir.as_prim(extent), kind, body)


def _is_parallel(stmt: tir.Stmt) -> bool:
    return isinstance(stmt, tir.For) and stmt.kind is tir.ForKind.PARALLEL


def test_relaxing_floor_divisions_proves_whole_blocks_end_within_the_loop() -> None:
    x = DimVar("x", 1)
    blocks_end = 16 * (x // 16)
    assert prove_le(blocks_end, x) is None  # interval bounds alone cannot tell
    assert prove_le(0, relax_floordivs(x - blocks_end)) is True
    relaxed = relax_floordivs(x - 3 * (x // 3) + 2 * (x // 2))  # a negative and a positive term
    for value in range(1, 100):  # the relaxed dimension is a lower bound
        binding = {"x": value}
        assert evaluate(relaxed, binding) <= evaluate(x - 3 * (x // 3) + 2 * (x // 2), binding)


def test_rows_of_a_symbolic_count_run_in_parallel() -> None:
    out, data = tir.Buffer("out", (N * 4,), "float32"), tir.Buffer("data", (N * 4,), "float32")
    i, j = tir.TVar("i"), tir.TVar("j")
    index = i * 4 + j
    body = _loop(j, 4, tir.BufferStore(out, data.load(index) * 2.0, (index,)), tir.ForKind.VECTORIZED)
    assert _is_parallel(parallel_symbolic_nest(_loop(i, N, body), (N,)))


def test_rows_of_a_symbolic_stride_are_independent_when_the_stride_covers_a_row() -> None:
    out = tir.Buffer("out", (N * M,), "float32")
    i, j = tir.TVar("i"), tir.TVar("j")
    row = _loop(j, M, tir.BufferStore(out, tir.FloatImm(1.0), (i * M + j,)))
    assert _is_parallel(parallel_symbolic_nest(_loop(i, N, row), (N, M)))
    # rows of 4 at a stride of m: overlapping unless m >= 4, which no bound says
    short = _loop(j, 4, tir.BufferStore(out, tir.FloatImm(1.0), (i * M + j,)))
    nest = _loop(i, N, short)
    assert parallel_symbolic_nest(nest, (N, M)) is nest


@pytest.mark.parametrize("case", ["reduction", "overlap", "neighbour_row"])
def test_dependent_iterations_stay_serial(case: str) -> None:
    out, data = tir.Buffer("out", (N * 8 + 8,), "float32"), tir.Buffer("data", (N * 8,), "float32")
    i, j = tir.TVar("i"), tir.TVar("j")
    if case == "reduction":  # every iteration adds into out[0]
        nest = _loop(i, N, tir.BufferStore(out, out.load(0) + data.load(i), (tir.IntImm(0),)))
    elif case == "overlap":  # rows of 8 written at a stride of 4
        nest = _loop(i, N, _loop(j, 8, tir.BufferStore(out, tir.FloatImm(0.0), (i * 4 + j,))))
    else:  # row i reads row i + 1, which another iteration writes
        store = tir.BufferStore(out, out.load((i + 1) * 8 + j), (i * 8 + j,))
        nest = _loop(i, N, _loop(j, 8, store))
    assert parallel_symbolic_nest(nest, (N,)) is nest


def _kernel(body: tir.Stmt, params: list[tir.Buffer]) -> tir.PrimFunc:
    return tir.PrimFunc(params, body, {"num_inputs": 1, "global_symbol": "k", "flattened": True}, (N,))


def test_a_loop_over_a_run_time_size_becomes_vectorized_blocks_and_a_remainder() -> None:
    data, out = tir.Buffer("data", (N,), "float32"), tir.Buffer("out", (N,), "float32")
    k = tir.TVar("k")
    func = _kernel(_loop(k, N, tir.BufferStore(out, tir.Intrinsic("exp", (data.load(k),), "float32"), (k,))),
                   [data, out])
    split = vectorize_prim_func(func)
    loops = [s for s in iter_stmts(split.body) if isinstance(s, tir.For)]
    vectorized = [s for s in loops if s.kind is tir.ForKind.VECTORIZED]
    assert len(vectorized) == 1 and vectorized[0].extent.value == 16
    for n in (0, 1, 15, 16, 17, 40):
        x = np.linspace(-2, 2, n, dtype=np.float32)
        same = run_prim_func(split, x, sizes={"n": n}), run_prim_func(func, x, sizes={"n": n})
        np.testing.assert_array_equal(*same)


def test_a_reduction_over_a_run_time_size_keeps_its_order_in_blocks() -> None:
    data, acc = tir.Buffer("data", (N,), "float32"), tir.Buffer("acc", (1,), "float32")
    k = tir.TVar("k")
    update = tir.BufferStore(acc, acc.load(0) + data.load(k), (tir.IntImm(0),))  # a float sum: order matters
    start = tir.BufferStore(acc, tir.FloatImm(0.0), (tir.IntImm(0),))
    func = _kernel(tir.SeqStmt((start, _loop(k, N, update))), [data, acc])
    split = vectorize_prim_func(func)
    loops = [s for s in iter_stmts(split.body) if isinstance(s, tir.For)]
    assert not any(s.kind is tir.ForKind.VECTORIZED for s in loops) and len(loops) == 3  # blocks, lanes, rest
    rng = np.random.default_rng(0)
    for n in (0, 5, 16, 37):
        x = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32)
        same = run_prim_func(split, x, sizes={"n": n}), run_prim_func(func, x, sizes={"n": n})
        np.testing.assert_array_equal(*same)


def test_the_work_of_a_loop_over_sizes_is_computed_from_them() -> None:
    out = tir.Buffer("out", (N * 64,), "float32")
    i, j = tir.TVar("i"), tir.TVar("j")
    body = _loop(i, N, _loop(j, 64, tir.BufferStore(out, tir.FloatImm(1.0), (i * 64 + j,))))
    work = work_expression(body, (N,))
    result = tir.Buffer("w", (1,), "int64")
    func = tir.PrimFunc([result], tir.BufferStore(result, work, (tir.IntImm(0),)), {"num_inputs": 0}, (N,))
    values = [int(run_prim_func(func, np.zeros(1, np.int64), sizes={"n": n})[0]) for n in (1, 10, 100)]
    assert values[0] >= 1 and values[1] == 10 * values[0] and values[2] == 100 * values[0]

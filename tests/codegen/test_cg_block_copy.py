"""Contiguous copies and zero fills inside loop nests render as memcpy / memset
(passinfra/codegen/transform/block_copy.py) and compute what the loops did."""

from __future__ import annotations

import numpy as np
import pytest
from cg_c_support import CompiledKernel, loop, prim_func

from passinfra.codegen import tir
from passinfra.codegen.c_renderer import render_prim_func
from passinfra.codegen.compiler import CompilerSettings
from passinfra.codegen.transform.block_copy import match_block_copy

F32 = "float32"
ROWS, COLS = 5, 6


@pytest.fixture
def settings(tmp_path) -> CompilerSettings:
    return CompilerSettings(cache_dir=str(tmp_path / "cache"))


def _rows(make_value, rows: int = ROWS, cols: int = COLS, symbol: str = "rows") -> tir.PrimFunc:
    """out[r, c] = make_value(x, r, c) over flattened (rows, cols) buffers: a nest whose
    inner loop is the candidate for a block copy."""
    x = tir.Buffer("x", (rows * 2 * cols,), F32)
    out = tir.Buffer("out", (rows * cols,), F32)
    r, c = tir.TVar("r"), tir.TVar("c")
    index = r * tir.IntImm(cols) + c
    inner = loop(c, cols, tir.BufferStore(out, make_value(x, r, c), (index,)))
    return prim_func([x, out], loop(r, rows, inner), 1, symbol)


def _run(func, tmp_path, settings):
    kernel = CompiledKernel(func, tmp_path, settings)
    x = np.random.default_rng(0).standard_normal(ROWS * 2 * COLS).astype(F32)
    out = np.full(ROWS * COLS, 7.0, F32)
    assert kernel(x, out) == 0
    return kernel.source, x.reshape(ROWS, 2 * COLS), out.reshape(ROWS, COLS)


def test_copy_of_every_other_row_half_is_a_memcpy(tmp_path, settings):
    # out[r, c] = x[r, COLS + c]: the second half of each input row
    func = _rows(lambda x, r, c: x.load(r * tir.IntImm(2 * COLS) + tir.IntImm(COLS) + c))
    source, x, out = _run(func, tmp_path, settings)
    assert "memcpy(" in source and f", {COLS * 4});" in source
    np.testing.assert_array_equal(out, x[:, COLS:])


def test_zero_fill_is_a_memset(tmp_path, settings):
    source, _, out = _run(_rows(lambda x, r, c: tir.FloatImm(0.0, F32)), tmp_path, settings)
    assert "memset(" in source
    np.testing.assert_array_equal(out, np.zeros_like(out))
    assert not np.signbit(out).any()


@pytest.mark.parametrize("make_value", [
    lambda x, r, c: tir.FloatImm(-0.0, F32),  # -0.0 is not all-zero bytes
    lambda x, r, c: tir.FloatImm(1.0, F32),
    lambda x, r, c: x.load(r * tir.IntImm(2 * COLS) + c * tir.IntImm(2)),  # strided read
    lambda x, r, c: x.load(r * tir.IntImm(2 * COLS) + c) * tir.FloatImm(2.0, F32),  # not a plain copy
], ids=["negative_zero", "nonzero_fill", "strided", "scaled"])
def test_other_stores_stay_loops(tmp_path, settings, make_value):
    func = _rows(make_value)
    source = render_prim_func(func)
    assert "memcpy(" not in source and "memset(" not in source
    kernel = CompiledKernel(func, tmp_path, settings)
    assert kernel.source == source


def test_unrolled_or_parallel_loops_are_not_block_copies():
    x, out = tir.Buffer("x", (8,), F32), tir.Buffer("out", (8,), F32)
    i = tir.TVar("i")
    store = tir.BufferStore(out, x.load(i), (i,))
    assert match_block_copy(loop(i, 8, store)) is not None
    assert match_block_copy(loop(i, 8, store, tir.ForKind.UNROLLED)) is None
    assert match_block_copy(loop(i, 8, store, tir.ForKind.PARALLEL)) is None

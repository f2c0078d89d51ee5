"""Contiguous copies and zero fills inside loop nests render as memcpy / memset
(passinfra/codegen/block_copy.py) and compute what the loops did."""

from __future__ import annotations

import numpy as np
import pytest
from cg_c_support import CompiledKernel, loop, prim_func

from passinfra import tir
from passinfra.codegen.block_copy import match_block_copy
from passinfra.codegen.c_renderer import PREAMBLE, render_prim_func
from passinfra.codegen.cc_driver import CompilerSettings

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
    body = source.replace(PREAMBLE, "")  # the preamble's float16 helpers use memcpy for bit casts
    assert PREAMBLE in source and "memcpy(" not in body and "memset(" not in body
    kernel = CompiledKernel(func, tmp_path, settings)
    assert kernel.source == source


def test_unrolled_or_parallel_loops_are_not_block_copies():
    x, out = tir.Buffer("x", (8,), F32), tir.Buffer("out", (8,), F32)
    i = tir.TVar("i")
    store = tir.BufferStore(out, x.load(i), (i,))
    assert match_block_copy(loop(i, 8, store)) is not None
    assert match_block_copy(loop(i, 8, store, tir.ForKind.UNROLLED)) is None
    assert match_block_copy(loop(i, 8, store, tir.ForKind.PARALLEL)) is None


def _nest(source_row_stride: int, target_row_stride: int, rows: int = 3, cols: int = 4) -> tir.PrimFunc:
    """A 3-deep nest: for b: for r: for c: out[b, r*ts + c] = x[b, r*ss + c] (flattened);
    the (r, c) pair is one block when both strides equal ``cols``."""
    blocks = 2
    x = tir.Buffer("x", (blocks * rows * source_row_stride,), F32)
    out = tir.Buffer("out", (blocks * rows * target_row_stride,), F32)
    b, r, c = tir.TVar("b"), tir.TVar("r"), tir.TVar("c")
    target = b * tir.IntImm(rows * target_row_stride) + r * tir.IntImm(target_row_stride) + c
    source = b * tir.IntImm(rows * source_row_stride) + r * tir.IntImm(source_row_stride) + c
    body = loop(b, blocks, loop(r, rows, loop(c, cols, tir.BufferStore(out, x.load(source), (target,)))))
    return prim_func([x, out], body, 1, "nest")


def test_a_perfect_nest_over_contiguous_rows_is_one_block(tmp_path, settings):
    func = _nest(4, 4)
    block = match_block_copy(func.body.body)  # the (r, c) nest inside b
    assert block is not None and block.count == 12
    kernel = CompiledKernel(func, tmp_path, settings)
    assert "memcpy(" in kernel.source and ", 48);" in kernel.source
    x = np.random.default_rng(1).standard_normal(24).astype(F32)
    out = np.zeros(24, F32)
    kernel(x, out)
    np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("source_stride, target_stride", [(6, 4), (4, 6)], ids=["source_gaps", "target_gaps"])
def test_a_nest_with_gaps_between_rows_is_not_one_block(tmp_path, settings, source_stride, target_stride):
    func = _nest(source_stride, target_stride)
    assert match_block_copy(func.body.body) is None
    inner = match_block_copy(func.body.body.body)  # each row alone still is
    assert inner is not None and inner.count == 4
    kernel = CompiledKernel(func, tmp_path, settings)
    x = np.random.default_rng(2).standard_normal(2 * 3 * source_stride).astype(F32)
    out = np.zeros(2 * 3 * target_stride, F32)
    kernel(x, out)
    got = out.reshape(2, 3, target_stride)[:, :, :4]
    np.testing.assert_array_equal(got, x.reshape(2, 3, source_stride)[:, :, :4])

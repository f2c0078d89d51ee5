"""A float32 softmax keeps the vector expf in its fast range (passinfra/codegen/compute/
nn.py, EXP_FAST_FROM): rows with masked entries (-1e9, -inf), entries whose exp is a
denormal, NaN and +inf give the values of before, exactly where they are exact."""

from __future__ import annotations

import numpy as np
import pytest

import passinfra
from passinfra import tir
from passinfra.codegen.compute.nn import EXP_FAST_FROM, EXP_ZERO_BELOW
from passinfra.codegen.lower import lower_primitive_function
from passinfra.ir import op
from passinfra.ir.expr import Function, var
from passinfra.ir.module import IRModule
from passinfra.runtime.interpreter import evaluate
from passinfra.tir.evaluator import run_prim_func
from passinfra.transform import PassContext

ROWS, WIDTH = 8, 40


def _rows() -> np.ndarray:
    """One row per regime: plain, a causal-style -1e9 mask, -inf, shifted entries in the
    denormal window, far below it, a NaN, a +inf, and the window's edges."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((ROWS, WIDTH)).astype(np.float32)
    x[1, WIDTH // 2:] = -1e9
    x[2, ::3] = -np.inf
    x[3, 1::2] = x[3].max() + np.linspace(EXP_ZERO_BELOW + 0.5, EXP_FAST_FROM - 0.5, WIDTH // 2)
    x[4, 5:] = -300.0
    x[5, 7] = np.nan
    x[6, 3] = np.inf
    x[7, :4] = [x[7].max() + EXP_FAST_FROM, x[7].max() + EXP_ZERO_BELOW, -1e30, np.finfo(np.float32).min]
    return x


def _softmax_function() -> Function:
    x = var("x", (ROWS, WIDTH))
    return Function([x], op.nn.softmax(x, -1))


def _loops(stmt: tir.Stmt) -> list[str]:
    names, stack = [], [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, tir.For):
            names.append(node.loop_var.name)
            stack.append(node.body)
        elif isinstance(node, tir.SeqStmt):
            stack.extend(node.stmts)
        elif isinstance(node, (tir.Allocate, tir.LetStmt)):
            stack.append(node.body)
        elif isinstance(node, tir.IfThenElse):
            stack.extend(s for s in (node.then_case, node.else_case) if s is not None)
    return names


def _check(got: np.ndarray, x: np.ndarray) -> None:
    with np.errstate(invalid="ignore"):  # the reference meets inf - inf in the +inf row
        expected = evaluate(IRModule({"main": _softmax_function()}), x)
    # a denormal has fewer significant bits: a few of its units apart is 1e-44 absolute
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-43)
    with np.errstate(invalid="ignore"):
        shifted = x - np.nanmax(np.where(np.isnan(x), -np.inf, x), axis=-1, keepdims=True)
    exact_zero = shifted < -104.0  # expf rounds to +0: masked entries are exactly 0
    clean_rows = ~np.isnan(x).any(axis=-1) & ~np.isinf(x).any(axis=-1, where=x > 0)
    assert np.all(got[exact_zero & clean_rows[:, None]] == 0.0)
    window = (shifted >= EXP_ZERO_BELOW + 0.5) & (shifted < EXP_FAST_FROM)
    assert window[3].sum() == WIDTH // 2
    kept = window[3] & (expected[3] > 1e-43)  # denormals kept, not flushed to 0
    assert kept.sum() > WIDTH // 4 and np.all(got[3][kept] > 0.0)
    assert np.isnan(got[5]).all() and np.isnan(got[6]).any()


def test_the_lowered_softmax_has_the_fast_range_path_and_agrees():
    lowered = lower_primitive_function(_softmax_function(), "kernel")
    assert {"k_below", "k_clamp", "k_note", "k_exact"} <= set(_loops(lowered.body))
    x = _rows()
    _check(run_prim_func(lowered, x).reshape(x.shape), x)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_compiled_softmax_on_masked_and_extreme_rows(tmp_path, threads):
    x = _rows()
    with PassContext(config={"codegen.cache_dir": str(tmp_path)}):
        lib = passinfra.build(IRModule({"main": _softmax_function()}))
    lib.set_num_threads(threads)
    got = lib(x)
    _check(got, x)
    lib.set_num_threads(1)
    np.testing.assert_array_equal(lib(x), got)

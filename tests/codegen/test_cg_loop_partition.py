"""LoopPartition: loops cut where a condition on their variable changes; the pieces hold
no condition that is decided over their range, and every kernel computes what it did."""

from __future__ import annotations

import numpy as np
import pytest
from cg_tir_samples import loop
from hypothesis import given, settings
from hypothesis import strategies as st

from passinfra import ir
from passinfra.codegen.transform import LoopPartition
from passinfra.codegen.transform.loop_partition import MAX_PIECES, affine_in, partition_prim_func
from passinfra.tir import (
    GE,
    LT,
    Add,
    And,
    Buffer,
    BufferStore,
    FloatImm,
    For,
    IntImm,
    Max,
    Min,
    Mul,
    PrimFunc,
    Select,
    SeqStmt,
    Sub,
    TVar,
)
from passinfra.tir.evaluator import run_prim_func
from passinfra.tir.functor import StmtExprVisitor
from passinfra.tir.verify import verify_prim_func
from passinfra.transform import PassContext, get_pass


class _Census(StmtExprVisitor):
    """Counts the Selects, Min/Max nodes and loops of a statement."""

    def __init__(self) -> None:
        self.selects = self.clamps = 0
        self.loops: list[For] = []

    def visit_select(self, node) -> None:
        self.selects += 1

    def visit_min(self, node) -> None:
        self.clamps += 1

    visit_max = visit_min

    def visit_for(self, stmt: For) -> None:
        self.loops.append(stmt)
        super().visit_for(stmt)


def census(stmt) -> _Census:
    counter = _Census()
    counter.visit_stmt(stmt)
    return counter


def padded_window(height: int = 12, width: int = 10, stride: int = 2, pad: int = 1) -> PrimFunc:
    """out[i, j] = sum over a 3x3 window of x around (stride*i - pad, stride*j - pad),
    zero outside x: each tap is a Select around a read at a clamped index, the way the
    pooling and padding compute rules write it (taps already unrolled)."""
    out_h, out_w = (height + 2 * pad - 3) // stride + 1, (width + 2 * pad - 3) // stride + 1
    x, out = Buffer("x", (height, width), "float32"), Buffer("out", (out_h, out_w), "float32")
    i, j = TVar("i"), TVar("j")
    total = FloatImm(0.0)
    for dh in range(3):
        for dw in range(3):
            row = Add(Mul(i, IntImm(stride)), IntImm(dh - pad))
            col = Add(Mul(j, IntImm(stride)), IntImm(dw - pad))
            inside = And(And(GE(row, IntImm(0)), LT(row, IntImm(height))),
                         And(GE(col, IntImm(0)), LT(col, IntImm(width))))
            clamped_row = Max(Min(row, IntImm(height - 1)), IntImm(0))
            clamped_col = Max(Min(col, IntImm(width - 1)), IntImm(0))
            total = total + Select(inside, x.load(clamped_row, clamped_col), FloatImm(0.0))
    body = loop(i, out_h, loop(j, out_w, BufferStore(out, total, (i, j))))
    return PrimFunc([x, out], body, {"num_inputs": 1, "global_symbol": "window"})


def _longest_loop(pieces) -> For:
    """The piece that is a loop with the most iterations (one-step pieces are inlined)."""
    return max((piece for piece in pieces if isinstance(piece, For)), key=lambda piece: piece.extent.value)


def test_registered_and_in_the_build_pipeline() -> None:
    from passinfra.build import COMPILE_PIPELINE

    made = get_pass("LoopPartition")
    assert made.info.name == "LoopPartition" and made.info.opt_level == 2
    assert COMPILE_PIPELINE.index("UnrollLoop") < COMPILE_PIPELINE.index("LoopPartition")


def test_affine_in() -> None:
    v, w = TVar("v"), TVar("w")
    assert affine_in(Add(Mul(v, IntImm(2)), IntImm(-1)), v) == (2, -1)
    assert affine_in(Sub(IntImm(5), Mul(IntImm(3), v)), v) == (-3, 5)
    assert affine_in(IntImm(7), v) == (0, 7)
    assert affine_in(Add(v, w), v) is None  # another variable
    assert affine_in(Mul(v, v), v) is None  # not affine


@pytest.mark.parametrize("height, width, stride, pad", [(12, 10, 2, 1), (7, 9, 1, 1), (8, 8, 1, 2)])
def test_padded_window_is_cut_at_its_borders_and_computes_the_same(height, width, stride, pad) -> None:
    func = padded_window(height, width, stride, pad)
    parted = partition_prim_func(func)
    verify_prim_func(parted)
    x = np.random.default_rng(0).standard_normal((height, width)).astype(np.float32)
    np.testing.assert_array_equal(run_prim_func(parted, x), run_prim_func(func, x))
    # the outer loop is cut into pieces; the biggest piece (the interior) has neither a
    # Select nor a clamp left: its reads are plain loads
    pieces = parted.body.stmts
    assert isinstance(parted.body, SeqStmt) and 2 <= len(pieces) <= MAX_PIECES
    interior = _longest_loop(pieces)
    middle = _longest_loop(interior.body.stmts)
    assert census(middle).selects == 0 and census(middle).clamps == 0
    assert census(func.body).selects == 9


def test_the_pass_runs_through_the_pass_manager() -> None:
    func = padded_window()
    with PassContext(opt_level=3):
        parted = LoopPartition()(ir.IRModule({"k": func}))["k"]
    assert census(parted.body).selects < census(func.body).selects * len(census(parted.body).loops)
    assert isinstance(parted.body, SeqStmt)


def test_loops_without_qualifying_conditions_are_left_alone() -> None:
    x, out = Buffer("x", (8, 8), "float32"), Buffer("out", (8, 8), "float32")
    i, j = TVar("i"), TVar("j")
    # the condition mixes both loop variables: no single cut point for either
    diagonal = Select(GE(i, j), x.load(i, j), FloatImm(0.0))
    func = PrimFunc([x, out], loop(i, 8, loop(j, 8, BufferStore(out, diagonal, (i, j)))), {"num_inputs": 1})
    assert partition_prim_func(func) is func
    # a condition that holds over the whole range needs no cut
    always = Select(GE(i, IntImm(0)), x.load(i, IntImm(0)), FloatImm(0.0))
    func = PrimFunc([x, out], loop(i, 8, BufferStore(out, always, (i, IntImm(0)))), {"num_inputs": 1})
    assert partition_prim_func(func) is func


def test_a_loop_needing_too_many_pieces_stays_whole() -> None:
    x, out = Buffer("x", (16,), "float32"), Buffer("out", (16,), "float32")
    i = TVar("i")
    value = FloatImm(0.0)
    for cut in range(1, MAX_PIECES + 1):  # MAX_PIECES cut points: MAX_PIECES + 1 pieces
        value = value + Select(LT(i, IntImm(cut)), x.load(i), FloatImm(1.0))
    func = PrimFunc([x, out], loop(i, 16, BufferStore(out, value, (i,))), {"num_inputs": 1})
    assert partition_prim_func(func) is func


@settings(max_examples=60, deadline=None)
@given(extent=st.integers(2, 20), slope=st.integers(-3, 3).filter(bool), offset=st.integers(-25, 25),
       bound=st.integers(-10, 10), less=st.booleans())
def test_random_affine_conditions_keep_the_results(extent, slope, offset, bound, less) -> None:
    x, out = Buffer("x", (extent,), "float32"), Buffer("out", (extent,), "float32")
    i = TVar("i")
    affine = Add(Mul(i, IntImm(slope)), IntImm(offset))
    condition = LT(affine, IntImm(bound)) if less else GE(affine, IntImm(bound))
    clamped = Max(Min(affine, IntImm(extent - 1)), IntImm(0))
    value = Select(condition, x.load(clamped), FloatImm(-1.0)) + x.load(i)
    func = PrimFunc([x, out], loop(i, extent, BufferStore(out, value, (i,))), {"num_inputs": 1})
    parted = partition_prim_func(func)
    verify_prim_func(parted)
    data = np.arange(1, extent + 1, dtype=np.float32)
    np.testing.assert_array_equal(run_prim_func(parted, data), run_prim_func(func, data))
    # every cut is where the condition or a clamp changes, so inside each piece all of
    # them are decided and folded away
    if parted is not func:
        for piece in parted.body.stmts:
            assert census(piece).selects == 0 and census(piece).clamps == 0

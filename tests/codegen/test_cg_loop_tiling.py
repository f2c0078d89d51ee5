"""Element-wise stores that read an input transposed get a tiled loop nest, and a
channel shuffle a channel loop split by its groups (passinfra/codegen/loop_tiling.py);
values stay those of the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import passinfra
from passinfra import tir
from passinfra.codegen.loop_tiling import elementwise_nest
from passinfra.codegen.lower import lower_primitive_function
from passinfra.ir import op
from passinfra.ir.expr import Function, var
from passinfra.ir.module import IRModule
from passinfra.runtime.interpreter import evaluate
from passinfra.tir.evaluator import run_prim_func
from passinfra.transform import PassContext


def _func(shapes, make):
    params = [var(f"p{i}", s) for i, s in enumerate(shapes)]
    return Function(params, make(*params))


def _loops(stmt) -> list[tir.For]:
    out, stack = [], [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, tir.For):
            out.append(node)
        if isinstance(node, tir.SeqStmt):
            stack.extend(node.stmts)
        elif isinstance(node, (tir.For, tir.Allocate, tir.LetStmt)):
            stack.append(node.body)
    return out


def to_nhwc_scaled(x, scale):
    return op.nn.relu(op.multiply(op.transpose(x, (0, 2, 3, 1)), scale))


def to_nchw(x):
    return op.transpose(x, (0, 3, 1, 2))


def concat_nchw_of_nhwc(a, b):
    return op.concatenate([a, op.transpose(b, (0, 3, 1, 2))], axis=1)


@pytest.mark.parametrize("shapes, make, tiled", [
    ([(1, 32, 8, 12), (32,)], to_nhwc_scaled, True),
    ([(2, 6, 16, 48)], to_nchw, True),
    # split; width 6 has no tile size: the 16 channels in blocks of 8, lanes innermost
    ([(1, 8, 6, 6), (1, 6, 6, 16)], concat_nchw_of_nhwc, True),
    ([(1, 14, 14, 64)], to_nchw, True),  # width 14 has no tile size: the same
    ([(1, 30, 7, 7)], lambda x: op.transpose(x, (0, 2, 3, 1)), False),  # 30 has no tile size
    ([(4, 64), (4, 64)], op.add, False),  # nothing transposed
], ids=["nchw_to_nhwc_epilogue", "nhwc_to_nchw", "concat", "nhwc_to_nchw_14", "untileable", "plain"])
def test_transposing_stores_are_tiled_and_correct(tmp_path, shapes, make, tiled):
    func = _func(shapes, make)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype("float32") for s in shapes]
    expected = evaluate(IRModule({"main": func}), *args)
    lowered = lower_primitive_function(func, "kernel")
    names = [loop.loop_var.name for loop in _loops(lowered.body)]
    assert any(name.endswith("_i") for name in names) is tiled, names
    np.testing.assert_allclose(run_prim_func(lowered, *args), expected, rtol=1e-6, atol=1e-6)
    with PassContext(config={"codegen.cache_dir": str(tmp_path)}):
        compiled = passinfra.build(IRModule({"main": func}))
    np.testing.assert_allclose(compiled(*args), expected, rtol=1e-6, atol=1e-6)


def test_tiled_nest_puts_both_tiles_innermost():
    src = tir.Buffer("src", (64, 32), "float32")
    dst = tir.Buffer("dst", (32, 64), "float32")
    i, j = tir.TVar("i"), tir.TVar("j")
    nest = elementwise_nest((i, j), (32, 64), tir.BufferStore(dst, src.load(j, i), (i, j)))
    order = [(loop.loop_var.name, loop.extent.value) for loop in _loops(nest)]
    # dst's inner axis j in tiles of 16, then i (read contiguously from src) in tiles of 16
    assert order == [("j_o", 4), ("i_o", 2), ("i_i", 16), ("j_i", 16)]


def test_an_untileable_innermost_axis_walks_blocks_of_the_loaded_axis():
    """Channels-last into channels-first with 14 columns (no tile size divides 14): the
    channels, which the load reads contiguously, in blocks of 16 whose lanes run
    innermost, so each step reads one whole cache line of the input (untiled, the
    innermost loop read it at a stride of the channel count: 4 KiB for 1024 channels,
    every line in one cache set)."""
    src = tir.Buffer("src", (14, 14, 1024), "float32")
    dst = tir.Buffer("dst", (1024, 14, 14), "float32")
    c, h, w = tir.TVar("c"), tir.TVar("h"), tir.TVar("w")
    nest = elementwise_nest((c, h, w), (1024, 14, 14), tir.BufferStore(dst, src.load(h, w, c), (c, h, w)))
    order = [(loop.loop_var.name, loop.extent.value) for loop in _loops(nest)]
    assert order == [("c_o", 64), ("h", 14), ("w", 14), ("c_i", 16)]


def test_a_narrow_innermost_axis_puts_the_loaded_axis_innermost():
    """An image's 3 channels into channels-last: the loop over the contiguously loaded
    width runs innermost (its loads contiguous, its values vectorized), its body a pixel's
    three stores side by side (one interleaved group); not a 3-iteration loop around each
    pixel, nor a loop over the channels around the width's, each store 3 apart."""
    src = tir.Buffer("src", (3, 8, 24), "float32")
    dst = tir.Buffer("dst", (8, 24, 3), "float32")
    h, w, c = tir.TVar("h"), tir.TVar("w"), tir.TVar("c")
    nest = elementwise_nest((h, w, c), (8, 24, 3), tir.BufferStore(dst, src.load(c, h, w), (h, w, c)))
    loops = _loops(nest)
    assert [(loop.loop_var.name, loop.extent.value) for loop in loops] == [("h", 8), ("w", 24)]
    channels = [(store.indices[-1].value, store.value.indices[0].value) for store in loops[-1].body.stmts]
    assert channels == [(0, 0), (1, 1), (2, 2)]


def _allocated(stmt) -> list[tir.Buffer]:
    out, stack = [], [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, tir.Allocate):
            out.append(node.buffer)
        if isinstance(node, tir.SeqStmt):
            stack.extend(node.stmts)
        elif isinstance(node, (tir.For, tir.Allocate, tir.LetStmt)):
            stack.append(node.body)
    return out


def test_a_computed_narrow_transpose_is_staged_through_a_buffer(tmp_path):
    """An image's 3 channels into channels-last with arithmetic on the way (a quantizing
    input layer's): per row of the image, the values computed along the width into a
    buffer of 3 x width (contiguous loads and stores, vectorized), then stored from it
    three a pixel, one store a channel; the interpreter's values, bit for bit."""
    shapes = [(2, 3, 8, 24), (3,)]
    func = _func(shapes, to_nhwc_scaled)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(s).astype("float32") for s in shapes]
    expected = evaluate(IRModule({"main": func}), *args)
    lowered = lower_primitive_function(func, "kernel")
    staged = [b for b in _allocated(lowered.body) if b.name.endswith("_staged")]
    assert [tuple(int(d) for d in b.shape) for b in staged] == [(3, 24)], staged
    names = [loop.loop_var.name for loop in _loops(lowered.body)]
    assert not any(name.endswith("_i") for name in names), names  # no tiles
    np.testing.assert_array_equal(run_prim_func(lowered, *args), expected)
    with PassContext(config={"codegen.cache_dir": str(tmp_path)}):
        compiled = passinfra.build(IRModule({"main": func}))
    np.testing.assert_array_equal(compiled(*args), expected)


def _selects(stmt) -> int:
    from passinfra.tir.functor import iter_expr_post_order

    count, stack = 0, [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, tir.BufferStore):
            count += sum(isinstance(n, tir.Select) for n in iter_expr_post_order(node.value))
        elif isinstance(node, tir.SeqStmt):
            stack.extend(node.stmts)
        elif isinstance(node, (tir.For, tir.Allocate, tir.LetStmt)):
            stack.append(node.body)
    return count


@pytest.mark.parametrize("axis", [1, 3])
def test_concatenate_splits_into_select_free_pieces(tmp_path, axis):
    shapes = [(1, 8, 4, 16), (1, 8, 4, 16), (1, 8, 4, 16)]
    func = _func(shapes, lambda a, b, c: op.nn.relu(op.concatenate([a, b, c], axis=axis)))
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype("float32") for s in shapes]
    expected = evaluate(IRModule({"main": func}), *args)
    lowered = lower_primitive_function(func, "kernel")
    assert _selects(lowered.body) == 0
    starts = sorted(loop.start.value for loop in _loops(lowered.body) if loop.start.value)
    assert starts == [8, 16] if axis == 1 else starts == [16, 32]
    np.testing.assert_allclose(run_prim_func(lowered, *args), expected, rtol=1e-6, atol=1e-6)
    with PassContext(config={"codegen.cache_dir": str(tmp_path)}):
        compiled = passinfra.build(IRModule({"main": func}))
    np.testing.assert_allclose(compiled(*args), expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape, groups", [((1, 5, 6, 12), 3), ((2, 3, 4, 32), 4), ((1, 7, 3, 10), 2)])
def test_channel_shuffle_splits_the_channel_loop_by_the_groups(tmp_path, shape, groups):
    """Per pixel, out[c] = in[(c % g) * (C/g) + c // g]: the channel loop is split into
    (C/g, g), so the index has no division or modulo left, and the copy is exact."""
    grouped = (*shape[:3], groups, shape[3] // groups)
    func = _func([shape], lambda x: op.reshape(op.transpose(op.reshape(x, grouped), (0, 1, 2, 4, 3)), shape))
    x = np.random.default_rng(2).standard_normal(shape).astype("float32")
    expected = evaluate(IRModule({"main": func}), x)
    lowered = lower_primitive_function(func, "kernel")
    inner = [(loop.loop_var.name, loop.extent.value) for loop in _loops(lowered.body)][-2:]
    assert inner == [("i3_o", shape[3] // groups), ("i3_i", groups)], inner
    np.testing.assert_array_equal(run_prim_func(lowered, x).reshape(shape), expected)
    with PassContext(config={"codegen.cache_dir": str(tmp_path)}):
        compiled = passinfra.build(IRModule({"main": func}))
    np.testing.assert_array_equal(compiled(x), expected)


def test_a_divisor_that_does_not_divide_the_extent_leaves_the_loop_whole():
    src = tir.Buffer("src", (10,), "float32")
    dst = tir.Buffer("dst", (10,), "float32")
    i = tir.TVar("i")
    nest = elementwise_nest((i,), (10,), tir.BufferStore(dst, src.load(tir.FloorMod(i, tir.IntImm(4))), (i,)))
    assert [(loop.loop_var.name, loop.extent.value) for loop in _loops(nest)] == [("i", 10)]
    nest = elementwise_nest((i,), (12,), tir.BufferStore(dst, src.load(tir.FloorMod(i, tir.IntImm(4))), (i,)))
    assert [(loop.loop_var.name, loop.extent.value) for loop in _loops(nest)] == [("i_o", 3), ("i_i", 4)]

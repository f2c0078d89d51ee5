"""Reductions over outer axes into the innermost (channel) axis (a global pool, a mean over
H and W of NHWC data): lowered as blocks of per-channel accumulators with the reduction
loops outside the loop over a block's channels (passinfra.codegen.lower,
_Lowerer._emit_channel_reduce). Each output combines its terms in the order of the
reduction loops, so the results are the bits of a float32 running sum in that order,
for any thread count.
"""

from __future__ import annotations

import numpy as np
import pytest

import passinfra
from passinfra import ir, tir
from passinfra.codegen.lower import MAX_CHANNEL_REDUCE_BLOCK, channel_block, lower_primitive_function
from passinfra.ir import op
from passinfra.transform import PassContext
from tests.codegen.test_cg_conv_kernels import _nodes


def test_channel_blocks_divide_the_channels_in_whole_vectors_where_they_can():
    assert channel_block(144) == 48 and channel_block(32) == 32 and channel_block(1152) == 64
    assert channel_block(240) == 48 and channel_block(13) == 13 and channel_block(26) == 26
    for channels in range(8, 600):
        block = channel_block(channels)
        assert channels % block == 0 and block <= MAX_CHANNEL_REDUCE_BLOCK


def lowered(func: ir.Function) -> tir.PrimFunc:
    return lower_primitive_function(func, "kernel", use_blas=False)


def test_a_global_pool_keeps_one_accumulator_per_channel_of_a_block():
    x = ir.var("x", (1, 20, 20, 144))
    func = ir.Function([x], op.nn.global_avg_pool2d(x, layout="NHWC"))
    nodes = _nodes(lowered(func).body)
    (acc,) = [n.buffer for n in nodes if isinstance(n, tir.Allocate)]
    assert acc.shape == (48,) and acc.scope == "local"
    # the reduction loops (20 x 20) run outside the loop over the block's 48 channels
    loops = [n for n in nodes if isinstance(n, tir.For)]
    extents = [loop.extent.value for loop in loops if loop.extent.value != 1]  # not the unit axes
    assert extents[0] == 3 and extents.count(48) == 3 and 20 in extents
    inner = next(loop for loop in loops if loop.extent.value == 20)
    assert any(isinstance(n, tir.For) and n.extent.value == 48 for n in _nodes(inner.body))
    # a reduction over the innermost axis keeps the scalar form
    y = ir.var("y", (4, 500))
    row_sums = lowered(ir.Function([y], op.sum(y, axis=1)))
    assert all(n.buffer.shape == () for n in _nodes(row_sums.body) if isinstance(n, tir.Allocate))


@pytest.mark.parametrize("make, shape", [
    (lambda x: op.nn.global_avg_pool2d(x, layout="NHWC"), (2, 17, 19, 96)),
    (lambda x: op.mean(x, axis=(1, 2), keepdims=True), (1, 9, 31, 40)),
    (lambda x: op.max(x, axis=(0, 1)), (33, 7, 24)),
], ids=["global_avg_pool_nhwc", "mean_hw_keepdims", "max_outer_axes"])
def test_results_are_the_bits_of_the_ordered_float32_sum_for_any_thread_count(tmp_path, make, shape):
    rng = np.random.default_rng(7)
    data = (rng.standard_normal(shape) * 10).astype(np.float32)
    x = ir.var("x", shape)
    mod = ir.IRModule({"main": ir.Function([x], make(x))})
    with PassContext(config={"codegen.cache_dir": str(tmp_path)}):
        lib = passinfra.build(mod)
    # the reference: a float32 running combine over the reduced axes in loop order
    if len(shape) == 4:
        n, h, w, c = shape
        acc = np.zeros((n, c), np.float32)
        for row in range(h):
            for col in range(w):
                acc = acc + data[:, row, col, :]
        want = (acc / np.float32(h * w)).reshape(lib(data).shape)
    else:
        acc = np.full(shape[-1], -np.inf, np.float32)
        for i in range(shape[0]):
            for j in range(shape[1]):
                acc = np.maximum(acc, data[i, j])
        want = acc
    for threads in (1, 2, 3):
        lib.set_num_threads(threads)
        got = lib(data)
        np.testing.assert_array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32))

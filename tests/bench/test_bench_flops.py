"""Contraction FLOP counting of bench/flops.py (what the codegen benchmark's GFLOP/s
columns divide by)."""

from __future__ import annotations

from bench.flops import contraction_flops
from passinfra.ir import op
from passinfra.ir.expr import Function, Var
from passinfra.ir.module import IRModule
from passinfra.ir.types import TensorType


def _module(body_of, *shapes) -> IRModule:
    params = [Var(f"p{i}", TensorType(shape, "float32")) for i, shape in enumerate(shapes)]
    return IRModule.from_expr(Function(params, body_of(*params)))


def test_conv2d_counts_output_elements_times_its_window_in_either_layout():
    # 1x8x6x6 input, 4 output channels, 3x3 window, no padding: 4x4 outputs
    nchw = _module(lambda x, w: op.nn.conv2d(x, w), (1, 8, 6, 6), (4, 8, 3, 3))
    nhwc = _module(lambda x, w: op.nn.conv2d(x, w, data_layout="NHWC", kernel_layout="HWIO"),
                   (1, 6, 6, 8), (3, 3, 8, 4))
    expected = 2 * (1 * 4 * 4 * 4) * (8 * 3 * 3)
    assert contraction_flops(nchw) == expected == contraction_flops(nhwc)


def test_grouped_conv2d_reduces_over_its_group_only():
    grouped = _module(lambda x, w: op.nn.conv2d(x, w, groups=2), (1, 8, 5, 5), (4, 4, 1, 1))
    assert contraction_flops(grouped) == 2 * (4 * 5 * 5) * 4


def test_dense_matmul_and_other_ops():
    dense = _module(lambda x, w: op.nn.relu(op.nn.dense(x, w)), (3, 16), (5, 16))
    assert contraction_flops(dense) == 2 * 3 * 5 * 16
    batched = _module(lambda a, b: op.matmul(a, b), (2, 3, 7), (2, 7, 4))
    assert contraction_flops(batched) == 2 * 2 * 3 * 4 * 7
    assert contraction_flops(_module(lambda x: op.tanh(op.add(x, x)), (4, 4))) == 0

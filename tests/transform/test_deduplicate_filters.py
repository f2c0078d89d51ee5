"""DeduplicateFilters: Before/Expected rewrites, identity on distinct filters, values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from passinfra import evaluate, ir
from passinfra.ir import op
from passinfra.transform import DeduplicateFilters
from passinfra.transform.builtin.deduplicate_filters import distinct_filters
from tests.graph_sums import graph_sums
from tests.numerics import assert_sums_close


def run(func: ir.Function) -> ir.Function:
    return DeduplicateFilters()(ir.IRModule({"main": func}))["main"]


def weight_with_rows(rows: list[int], k: int, seed: int = 0) -> np.ndarray:
    """A (len(rows), k) float32 weight whose row i is distinct filter ``rows[i]``."""
    filters = np.random.default_rng(seed).standard_normal((max(rows) + 1, k)).astype("float32")
    return filters[rows]


def test_dense_with_repeated_filters_computes_each_once() -> None:
    x = ir.var("x", (2, 6))
    w = weight_with_rows([0, 1, 0, 2, 1], 6)
    before = ir.Function([x], op.nn.dense(x, ir.const(w)))

    expected_x = ir.var("x", (2, 6))
    gather = ir.const(np.array([0, 1, 0, 2, 1], "int32"))
    reduced = op.nn.dense(expected_x, ir.const(w[[0, 1, 3]]))
    expected = ir.Function([expected_x], op.take(reduced, gather, axis=-1))
    ir.assert_structural_equal(run(before), expected)


def test_nhwc_conv_gathers_along_its_channel_axis() -> None:
    x = ir.var("x", (1, 5, 5, 3))
    w = np.stack([np.full((3, 3, 3), 0.02, "float32")] * 4, axis=-1)  # HWIO, four equal filters
    call = op.nn.conv2d(x, ir.const(w), padding=(1, 1), data_layout="NHWC", kernel_layout="HWIO")
    after = run(ir.Function([x], call)).body
    assert after.op.name == "take" and after.attrs["axis"] == 3
    assert after.args[0].args[1].data.shape == (3, 3, 3, 1)
    np.testing.assert_array_equal(after.args[1].data, np.zeros(4, "int32"))


def test_distinct_filters_leave_the_function_unchanged() -> None:
    x = ir.var("x", (1, 3, 6, 6))
    w = np.random.default_rng(1).standard_normal((8, 3, 3, 3)).astype("float32")
    func = ir.Function([x], op.nn.relu(op.nn.conv2d(x, ir.const(w))))
    assert run(func) is func


def test_grouped_convolutions_and_non_constant_weights_are_left_alone() -> None:
    x = ir.var("x", (1, 4, 6, 6))
    grouped = ir.Function([x], op.nn.conv2d(x, ir.const(np.ones((4, 1, 3, 3), "float32")), groups=4))
    assert run(grouped) is grouped
    w = ir.var("w", (4, 4, 3, 3))
    runtime_weight = ir.Function([x, w], op.nn.conv2d(x, w))
    assert run(runtime_weight) is runtime_weight


def test_filters_compare_bit_for_bit() -> None:
    # -0.0 == 0.0 numerically, but the filters are not the same bits: both kept
    w = np.zeros((2, 4), "float32")
    w[1, 3] = -0.0
    assert distinct_filters(w, 0) is None
    # a difference past the compared prefix is still seen
    w = np.zeros((3, 100), "float32")
    w[1, 99] = 1.0
    first, inverse = distinct_filters(w, 0)
    assert first.tolist() == [0, 1] and inverse.tolist() == [0, 1, 0]


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.integers(0, 3), min_size=2, max_size=9), layout=st.sampled_from(["NCHW", "NHWC"]))
def test_values_are_unchanged(rows: list[int], layout: str) -> None:
    filters = weight_with_rows(rows, 2 * 3 * 3, seed=len(rows)).reshape(len(rows), 2, 3, 3)  # OIHW
    shape, weight, kernel = (1, 2, 5, 5), filters, "OIHW"
    if layout == "NHWC":
        shape, weight, kernel = (1, 5, 5, 2), filters.transpose(2, 3, 1, 0), "HWIO"
    x = ir.var("x", shape)
    func = ir.Function([x], op.nn.conv2d(x, ir.const(weight), padding=(1, 1), data_layout=layout,
                                         kernel_layout=kernel))
    data = np.random.default_rng(3).standard_normal(shape).astype("float32")
    # fewer filters: another einsum, which BLAS may block otherwise; a filter mapped to the
    # wrong output moves it by whole terms, far past the bound for any order
    sums = graph_sums(ir.IRModule({"main": func}), data)
    assert_sums_close(evaluate(run(func), data), evaluate(func, data), *sums)


@pytest.mark.parametrize("axis", [0, 1, 3])
def test_distinct_filters_along_any_axis(axis: int) -> None:
    w = np.moveaxis(weight_with_rows([2, 0, 2, 1], 3 * 2 * 2).reshape(4, 3, 2, 2), 0, axis)
    first, inverse = distinct_filters(w, axis)
    assert first.tolist() == [0, 1, 3] and inverse.tolist() == [0, 1, 0, 2]

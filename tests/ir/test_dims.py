"""Symbolic dimensions (passinfra.ir.dims): canonical form, arithmetic, exact division,
bounds, three-valued equality, evaluation, text; and hypothesis properties: the
canonical form of a random expression evaluates, at every binding within the bounds,
to what the expression computes on Python ints, and lies within its bounds."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from passinfra.errors import DimError, RaypassError
from passinfra.ir import parse_type
from passinfra.ir.dims import (
    DimExpr,
    DimVar,
    bounds,
    dim_text,
    evaluate,
    exact_div,
    free_vars,
    is_static,
    prove_equal,
    prove_le,
    substitute,
)
from passinfra.ir.types import TensorType

batch = DimVar("batch")
seq = DimVar("seq", 1, 2048)
past = DimVar("past")
n = DimVar("n", 2, 9)


# --------------------------------------------------------------------------- canonical form


def test_equal_expressions_compare_and_hash_equal() -> None:
    assert batch * 16 + 0 == 16 * batch
    assert hash(batch * 16 + 0) == hash(16 * batch)
    assert (seq + past) - past == seq
    assert type((seq + past) - past) is DimVar  # one variable is that variable
    assert (batch + seq) * 2 == 2 * seq + batch + batch
    assert (batch + 1) * (batch - 1) == batch * batch - 1


def test_constants_stay_plain_ints() -> None:
    assert batch - batch == 0 and type(batch - batch) is int
    assert type((seq * 3 + 2) - 3 * seq) is int
    assert is_static(4) and not is_static(batch) and not is_static(batch * 2)


def test_variables_are_identified_by_name_and_bounds() -> None:
    assert DimVar("batch") == batch
    assert DimVar("batch", 1) != batch
    assert batch + DimVar("batch", 1) != 2 * batch


def test_text_of_canonical_forms() -> None:
    assert dim_text(seq * 64) == "seq * 64"
    assert dim_text(batch * seq * 64 + seq + 1) == "batch * seq * 64 + seq + 1"
    assert dim_text(5 - batch) == "-batch + 5"
    assert dim_text((batch + 1) // 2) == "floordiv(batch + 1, 2)"
    assert dim_text(batch % 4) == "floormod(batch, 4)"
    assert dim_text(DimVar("batch size")) == '"batch size"'
    assert dim_text(DimVar("floordiv")) == '"floordiv"'


# --------------------------------------------------------------------------- division


def test_floor_division_moves_multiples_out() -> None:
    assert (2 * batch + 1) // 2 == batch
    assert (batch + 3) // 2 == (batch + 1) // 2 + 1
    assert (batch + 1) // 2 // 3 == (batch + 1) // 6
    assert batch * 6 // 3 == 2 * batch
    assert batch // 1 == batch


def test_modulus_reduces_coefficients() -> None:
    assert (batch * 4 + 3) % 4 == 3
    assert (batch % 8) % 4 == batch % 4
    assert (batch * 5 + 1) % 5 == 1
    assert n % 10 == n  # the bounds (2..9) put n in [0, 10) already


def test_bounds_fold_a_quotient() -> None:
    assert n // 10 == 0
    assert (n + 8) // 10 == 1  # n + 8 lies in [10, 17]
    assert DimVar("k", 4, 7) // 4 == 1


def test_exact_division() -> None:
    total = batch * seq * 64 + batch * past * 64
    assert exact_div(total, seq + past) == batch * 64
    assert exact_div(total, batch * 64) == seq + past
    assert exact_div(total, 64) == batch * seq + batch * past
    assert exact_div(total, 3) is None
    assert exact_div(seq * seq - 1, seq + 1) == seq - 1
    assert exact_div(seq * seq - 1, seq + 2) is None
    assert exact_div(batch, 0) is None
    assert batch * seq // seq == batch


def test_division_errors_name_the_dims() -> None:
    with pytest.raises(DimError, match=r"batch \+ 1 by the symbolic dimension seq"):
        (batch + 1) // seq
    with pytest.raises(DimError, match="positive"):
        batch // 0
    with pytest.raises(DimError, match="positive"):
        batch % -2


# --------------------------------------------------------------------------- bounds, equality


def test_bounds() -> None:
    assert bounds(seq) == (1, 2048)
    assert bounds(batch) == (0, None)
    assert bounds(2 * seq - 1) == (1, 4095)
    assert bounds(5 - batch) == (None, 5)
    assert bounds(batch % 4) == (0, 3)
    assert bounds((seq + 1) // 2) == (1, 1024)
    assert bounds(7) == (7, 7)


def test_prove_equal_is_three_valued() -> None:
    assert prove_equal(batch * 2, batch + batch) is True
    assert prove_equal(seq, 0) is False  # seq >= 1
    assert prove_equal(batch + 1, batch) is False
    assert prove_equal(batch, 0) is None
    assert prove_equal(batch, seq) is None
    assert prove_equal(DimVar("one", 1, 1), 1) is True  # the bounds pin it
    assert prove_le(1, seq) is True and prove_le(seq, 0) is False and prove_le(batch, 3) is None


def test_truth_value_is_refused() -> None:
    with pytest.raises(DimError, match="truth value"):
        bool(batch)


def test_dimvar_validation() -> None:
    for bad in [dict(name=""), dict(name="x", lo=-1), dict(name="x", lo=5, hi=4), dict(name="x", lo=1.5)]:
        with pytest.raises(DimError):
            DimVar(**bad)


# --------------------------------------------------------------------------- evaluation, substitution


def test_evaluate_and_substitute() -> None:
    expr = (batch + 3) // 2 * seq - batch % 4
    assert evaluate(expr, {"batch": 7, "seq": 3}) == (7 + 3) // 2 * 3 - 7 % 4
    assert substitute(expr, {batch: 5, seq: past}) == 4 * past - 1
    assert free_vars(expr) == (batch, seq)
    assert free_vars((batch + seq) // 2 * past) == (batch, past, seq)
    with pytest.raises(DimError, match="no value for the dimension seq"):
        evaluate(expr, {"batch": 1})


def test_pickle_round_trip() -> None:
    for dim in (batch, seq, (batch + 3) // 2 * seq, seq % 8 + past):
        again = pickle.loads(pickle.dumps(dim))
        assert again == dim and hash(again) == hash(dim)


def test_tensor_types_reject_negative_dims() -> None:
    with pytest.raises(RaypassError, match="non-negative"):
        TensorType((-1 - batch, 3))
    TensorType((batch - 1, 3))  # may be negative for batch = 0 only: the binding decides


# --------------------------------------------------------------------------- properties

VARS = (DimVar("a"), DimVar("b", 1, 8), DimVar("c", 2, 5))
VAR_RANGES = {"a": (0, 20), "b": (1, 8), "c": (2, 5)}

leaves = st.one_of(st.integers(-6, 6), st.sampled_from(VARS))
trees = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(["+", "-", "*"]), inner, inner),
        st.tuples(st.sampled_from(["//", "%"]), inner, st.integers(1, 6)),
    ),
    max_leaves=8,
)
bindings = st.fixed_dictionaries({name: st.integers(lo, hi) for name, (lo, hi) in VAR_RANGES.items()})

_OPS = {
    "+": lambda x, y: x + y,
    "-": lambda x, y: x - y,
    "*": lambda x, y: x * y,
    "//": lambda x, y: x // y,
    "%": lambda x, y: x % y,
}


def naive(tree: Any, binding: dict[str, int]) -> int:
    """The expression on Python ints, nothing canonical."""
    if isinstance(tree, DimVar):
        return binding[tree.name]
    if isinstance(tree, int):
        return tree
    op, lhs, rhs = tree
    return _OPS[op](naive(lhs, binding), naive(rhs, binding))


def build(tree: Any) -> Any:
    """The same expression built with the dimension arithmetic (canonical at every step)."""
    if isinstance(tree, (int, DimVar)):
        return tree
    op, lhs, rhs = tree
    return _OPS[op](build(lhs), build(rhs))


PROPERTY_SETTINGS = settings(max_examples=150, deadline=None)


@PROPERTY_SETTINGS
@given(trees, bindings)
def test_canonical_form_evaluates_like_the_expression(tree: Any, binding: dict[str, int]) -> None:
    dim = build(tree)
    value = naive(tree, binding)
    assert evaluate(dim, binding) == value
    lo, hi = bounds(dim)
    assert (lo is None or lo <= value) and (hi is None or value <= hi)


@PROPERTY_SETTINGS
@given(trees, trees, bindings)
def test_equality_and_exact_division_are_sound(left: Any, right: Any, binding: dict[str, int]) -> None:
    a, b = build(left), build(right)
    verdict = prove_equal(a, b)
    if verdict is not None:
        assert (evaluate(a, binding) == evaluate(b, binding)) is verdict
    if a == b:
        assert hash(a) == hash(b)
    product = a * b
    if not is_static(b) or b != 0:
        quotient = exact_div(product, b)
        assert quotient is not None  # a polynomial times b divides by b
        if evaluate(b, binding) != 0:
            assert evaluate(quotient, binding) == evaluate(a, binding)


@PROPERTY_SETTINGS
@given(trees)
def test_text_round_trip(tree: Any) -> None:
    dim = build(tree)
    if is_static(dim) and dim < 0:
        return  # not a valid tensor dimension
    try:
        ty = TensorType((dim, 2))
    except RaypassError:
        return  # provably negative
    text = f"[a, b: 1..8, c: 2..5] Tensor[({dim_text(dim)}, 2), float32]"
    assert parse_type(text) == ty


def test_dim_expr_is_never_a_constant_or_a_lone_variable() -> None:
    for dim in (batch * 2, batch + 1, batch // 2, batch % 3, batch * seq):
        assert type(dim) is DimExpr

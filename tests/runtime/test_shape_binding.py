"""Symbolic dimensions take their sizes from a call's arguments: the reference interpreter
runs one function at every size that fits, and a size that does not fit is one error
naming the argument, the axis and the dimension."""

from __future__ import annotations

import numpy as np
import pytest

from passinfra import evaluate, ir
from passinfra.ir import DimVar, op
from passinfra.runtime.shape_binding import DimBindingError, bind_dims, bound_type

BATCH, PAST, SEQ = DimVar("batch", 1, 4), DimVar("past"), DimVar("seq", 1)


def _cache_step() -> ir.IRModule:
    """A KV-cache step: the past and the new keys concatenated along the sequence axis,
    then scaled: [batch, past + seq, 8]."""
    past = ir.var("past_key", (BATCH, PAST, 8))
    new = ir.var("key", (BATCH, SEQ, 8))
    body = op.multiply(op.concatenate(ir.Tuple([past, new]), axis=1), ir.const(np.float32(0.5)))
    return ir.IRModule.from_expr(ir.Function([past, new], body))


@pytest.mark.parametrize(("batch", "past", "seq"), [(1, 0, 1), (2, 7, 1), (4, 3, 5), (1, 0, 9)])
def test_one_function_runs_at_every_size_that_fits(batch: int, past: int, seq: int) -> None:
    rng = np.random.default_rng(batch * 100 + past * 10 + seq)
    cached = rng.standard_normal((batch, past, 8)).astype("float32")
    fresh = rng.standard_normal((batch, seq, 8)).astype("float32")
    result = evaluate(_cache_step(), cached, fresh)
    # one multiply per element: exact whatever the order
    np.testing.assert_array_equal(result, np.concatenate([cached, fresh], axis=1) * np.float32(0.5))


def test_the_binding_and_the_bound_types() -> None:
    past, new = _cache_step()["main"].params
    arrays = (np.zeros((2, 7, 8), "float32"), np.zeros((2, 1, 8), "float32"))
    binding = bind_dims([("past_key", past.type_annotation, arrays[0]),
                         ("key", new.type_annotation, arrays[1])])
    assert binding == {"batch": 2, "past": 7, "seq": 1}
    result_type = ir.TensorType((BATCH, PAST + SEQ, 8), "float32")
    assert bound_type(result_type, binding) == ir.TensorType((2, 8, 8), "float32")
    assert bind_dims([("x", ir.TensorType((2, 8), "float32"), np.zeros((2, 8)))]) == {}


@pytest.mark.parametrize(("shapes", "message"), [
    (((2, 3, 8), (3, 1, 8)), r"argument %key of @main axis 0: dimension batch is 3, but argument %past_key "
                             r"of @main axis 0 gave batch = 2"),
    (((5, 3, 8), (5, 1, 8)), r"%past_key of @main axis 0: dimension batch = 5 is outside its bounds 1\.\.4"),
    (((2, 3, 8), (2, 0, 8)), r"%key of @main axis 1: dimension seq = 0 is outside its bounds 1\.\."),
    (((2, 3, 8), (2, 1, 4)), r"%key of @main axis 2: expected 8, got 4"),
    (((2, 3), (2, 1, 8)), r"%past_key of @main: expected 3 dimensions .*, got shape \(2, 3\)"),
])
def test_sizes_that_do_not_fit_are_one_error_naming_them(shapes: tuple, message: str) -> None:
    with pytest.raises(DimBindingError, match=message):
        evaluate(_cache_step(), *(np.zeros(shape, "float32") for shape in shapes))


def test_an_expression_dimension_is_checked_against_its_value() -> None:
    total = ir.var("mask", (BATCH, PAST + SEQ))
    past, new = ir.var("past_key", (BATCH, PAST, 8)), ir.var("key", (BATCH, SEQ, 8))
    mod = ir.IRModule.from_expr(ir.Function([past, new, total], op.sum(total, axis=1)))
    cached, fresh = np.zeros((2, 3, 8), "float32"), np.zeros((2, 1, 8), "float32")
    np.testing.assert_array_equal(evaluate(mod, cached, fresh, np.ones((2, 4), "float32")), [4.0, 4.0])
    with pytest.raises(DimBindingError, match=r"%mask of @main axis 1: expected past \+ seq = 4, got 5"):
        evaluate(mod, cached, fresh, np.ones((2, 5), "float32"))
    # a variable that only appears inside an expression: no argument gives its size
    alone = ir.var("mask", (PAST + SEQ,))
    with pytest.raises(DimBindingError, match=r"uses (past, seq|seq, past), which no argument gives"):
        evaluate(ir.IRModule.from_expr(ir.Function([alone], alone)), np.ones(3, "float32"))


def test_a_variable_given_only_inside_a_sum_is_solved_from_it() -> None:
    """``past`` is no argument's whole dimension, but the mask's ``past + seq`` gives it
    once ``seq`` is known (what lets FuseOps lift an attention core that sees only it)."""
    mask, key = ir.var("mask", (BATCH, PAST + SEQ)), ir.var("key", (BATCH, SEQ, 8))
    binding = bind_dims([("mask", mask.type_annotation, np.ones((2, 9))),
                         ("key", key.type_annotation, np.ones((2, 4, 8)))])
    assert binding == {"batch": 2, "seq": 4, "past": 5}
    with pytest.raises(DimBindingError, match=r"mask axis 1 \(past \+ seq\): dimension past = -1 is outside"):
        bind_dims([("mask", mask.type_annotation, np.ones((2, 3))),
                   ("key", key.type_annotation, np.ones((2, 4, 8)))])

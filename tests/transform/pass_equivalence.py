"""Shared checks for the built-in optimization passes: a pass keeps what a program
computes, keeps it well formed and well typed, and goes through deep programs."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given

from passinfra import ir
from passinfra.runtime.interpreter import evaluate
from passinfra.testing import make_chain
from passinfra.transform.passes import Pass
from tests.strategies import GEN_SETTINGS, program_inputs, programs


def assert_same_value(actual: Any, expected: Any, atol: float = 1e-6) -> None:
    """Equal results: same tuple structure; floats within rtol 1e-5 (plus ``atol`` for
    values near 0), others exact."""
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same_value(a, e, atol)
        return
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if np.issubdtype(expected.dtype, np.floating):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=atol)
    else:
        np.testing.assert_array_equal(actual, expected)


def assert_pass_preserves_semantics(make_pass: Any, mod: ir.IRModule, seed: int = 0) -> ir.IRModule:
    """Run the pass; the result is well formed, typed, and evaluates like ``mod``."""
    inputs = program_inputs(mod, seed)
    expected = evaluate(mod, *inputs)
    after = make_pass()(mod)
    ir.verify_well_formed(after)
    ir.infer_type(after)
    assert_same_value(evaluate(after, *inputs), expected)
    return after


def property_test(make_pass: Any, **program_options: Any) -> Any:
    """A hypothesis test: the pass preserves what random programs compute."""

    @GEN_SETTINGS
    @given(programs(**program_options))
    def test(mod: ir.IRModule) -> None:
        assert_pass_preserves_semantics(make_pass, mod)

    return test


def run_on_chain(the_pass: Pass, n: int = 30_000, kind: str = "add") -> ir.IRModule:
    """Run a pass on an ``n``-long chain and check the result still computes (n+1)*x."""
    mod = make_chain(n, kind)
    after = the_pass(mod)
    x = np.array([1.0, 2.0], dtype="float32")
    np.testing.assert_allclose(evaluate(after, x), (n + 1) * x, rtol=1e-5)
    return after

"""Tolerances for comparing floating-point sums computed in different orders.

Two correct evaluations of one sum of ``n`` terms (a dot product, a convolution window, a
reduction) differ when they add in different orders: blocked by OpenBLAS's kernel for
this CPU, by NumPy's SIMD width, by the microkernels' vector length, with or without
fused multiply-adds. A test that compares them with a fixed ``rtol`` passes or fails
with the CPU it runs on. What holds on every CPU is the classic bound (Higham, *Accuracy
and Stability of Numerical Algorithms*, 2nd ed., section 3.1): a sum evaluated in any
order, each addition and product rounded once (an FMA rounds less), is within
``gamma(n) * sum(|term_i|)`` of the exact sum, ``gamma(n) = n*u / (1 - n*u)`` with ``u``
the unit roundoff; so two evaluations are within twice that of each other.

The bound follows from the sum's length and the magnitude of its terms (not of its
result: a sum of large terms that cancel still carries their rounding). The magnitude is
the same computation run on the absolute values of its inputs, which tests get from the
reference they already have (``evaluate(mod, abs(x))`` for a convolution or a matmul).
A wrong index, a missing or doubled term moves a result by about one term's size, which
is far beyond this bound for the sums the tests use.
"""

from __future__ import annotations

import numpy as np

UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float64": 2.0 ** -53, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


def gamma(terms: int, dtype: str = "float32") -> float:
    """Higham's gamma(n): the relative error bound of ``terms`` rounded operations."""
    nu = terms * UNIT_ROUNDOFF[dtype]
    assert nu < 1, f"a sum of {terms} terms in {dtype} has no useful bound"
    return nu / (1 - nu)


def sum_tolerance(terms: int, magnitude: np.ndarray | float, dtype: str = "float32") -> np.ndarray:
    """How far two evaluations of the same sum(s) of ``terms`` terms (each a product of two
    inputs, rounded, counts as one more operation) may be apart, per element:
    ``2 * gamma(terms + 1) * magnitude`` where ``magnitude`` is the sum of the terms'
    absolute values (an array broadcast against the results, or one number)."""
    return 2.0 * gamma(terms + 1, dtype) * np.asarray(magnitude, dtype=np.float64)


def assert_sums_close(got: np.ndarray, expected: np.ndarray, terms: int, magnitude: np.ndarray | float,
                      dtype: str = "float32") -> None:
    """``got`` and ``expected`` are the same sums evaluated in possibly different orders:
    the same shape, NaN where NaN is, and elementwise within :func:`sum_tolerance`."""
    got, expected = np.asarray(got, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert np.array_equal(np.isnan(got), np.isnan(expected))
    bound = np.broadcast_to(sum_tolerance(terms, magnitude, dtype), got.shape)
    # where both are NaN (checked above) they agree; a NaN input makes the magnitude NaN there
    bound = np.where(np.isnan(expected), np.inf, bound)
    error = np.abs(np.where(np.isnan(expected), 0.0, got - expected))
    worst = np.unravel_index(int(np.argmax(error - bound)), got.shape) if got.size else ()
    size = np.broadcast_to(magnitude, got.shape)[worst] if got.size else 0.0
    assert np.all(error <= bound), (
        f"sums of {terms} terms differ by {error[worst]:.3g} at {worst}, beyond the bound "
        f"{bound[worst]:.3g} for any summation order (magnitude {size:.3g})")

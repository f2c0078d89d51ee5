"""NumPy kernels that the op implementations share and NumPy does not provide:
``erf`` and C-style integer division. The sliding-window kernels (convolution,
pooling) are in :mod:`passinfra.ir.op._window`.

All kernels are vectorized (no Python loop over elements): the reference interpreter
runs small CNNs with them.
"""

from __future__ import annotations

import math

import numpy as np

from passinfra.errors import EvaluationError

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_SQRT_PI = math.sqrt(math.pi)
# |x| below this uses the power series, above it the continued fraction. Both are
# accurate to a few ulp at the switch point (tested against math.erf).
_SERIES_LIMIT = 2.5
_FRACTION_DEPTH = 48
_SERIES_MAX_TERMS = 80


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, elementwise, in the dtype of ``x`` (a float dtype).

    Two expansions, each used where it converges fast and without cancellation:

    * ``|x| < 2.5``: erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_n 2^n x^(2n+1) / (2n+1)!!.
      All terms are positive (unlike the Taylor series of erf itself), so the sum is
      accurate to rounding; each term is the previous times 2x^2 / (2n+3).
    * ``|x| >= 2.5``: erfc(x) = exp(-x^2) / sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))),
      Laplace's continued fraction, evaluated bottom-up from a fixed depth; erf = 1 - erfc.

    erf is odd, so both work on |x| and the sign is restored at the end.
    """
    values = np.asarray(x)
    work = values.astype(np.float64)
    magnitude = np.abs(work)
    out = np.empty_like(work)

    near = magnitude < _SERIES_LIMIT
    small = magnitude[near]
    term = small.copy()
    total = small.copy()
    ratio = 2.0 * small * small
    for n in range(_SERIES_MAX_TERMS):
        if not np.any(term > 1e-17 * total):
            break
        term = term * ratio / (2 * n + 3)
        total += term
    out[near] = _TWO_OVER_SQRT_PI * np.exp(-small * small) * total

    large = magnitude[~near]  # also NaN and inf, which the fraction handles
    with np.errstate(invalid="ignore"):
        denominator = large.copy()
        for k in range(_FRACTION_DEPTH, 0, -1):
            denominator = large + (0.5 * k) / denominator
        out[~near] = 1.0 - np.exp(-large * large) / (_SQRT_PI * denominator)

    return np.copysign(out, work).astype(values.dtype, copy=False)


def truncating_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division rounding toward zero (C and TVM semantics, not NumPy's floor).

    Division by zero raises EvaluationError: in C it is undefined behaviour, so no value
    the interpreter could return would match compiled code.
    """
    if np.any(b == 0):
        raise EvaluationError("integer division by zero")
    quotient = np.floor_divide(a, b)
    remainder = a - quotient * b
    # floor and trunc differ exactly when the division is inexact and the signs differ
    adjust = (remainder != 0) & ((a < 0) != (b < 0))
    return (quotient + adjust.astype(quotient.dtype)).astype(np.result_type(a, b), copy=False)

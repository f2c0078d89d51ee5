"""NumPy kernels that the op implementations share and NumPy does not provide:
``erf``, C-style integer division, and the sliding-window convolution and pooling.

All kernels are vectorized (no Python loop over elements or pixels): the reference
interpreter runs small CNNs with them.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

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


def pad_spatial(data: np.ndarray, padding: tuple[int, int, int, int], value: float) -> np.ndarray:
    """Pad the last two axes of an NCHW array; padding is (top, left, bottom, right)."""
    top, left, bottom, right = padding
    if not any(padding):
        return data
    widths = [(0, 0)] * (data.ndim - 2) + [(top, bottom), (left, right)]
    return np.pad(data, widths, mode="constant", constant_values=value)


def spatial_windows(data: np.ndarray, window: tuple[int, int], strides: tuple[int, int],
                    dilation: tuple[int, int] = (1, 1)) -> np.ndarray:
    """A read-only view (N, C, OH, OW, KH, KW) of the windows of a padded NCHW array."""
    extent = tuple(d * (k - 1) + 1 for k, d in zip(window, dilation))
    view = sliding_window_view(data, extent, axis=(2, 3))
    # keep every stride-th window position and every dilation-th tap inside a window
    return view[:, :, :: strides[0], :: strides[1], :: dilation[0], :: dilation[1]]


def conv2d_nchw(data: np.ndarray, weight: np.ndarray, strides: tuple[int, int],
                padding: tuple[int, int, int, int], dilation: tuple[int, int], groups: int) -> np.ndarray:
    """Grouped 2-D convolution, NCHW data and OIHW weight, via windows + einsum (BLAS)."""
    batch, channels = data.shape[:2]
    out_channels, group_channels, kh, kw = weight.shape
    windows = spatial_windows(pad_spatial(data, padding, 0), (kh, kw), strides, dilation)
    out_h, out_w = windows.shape[2:4]
    grouped = windows.reshape(batch, groups, channels // groups, out_h, out_w, kh, kw)
    kernels = weight.reshape(groups, out_channels // groups, group_channels, kh, kw)
    result = np.einsum("ngchwij,gocij->ngohw", grouped, kernels, optimize=True)
    return result.reshape(batch, out_channels, out_h, out_w).astype(data.dtype, copy=False)


def _reduce_windows(padded: np.ndarray, window: tuple[int, int], strides: tuple[int, int],
                    combine: np.ufunc) -> np.ndarray:
    """Combine each window's cells with ``combine`` (np.maximum, np.add), one kernel tap at a
    time: a loop over the KH*KW taps of whole-image strided slices, which is much faster
    than reducing a 6-D window view."""
    out_h = (padded.shape[2] - window[0]) // strides[0] + 1
    out_w = (padded.shape[3] - window[1]) // strides[1] + 1
    result = None
    for i in range(window[0]):
        for j in range(window[1]):
            tap = padded[:, :, i:i + strides[0] * (out_h - 1) + 1:strides[0],
                         j:j + strides[1] * (out_w - 1) + 1:strides[1]]
            result = tap.copy() if result is None else combine(result, tap, out=result)
    return result


def max_pool2d_nchw(data: np.ndarray, pool_size: tuple[int, int], strides: tuple[int, int],
                    padding: tuple[int, int, int, int]) -> np.ndarray:
    """Max pooling; padded cells never win (they hold the dtype's lowest value)."""
    lowest = -np.inf if data.dtype.kind == "f" else np.iinfo(data.dtype).min
    return _reduce_windows(pad_spatial(data, padding, lowest), pool_size, strides, np.maximum)


def avg_pool2d_nchw(data: np.ndarray, pool_size: tuple[int, int], strides: tuple[int, int],
                    padding: tuple[int, int, int, int], count_include_pad: bool) -> np.ndarray:
    """Average pooling; without count_include_pad each window divides by its real cells."""
    sums = _reduce_windows(pad_spatial(data, padding, 0), pool_size, strides, np.add)
    if count_include_pad:
        counts = np.asarray(pool_size[0] * pool_size[1], dtype=data.dtype)
    else:
        ones = np.ones((1, 1, *data.shape[2:]), dtype=data.dtype)
        counts = _reduce_windows(pad_spatial(ones, padding, 0), pool_size, strides, np.add)
    with np.errstate(invalid="ignore", divide="ignore"):  # a window of padding only is 0/0
        return (sums / counts).astype(data.dtype, copy=False)

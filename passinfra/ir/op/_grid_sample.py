"""How ``grid_sample`` reads its input: per spatial axis, the input positions (taps) an
output element reads, their weights, and whether each lies inside the input.

An output element's location along spatial axis ``a`` of an input of ``r`` spatial axes
is component ``r - 1 - a`` of its grid vector (the grid lists x first: the last axis).
Per axis, as onnxruntime's CPU kernel and the ONNX reference:

* denormalize: ``align_corners`` maps -1 and 1 to the centres of the edge cells
  (``(g + 1) / 2 * (L - 1)``), otherwise to their outer edges (``((g + 1) * L - 1) / 2``);
* nearest rounds the location half to even (C's ``nearbyint``, NumPy's ``rint``);
* nearest and linear: a location outside the border (``[0, L - 1]`` with
  ``align_corners``, else ``[-0.5, L - 0.5]``) is clamped to ``[0, L - 1]``
  (``border``) or reflected back in (``reflection``) before the taps are taken; cubic
  takes its taps around the location as it is (onnxruntime and PyTorch; the ONNX
  reference implementation clamps it first, which changes ``border`` results);
* taps: nearest one, linear two (weights ``1 - f`` and ``f`` of the fraction ``f``),
  cubic four (Keys' cubic convolution with a = -0.75, shared with ``resize``);
* a tap outside the input reads 0 (``zeros``), the edge cell (``border``) or the cell
  its position reflects to (``reflection``).

The value is the nested sum, the first spatial axis outermost, of weight times value:
``sum_i w0[i] * (sum_j w1[j] * x[..., i0, j1])`` (onnxruntime's order). Arithmetic is in
the data's dtype (float32 for float16 and bfloat16, rounded on store). The formulas are
written once against :class:`Arith`: the NumPy reference evaluates them on whole arrays,
the compute rule (``passinfra.codegen.compute.grid_sample``) in the loop-level IR.

Where the spec is silent: an axis of length 1 with ``align_corners`` and ``reflection``
has an empty reflection range (onnxruntime divides by it); every position reflects to
cell 0, the only one there is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from passinfra.ir.op import _resample

MODES = ("linear", "nearest", "cubic")
PADDING_MODES = ("zeros", "border", "reflection")
CUBIC_A = -0.75

Expr = Any  # a NumPy array or a loop-level expression


class Arith(Protocol):
    """What the formulas need besides ``+ - * /``; ``real`` and ``f32`` make constants of
    the working float dtype (so the shared cubic weights compute in it)."""

    def real(self, value: float) -> Expr: ...
    def f32(self, value: float) -> Expr: ...
    def i64(self, value: int) -> Expr: ...
    def to_real(self, x: Expr) -> Expr: ...
    def to_i64(self, x: Expr) -> Expr: ...  # truncates toward zero, as a C cast
    def floor(self, x: Expr) -> Expr: ...
    def rint(self, x: Expr) -> Expr: ...  # half to even
    def select(self, cond: Expr, a: Expr, b: Expr) -> Expr: ...
    def lt(self, a: Expr, b: Expr) -> Expr: ...
    def eq(self, a: Expr, b: Expr) -> Expr: ...
    def either(self, a: Expr, b: Expr) -> Expr: ...
    def both(self, a: Expr, b: Expr) -> Expr: ...
    def minimum(self, a: Expr, b: Expr) -> Expr: ...
    def maximum(self, a: Expr, b: Expr) -> Expr: ...
    def bind(self, x: Expr, name: str) -> Expr: ...


@dataclass(frozen=True)
class Method:
    mode: str
    padding_mode: str
    align_corners: bool


@dataclass
class AxisTaps:
    """The taps of one axis: input indices (always inside the input, safe to load),
    weights (None for nearest) and validity flags (None unless ``zeros`` padding)."""

    indices: list[Expr]
    weights: list[Expr] | None
    valid: list[Expr] | None


def borders(length: int, align_corners: bool) -> tuple[float, float]:
    """The range of locations inside the input along an axis of ``length`` cells."""
    return (0.0, length - 1.0) if align_corners else (-0.5, length - 0.5)


def denormalize(m: Arith, g: Expr, length: int, align_corners: bool) -> Expr:
    if align_corners:
        return (g + 1.0) / 2.0 * m.real(length - 1)
    return ((g + 1.0) * m.real(length) - 1.0) / 2.0


def reflect(m: Arith, x: Expr, low: float, high: float) -> Expr:
    """``x`` folded back into ``[low, high]`` by reflecting at the borders as often as
    needed (an even number of reflections keeps the direction)."""
    span = high - low
    if span == 0:
        return m.real(low)
    below = m.lt(x, m.real(low))
    beyond = m.select(below, m.real(low) - x, x - m.real(high))  # >= 0 when outside
    folds = m.floor(beyond / span)
    rest = beyond - folds * span
    odd = m.eq(folds - m.floor(folds * 0.5) * 2.0, m.real(1.0))
    from_low, from_high = m.real(low) + rest, m.real(high) - rest
    folded = m.select(below, m.select(odd, from_high, from_low), m.select(odd, from_low, from_high))
    outside = m.either(below, m.lt(m.real(high), x))
    return m.select(outside, folded, x)


def _location(m: Arith, g: Expr, length: int, method: Method) -> Expr:
    """The location along the axis, after rounding (nearest) and the padding's clamp or
    reflection of a location outside the borders."""
    x = denormalize(m, g, length, method.align_corners)
    if method.mode == "nearest":
        x = m.rint(x)
    if method.mode == "cubic":  # its taps are padded one by one (onnxruntime, PyTorch)
        return x
    low, high = borders(length, method.align_corners)
    if method.padding_mode == "border":
        outside = m.either(m.lt(x, m.real(low)), m.lt(m.real(high), x))
        return m.select(outside, m.maximum(m.minimum(x, m.real(length - 1)), m.real(0.0)), x)
    if method.padding_mode == "reflection":
        return reflect(m, x, low, high)
    return x


def _clamped(m: Arith, index: Expr, length: int) -> Expr:
    return m.maximum(m.minimum(index, m.i64(length - 1)), m.i64(0))


def _tap(m: Arith, position: Expr, length: int, method: Method) -> tuple[Expr, Expr | None]:
    """(index to load, validity) of the tap at integer ``position``."""
    if method.padding_mode == "zeros":
        valid = m.both(m.lt(m.i64(-1), position), m.lt(position, m.i64(length)))
        return _clamped(m, position, length), valid
    if method.padding_mode == "reflection":
        low, high = borders(length, method.align_corners)
        position = m.to_i64(reflect(m, m.to_real(position), low, high))
    return _clamped(m, position, length), None


def axis_taps(m: Arith, g: Expr, length: int, method: Method, name: str) -> AxisTaps:
    """The taps of the axis of ``length`` cells at normalized grid value ``g``."""
    x = m.bind(_location(m, g, length, method), f"{name}_x")
    if method.mode == "nearest":
        positions, weights = [m.to_i64(x)], None
    else:
        low = m.floor(x)
        frac = m.bind(x - low, f"{name}_frac")
        base = m.bind(m.to_i64(low), f"{name}_base")
        if method.mode == "linear":
            positions, weights = [base, base + 1], [1.0 - frac, frac]
        else:
            positions = [base + k for k in (-1, 0, 1, 2)]
            weights = _resample._cubic_coefficients(m, frac, CUBIC_A)
        weights = [m.bind(w, f"{name}_w{k}") for k, w in enumerate(weights)]
    taps = [_tap(m, p, length, method) for p in positions]
    indices = [m.bind(index, f"{name}_i{k}") for k, (index, _) in enumerate(taps)]
    valid = None if method.padding_mode != "zeros" else [flag for _, flag in taps]
    return AxisTaps(indices, weights, valid)


Pixel = Callable[[list[Expr]], Expr]  # input indices per spatial axis -> the value there


def interpolate(m: Arith, axes: Sequence[AxisTaps], pixel: Pixel) -> Expr:
    """The weighted sum over every combination of taps, the first axis outermost."""

    def nested(axis: int, indices: list[Expr], valid: Expr | None) -> Expr:
        if axis == len(axes):
            value = pixel(indices)
            return value if valid is None else m.select(valid, value, m.real(0.0))
        taps = axes[axis]
        total = None
        for k, index in enumerate(taps.indices):
            flag = valid
            if taps.valid is not None:
                flag = taps.valid[k] if flag is None else m.both(flag, taps.valid[k])
            inner = nested(axis + 1, [*indices, index], flag)
            term = inner if taps.weights is None else taps.weights[k] * inner
            total = term if total is None else total + term
        return total

    return nested(0, [], None)


# --------------------------------------------------------------------------- NumPy


class NumpyArith(_resample.NumpyArith):
    """:class:`Arith` over NumPy arrays of one float dtype (``real`` and ``f32`` make
    constants of it)."""

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = np.dtype(dtype)

    def real(self, value: float) -> Expr:
        return self.dtype.type(value)

    f32 = real

    def to_real(self, x: Expr) -> Expr:
        return np.asarray(x).astype(self.dtype)

    def rint(self, x: Expr) -> Expr:
        return np.rint(x)

    def both(self, a: Expr, b: Expr) -> Expr:
        return np.logical_and(a, b)


def numpy_grid_sample(data: np.ndarray, grid: np.ndarray, method: Method) -> np.ndarray:
    """The reference: ``data`` (N, C, *S) of float32 or float64, ``grid`` (N, *O, r)."""
    m = NumpyArith(data.dtype)
    rank = data.ndim - 2
    # every per-location array is shaped (N, 1, *O): it broadcasts over the channels
    locations = m.to_real(grid)[:, None]
    extra = (1,) * (grid.ndim - 2)
    n = np.arange(data.shape[0]).reshape(-1, 1, *extra)
    c = np.arange(data.shape[1]).reshape(1, -1, *extra)
    with np.errstate(invalid="ignore", over="ignore"):  # far-off grid values: inf/nan as in C
        axes = [axis_taps(m, locations[..., rank - 1 - a], data.shape[2 + a], method, f"a{a}")
                for a in range(rank)]
        out = interpolate(m, axes, lambda indices: data[(n, c, *indices)])
    return np.ascontiguousarray(np.broadcast_to(out, data.shape[:2] + grid.shape[1:-1])).astype(data.dtype)

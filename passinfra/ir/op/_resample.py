"""How ``resize`` samples one axis: for an output position, the input positions it reads
(its taps), their weights, and whether it lies outside the input (``tf_crop_and_resize``
then writes the extrapolation value instead).

Every formula is onnxruntime's, in float32 and in the same order of operations (float64
where onnxruntime computes in double), so nearest-neighbour ties break the same way and
interpolation weights agree to the last bit. The formulas are written once, against the
small arithmetic interface :class:`Arith`: the NumPy reference evaluates them over all
positions of an axis at once (:func:`numpy_tables`), the compute rule evaluates them in
the loop-level IR inside the kernel (``passinfra.codegen.compute.resize``). One set of
formulas, so the interpreter and compiled code sample the same cells.

Per axis, by mode (an axis whose scale is exactly 1 is not resampled, as onnxruntime):

* nearest: one tap, the coordinate rounded by ``nearest_mode`` and clamped;
* linear: two taps, the clamped coordinate's neighbours, weighted by distance;
* cubic: four taps around the floor of the coordinate (indices clamped to the edge),
  Keys' cubic convolution with ``cubic_coeff_a``; ``exclude_outside`` zeroes the taps
  outside the input and renormalizes;
* ``antialias`` (linear or cubic): the filter stretched by the downscaling factor over a
  window of taps, normalized (Pillow's resampling, as onnxruntime).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                    "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize")
# "simple" is Resize-10's rounding (no nearest_mode attribute yet): ceil when
# downscaling, truncation otherwise
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")

Expr = Any  # a NumPy array or a loop-level expression, whichever the Arith works on


def f32(value: float) -> float:
    """``value`` rounded to float32 (as a Python float)."""
    return float(np.float32(value))


@dataclass(frozen=True)
class Method:
    """The sampling attributes of one resize (the same for every axis)."""

    mode: str
    coordinate_mode: str
    nearest_mode: str
    cubic_coeff_a: float
    exclude_outside: bool
    antialias: bool

    @property
    def extrapolates(self) -> bool:
        return self.coordinate_mode == "tf_crop_and_resize"

    @property
    def filtered(self) -> bool:
        """Antialiasing applies to the interpolating modes only."""
        return self.antialias and self.mode != "nearest"


@dataclass(frozen=True)
class Axis:
    """One axis: input and output lengths, the float32 scale of its coordinate transform
    and its region of interest (tf_crop_and_resize)."""

    in_len: int
    out_len: int
    scale: float
    roi_start: float = 0.0
    roi_end: float = 1.0

    def resampled(self, method: Method) -> bool:
        """Whether the axis is resampled at all (onnxruntime copies an axis whose scale
        is exactly 1, whatever the coordinate mode)."""
        if method.filtered:
            return f32(np.float32(1.0) / np.float32(self.scale)) != 1.0
        return self.scale != 1.0


class Arith(Protocol):
    """The operations the formulas need besides ``+ - * /`` (operands of one dtype, or a
    Python number, which takes the other operand's dtype)."""

    def f32(self, value: float) -> Expr: ...
    def f64(self, value: float) -> Expr: ...
    def i64(self, value: int) -> Expr: ...
    def to_f32(self, x: Expr) -> Expr: ...
    def to_f64(self, x: Expr) -> Expr: ...
    def to_i64(self, x: Expr) -> Expr: ...  # truncates toward zero, as a C cast
    def floor(self, x: Expr) -> Expr: ...
    def ceil(self, x: Expr) -> Expr: ...
    def fabs(self, x: Expr) -> Expr: ...
    def select(self, cond: Expr, a: Expr, b: Expr) -> Expr: ...
    def lt(self, a: Expr, b: Expr) -> Expr: ...
    def ge(self, a: Expr, b: Expr) -> Expr: ...
    def eq(self, a: Expr, b: Expr) -> Expr: ...
    def either(self, a: Expr, b: Expr) -> Expr: ...
    def minimum(self, a: Expr, b: Expr) -> Expr: ...
    def maximum(self, a: Expr, b: Expr) -> Expr: ...
    def bind(self, x: Expr, name: str) -> Expr: ...  # evaluate once, reuse


@dataclass
class Sampling:
    """What one output position reads along one axis.

    ``weights`` is None for nearest; ``normalize`` says how the raw weights become the
    final ones: None (as they are), ``"divide"`` (each by their sum) or ``"inverse"``
    (each times 1 / their sum, or times 1 when the sum is 0).
    """

    indices: list[Expr]
    weights: list[Expr] | None
    normalize: str | None
    outside: Expr | None


def taps(axis: Axis, method: Method) -> int:
    """How many input positions an output position of ``axis`` reads."""
    if method.filtered:
        return _filter_window(axis, method)[1]
    return {"nearest": 1, "linear": 2, "cubic": 4}[method.mode]


def coordinate(m: Arith, x: Expr, axis: Axis, method: Method) -> Expr:
    """The input coordinate (float32) of output position ``x`` (int64)."""
    mode, scale = method.coordinate_mode, m.f32(axis.scale)
    xf = m.to_f32(x)
    if mode == "asymmetric":
        return xf / scale
    if mode == "tf_half_pixel_for_nn":
        return (xf + 0.5) / scale
    if mode == "pytorch_half_pixel" and axis.out_len <= 1:
        return m.f32(0.0)
    if mode in ("half_pixel", "pytorch_half_pixel"):
        return (xf + 0.5) / scale - 0.5
    length_in, length_out = np.float32(axis.in_len), np.float32(axis.out_len)
    if mode == "align_corners":
        if axis.out_len == 1:
            return m.f32(0.0)
        return xf * m.f32(length_in - 1) / m.f32(length_out - 1)
    if mode == "half_pixel_symmetric":
        adjustment = length_out / (np.float32(axis.scale) * length_in)
        offset = (length_in / np.float32(2)) * (np.float32(1) - adjustment)
        # onnxruntime adds in double here, then rounds to float
        return m.to_f32(m.f64(float(offset)) + (m.to_f64(xf) + 0.5) / m.f64(axis.scale) - 0.5)
    if mode == "tf_crop_and_resize":
        start, end = np.float32(axis.roi_start), np.float32(axis.roi_end)
        if axis.out_len == 1:
            return m.f32(f32(0.5 * float(start + end) * float(length_in - 1)))
        return m.f32(start * (length_in - 1)) + xf * m.f32(end - start) * m.f32(length_in - 1) \
            / m.f32(length_out - 1)
    raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")


def _outside(m: Arith, position: Expr, axis: Axis) -> Expr:
    return m.either(m.lt(position, m.f32(0.0)), m.lt(m.f32(axis.in_len - 1), position))


def _clamped(m: Arith, index: Expr, axis: Axis) -> Expr:
    return m.maximum(m.minimum(index, m.i64(axis.in_len - 1)), m.i64(0))


def _round_half_away(m: Arith, c: Expr) -> Expr:
    """C's ``round`` for the coordinates that survive clamping (a negative one clamps to
    0 either way): floor, plus one from a fraction of a half up; exact in float."""
    low = m.floor(c)
    return low + m.select(m.ge(c - low, m.f32(0.5)), m.f32(1.0), m.f32(0.0))


def _nearest(m: Arith, c: Expr, axis: Axis, method: Method) -> Expr:
    mode = method.nearest_mode
    if mode == "floor":
        rounded = m.floor(c)
    elif mode == "ceil":
        rounded = m.ceil(c)
    elif mode == "round_prefer_ceil":
        rounded = _round_half_away(m, c)
    elif mode == "round_prefer_floor":
        tie = m.eq(c, m.to_f32(m.to_i64(c)) + 0.5)
        rounded = m.select(tie, m.floor(c), _round_half_away(m, c))
    elif mode == "simple":
        rounded = m.ceil(c) if axis.scale < 1 else c
    else:
        raise ValueError(f"unknown nearest_mode {mode!r}")
    return _clamped(m, m.to_i64(rounded), axis)


def _cubic_coefficients(m: Arith, s: Expr, a: float) -> list[Expr]:
    """Keys' cubic convolution weights of the taps at -1, 0, 1, 2 from a fraction ``s``."""
    a32 = np.float32(a)
    a_, five_a, eight_a, four_a = (m.f32(v) for v in (a32, np.float32(5) * a32, np.float32(8) * a32,
                                                      np.float32(4) * a32))
    a2, a3 = m.f32(a32 + np.float32(2)), m.f32(a32 + np.float32(3))

    def outer(d: Expr) -> Expr:  # |d| in [1, 2)
        return ((a_ * d - five_a) * d + eight_a) * d - four_a

    def inner(d: Expr) -> Expr:  # |d| in [0, 1)
        return (a2 * d - a3) * d * d + 1.0

    return [outer(s + 1.0), inner(s), inner(1.0 - s), outer(2.0 - s)]


def _filter_window(axis: Axis, method: Method) -> tuple[float, int, float]:
    """(support, window size, 1 / stretch) of the antialiasing filter on ``axis``."""
    stretch = np.float32(1.0) / np.float32(axis.scale)
    half = np.float32(2.0 if method.mode == "cubic" else 1.0)
    support = half * stretch if stretch >= 1 else half
    window = int(np.ceil(support)) * 2 + 1
    inverse = np.float32(1.0) / stretch if stretch >= 1 else np.float32(1.0)
    return float(support), window, float(inverse)


def _filter(m: Arith, v: Expr, method: Method) -> Expr:
    d = m.fabs(v)
    if method.mode == "linear":
        return m.select(m.lt(d, m.f32(1.0)), 1.0 - d, m.f32(0.0))
    a32 = np.float32(method.cubic_coeff_a)
    a_, a2, a3 = m.f32(a32), m.f32(a32 + np.float32(2)), m.f32(a32 + np.float32(3))
    near = (a2 * d - a3) * d * d + 1.0
    far = (((d - 5.0) * d + 8.0) * d - 4.0) * a_
    return m.select(m.lt(d, m.f32(1.0)), near, m.select(m.lt(d, m.f32(2.0)), far, m.f32(0.0)))


def _filtered(m: Arith, x: Expr, axis: Axis, method: Method) -> Sampling:
    support, window, inverse = _filter_window(axis, method)
    center = m.bind(m.f32(0.5) + coordinate(m, x, axis, method), "center")
    outside = _outside(m, center - 0.5, axis) if method.extrapolates else None
    first = m.bind(m.to_i64(m.floor(center - support + 0.5)), "first")
    stop = m.to_i64(m.floor(center + support + 0.5))
    count = m.maximum(m.minimum(stop - first, m.i64(window)), m.i64(0))
    cut_first = m.maximum(m.minimum(first, m.i64(axis.in_len)), m.i64(0))
    cut_stop = m.maximum(m.minimum(first + count, m.i64(axis.in_len)), m.i64(0))
    if method.exclude_outside:
        base, count = cut_first, cut_stop - cut_first
    else:
        # a tap outside the input reads the edge (onnxruntime folds its weight into the
        # edge tap's); a window wholly outside reads nothing
        base, count = first, m.select(m.lt(cut_first, cut_stop), count, m.i64(0))
    base, count = m.bind(base, "base"), m.bind(count, "count")
    indices, weights = [], []
    for t in range(window):
        position = base + t
        weight = _filter(m, (m.to_f32(position) - center + 0.5) * m.f32(inverse), method)
        weights.append(m.select(m.lt(m.i64(t), count), weight, m.f32(0.0)))
        indices.append(_clamped(m, position, axis))
    return Sampling(indices, weights, "inverse", outside)


def sample(m: Arith, x: Expr, axis: Axis, method: Method) -> Sampling:
    """The taps of output position ``x`` (int64) along a resampled ``axis``."""
    if method.filtered:
        return _filtered(m, x, axis, method)
    c = m.bind(coordinate(m, x, axis, method), "coordinate")
    outside = _outside(m, c, axis) if method.extrapolates else None
    if method.mode == "nearest":
        return Sampling([_nearest(m, c, axis, method)], None, None, outside)
    if method.mode == "linear":
        inside = m.maximum(m.minimum(c, m.f32(axis.in_len - 1)), m.f32(0.0))
        low = m.minimum(m.to_i64(inside), m.i64(axis.in_len - 1))
        high = m.minimum(low + 1, m.i64(axis.in_len - 1))
        # each neighbour weighs the distance to the other one
        low_weight, high_weight = m.fabs(inside - m.to_f32(high)), m.fabs(inside - m.to_f32(low))
        same = m.eq(low, high)  # one cell (a length-1 axis): half and half
        return Sampling([low, high], [m.select(same, m.f32(0.5), low_weight),
                                      m.select(same, m.f32(0.5), high_weight)], None, outside)
    low = m.floor(c)
    start = m.bind(m.to_i64(low) - 1, "start")
    coefficients = _cubic_coefficients(m, c - low, method.cubic_coeff_a)
    positions = [start + t for t in range(4)]
    if not method.exclude_outside:
        return Sampling([_clamped(m, p, axis) for p in positions], coefficients, None, outside)
    kept = [m.select(m.either(m.lt(p, m.i64(0)), m.lt(m.i64(axis.in_len - 1), p)), m.f32(0.0), w)
            for p, w in zip(positions, coefficients)]
    return Sampling([_clamped(m, p, axis) for p in positions], kept, "divide", outside)


# --------------------------------------------------------------------------- NumPy


class NumpyArith:
    """:class:`Arith` over NumPy arrays (one element per output position)."""

    def f32(self, value: float) -> Expr:
        return np.float32(value)

    def f64(self, value: float) -> Expr:
        return np.float64(value)

    def i64(self, value: int) -> Expr:
        return np.int64(value)

    def to_f32(self, x: Expr) -> Expr:
        return np.asarray(x).astype(np.float32)

    def to_f64(self, x: Expr) -> Expr:
        return np.asarray(x).astype(np.float64)

    def to_i64(self, x: Expr) -> Expr:
        return np.asarray(x).astype(np.int64)

    def floor(self, x: Expr) -> Expr:
        return np.floor(x)

    def ceil(self, x: Expr) -> Expr:
        return np.ceil(x)

    def fabs(self, x: Expr) -> Expr:
        return np.abs(x)

    def select(self, cond: Expr, a: Expr, b: Expr) -> Expr:
        return np.where(cond, a, b).astype(np.result_type(a, b))

    def lt(self, a: Expr, b: Expr) -> Expr:
        return np.less(a, b)

    def ge(self, a: Expr, b: Expr) -> Expr:
        return np.greater_equal(a, b)

    def eq(self, a: Expr, b: Expr) -> Expr:
        return np.equal(a, b)

    def either(self, a: Expr, b: Expr) -> Expr:
        return np.logical_or(a, b)

    def minimum(self, a: Expr, b: Expr) -> Expr:
        return np.minimum(a, b)

    def maximum(self, a: Expr, b: Expr) -> Expr:
        return np.maximum(a, b)

    def bind(self, x: Expr, name: str) -> Expr:
        return x


def normalized(weights: Sequence[Expr], kind: str | None, m: Arith) -> list[Expr]:
    """The final weights from the raw ones (see :class:`Sampling`); the sum runs over the
    taps in order, as onnxruntime's."""
    if kind is None:
        return list(weights)
    total = weights[0]
    for weight in weights[1:]:
        total = total + weight
    total = m.bind(total, "total")
    if kind == "divide":
        return [w / total for w in weights]
    inverse = m.bind(m.select(m.eq(total, m.f32(0.0)), m.f32(1.0), m.f32(1.0) / total), "inverse")
    return [w * inverse for w in weights]


@dataclass(frozen=True)
class Tables:
    """One axis sampled at every output position: ``indices`` (out_len, taps) int64,
    ``weights`` (out_len, taps) float32 or None, ``outside`` (out_len,) bool or None."""

    indices: np.ndarray
    weights: np.ndarray | None
    outside: np.ndarray | None


def numpy_tables(axis: Axis, method: Method) -> Tables:
    m = NumpyArith()
    x = np.arange(axis.out_len, dtype=np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):  # weights of extrapolated cells may be 0/0
        sampling = sample(m, x, axis, method)
        weights = None
        if sampling.weights is not None:
            final = normalized([np.broadcast_to(w, x.shape).astype(np.float32) for w in sampling.weights],
                               sampling.normalize, m)
            weights = np.stack(final, axis=1).astype(np.float32)
    indices = np.stack([np.broadcast_to(i, x.shape) for i in sampling.indices], axis=1).astype(np.int64)
    outside = None if sampling.outside is None else np.broadcast_to(sampling.outside, x.shape)
    return Tables(indices, weights, outside)

"""``roi_align``: ONNX RoiAlign (NCHW data, rois as (x1, y1, x2, y2) rows, a batch index
per roi); the output is (num_rois, C, output_height, output_width) of the data's dtype.

Per roi and output cell, a grid of ``sampling_ratio`` x ``sampling_ratio`` sample points
(with ``sampling_ratio = 0``: ``ceil(roi extent / output extent)`` per axis, which
depends on the roi's values) is read by bilinear interpolation and pooled by ``avg`` or
``max``. As onnxruntime's CPU kernel (and the ONNX reference, which follows it):

* ``half_pixel`` shifts the scaled roi by -0.5; ``output_half_pixel`` (RoiAlign-10's
  only behaviour) does not, and stretches an roi smaller than one cell to one cell;
* a sample point beyond one cell outside the data (y < -1, y > H, and so for x) reads
  0; others are clamped to the data's edge;
* ``max`` pools the largest *weighted corner* ``w * x`` over the four corners of every
  sample (onnxruntime's definition; not the largest interpolated value).

The formulas are written once (:func:`roi_box`, :func:`sample_axis`) against the
arithmetic interface of :mod:`passinfra.ir.op._grid_sample`, shared with the compute
rule. Where the spec is silent: a batch index outside ``[0, N)`` is an EvaluationError
in the interpreter (the compiled kernel clamps it, as it cannot raise); arithmetic is in
float64 for float64 data, else float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from passinfra.errors import EvaluationError, IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op._grid_sample import Arith, NumpyArith
from passinfra.ir.op._rel import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    expect_dtype,
    expect_ndim,
    expect_tensor,
    register_tensor_op,
    type_text,
)
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, Type

__all__ = ["roi_align", "roi_box", "sample_axis", "checked"]

MODES = ("avg", "max")
COORDINATE_MODES = ("half_pixel", "output_half_pixel")
Expr = Any


@dataclass
class Box:
    """One roi along one axis: start, bin size and sample count (an int64 expression)."""

    start: Expr
    bin_size: Expr
    grid: Expr


def roi_box(m: Arith, low: Expr, high: Expr, cells: int, attrs: Attrs) -> Box:
    """The roi from ``low`` to ``high`` (unscaled) along an axis of ``cells`` outputs."""
    offset = 0.5 if attrs["coordinate_transformation_mode"] == "half_pixel" else 0.0
    scale = m.real(attrs["spatial_scale"])
    start = low * scale - offset
    extent = high * scale - offset - start
    if offset == 0.0:  # malformed rois become one cell
        extent = m.maximum(extent, m.real(1.0))
    bin_size = extent / m.real(cells)
    ratio = attrs["sampling_ratio"]
    grid = m.i64(ratio) if ratio > 0 else m.to_i64(m.ceil(extent / m.real(cells)))
    return Box(start, bin_size, grid)


@dataclass
class AxisSample:
    """A sample point along one axis: its two neighbours, their weights, and whether
    the point is too far outside the data to be read (it then reads 0)."""

    low: Expr
    high: Expr
    low_weight: Expr
    high_weight: Expr
    outside: Expr


def sample_axis(m: Arith, box: Box, cell: Expr, step: Expr, length: int) -> AxisSample:
    """Sample ``step`` (int64) of output ``cell`` (int64) along an axis of ``length``."""
    within = (m.to_real(step) + 0.5) * box.bin_size / m.to_real(box.grid)
    at = box.start + m.to_real(cell) * box.bin_size + within
    outside = m.either(m.lt(at, m.real(-1.0)), m.lt(m.real(length), at))
    at = m.maximum(at, m.real(0.0))
    low = m.to_i64(at)
    edge = m.lt(m.i64(length - 2), low)  # low >= length - 1
    last = m.i64(length - 1)
    at = m.select(edge, m.to_real(last), at)
    low, high = m.select(edge, last, low), m.select(edge, last, low + 1)
    frac = at - m.to_real(low)
    return AxisSample(low, high, 1.0 - frac, frac, outside)


def checked(attrs: Attrs) -> None:
    for name, allowed in (("mode", MODES), ("coordinate_transformation_mode", COORDINATE_MODES)):
        if attrs[name] not in allowed:
            raise IRTypeError(f"unknown {name} {attrs[name]!r}; use one of {', '.join(allowed)}")
    for name in ("output_height", "output_width"):
        if not isinstance(attrs[name], int) or attrs[name] < 1:
            raise IRTypeError(f"{name} must be a positive int, got {attrs[name]!r}")
    if not isinstance(attrs["sampling_ratio"], int) or attrs["sampling_ratio"] < 0:
        raise IRTypeError(f"sampling_ratio must be an int >= 0, got {attrs['sampling_ratio']!r}")


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    rois = expect_tensor(arg_types[1], "the rois")
    indices = expect_tensor(arg_types[2], "the batch indices")
    checked(attrs)
    expect_ndim(data, 4, "the data", "NCHW")
    expect_dtype(data, FLOAT_DTYPES, "the data")
    expect_dtype(rois, FLOAT_DTYPES, "the rois")
    expect_dtype(indices, INDEX_DTYPES, "the batch indices")
    if rois.ndim != 2 or rois.shape[1] != 4 or indices.shape != (rois.shape[0],):
        raise IRTypeError(f"expected rois of shape (R, 4) and batch indices of shape (R,), got "
                          f"{type_text(rois)} and {type_text(indices)}")
    cells = (attrs["output_height"], attrs["output_width"])
    return TensorType((rois.shape[0], data.shape[1], *cells), data.dtype)


def _impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data, rois, batch = (np.asarray(a) for a in args)
    m = NumpyArith(data.dtype)
    n, channels, height, width = data.shape
    out_h, out_w = attrs["output_height"], attrs["output_width"]
    out = np.zeros((rois.shape[0], channels, out_h, out_w), data.dtype)
    bad = [int(b) for b in batch.reshape(-1) if not 0 <= b < n]
    if bad:
        raise EvaluationError(f"roi_align: batch index {bad[0]} is out of range for data of batch size {n}")
    boxes = m.to_real(rois)
    for r in range(rois.shape[0]):
        x1, y1, x2, y2 = boxes[r]
        box_y, box_x = roi_box(m, y1, y2, out_h, attrs), roi_box(m, x1, x2, out_w, attrs)
        if int(box_y.grid) >= 1 and int(box_x.grid) >= 1:  # else no sample points: 0
            out[r] = _pooled(m, data[int(batch[r])], box_y, box_x, (out_h, out_w), attrs["mode"])
    return out


def _pooled(m: NumpyArith, image: np.ndarray, box_y: Box, box_x: Box, cells: tuple[int, int],
            mode: str) -> np.ndarray:
    """One roi of ``image`` (C, H, W) pooled into (C, *cells)."""
    steps_y, steps_x = np.arange(int(box_y.grid)), np.arange(int(box_x.grid))
    # per axis, arrays over (output cell, sample step)
    ys = sample_axis(m, box_y, np.arange(cells[0])[:, None], steps_y[None, :], image.shape[1])
    xs = sample_axis(m, box_x, np.arange(cells[1])[:, None], steps_x[None, :], image.shape[2])

    def corner(y_index: Any, x_index: Any, y_weight: Any, x_weight: Any) -> np.ndarray:
        # (C, out_h, grid_h, out_w, grid_w)
        values = image[:, y_index[:, :, None, None], x_index[None, None, :, :]]
        return (y_weight[:, :, None, None] * x_weight[None, None, :, :]) * values

    c = [corner(ys.low, xs.low, ys.low_weight, xs.low_weight),
         corner(ys.low, xs.high, ys.low_weight, xs.high_weight),
         corner(ys.high, xs.low, ys.high_weight, xs.low_weight),
         corner(ys.high, xs.high, ys.high_weight, xs.high_weight)]
    outside = ys.outside[:, :, None, None] | xs.outside[None, None, :, :]
    if mode == "avg":
        terms = np.where(outside, 0, c[0] + c[1] + c[2] + c[3]).astype(image.dtype)
        return terms.sum(axis=(2, 4)) / image.dtype.type(steps_y.size * steps_x.size)
    largest = np.maximum(np.maximum(np.maximum(c[0], c[1]), c[2]), c[3])
    terms = np.where(outside, 0, largest).astype(image.dtype)
    return terms.max(axis=(2, 4))


register_tensor_op(
    "roi_align",
    attrs={"mode": "avg", "output_height": 1, "output_width": 1, "sampling_ratio": 0, "spatial_scale": 1.0,
           "coordinate_transformation_mode": "half_pixel"},
    num_inputs=3, type_rel=_relation, impl=_impl, pattern=OpPattern.OPAQUE,
    doc="ONNX RoiAlign: bilinear samples of each roi's bins, pooled by avg or max",
)


def roi_align(data: Any, rois: Any, batch_indices: Any, mode: str = "avg", output_height: int = 1,
              output_width: int = 1, sampling_ratio: int = 0, spatial_scale: float = 1.0,
              coordinate_transformation_mode: str = "half_pixel") -> Call:
    """Pool each roi of ``rois`` over ``data[batch_indices[r]]`` into a fixed-size grid."""
    return call_op("roi_align", data, rois, batch_indices, mode=str(mode), output_height=int(output_height),
                   output_width=int(output_width), sampling_ratio=int(sampling_ratio),
                   spatial_scale=float(spatial_scale),
                   coordinate_transformation_mode=str(coordinate_transformation_mode))

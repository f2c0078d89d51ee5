"""``resize``: ONNX Resize on any axes, with static output sizes and scales.

The call carries the output shape (``sizes``) and, per axis, the float32 scale its
coordinate transform divides by (``scales``: the ONNX scales, or output/input lengths
when ONNX gave sizes; the importer works them out as onnxruntime does). How an axis is
sampled (coordinate transform, rounding, interpolation weights) is in
:mod:`passinfra.ir.op._resample`, shared with the compute rule.

As onnxruntime: a call whose output shape is the input shape copies the input, and an
axis whose scale is exactly 1 is copied along (even with ``tf_crop_and_resize``);
``antialias`` applies to linear and cubic (nearest ignores it, as the ONNX spec says).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op import _resample
from passinfra.ir.op._rel import (
    FLOAT_DTYPES,
    REQUIRED,
    expect_dtype,
    expect_tensor,
    register_tensor_op,
    type_text,
)
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, Type

__all__ = ["resize", "method_of", "axes_of", "compute_dtype"]

_DEFAULTS = {
    "sizes": REQUIRED,
    "scales": REQUIRED,
    "roi": None,
    "mode": "nearest",
    "coordinate_transformation_mode": "half_pixel",
    "nearest_mode": "round_prefer_floor",
    "cubic_coeff_a": -0.75,
    "exclude_outside": False,
    "extrapolation_value": 0.0,
    "antialias": False,
}


def method_of(attrs: Attrs) -> _resample.Method:
    return _resample.Method(attrs["mode"], attrs["coordinate_transformation_mode"], attrs["nearest_mode"],
                            float(attrs["cubic_coeff_a"]), bool(attrs["exclude_outside"]),
                            bool(attrs["antialias"]))


def axes_of(shape: Sequence[int], attrs: Attrs) -> list[_resample.Axis]:
    """Every axis of a call on data of ``shape`` (resampled or not)."""
    rank = len(shape)
    roi = attrs["roi"] or (0.0,) * rank + (1.0,) * rank
    return [_resample.Axis(n, out, scale, roi[i], roi[rank + i])
            for i, (n, out, scale) in enumerate(zip(shape, attrs["sizes"], attrs["scales"]))]


def compute_dtype(dtype: str) -> str:
    """The dtype interpolation computes in: the data's, or float32 for narrower floats
    (rounded to the data's dtype on store, as onnxruntime on CPU)."""
    narrow_float = dtype.startswith(("float", "bfloat")) and dtype not in ("float32", "float64")
    return "float32" if narrow_float else dtype


def _choice(attrs: Attrs, name: str, allowed: Sequence[str]) -> None:
    if attrs[name] not in allowed:
        raise IRTypeError(f"unknown {name} {attrs[name]!r}; use one of {', '.join(allowed)}")


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    _choice(attrs, "mode", _resample.MODES)
    _choice(attrs, "coordinate_transformation_mode", _resample.COORDINATE_MODES)
    _choice(attrs, "nearest_mode", _resample.NEAREST_MODES)
    if attrs["mode"] != "nearest":
        expect_dtype(data, FLOAT_DTYPES, f"the data of a {attrs['mode']} resize")
    sizes, scales, roi = attrs["sizes"], attrs["scales"], attrs["roi"]
    if data.ndim == 0:
        raise IRTypeError(f"expected a tensor of rank >= 1 to resize, got {type_text(data)}")
    if not isinstance(sizes, tuple) or len(sizes) != data.ndim or any(
            not isinstance(n, int) or n < 1 for n in sizes):
        raise IRTypeError(f"sizes must hold {data.ndim} positive ints (the output shape), got {sizes!r}")
    if not isinstance(scales, tuple) or len(scales) != data.ndim or any(
            not isinstance(s, (int, float)) or not s > 0 for s in scales):
        raise IRTypeError(f"scales must hold {data.ndim} positive numbers, got {scales!r}")
    if roi is not None and (not isinstance(roi, tuple) or len(roi) != 2 * data.ndim):
        raise IRTypeError(f"roi must hold {2 * data.ndim} numbers (starts, then ends), got {roi!r}")
    return TensorType(sizes, data.dtype)


def _impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data = np.asarray(args[0])
    if tuple(attrs["sizes"]) == data.shape:
        return data.copy()
    method = method_of(attrs)
    axes = axes_of(data.shape, attrs)
    tables = {i: _resample.numpy_tables(axis, method)
              for i, axis in enumerate(axes) if axis.resampled(method)}
    if method.mode == "nearest":
        picks = [tables[i].indices[:, 0] if i in tables else np.arange(n) for i, n in enumerate(data.shape)]
        out = data[np.ix_(*picks)]
    else:
        # one axis at a time, the last first (onnxruntime's order for the separable modes)
        work = data.astype(compute_dtype(data.dtype.name), copy=False)
        for i in sorted(tables, reverse=True):
            table = tables[i]
            along = [1] * data.ndim
            along[i] = -1
            weights = table.weights.astype(work.dtype)
            total = None
            for tap in range(table.indices.shape[1]):
                part = np.take(work, table.indices[:, tap], axis=i) * weights[:, tap].reshape(along)
                total = part if total is None else total + part
            work = total
        out = work.astype(data.dtype, copy=False)
    outside = np.zeros((1,) * data.ndim, dtype=bool)
    for i, table in tables.items():
        if table.outside is not None:
            along = [1] * data.ndim
            along[i] = -1
            outside = outside | table.outside.reshape(along)
    if outside.any():
        fill = np.asarray(attrs["extrapolation_value"]).astype(data.dtype)
        out = np.where(outside, fill, out)
    return np.ascontiguousarray(out)


register_tensor_op(
    "resize", attrs=_DEFAULTS, num_inputs=1, type_rel=_relation, impl=_impl, pattern=OpPattern.OPAQUE,
    doc="ONNX Resize: nearest / linear / cubic on any axes, static sizes and scales",
)


def resize(data: Any, sizes: Sequence[int], scales: Sequence[float], roi: Sequence[float] | None = None,
           mode: str = "nearest", coordinate_transformation_mode: str = "half_pixel",
           nearest_mode: str = "round_prefer_floor", cubic_coeff_a: float = -0.75,
           exclude_outside: bool = False, extrapolation_value: float = 0.0, antialias: bool = False) -> Call:
    """Resize ``data`` to the shape ``sizes``; ``scales`` (one per axis) are the factors
    the coordinate transform divides by, kept in float32; ``roi`` (starts, then ends) is
    read by ``tf_crop_and_resize`` only."""
    return call_op(
        "resize", data,
        sizes=tuple(int(n) for n in sizes),
        scales=tuple(_resample.f32(s) for s in scales),
        roi=None if roi is None else tuple(_resample.f32(r) for r in roi),
        mode=str(mode),
        coordinate_transformation_mode=str(coordinate_transformation_mode),
        nearest_mode=str(nearest_mode),
        cubic_coeff_a=_resample.f32(cubic_coeff_a),
        exclude_outside=bool(exclude_outside),
        extrapolation_value=float(extrapolation_value),
        antialias=bool(antialias),
    )

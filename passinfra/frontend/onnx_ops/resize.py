"""Resize (opsets 10, 11, 13, 18, 19) and the deprecated Upsample (7, 9) as ``resize``.

The output shape must be static: ``scales``, ``sizes`` (and ``roi`` for
``tf_crop_and_resize``) must be known at import time. The output shape and the
per-axis scales follow onnxruntime exactly (float32 arithmetic):

* from scales: ``out = trunc(scale * in)``, and the coordinate transform divides by the
  given scale (not by out / in);
* from sizes: ``scale = out / in``; with ``keep_aspect_ratio_policy`` not ``stretch``,
  every listed axis takes the smallest (``not_larger``) or largest (``not_smaller``) of
  those scales and ``out = round(scale * in)``.

Resize-10 and Upsample have no coordinate mode: they are ``asymmetric``, and their
nearest rounding is Resize-10's (ceil when downscaling, truncation otherwise).
"""

from __future__ import annotations

import numpy as np

from passinfra.frontend.onnx_ops.context import NodeContext
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.ir.expr import Expr
from passinfra.ir.op import _resample
from passinfra.ir.op.resize import resize


def _text(value, default: str) -> str:
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def _given(node: NodeContext, index: int, what: str) -> np.ndarray | None:
    """Input ``index`` as a known array, or None when absent or empty (opset 11 passes
    an empty tensor for the one of scales and sizes it does not use)."""
    if not node.has_input(index):
        return None
    value = node.known(index, what)
    return value if value.size else None


def _axes(node: NodeContext, rank: int) -> list[int]:
    axes = node.attr("axes")
    if axes is None:
        return list(range(rank))
    normalized = []
    for axis in axes:
        if not -rank <= axis < rank:
            raise node.fail(f"axis {axis} is out of range for data of rank {rank}")
        normalized.append(int(axis) % rank)
    if len(set(normalized)) != len(normalized):
        raise node.fail(f"axes {list(axes)} name an axis twice")
    return normalized


Shape = tuple[list[int], list[float]]  # output sizes, per-axis scales


def _from_scales(node: NodeContext, shape, axes: list[int], given: np.ndarray) -> Shape:
    if given.size != len(axes):
        raise node.fail(f"scales has {given.size} values for {len(axes)} axes")
    scales = [1.0] * len(shape)
    for axis, scale in zip(axes, given.reshape(-1)):
        if not scale > 0:
            raise node.fail(f"scales must be positive, got {given.reshape(-1).tolist()}")
        scales[axis] = _resample.f32(scale)
    sizes = [int(np.float32(s) * np.float32(n)) for s, n in zip(scales, shape)]
    if any(n < 1 for n in sizes):
        raise node.fail(f"scales {given.reshape(-1).tolist()} give an empty output for input shape "
                        f"{tuple(shape)}")
    return sizes, scales


def _from_sizes(node: NodeContext, shape, axes: list[int], given: np.ndarray) -> Shape:
    if given.size != len(axes):
        raise node.fail(f"sizes has {given.size} values for {len(axes)} axes")
    sizes = list(shape)
    for axis, size in zip(axes, given.reshape(-1)):
        if size < 1:
            raise node.fail(f"sizes must be positive, got {given.reshape(-1).tolist()}")
        sizes[axis] = int(size)
    scales = [_resample.f32(np.float32(o) / np.float32(n)) for o, n in zip(sizes, shape)]
    policy = _text(node.attr("keep_aspect_ratio_policy"), "stretch")
    if policy == "stretch":
        return sizes, scales
    if policy not in ("not_larger", "not_smaller"):
        raise node.fail(f"unknown keep_aspect_ratio_policy {policy!r}")
    pick = min if policy == "not_larger" else max
    common = np.float32(pick(scales[a] for a in axes))
    for axis in range(len(shape)):
        if axis in axes:
            scales[axis] = float(common)
            # C's round: half away from zero
            sizes[axis] = int(np.floor(np.float64(common * np.float32(shape[axis])) + 0.5))
        else:
            scales[axis], sizes[axis] = 1.0, shape[axis]
    return sizes, scales


def _roi(node: NodeContext, rank: int, axes: list[int], index: int) -> list[float] | None:
    given = _given(node, index, "roi")
    if given is None:
        return None
    values = [float(v) for v in given.reshape(-1)]
    if len(values) != 2 * len(axes):
        raise node.fail(f"roi has {len(values)} values for {len(axes)} axes (a start and an end each)")
    roi = [0.0] * rank + [1.0] * rank
    for i, axis in enumerate(axes):
        roi[axis], roi[rank + axis] = values[i], values[len(axes) + i]
    return roi


def _convert(node: NodeContext, scales_index: int | None, sizes_index: int | None,
             roi_index: int | None) -> Expr:
    """The node as a ``resize`` call; an index of None: the node has no such input
    (Upsample-7's scales are an attribute)."""
    data = node.input(0)
    shape = node.shape(data)
    rank = len(shape)
    axes = _axes(node, rank)
    legacy = node.op_type == "Upsample" or node.opset < 11
    mode = _text(node.attr("mode"), "nearest")
    coordinate_mode = _text(node.attr("coordinate_transformation_mode"), "half_pixel")
    if legacy:
        coordinate_mode = "asymmetric"
    if scales_index is None:
        scales = np.asarray(node.attr("scales"), dtype=np.float32)
    else:
        scales = _given(node, scales_index, "scales")
    sizes = _given(node, sizes_index, "sizes") if sizes_index is not None else None
    if (scales is None) == (sizes is None):
        raise node.fail("exactly one of scales and sizes must be given (and non-empty)")
    if sizes is None:
        out, factors = _from_scales(node, shape, axes, scales)
    else:
        out, factors = _from_sizes(node, shape, axes, sizes)
    roi = None
    if coordinate_mode == "tf_crop_and_resize" and roi_index is not None:
        roi = _roi(node, rank, axes, roi_index)
    nearest_mode = "simple" if legacy else _text(node.attr("nearest_mode"), "round_prefer_floor")
    choices = (("mode", mode, _resample.MODES),
               ("coordinate_transformation_mode", coordinate_mode, _resample.COORDINATE_MODES),
               ("nearest_mode", nearest_mode, _resample.NEAREST_MODES))
    for name, value, known in choices:
        if value not in known:
            raise node.fail(f"unknown {name} {value!r}; supported: {', '.join(known)}")
    return resize(
        node.expr(data), out, factors, roi,
        mode=mode,
        coordinate_transformation_mode=coordinate_mode,
        nearest_mode=nearest_mode,
        cubic_coeff_a=node.attr("cubic_coeff_a", -0.75),
        exclude_outside=bool(node.attr("exclude_outside", 0)),
        extrapolation_value=node.attr("extrapolation_value", 0.0),
        antialias=bool(node.attr("antialias", 0)) if node.opset >= 18 else False,
    )


@converter("Resize", since=10)
def _resize_10(node: NodeContext) -> Expr:
    return _convert(node, scales_index=1, sizes_index=None, roi_index=None)


@converter("Resize", since=11)
def _resize_11(node: NodeContext) -> Expr:
    return _convert(node, scales_index=2, sizes_index=3, roi_index=1)


@converter("Upsample", since=7)
def _upsample_7(node: NodeContext) -> Expr:
    return _convert(node, scales_index=None, sizes_index=None, roi_index=None)


@converter("Upsample", since=9)
def _upsample_9(node: NodeContext) -> Expr:
    return _convert(node, scales_index=1, sizes_index=None, roi_index=None)

"""Sampling ONNX ops: GridSample (16, 20), RoiAlign (10, 16), Col2Im (18) (DeformConv: deform_conv.py).

GridSample-16 takes 4-D data only and names its modes bilinear / bicubic; from 20 on any
rank and linear / cubic; both become ``grid_sample``. Col2Im's ``image_shape`` and
``block_shape`` decide the output shape: they must be known at import time.
"""

from __future__ import annotations

from passinfra.frontend.onnx_ops.context import NodeContext
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.ir.expr import Expr
from passinfra.ir.op import _grid_sample
from passinfra.ir.op import roi_align as roi_align_op
from passinfra.ir.op.col2im import col2im
from passinfra.ir.op.grid_sample import grid_sample


def _text(node: NodeContext, name: str, default: str) -> str:
    value = node.attr(name, default)
    return value.decode() if isinstance(value, bytes) else str(value)


def _choice(node: NodeContext, name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise node.fail(f"unknown {name} {value!r}; supported: {', '.join(allowed)}")
    return value


_GRID_MODES_16 = {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"}


@converter("GridSample", since=16)
def _grid_sample_16(node: NodeContext) -> Expr:
    if len(node.shape(node.input(0))) != 4:
        raise node.fail(f"GridSample-16 takes 4-D data, got shape {node.shape(node.input(0))}")
    mode = _choice(node, "mode", _text(node, "mode", "bilinear"), tuple(_GRID_MODES_16))
    return _grid(node, _GRID_MODES_16[mode])


@converter("GridSample", since=20)
def _grid_sample_20(node: NodeContext) -> Expr:
    return _grid(node, _choice(node, "mode", _text(node, "mode", "linear"), _grid_sample.MODES))


def _grid(node: NodeContext, mode: str) -> Expr:
    padding = _choice(node, "padding_mode", _text(node, "padding_mode", "zeros"), _grid_sample.PADDING_MODES)
    return grid_sample(node.arg(0), node.arg(1), mode=mode, padding_mode=padding,
                       align_corners=bool(node.attr("align_corners", 0)))


@converter("RoiAlign", since=10)
def _roi_align(node: NodeContext) -> Expr:
    # RoiAlign-10 has no coordinate_transformation_mode: it behaves as output_half_pixel
    default = "half_pixel" if node.opset >= 16 else "output_half_pixel"
    coordinate_mode = _text(node, "coordinate_transformation_mode", default)
    _choice(node, "coordinate_transformation_mode", coordinate_mode, roi_align_op.COORDINATE_MODES)
    return roi_align_op.roi_align(
        node.arg(0), node.arg(1), node.arg(2), mode=_choice(node, "mode", _text(node, "mode", "avg"),
                                                            roi_align_op.MODES),
        output_height=node.attr("output_height", 1), output_width=node.attr("output_width", 1),
        sampling_ratio=node.attr("sampling_ratio", 0), spatial_scale=node.attr("spatial_scale", 1.0),
        coordinate_transformation_mode=coordinate_mode)


@converter("Col2Im", since=18)
def _col2im(node: NodeContext) -> Expr:
    image = node.known_ints(1, "image_shape")
    block = node.known_ints(2, "block_shape")
    if len(image) != len(block):
        raise node.fail(f"image_shape {image} and block_shape {block} differ in length")
    return col2im(node.arg(0), image, block, dilations=node.attr("dilations"), pads=node.attr("pads"),
                  strides=node.attr("strides"))

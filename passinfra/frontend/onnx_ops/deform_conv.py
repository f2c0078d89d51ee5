"""ONNX DeformConv (19, 22: 22 adds bfloat16) -> ``deform_conv``.

Only 2-D images (4-D X), as onnxruntime and the ONNX reference. ``kernel_shape``, when
given, must be the weight's; a mask without a bias gets a zero bias (the IR op takes its
optional inputs in order).
"""

from __future__ import annotations

import numpy as np

from passinfra.frontend.onnx_ops.context import NodeContext
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.ir.expr import Expr
from passinfra.ir.op.deform_conv import deform_conv


@converter("DeformConv", since=19)
def _deform_conv(node: NodeContext) -> Expr:
    data, weight = node.shape(node.input(0)), node.shape(node.arg(1))
    if len(data) != 4:
        raise node.fail(f"only 2-D images (X of rank 4, NCHW) are supported, got X of shape {data}")
    kernel = tuple(weight[2:])
    given = node.attr("kernel_shape")
    if given is not None and tuple(given) != kernel:
        raise node.fail(f"kernel_shape {tuple(given)} differs from the weight's spatial shape {kernel}")
    bias = node.arg(3) if node.has_input(3) else None
    mask = node.arg(4) if node.has_input(4) else None
    if mask is not None and bias is None:
        bias = node.expr(np.zeros((weight[0],), np.dtype(node.dtype(node.input(0)))))
    return deform_conv(
        node.arg(0), node.arg(1), node.arg(2), bias, mask,
        strides=node.attr("strides", (1, 1)), pads=node.attr("pads", (0, 0, 0, 0)),
        dilations=node.attr("dilations", (1, 1)), group=node.attr("group", 1),
        offset_group=node.attr("offset_group", 1))

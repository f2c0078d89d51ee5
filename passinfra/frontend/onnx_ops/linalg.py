"""ONNX Det (opset 11): the determinant of each square matrix in the last two axes
(:mod:`passinfra.ir.op.linalg`)."""

from __future__ import annotations

from passinfra.frontend.onnx_ops.context import NodeContext
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.ir.expr import Expr
from passinfra.ir.op.linalg import det


@converter("Det", since=11)
def _det(node: NodeContext) -> Expr:
    data = node.arg(0)
    shape = node.shape(data)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        raise node.fail(f"the input must hold square matrices in its last two axes, got shape {shape}")
    return det(data)

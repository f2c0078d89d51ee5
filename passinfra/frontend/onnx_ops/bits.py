"""ONNX BitCast (opset 26): each element's bits read as another type of the same size
(:mod:`passinfra.ir.op.bitcast`). A value known at import time is reinterpreted with
NumPy, as Cast folds, so shape computations stay foldable."""

from __future__ import annotations

from typing import Any

from passinfra.frontend.onnx_ops.context import NodeContext
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.frontend.onnx_ops.tensor import onnx_dtype
from passinfra.ir.op.bitcast import bit_width, bitcast, reinterpret_array
from passinfra.ir.types import normalize_dtype


@converter("BitCast", since=26)
def _bitcast(node: NodeContext) -> Any:
    if node.attr("to") is None:
        raise node.fail("attribute 'to' is required")
    target = normalize_dtype(onnx_dtype(node.attr("to"), node))
    value = node.input(0)
    source = node.dtype(value)
    if bit_width(source) != bit_width(target):
        raise node.fail(f"cannot bitcast {source} ({bit_width(source)} bytes) to {target} "
                        f"({bit_width(target)} bytes): the sizes must match")
    if node.is_known(value):
        return reinterpret_array(value, target)
    return bitcast(value, target)

"""Which ONNX element types the importer takes, and the one-line error for the others.

The IR holds float16, bfloat16, float32, float64, int8/16/32/64, uint8/16/32/64 and
bool (:data:`passinfra.ir.types.DTYPES`). Everything else ONNX has (the float8 and
float4 formats, e8m0, int4/uint4, int2/uint2, strings, complex numbers) is out of scope.
Before converting anything, the importer looks at every tensor the model declares (graph
inputs and outputs, initializers, value_info, the outputs of Cast nodes and of nodes with
a tensor attribute, such as Constant) and reports all those of an unsupported type at
once, each type with the number of tensors declared with it, instead of failing at the
first one.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping

import numpy as np
import onnx

from passinfra.errors import IRError
from passinfra.frontend.onnx_ops.context import OnnxImportError
from passinfra.ir.types import normalize_dtype

__all__ = ["UnsupportedDtypesError", "dtype_name", "unsupported_dtypes"]

# attributes that name the element type of a node's first output
_DTYPE_ATTRIBUTES = ("to", "dtype", "output_dtype")


class UnsupportedDtypesError(OnnxImportError, NotImplementedError):
    """A model declares tensors of element types the IR does not have; lists every such
    type with its count of tensors."""

    def __init__(self, counts: Mapping[str, int]) -> None:
        self.counts = dict(counts)
        count = len(self.counts)
        super().__init__(f"the ONNX model uses {count} unsupported dtype(s): {listing(self.counts)}")


def listing(counts: Mapping[str, int]) -> str:
    """``A (x2), B (x1)``: names sorted, each with its count."""
    return ", ".join(f"{name} (x{count})" for name, count in sorted(counts.items()))


def dtype_name(code: int) -> str:
    """The ONNX name of an element type (``FLOAT8E4M3FN``), or its number if unknown."""
    try:
        return onnx.TensorProto.DataType.Name(code)
    except ValueError:
        return str(code)


def _supported(code: int) -> bool:
    try:
        normalize_dtype(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code)))
    except (IRError, KeyError, TypeError, ValueError):
        return False
    return True


def _declared_types(graph: onnx.GraphProto) -> dict[str, int]:
    """Tensor name -> element type, for every tensor whose type the model states."""
    declared: dict[str, int] = {}
    for value in (*graph.input, *graph.output, *graph.value_info):
        if value.type.HasField("tensor_type"):
            declared[value.name] = value.type.tensor_type.elem_type
    for init in graph.initializer:
        declared[init.name] = init.data_type
    for node in graph.node:
        if not node.output:
            continue
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                declared[node.output[0]] = attr.t.data_type
            elif attr.type == onnx.AttributeProto.INT and attr.name in _DTYPE_ATTRIBUTES:
                declared[node.output[0]] = attr.i
    return declared


def unsupported_dtypes(model: onnx.ModelProto) -> dict[str, int]:
    """ONNX element types of ``model``'s tensors that the IR has no dtype for, each with
    the number of tensors declared with it (``{"FLOAT8E4M3FN": 3}``). Element type 0
    (UNDEFINED: a value_info without a type) is not a dtype and is skipped, and so is a
    number ONNX does not define (a corrupt file: the tensor or node that carries it is
    reported as malformed where it is read)."""
    counts: collections.Counter[str] = collections.Counter()
    verdicts: dict[int, bool] = {}
    defined = set(onnx.TensorProto.DataType.values())
    for code in _declared_types(model.graph).values():
        if code == onnx.TensorProto.UNDEFINED or code not in defined:
            continue
        if code not in verdicts:
            verdicts[code] = _supported(code)
        if not verdicts[code]:
            counts[dtype_name(code)] += 1
    return dict(counts)

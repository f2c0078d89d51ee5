"""Import ONNX models into an IRModule.

``from_onnx(model_or_path, shapes=None)`` walks the graph in its (topological) node order
and converts each node with the converter registered for its op type and the model's
opset (``passinfra.frontend.onnx_ops``). Values known at import time (initializers,
Constants, shape computations) stay NumPy arrays and fold as the walk goes, through the
ops' own NumPy implementations, so the IR keeps static shapes. The result has one
function, ``main``: the graph inputs (initializers excluded) as parameters in order,
returning the graph output or a tuple of the outputs.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from passinfra.errors import RaypassError
from passinfra.frontend.onnx_ops import lookup
from passinfra.frontend.onnx_ops.context import NodeContext, OnnxImportError, TypeTracker
from passinfra.frontend.onnx_ops.tensor import onnx_dtype
from passinfra.ir.expr import Constant, Expr, Function, Tuple, Var
from passinfra.ir.module import IRModule
from passinfra.ir.types import TensorType, normalize_dtype
from passinfra.runtime import evaluate

__all__ = ["from_onnx", "UnsupportedOpsError", "OnnxImportError", "unsupported_ops"]

_DEFAULT_DOMAINS = ("", "ai.onnx")


class UnsupportedOpsError(RaypassError, NotImplementedError):
    """A model uses ops the importer has no converter for; lists every one with its count."""

    def __init__(self, counts: Mapping[str, int]) -> None:
        self.counts = dict(counts)
        listing = ", ".join(f"{name} (x{count})" for name, count in sorted(self.counts.items()))
        super().__init__(f"the ONNX model uses {len(self.counts)} unsupported op type(s): {listing}")


def _default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in _DEFAULT_DOMAINS:
            return entry.version
    return 1


def unsupported_ops(model: onnx.ModelProto) -> dict[str, int]:
    """Op types of ``model`` with no converter at its opset, and how often each occurs."""
    opset = _default_opset(model)
    counts: collections.Counter[str] = collections.Counter()
    for node in model.graph.node:
        if node.domain not in _DEFAULT_DOMAINS:
            counts[f"{node.domain}.{node.op_type}"] += 1
        elif lookup(node.op_type, opset) is None:
            counts[node.op_type] += 1
    return dict(counts)


def _load(model_or_path: Any) -> onnx.ModelProto:
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    if isinstance(model_or_path, (str, os.PathLike)):
        return onnx.load(os.fspath(model_or_path))
    raise OnnxImportError(
        f"from_onnx needs an onnx.ModelProto or a path, got a {type(model_or_path).__name__}"
    )


def _input_type(value_info: onnx.ValueInfoProto, shapes: Mapping[str, Sequence[int]]) -> TensorType:
    name = value_info.name
    tensor_type = value_info.type.tensor_type
    if not value_info.type.HasField("tensor_type"):
        raise OnnxImportError(f"graph input {name!r} is not a tensor (sequences and maps are not supported)")
    try:
        dtype = normalize_dtype(onnx_dtype(tensor_type.elem_type))
    except (RaypassError, ValueError) as err:
        raise OnnxImportError(f"graph input {name!r}: {err}") from None
    if name in shapes:
        return TensorType(tuple(int(d) for d in shapes[name]), dtype)
    if not tensor_type.HasField("shape"):
        raise OnnxImportError(f"graph input {name!r} has no shape; pass it in shapes={{{name!r}: (...)}}")
    dims = []
    for position, dim in enumerate(tensor_type.shape.dim):
        if not dim.HasField("dim_value"):
            label = dim.dim_param or "?"
            raise OnnxImportError(
                f"graph input {name!r} has a dynamic dimension {label!r} at position {position}; "
                f"give its static shape with shapes={{{name!r}: (...)}}"
            )
        dims.append(dim.dim_value)
    return TensorType(tuple(dims), dtype)


class _Importer:
    def __init__(self, model: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> None:
        self.model = model
        self.graph = model.graph
        self.opset = _default_opset(model)
        self.shapes = shapes
        self.tracker = TypeTracker()
        self.values: dict[str, Any] = {}

    def run(self) -> IRModule:
        missing = unsupported_ops(self.model)
        if missing:
            raise UnsupportedOpsError(missing)
        for init in self.graph.initializer:
            self.values[init.name] = numpy_helper.to_array(init)
        params = []
        for value_info in self.graph.input:
            if value_info.name in self.values:  # an initializer listed as an input (old exporters)
                continue
            param = Var(value_info.name, _input_type(value_info, self.shapes))
            self.values[value_info.name] = param
            params.append(param)
        for node in self.graph.node:
            self._convert(node)
        outputs = [self._output(o.name) for o in self.graph.output]
        body = outputs[0] if len(outputs) == 1 else Tuple(outputs)
        return IRModule({"main": Function(params, body)})

    def _output(self, name: str) -> Expr:
        if name not in self.values:
            raise OnnxImportError(f"graph output {name!r} is not produced by any node")
        value = self.values[name]
        return Constant(np.asarray(value)) if isinstance(value, np.ndarray) else value

    def _convert(self, node: onnx.NodeProto) -> None:
        inputs = []
        for name in node.input:
            if not name:
                inputs.append(None)
            elif name in self.values:
                inputs.append(self.values[name])
            else:
                raise OnnxImportError(
                    f"{node.op_type} node {node.name!r} reads {name!r}, which no node or "
                    "input defines before it (is the graph topologically sorted?)"
                )
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        context = NodeContext(node, inputs, attrs, self.opset, self.tracker)
        result = lookup(node.op_type, self.opset)(context)
        results = result if isinstance(result, list) else [result]
        foldable = all(v is None or isinstance(v, np.ndarray) for v in inputs)
        for name, value in zip(node.output, results):
            if not name:
                continue
            if isinstance(value, Expr):
                value = self._fold(value) if foldable else value
                if isinstance(value, Expr):
                    self._check(value, context)
            self.values[name] = value

    def _fold(self, expr: Expr) -> np.ndarray:
        """Evaluate an expression of known inputs with the ops' NumPy implementations
        (one semantics with the interpreter and FoldConstant)."""
        return np.asarray(evaluate(expr))

    def _check(self, expr: Expr, context: NodeContext) -> None:
        """Type the new expression now, so an error names the ONNX node that made it."""
        try:
            self.tracker.type_of(expr)
        except RaypassError as err:
            raise OnnxImportError(f"{context.where()}: {err}") from err


def from_onnx(model_or_path: Any, shapes: Mapping[str, Sequence[int]] | None = None) -> IRModule:
    """Import an ONNX model (a ``ModelProto`` or a path) as an IRModule with entry ``main``.

    ``shapes`` maps input names to static shapes: it fills dynamic dimensions (a dynamic
    dimension without one is an error naming the input) and overrides declared shapes.
    A model with unsupported ops raises :class:`UnsupportedOpsError` listing all of them.
    """
    return _Importer(_load(model_or_path), dict(shapes or {})).run()

"""What a converter sees of one ONNX node: its inputs, attributes and opset, plus helpers.

An input value is either a NumPy array (known at import time: an initializer, a Constant,
or anything folded from them, such as a shape computation) or an IR expression. Keeping
known values as arrays is what lets shape subgraphs fold with NumPy and the IR keep
static shapes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError, RaypassError
from passinfra.ir.expr import Call, Constant, Expr, Tuple, TupleGetItem, Var
from passinfra.ir.functor import expr_children
from passinfra.ir.op.registry import Op
from passinfra.ir.types import TensorType, TupleType, Type, normalize_dtype

Value = Any  # np.ndarray | Expr


class OnnxImportError(RaypassError, ValueError):
    """An ONNX model the importer cannot represent (names the node or input at fault)."""


class OnnxImportWarning(UserWarning):
    """A model the importer can represent, but with a value ONNX leaves undefined (a float
    cast to an integer type it does not fit); names the node and says what value it got."""


class TypeTracker:
    """Static types of the expressions the importer builds, computed with the ops' type
    relations as the expressions are made (memoized; iterative over fresh sub-terms)."""

    def __init__(self) -> None:
        self._types: dict[Expr, Type] = {}

    def type_of(self, expr: Expr) -> Type:
        known = self._types.get(expr)
        if known is not None:
            return known
        stack = [expr]
        while stack:
            node = stack[-1]
            if node in self._types:
                stack.pop()
                continue
            pending = [c for c in expr_children(node) if c not in self._types and not isinstance(c, Op)]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            self._types[node] = self._compute(node)
        return self._types[expr]

    def _compute(self, node: Expr) -> Type:
        if isinstance(node, Var):
            if node.type_annotation is None:
                raise OnnxImportError(f"variable {node.name_hint} has no type")
            return node.type_annotation
        if isinstance(node, Constant):
            return TensorType(node.data.shape, node.dtype)
        if isinstance(node, Tuple):
            return TupleType([self._types[f] for f in node.fields])
        if isinstance(node, TupleGetItem):
            return self._types[node.tuple_value].fields[node.index]
        if isinstance(node, Call) and isinstance(node.op, Op):
            return node.op.infer_type([self._types[a] for a in node.args], node.attrs)
        raise OnnxImportError(f"the ONNX importer does not build {type(node).__name__} nodes")


class NodeContext:
    """One ONNX node being converted."""

    def __init__(
        self,
        node: Any,
        inputs: Sequence[Value | None],
        attrs: dict[str, Any],
        opset: int,
        tracker: TypeTracker,
    ) -> None:
        self.node = node
        self.op_type: str = node.op_type
        self.inputs = list(inputs)
        self.attrs = attrs
        self.opset = opset
        self.num_outputs = len(node.output)
        self._tracker = tracker

    # -- describing the node in errors
    def where(self) -> str:
        name = f" {self.node.name!r}" if self.node.name else ""
        return f"{self.op_type} node{name} (opset {self.opset})"

    def fail(self, message: str) -> OnnxImportError:
        return OnnxImportError(f"{self.where()}: {message}")

    # -- inputs
    def input(self, index: int) -> Value | None:
        """Input ``index``, or None when it is absent (omitted or the empty name)."""
        return self.inputs[index] if index < len(self.inputs) else None

    def has_input(self, index: int) -> bool:
        return self.input(index) is not None

    def is_known(self, value: Value) -> bool:
        return isinstance(value, np.ndarray)

    def known(self, index: int, what: str) -> np.ndarray:
        """Input ``index`` as an array known at import time, or an error naming it."""
        value = self.input(index)
        if not isinstance(value, np.ndarray):
            raise self.fail(
                f"input {index} ({what}) must be known at import time "
                "(an initializer, a Constant or a foldable shape computation)"
            )
        return value

    def known_ints(self, index: int, what: str) -> list[int]:
        return [int(v) for v in self.known(index, what).reshape(-1)]

    def expr(self, value: Value) -> Expr:
        """``value`` as an IR expression (known arrays become Constants)."""
        if isinstance(value, Expr):
            return value
        array = np.asarray(value)
        try:
            normalize_dtype(array.dtype)
        except RaypassError:
            raise self.fail(f"a tensor of dtype {array.dtype} is not supported by the IR") from None
        return Constant.owning(array)  # values converters made for the graph: not copied

    def arg(self, index: int) -> Expr:
        value = self.input(index)
        if value is None:
            raise self.fail(f"input {index} is required")
        return self.expr(value)

    # -- static type information
    def tensor_type(self, value: Value) -> TensorType:
        if isinstance(value, np.ndarray):
            return TensorType(value.shape, normalize_dtype(value.dtype))
        ty = self._tracker.type_of(value)
        if not isinstance(ty, TensorType):
            raise IRTypeError(f"{self.where()}: expected a tensor input, got a tuple")
        return ty

    def shape(self, value: Value) -> tuple[int, ...]:
        if isinstance(value, np.ndarray):
            return value.shape
        return self.tensor_type(value).shape

    def dtype(self, value: Value) -> str:
        if isinstance(value, np.ndarray):
            return value.dtype.name
        return self.tensor_type(value).dtype

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

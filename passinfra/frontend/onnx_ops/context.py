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
from passinfra.ir.dims import SymDim, free_vars
from passinfra.ir.expr import Call, Constant, Expr, Tuple, TupleGetItem, Var
from passinfra.ir.functor import expr_children
from passinfra.ir.op.registry import Op
from passinfra.ir.types import TensorType, TupleType, Type, normalize_dtype

Value = Any  # np.ndarray | Expr

# A known *shape value* may hold symbolic dimensions (the Shape of a tensor whose type has
# them): it is then an object-dtype array of dims (ints and SymDims), standing for an
# int64 tensor. An array keeps it "known" to every converter (``isinstance(value,
# np.ndarray)``) and NumPy's indexing, concatenation and object arithmetic do the shape
# algebra with the dims' own operators; only the ops in :mod:`.shape_values` compute on it,
# every other converter gets one clear error (:meth:`NodeContext.reject_symbolic`).


def is_symbolic_value(value: Value) -> bool:
    """Whether ``value`` is a known shape value holding symbolic dimensions."""
    return isinstance(value, np.ndarray) and value.dtype == object


def symbolic_value(dims: Any) -> np.ndarray:
    """``dims`` as a known value: an int64 array when every entry is an int (so static
    shapes stay what they always were), else an object array of dims."""
    array = np.asarray(dims, dtype=object)
    if all(type(d) is int or isinstance(d, np.integer) for d in array.reshape(-1)):
        return array.astype(np.int64)
    return array


class OnnxImportError(RaypassError, ValueError):
    """An ONNX model the importer cannot represent (names the node or input at fault)."""


class RuntimeValueError(OnnxImportError):
    """A node needs at import a value the graph computes at run time (a Reshape's shape,
    a TopK's k, a Slice's starts given as a graph input): ``value_name`` is the ONNX name
    of that value. The ONNX backend compiles such a model when it runs, with the values
    of the graph inputs it depends on (:mod:`passinfra.frontend.onnx_backend`)."""

    def __init__(self, message: str, value_name: str) -> None:
        super().__init__(message)
        self.value_name = value_name


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
            raise self.runtime_value(index, f"input {index} ({what}) must be known at import time "
                                            "(an initializer, a Constant or a foldable shape computation)")
        return value

    def runtime_value(self, index: int, message: str) -> RuntimeValueError:
        """The error for input ``index`` computed at run time where the node needs it now."""
        return RuntimeValueError(f"{self.where()}: {message}", self.node.input[index])

    def known_ints(self, index: int, what: str) -> list[int]:
        value = self.known(index, what)
        if value.dtype == object:
            raise self.symbolic_error(index, what, value)
        return [int(v) for v in value.reshape(-1)]

    def symbolic_error(self, index: int, what: str, value: np.ndarray) -> OnnxImportError:
        """The one error for a converter that needs a static value and got a symbolic
        one: names the node, the input and the dimension."""
        entries = list(value.reshape(-1))
        names = dict.fromkeys(v.name for d in entries if isinstance(d, SymDim) for v in free_vars(d))
        shown = "[" + ", ".join(str(d) for d in value.reshape(-1)) + "]"
        dims = f"dimension {next(iter(names))}" if len(names) == 1 else f"dimensions {', '.join(names)}"
        return self.fail(f"input {index} ({what}) is {shown}, which depends on the symbolic {dims}; "
                         f"{self.op_type} needs it static here (fix the dimension with shapes=)")

    def reject_symbolic(self) -> None:
        """Raise :meth:`symbolic_error` for the first input that is a symbolic value."""
        for index, value in enumerate(self.inputs):
            if is_symbolic_value(value):
                name = self.node.input[index] if index < len(self.node.input) else str(index)
                raise self.symbolic_error(index, repr(name), value)

    def expr(self, value: Value) -> Expr:
        """``value`` as an IR expression (known arrays become Constants)."""
        if isinstance(value, Expr):
            return value
        if is_symbolic_value(value):
            index = next((i for i, v in enumerate(self.inputs) if v is value), None)
            if index is not None:
                raise self.symbolic_error(index, repr(self.node.input[index]), value)
            raise self.fail(f"the value [{', '.join(map(str, value.reshape(-1)))}] depends on a symbolic "
                            "dimension and cannot become a tensor constant")
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
            return TensorType(value.shape, self.dtype(value))
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
            return "int64" if value.dtype == object else value.dtype.name
        return self.tensor_type(value).dtype

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

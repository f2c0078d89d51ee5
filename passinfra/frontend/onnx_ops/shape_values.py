"""Shape computations on symbolic shape values, folded at import.

A model with symbolic input dims computes shapes at run time (``Shape`` -> ``Gather`` ->
``Concat`` -> ``Reshape``). Their values are known at import as dims (see
:func:`.context.is_symbolic_value`), so these ops fold them here with the dims'
arithmetic, as the importer folds static shape computations with NumPy. The importer
calls :func:`fold_symbolic` for a node with a symbolic input before its converter; an op
with no folder here gets the one clear error (:meth:`NodeContext.reject_symbolic`) unless
its converter handles symbolic values itself (:data:`CONVERTER_HANDLES`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from passinfra.frontend.onnx_ops.context import NodeContext, is_symbolic_value, symbolic_value
from passinfra.frontend.onnx_ops.tensor import onnx_dtype
from passinfra.ir.dims import Dim, exact_div

# ops whose converter takes a symbolic shape value as its shape input (Reshape's target,
# Expand's shape, ConstantOfShape's shape, Range's bounds) and builds IR from it; the data
# input stays an expression
CONVERTER_HANDLES = frozenset(("Reshape", "Expand", "ConstantOfShape", "Range"))


def _operand(node: NodeContext, index: int) -> np.ndarray:
    value = node.known(index, "shape value")
    return value if value.dtype == object else value.astype(object)


def _axes(node: NodeContext, since_opset: int) -> list[int] | None:
    """Unsqueeze/Squeeze axes: an attribute before ``since_opset``, else input 1."""
    if node.opset < since_opset:
        return list(node.attr("axes")) if node.attr("axes") is not None else None
    return node.known_ints(1, "axes") if node.has_input(1) else None


def _identity(node: NodeContext) -> np.ndarray:
    return node.known(0, "input")


def _gather(node: NodeContext) -> np.ndarray:
    data = _operand(node, 0)
    indices = np.asarray(node.known_ints(1, "indices"), np.int64).reshape(node.shape(node.input(1)))
    axis = node.attr("axis", 0)
    try:
        return np.take(data, indices, axis=axis)
    except (IndexError, np.exceptions.AxisError) as err:
        raise node.fail(f"indices out of range: {err}") from None


def _slice(node: NodeContext) -> np.ndarray:
    data = _operand(node, 0)
    if node.opset < 10:
        starts, ends = list(node.attr("starts")), list(node.attr("ends"))
        axes = list(node.attr("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = node.known_ints(1, "starts"), node.known_ints(2, "ends")
        axes = node.known_ints(3, "axes") if node.has_input(3) else list(range(len(starts)))
        steps = node.known_ints(4, "steps") if node.has_input(4) else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for axis, start, end, step in zip(axes, starts, ends, steps):
        index[axis] = slice(start, end, step)  # Python's clamping is ONNX's on a known length
    return data[tuple(index)]


def _concat(node: NodeContext) -> np.ndarray:
    parts = [_operand(node, i) for i in range(len(node.inputs))]
    return np.concatenate(parts, axis=node.attr("axis"))


def _unsqueeze(node: NodeContext) -> np.ndarray:
    data = _operand(node, 0)
    axes = _axes(node, 13) or []
    rank = data.ndim + len(axes)
    for axis in sorted(a % rank for a in axes):
        data = np.expand_dims(data, axis)
    return data


def _squeeze(node: NodeContext) -> np.ndarray:
    data = _operand(node, 0)
    axes = _axes(node, 13)
    if axes is None:
        axes = [i for i, n in enumerate(data.shape) if n == 1]
    return np.squeeze(data, axis=tuple(a % data.ndim for a in axes))


def _cast(node: NodeContext) -> np.ndarray:
    dtype = onnx_dtype(node.attr("to"), node)
    if dtype.kind not in "iu":  # a size as a float or a bool has no symbolic form here
        node.reject_symbolic()
    return _operand(node, 0)


def _divide(a: Dim, b: Dim) -> Dim:
    if type(a) is int and type(b) is int:
        if b == 0:
            raise ZeroDivisionError(f"{a} / 0")
        quotient = abs(a) // abs(b)  # ONNX integer Div truncates toward zero
        return quotient if (a < 0) == (b < 0) else -quotient
    quotient = exact_div(a, b)
    if quotient is not None:
        return quotient
    if type(b) is int and b > 0:
        return a // b  # sizes are not negative: floor is truncation
    raise ValueError(f"{a} / {b} has no exact symbolic quotient")


def _binary(fn: Callable[[Dim, Dim], Dim]) -> Callable[[NodeContext], np.ndarray]:
    def fold(node: NodeContext) -> np.ndarray:
        a, b = _operand(node, 0), _operand(node, 1)
        try:
            return np.frompyfunc(fn, 2, 1)(a, b)
        except (ValueError, ZeroDivisionError, TypeError) as err:
            raise node.fail(f"cannot fold the symbolic shape computation: {err}") from None

    return fold


FOLDERS: dict[str, Callable[[NodeContext], np.ndarray]] = {
    "Identity": _identity,
    "Gather": _gather,
    "Slice": _slice,
    "Concat": _concat,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Cast": _cast,
    "Add": _binary(lambda a, b: a + b),
    "Sub": _binary(lambda a, b: a - b),
    "Mul": _binary(lambda a, b: a * b),
    "Div": _binary(_divide),
}


def fold_symbolic(node: NodeContext) -> np.ndarray | None:
    """The value of ``node`` (one output) when an input is a symbolic shape value and
    every input is known; None when no input is symbolic or the converter handles it (a
    tensor, not a shape value, sliced to a symbolic bound becomes a strided_slice with
    dims). Anything else (an op with no folder) is the one clear error naming the node,
    the input and the dim."""
    if not any(is_symbolic_value(v) for v in node.inputs):
        return None
    if node.op_type in CONVERTER_HANDLES:
        return None
    if node.op_type == "Slice" and not is_symbolic_value(node.inputs[0]):
        return None  # a tensor (a constant buffer too) sliced to a run-time length: strided_slice
    folder = FOLDERS.get(node.op_type)
    if folder is None or not all(v is None or isinstance(v, np.ndarray) for v in node.inputs):
        node.reject_symbolic()
    result = np.asarray(folder(node), dtype=object)
    return symbolic_value(result)

"""Creation, layout and indexing ONNX ops: Constant, Reshape, Squeeze, Slice, Pad, ...

Shape-valued inputs (Reshape's shape, Slice's bounds, Pad's pads, ...) must be known at
import time; the importer folds the shape subgraphs that produce them. Over symbolic input
dims a shape value holds dims (:mod:`.shape_values`): Reshape, Flatten, Squeeze/Unsqueeze
and Expand take them where the IR ops can express the result, and so do ops whose IR op
holds dims in its attributes: Slice's starts/ends (strided_slice), Expand's shape
(broadcast_to), Range's start/limit with a known delta (arange) and ConstantOfShape's
shape (full); the others need static ones.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper

from passinfra.frontend.onnx_ops.context import (
    NodeContext,
    OnnxImportError,
    is_symbolic_value,
    symbolic_value,
)
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.ir import op
from passinfra.ir.dims import SymDim, exact_div, prove_equal
from passinfra.ir.expr import Expr, TupleGetItem
from passinfra.ir.op import extra


def onnx_dtype(code: int, node: NodeContext | None = None) -> np.dtype:
    """The NumPy dtype of an ONNX TensorProto element type."""
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code))
    except (KeyError, TypeError, ValueError):
        where = f"{node.where()}: " if node is not None else ""
        raise OnnxImportError(f"{where}unknown ONNX element type {code}") from None


def _normalize(axis: int, ndim: int, node: NodeContext) -> int:
    if not -ndim <= axis < ndim:
        raise node.fail(f"axis {axis} is out of range for rank {ndim}")
    return axis % ndim


# --------------------------------------------------------------------------- constants


@converter("Constant")
def _constant(node: NodeContext) -> np.ndarray:
    for key in ("value_float", "value_int"):
        if key in node.attrs:
            return np.asarray(node.attrs[key], dtype=np.float32 if key == "value_float" else np.int64)
    for key in ("value_floats", "value_ints"):
        if key in node.attrs:
            return np.asarray(node.attrs[key], dtype=np.float32 if key == "value_floats" else np.int64)
    if "value" in node.attrs:
        return numpy_helper.to_array(node.attrs["value"])
    raise node.fail(f"unsupported Constant attribute(s) {sorted(node.attrs)}")


@converter("ConstantOfShape", since=9)
def _constant_of_shape(node: NodeContext) -> np.ndarray | Expr:
    value = node.attr("value")
    fill = numpy_helper.to_array(value).reshape(-1) if value is not None else np.zeros(1, np.float32)
    target = node.known(0, "shape")
    if is_symbolic_value(target):  # a run-time shape: op.full with dims in its shape
        return op.full(fill[:1].reshape(()), list(target.reshape(-1)), dtype=fill.dtype.name)
    shape = node.known_ints(0, "shape")
    return np.full(shape, fill[0], dtype=fill.dtype)


@converter("Shape")
def _shape(node: NodeContext) -> np.ndarray:
    dims = symbolic_value(list(node.shape(node.input(0))))  # int64 unless a dim is symbolic
    start, end = node.attr("start", 0), node.attr("end", None)
    return dims[start:end]


@converter("Size")
def _size(node: NodeContext) -> np.ndarray:
    shape = node.shape(node.input(0))
    if any(isinstance(d, SymDim) for d in shape):
        return symbolic_value(math.prod(shape))
    return np.asarray(int(np.prod(shape)), dtype=np.int64)


@converter("Range", since=11)
def _range(node: NodeContext) -> np.ndarray | Expr:
    start, limit, delta = (node.known(i, what) for i, what in enumerate(("start", "limit", "delta")))
    if is_symbolic_value(start) or is_symbolic_value(limit):
        # arange(past, past + seq): the arange op with dims; its delta must be a known int
        step = node.known_ints(2, "delta")
        if len(step) != 1 or step[0] == 0:
            raise node.fail(f"delta must be one nonzero int, got {step}")
        bounds = [v.reshape(-1)[0] if is_symbolic_value(v) else int(v.reshape(-1)[0]) for v in (start, limit)]
        return extra.arange(bounds[1], start=bounds[0], step=step[0], dtype=node.dtype(node.input(2)))
    return np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype)


# --------------------------------------------------------------------------- reshaping


def _static_reshape(node: NodeContext, data, target: list, allow_zero: bool = False):
    if any(isinstance(d, SymDim) for d in target):  # Squeeze/Unsqueeze/Flatten of a symbolic shape
        return _symbolic_reshape(node, data, np.array(target, dtype=object), allow_zero)
    in_shape = node.shape(data)
    if not allow_zero and 0 in target[len(in_shape) :]:  # a 0 copies the input dimension at its place
        raise node.fail(f"shape {target} copies (0) a dimension beyond the input's rank {len(in_shape)}")
    out = [in_shape[i] if d == 0 and not allow_zero else d for i, d in enumerate(target)]
    if out.count(-1) > 1:
        raise node.fail(f"shape {target} has more than one -1")
    if any(isinstance(d, SymDim) for d in in_shape):  # the op copies 0s and infers a -1 symbolically
        if allow_zero and 0 in target:
            shown = ", ".join(map(str, in_shape))
            raise node.fail(f"shape {target} with allowzero=1 on the symbolic shape ({shown}): "
                            "the reshape op reads a 0 as a copy")
        return op.reshape(node.expr(data), target)
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1]))
        total = int(np.prod(in_shape))
        if known == 0 or total % known:
            raise node.fail(f"cannot reshape {tuple(in_shape)} into {target}")
        out[out.index(-1)] = total // known
    if node.is_known(data):
        if any(d < 0 for d in out) or math.prod(out) != math.prod(in_shape):  # as op.reshape checks
            raise node.fail(f"cannot reshape {tuple(in_shape)} into {target}")
        return data.reshape(out)
    return op.reshape(data, out)


@converter("Reshape", since=1)
def _reshape_attr(node: NodeContext):
    return _static_reshape(node, node.input(0), list(node.attr("shape")))


@converter("Reshape", since=5)
def _reshape(node: NodeContext):
    allow_zero = bool(node.attr("allowzero", 0))
    target = node.known(1, "shape")
    if is_symbolic_value(target):
        return _symbolic_reshape(node, node.input(0), target, allow_zero)
    return _static_reshape(node, node.input(0), node.known_ints(1, "shape"), allow_zero)


def _symbolic_reshape(node: NodeContext, data, target: np.ndarray, allow_zero: bool) -> Expr:
    """Reshape to a computed target with symbolic entries. The reshape op's newshape takes
    ints only, so the target is first resolved to dims (0 copies, -1 by exact division),
    then each symbolic dim becomes a 0 (it is the input's dim at that place) or the one -1
    the op infers; the type the op infers is checked against the resolved target, so the
    IR says exactly what the model asked for."""
    if node.is_known(data):
        raise node.symbolic_error(1, "shape", target)
    in_shape = node.shape(data)
    entries = list(target.reshape(-1))
    shown = "[" + ", ".join(map(str, entries)) + "]"
    copies = [] if allow_zero else [i for i, d in enumerate(entries) if not isinstance(d, SymDim) and d == 0]
    if any(i >= len(in_shape) for i in copies):
        raise node.fail(f"shape {shown} copies (0) a dimension beyond the input's rank {len(in_shape)}")
    dims = [in_shape[i] if i in copies else d for i, d in enumerate(entries)]
    inferred = [i for i, d in enumerate(entries) if not isinstance(d, SymDim) and d == -1]
    if len(inferred) > 1:
        raise node.fail(f"shape {shown} has more than one -1")
    if inferred:
        rest = math.prod(d for i, d in enumerate(dims) if i != inferred[0])
        dims[inferred[0]] = exact_div(math.prod(in_shape), rest)
        if dims[inferred[0]] is None:
            raise node.fail(f"cannot reshape ({', '.join(map(str, in_shape))}) into {shown}: the element "
                            "count does not divide exactly")
    newshape = [
        d if not isinstance(d, SymDim)
        else 0 if not allow_zero and i < len(in_shape) and prove_equal(d, in_shape[i]) else -1
        for i, d in enumerate(dims)
    ]
    if newshape.count(-1) > 1:
        raise node.fail(f"the computed shape {shown} has more than one entry that is neither static nor "
                        "the input's dim at its place; the reshape op cannot express it")
    result = op.reshape(node.expr(data), newshape)
    out = node.tensor_type(result).shape
    for position, (want, got) in enumerate(zip(dims, out)):
        if prove_equal(want, got) is not True:
            raise node.fail(f"reshape to the computed shape {shown}: dim {position} would be {got}, "
                            f"which is not provably {want}")
    return result


@converter("Flatten")
def _flatten(node: NodeContext):
    data = node.input(0)
    shape = node.shape(data)
    axis = node.attr("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    if any(isinstance(d, SymDim) for d in shape):
        return _static_reshape(node, data, [math.prod(shape[:axis]), math.prod(shape[axis:])])
    outer = int(np.prod(shape[:axis]))
    return _static_reshape(node, data, [outer, int(np.prod(shape[axis:]))])


def _axes(node: NodeContext, since_input: int) -> list[int] | None:
    """Axes from the attribute (before opset ``since_input``) or from input 1."""
    if node.opset < since_input:
        axes = node.attr("axes")
        return None if axes is None else list(axes)
    return node.known_ints(1, "axes") if node.has_input(1) else None


@converter("Squeeze")
def _squeeze(node: NodeContext):
    data = node.input(0)
    shape = node.shape(data)
    axes = _axes(node, 13)
    if axes is None:
        kept = [d for d in shape if d != 1]
    else:
        dropped = {_normalize(a, len(shape), node) for a in axes}
        if any(shape[a] != 1 for a in dropped):
            raise node.fail(f"cannot squeeze axes {axes} of shape {tuple(shape)}")
        kept = [d for i, d in enumerate(shape) if i not in dropped]
    return _static_reshape(node, data, kept)


@converter("Unsqueeze")
def _unsqueeze(node: NodeContext):
    data = node.input(0)
    shape = list(node.shape(data))
    axes = _axes(node, 13)
    if axes is None:
        raise node.fail("Unsqueeze needs axes")
    rank = len(shape) + len(axes)
    for axis in sorted(_normalize(a, rank, node) for a in axes):
        shape.insert(axis, 1)
    return _static_reshape(node, data, shape)


@converter("Transpose")
def _transpose(node: NodeContext):
    perm = node.attr("perm")
    return op.transpose(node.arg(0), None if perm is None else list(perm))


@converter("Concat")
def _concat(node: NodeContext) -> Expr:
    fields = [node.arg(i) for i in range(len(node.inputs)) if node.has_input(i)]
    return op.concatenate(fields, axis=node.attr("axis", 0))


@converter("Split")
def _split(node: NodeContext) -> list[Expr]:
    data = node.arg(0)
    shape = node.shape(data)
    axis = _normalize(node.attr("axis", 0), len(shape), node)
    if node.opset < 13:
        sizes = node.attr("split")
    else:
        sizes = node.known_ints(1, "split") if node.has_input(1) else None
    if sizes is None:
        count = node.attr("num_outputs", node.num_outputs)
        step = -(-shape[axis] // count)  # ceil: the last piece may be smaller (opset 18)
        sizes = [min(step, shape[axis] - i * step) for i in range(count)]
    if sum(sizes) != shape[axis]:
        raise node.fail(f"split sizes {list(sizes)} do not add up to axis {axis} of shape {tuple(shape)}")
    indices = list(np.cumsum(sizes)[:-1])
    pieces = op.split(data, [int(i) for i in indices], axis=axis)
    return [TupleGetItem(pieces, i) for i in range(len(sizes))]


@converter("Slice", since=1)
def _slice_attrs(node: NodeContext) -> Expr:
    data = node.input(0)
    starts, ends = list(node.attr("starts")), list(node.attr("ends"))
    axes = list(node.attr("axes", range(len(starts))))
    return _slice(node, data, axes, starts, ends, [1] * len(starts))


@converter("Slice", since=10)
def _slice_inputs(node: NodeContext) -> Expr:
    data = node.input(0)
    # starts and ends may hold dims (a buffer sliced to the run-time seq): strided_slice
    # takes them; axes and steps must be static
    starts, ends = _known_dims(node, 1, "starts"), _known_dims(node, 2, "ends")
    axes = node.known_ints(3, "axes") if node.has_input(3) else list(range(len(starts)))
    steps = node.known_ints(4, "steps") if node.has_input(4) else [1] * len(starts)
    return _slice(node, data, axes, starts, ends, steps)


def _known_dims(node: NodeContext, index: int, what: str) -> list:
    value = node.known(index, what)
    if is_symbolic_value(value):
        return list(value.reshape(-1))
    return [int(v) for v in value.reshape(-1)]


def _slice(node: NodeContext, data, axes, starts, ends, steps):
    shape = node.shape(data)
    return extra.strided_slice(node.expr(data), shape, axes, starts, ends, steps)


@converter("Gather")
def _gather(node: NodeContext) -> Expr:
    data = node.input(0)
    axis = _normalize(node.attr("axis", 0), len(node.shape(data)), node)
    return op.take(node.expr(data), node.arg(1), axis=axis)


@converter("Expand", since=8)
def _expand(node: NodeContext) -> Expr:
    target = node.known(1, "shape")
    if is_symbolic_value(target):
        return _symbolic_expand(node, target)
    return extra.broadcast_to(node.arg(0), node.known_ints(1, "shape"))


def _symbolic_expand(node: NodeContext, target: np.ndarray) -> Expr:
    """Expand to a symbolic shape: no op when the target broadcasts to the input's own
    shape (an Expand to ``Shape(x)`` of x), else broadcast_to with dims in its shape."""
    shape = node.shape(node.input(0))
    entries = list(target.reshape(-1))
    same = len(entries) <= len(shape) and all(
        (not isinstance(want, SymDim) and want == 1) or prove_equal(want, have) is True
        for want, have in zip(entries, shape[len(shape) - len(entries):])
    )
    if same:
        return node.arg(0)
    return extra.broadcast_to(node.arg(0), entries)


@converter("Tile", since=6)
def _tile(node: NodeContext) -> Expr:
    return extra.tile(node.arg(0), node.known_ints(1, "repeats"))


@converter("Trilu", since=14)
def _trilu(node: NodeContext) -> Expr:
    upper = bool(node.attr("upper", 1))
    if not node.has_input(1) or node.is_known(node.input(1)):
        k = node.known_ints(1, "k")[0] if node.has_input(1) else 0
        return extra.trilu(node.arg(0), k=k, upper=upper)
    # k is a runtime graph input: the shape is static, so the mask compares a constant
    # table of (column - row) with k, which keeps an element on the kept side of diagonal k
    shape, dtype = node.shape(node.input(0)), node.dtype(node.input(0))
    if len(shape) < 2:
        raise node.fail(f"the input must have rank >= 2, got shape {tuple(shape)}")
    k_type = node.tensor_type(node.input(1))
    if k_type.dtype != "int64" or math.prod(k_type.shape) != 1:
        raise node.fail(f"k must be one int64 value, got {k_type.dtype} of shape {k_type.shape}")
    rows, cols = shape[-2:]
    offsets = np.arange(cols, dtype=np.int64)[None, :] - np.arange(rows, dtype=np.int64)[:, None]
    k = op.reshape(node.arg(1), ())
    compare = op.greater_equal if upper else op.less_equal
    keep = compare(node.expr(offsets), k)
    return op.where(keep, node.arg(0), node.expr(np.zeros((), dtype)))


# --------------------------------------------------------------------------- pad

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def _pad(node: NodeContext, pads: list[int], value: float, mode: str, axes: list[int] | None = None) -> Expr:
    data = node.arg(0)
    ndim = len(node.shape(node.input(0)))
    axes = list(range(ndim)) if axes is None else [_normalize(a, ndim, node) for a in axes]
    if len(pads) != 2 * len(axes):
        raise node.fail(f"pads {pads} must hold 2 entries per padded axis ({len(axes)} axes)")
    widths = [(0, 0)] * ndim
    for i, axis in enumerate(axes):
        widths[axis] = (pads[i], pads[i + len(axes)])
    if mode not in _PAD_MODES:
        raise node.fail(f"unsupported pad mode {mode!r}")
    return extra.pad(data, widths, value, _PAD_MODES[mode])


@converter("Pad", since=1)
def _pad_v1(node: NodeContext) -> Expr:
    pads = node.attr("pads", node.attr("paddings"))
    return _pad(node, list(pads), node.attr("value", 0.0), _text(node.attr("mode", "constant")))


@converter("Pad", since=11)
def _pad_v11(node: NodeContext) -> Expr:
    pads = node.known_ints(1, "pads")
    value = node.known(2, "constant_value").item() if node.has_input(2) else 0.0
    axes = node.known_ints(3, "axes") if node.has_input(3) else None
    return _pad(node, pads, value, _text(node.attr("mode", "constant")), axes)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --------------------------------------------------------------------------- depth/space


@converter("DepthToSpace")
def _depth_to_space(node: NodeContext) -> Expr:
    data = node.arg(0)
    n, c, h, w = node.shape(node.input(0))
    b = node.attr("blocksize")
    if _text(node.attr("mode", "DCR")) == "DCR":
        grouped = op.reshape(data, (n, b, b, c // (b * b), h, w))
        moved = op.transpose(grouped, (0, 3, 4, 1, 5, 2))
    else:
        grouped = op.reshape(data, (n, c // (b * b), b, b, h, w))
        moved = op.transpose(grouped, (0, 1, 4, 2, 5, 3))
    return op.reshape(moved, (n, c // (b * b), h * b, w * b))


@converter("SpaceToDepth")
def _space_to_depth(node: NodeContext) -> Expr:
    data = node.arg(0)
    n, c, h, w = node.shape(node.input(0))
    b = node.attr("blocksize")
    grouped = op.reshape(data, (n, c, h // b, b, w // b, b))
    # DCR puts the block offsets before the channels, CRD after them
    order = (0, 3, 5, 1, 2, 4) if _text(node.attr("mode", "DCR")) == "DCR" else (0, 1, 3, 5, 2, 4)
    moved = op.transpose(grouped, order)
    return op.reshape(moved, (n, c * b * b, h // b, w // b))

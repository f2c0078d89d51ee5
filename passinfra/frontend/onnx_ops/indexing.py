"""Indexing, scan and integer-arithmetic ONNX ops.

Ops with an IR op of their own (:mod:`passinfra.ir.op.indexing`): GatherElements,
ScatterElements (and the older Scatter), GatherND, ScatterND, TopK, CumSum, CumProd, Mod,
BitShift.

Ops lowered here to existing ops, which all compile:

* Einsum: per operand, repeated labels become diagonals (a transpose, a reshape and a
  strided slice) and labels no one else needs are summed; then the operands are
  contracted left to right, each pair as one batched ``matmul`` between transposes and
  reshapes; a last transpose puts the labels in output order.
* OneHot: ``where(equal(index, arange(depth)), on, off)``; Hardmax: ``argmax`` compared
  with the positions of its axis; EyeLike: a constant (only the input's shape matters);
  IsNaN: ``x != x``; IsInf: comparisons with the infinities; ReverseSequence: a
  ``gather_elements`` along the time axis with reversed positions inside each sequence.
* TensorScatter (a KV-cache write) and MaxUnpool: one ``scatter_elements`` each.

Values that fix an output's shape or the computation's structure (TopK's k, OneHot's depth,
MaxUnpool's output_shape) must be known at import time. CumSum's and CumProd's axis may
be a run-time input: it does not change the output's shape, so the scans along every axis
are computed and a ``where`` on the axis value picks one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from passinfra.frontend.onnx_ops.context import NodeContext
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.frontend.onnx_ops.tensor import onnx_dtype
from passinfra.ir import op
from passinfra.ir.expr import Constant, Expr, TupleGetItem
from passinfra.ir.op import extra, indexing


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _axis(node: NodeContext, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise node.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def _reduction(node: NodeContext) -> str:
    reduction = _text(node.attr("reduction", "none"))
    if reduction not in indexing.SCATTER_REDUCTIONS:
        raise node.fail(f"unknown reduction {reduction!r}")
    return reduction


# --------------------------------------------------------------------------- gathers and scatters


@converter("GatherElements", since=11)
def _gather_elements(node: NodeContext) -> Expr:
    axis = _axis(node, node.attr("axis", 0), len(node.shape(node.input(0))))
    return indexing.gather_elements(node.arg(0), node.arg(1), axis=axis)


@converter("Scatter", since=9)  # the name ScatterElements had before opset 11
@converter("ScatterElements", since=11)
def _scatter_elements(node: NodeContext) -> Expr:
    axis = _axis(node, node.attr("axis", 0), len(node.shape(node.input(0))))
    return indexing.scatter_elements(node.arg(0), node.arg(1), node.arg(2), axis=axis,
                                     reduction=_reduction(node))


@converter("GatherND", since=11)
def _gather_nd(node: NodeContext) -> Expr:
    return indexing.gather_nd(node.arg(0), node.arg(1), batch_dims=node.attr("batch_dims", 0))


@converter("ScatterND", since=11)
def _scatter_nd(node: NodeContext) -> Expr:
    return indexing.scatter_nd(node.arg(0), node.arg(1), node.arg(2), reduction=_reduction(node))


@converter("TensorScatter", since=24)
def _tensor_scatter(node: NodeContext) -> Expr:
    """A KV-cache write: ``update`` goes into ``past_cache`` along ``axis`` from each batch
    entry's write index on (modulo the cache length in circular mode), as one
    ``scatter_elements`` whose indices are ``write_index[b] + step``."""
    cache, update = node.input(0), node.input(1)
    shape, update_shape = node.shape(cache), node.shape(update)
    rank = len(shape)
    axis = _axis(node, node.attr("axis", -2), rank)
    if axis == 0:
        raise node.fail("axis must not be the batch axis 0")
    if len(update_shape) != rank or any(
            u != c for i, (u, c) in enumerate(zip(update_shape, shape)) if i != axis) or \
            update_shape[axis] > shape[axis]:
        raise node.fail(f"update of shape {tuple(update_shape)} does not fit the cache of shape "
                        f"{tuple(shape)} along axis {axis}")
    mode = _text(node.attr("mode", "linear"))
    if mode not in ("linear", "circular"):
        raise node.fail(f"mode must be linear or circular, got {mode!r}")
    step_shape = [1] * rank
    step_shape[axis] = update_shape[axis]
    index: Expr = Constant(np.arange(update_shape[axis], dtype=np.int64).reshape(step_shape))
    if node.has_input(2):
        starts = node.arg(2)
        if node.dtype(node.input(2)) != "int64":
            starts = op.cast(starts, "int64")
        index = op.add(op.reshape(starts, [shape[0]] + [1] * (rank - 1)), index)
    if mode == "circular":
        index = indexing.floor_mod(index, _int64(shape[axis]))
    index = extra.broadcast_to(index, update_shape)
    return indexing.scatter_elements(node.arg(0), index, node.arg(1), axis=axis)


@converter("MaxUnpool", since=9)
def _max_unpool(node: NodeContext) -> Expr:
    """Zeros with each value of X at its flat position from I (MaxPool's indices count over
    the whole N x C x spatial tensor): one ``scatter_elements`` into a flat zero tensor."""
    data = node.input(0)
    shape = node.shape(data)
    spatial = len(shape) - 2
    kernel = list(node.attr("kernel_shape"))
    strides = list(node.attr("strides", [1] * spatial))
    pads = list(node.attr("pads", [0] * (2 * spatial)))
    if node.has_input(2):
        out_shape = node.known_ints(2, "output_shape")
    else:
        out_shape = list(shape[:2]) + [
            (shape[2 + i] - 1) * strides[i] - pads[i] - pads[i + spatial] + kernel[i] for i in range(spatial)]
    size = math.prod(out_shape)
    values, positions = op.reshape(node.arg(0), [-1]), op.reshape(node.arg(1), [-1])
    flat = indexing.scatter_elements(op.zeros((size,), node.dtype(data)), positions, values, axis=0)
    return op.reshape(flat, out_shape)


# --------------------------------------------------------------------------- topk, scans


def _topk(node: NodeContext, k: int) -> list[Expr]:
    # sorted=0 leaves the order unspecified, so the sorted result answers it too
    call = indexing.topk(node.arg(0), k, axis=node.attr("axis", -1), largest=bool(node.attr("largest", 1)))
    return [TupleGetItem(call, 0), TupleGetItem(call, 1)]


@converter("TopK", since=1)
def _topk_attr(node: NodeContext) -> list[Expr]:
    return _topk(node, node.attr("k"))


@converter("TopK", since=10)
def _topk_input(node: NodeContext) -> list[Expr]:
    k = node.known_ints(1, "k")
    if len(k) != 1:
        raise node.fail(f"k must hold one value, got {k}")
    return _topk(node, k[0])


def _scan_any_axis(node: NodeContext, builder, rank: int, **flags: bool) -> Expr:
    """A scan along an axis known only at run time: the output shape is the input's
    whatever the axis, so every axis's scan is computed and a run-time ``where`` picks
    the one whose index (or index - rank) the axis input holds. An axis out of range
    cannot be reported at run time: it gets the last axis's scan."""
    axis_input = node.input(1)
    axis_shape, axis_dtype = node.shape(axis_input), node.dtype(axis_input)
    if math.prod(axis_shape) != 1 or axis_dtype not in ("int32", "int64"):
        raise node.fail(f"axis must be one int32 or int64 value, "
                        f"got shape {tuple(axis_shape)} of {axis_dtype}")
    axis = op.reshape(node.expr(axis_input), ())
    data = node.arg(0)
    result = builder(data, axis=rank - 1, **flags)
    for candidate in reversed(range(rank - 1)):
        named = op.logical_or(op.equal(axis, node.expr(np.asarray(candidate, axis_dtype))),
                              op.equal(axis, node.expr(np.asarray(candidate - rank, axis_dtype))))
        result = op.where(named, builder(data, axis=candidate, **flags), result)
    return result


def _scan(builder):
    def convert(node: NodeContext) -> Expr:
        rank = len(node.shape(node.input(0)))
        flags = {"exclusive": bool(node.attr("exclusive", 0)), "reverse": bool(node.attr("reverse", 0))}
        if rank == 1 and not node.is_known(node.input(1)):
            axis = [0]  # a vector has one axis: a run-time axis input can only name it
        elif not node.is_known(node.input(1)):
            return _scan_any_axis(node, builder, rank, **flags)
        else:
            axis = node.known_ints(1, "axis")
        if len(axis) != 1:
            raise node.fail(f"axis must hold one value, got {axis}")
        return builder(node.arg(0), axis=_axis(node, axis[0], rank), **flags)

    return convert


converter("CumSum", since=11)(_scan(indexing.cumsum))
converter("CumProd", since=26)(_scan(indexing.cumprod))


# --------------------------------------------------------------------------- arithmetic


@converter("Mod", since=10)
def _mod(node: NodeContext) -> Expr:
    fmod = node.attr("fmod", 0)
    if fmod not in (0, 1):
        raise node.fail(f"fmod must be 0 or 1, got {fmod}")
    # fmod=1: the sign of the dividend (C fmod); fmod=0: the sign of the divisor
    builder = indexing.mod if fmod else indexing.floor_mod
    return builder(node.arg(0), node.arg(1))


@converter("BitShift", since=11)
def _bit_shift(node: NodeContext) -> Expr:
    direction = _text(node.attr("direction", ""))
    if direction not in ("LEFT", "RIGHT"):
        raise node.fail(f"direction must be LEFT or RIGHT, got {direction!r}")
    builder = indexing.left_shift if direction == "LEFT" else indexing.right_shift
    return builder(node.arg(0), node.arg(1))


@converter("IsNaN", since=9)
def _is_nan(node: NodeContext) -> Expr:
    data = node.arg(0)
    return op.not_equal(data, data)  # only NaN differs from itself


@converter("IsInf", since=10)
def _is_inf(node: NodeContext):
    data = node.input(0)
    dtype = node.dtype(data)
    tests = [op.equal(node.expr(data), Constant(np.asarray(sign * np.inf, dtype=dtype)))
             for sign, wanted in ((1, node.attr("detect_positive", 1)), (-1, node.attr("detect_negative", 1)))
             if wanted]
    if not tests:
        return np.zeros(node.shape(data), dtype=bool)
    return tests[0] if len(tests) == 1 else op.logical_or(tests[0], tests[1])


# --------------------------------------------------------------------------- one-hot style


@converter("OneHot", since=9)
def _one_hot(node: NodeContext) -> Expr:
    indices = node.input(0)
    depth_values = node.known(1, "depth").reshape(-1)
    if depth_values.size != 1:
        raise node.fail(f"depth must hold one value, got {depth_values.tolist()}")
    depth = int(depth_values[0])
    if depth < 1:
        raise node.fail(f"depth must be positive, got {depth}")
    rank = len(node.shape(indices)) + 1
    axis = _axis(node, node.attr("axis", -1), rank)
    index = node.expr(indices)
    if node.dtype(indices) != "int64":  # float indices truncate, as ONNX casts them
        index = op.cast(index, "int64")
    # negative indices count from the end; anything still outside [0, depth) matches no class
    index = op.where(op.less(index, _int64(0)), op.add(index, _int64(depth)), index)
    classes = np.arange(depth, dtype=np.int64).reshape((depth,) + (1,) * (rank - 1 - axis))
    hot = op.equal(op.expand_dims(index, axis), Constant(classes))
    values = node.arg(2)
    off, on = (op.take(values, _int64(i), axis=0) for i in (0, 1))
    return op.where(hot, on, off)


def _int64(value: int) -> Constant:
    return Constant(np.asarray(value, dtype=np.int64))


def _hardmax(data: Expr, shape: Sequence[int], axis: int, dtype: str) -> Expr:
    """1 at the first maximum along ``axis``, 0 elsewhere, in ``dtype``."""
    best = extra.argmax(data, axis=axis, keepdims=True)
    trailing = (1,) * (len(shape) - 1 - axis)
    positions = np.arange(shape[axis], dtype=np.int64).reshape((shape[axis], *trailing))
    return op.cast(op.equal(best, Constant(positions)), dtype)


@converter("Hardmax", since=1)
def _hardmax_2d(node: NodeContext) -> Expr:
    # before opset 13 the input is seen as 2-D: [prod(shape[:axis]), prod(shape[axis:])]
    shape = node.shape(node.input(0))
    axis = node.attr("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        raise node.fail(f"axis {node.attr('axis')} is out of range for rank {len(shape)}")
    flat = (math.prod(shape[:axis]), math.prod(shape[axis:]))
    result = _hardmax(op.reshape(node.arg(0), flat), flat, 1, node.dtype(node.input(0)))
    return op.reshape(result, shape)


@converter("Hardmax", since=13)
def _hardmax_axis(node: NodeContext) -> Expr:
    shape = node.shape(node.input(0))
    axis = _axis(node, node.attr("axis", -1), len(shape))
    return _hardmax(node.arg(0), shape, axis, node.dtype(node.input(0)))


@converter("EyeLike", since=9)
def _eye_like(node: NodeContext) -> np.ndarray:
    shape = node.shape(node.input(0))
    if len(shape) != 2:
        raise node.fail(f"expected a 2-D input, got shape {tuple(shape)}")
    code = node.attr("dtype")
    dtype = np.dtype(node.dtype(node.input(0))) if code is None else onnx_dtype(code, node)
    return np.eye(shape[0], shape[1], k=node.attr("k", 0), dtype=dtype)


@converter("ReverseSequence", since=10)
def _reverse_sequence(node: NodeContext) -> Expr:
    data = node.input(0)
    shape = node.shape(data)
    if len(shape) < 2:
        raise node.fail(f"expected an input of rank >= 2, got shape {tuple(shape)}")
    time_axis = _axis(node, node.attr("time_axis", 0), len(shape))
    batch_axis = _axis(node, node.attr("batch_axis", 1), len(shape))
    if {time_axis, batch_axis} != {0, 1}:
        raise node.fail(f"time_axis and batch_axis must be 0 and 1, got {time_axis} and {batch_axis}")
    lengths = node.arg(1)
    if node.dtype(node.input(1)) != "int64":
        lengths = op.cast(lengths, "int64")
    steps, batch = shape[time_axis], shape[batch_axis]
    step_shape, length_shape = [1] * len(shape), [1] * len(shape)
    step_shape[time_axis], length_shape[batch_axis] = steps, batch
    step = Constant(np.arange(steps, dtype=np.int64).reshape(step_shape))
    length = op.reshape(lengths, length_shape)
    # inside its sequence, step t reads step length-1-t; past its end it stays in place
    reversed_step = op.subtract(op.subtract(length, _int64(1)), step)
    source = op.where(op.less(step, length), reversed_step, step)
    return indexing.gather_elements(node.arg(0), extra.broadcast_to(source, shape), axis=time_axis)


# --------------------------------------------------------------------------- einsum


class _Operand:
    """An einsum operand on its way: the expression, its shape and one label per axis."""

    def __init__(self, expr: Expr, shape: Sequence[int], labels: Sequence[str]) -> None:
        self.expr, self.shape, self.labels = expr, tuple(shape), list(labels)

    def transpose(self, order: Sequence[str]) -> _Operand:
        perm = [self.labels.index(label) for label in order]
        if perm == list(range(len(perm))):
            return self
        return _Operand(op.transpose(self.expr, perm), [self.shape[p] for p in perm], order)

    def reshape(self, shape: Sequence[int], labels: Sequence[str]) -> _Operand:
        expr = self.expr if tuple(shape) == self.shape else op.reshape(self.expr, list(shape))
        return _Operand(expr, shape, labels)

    def size(self, label: str) -> int:
        return self.shape[self.labels.index(label)]


def _einsum_terms(node: NodeContext, equation: str,
                  ranks: Sequence[int]) -> tuple[list[list[str]], list[str]]:
    """The labels of each operand and of the output; the dims an ellipsis stands for get
    the labels ``...0``, ``...1``, ... (right-aligned across operands, as they broadcast)."""
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise node.fail(f"equation {equation!r} has {len(terms)} operand terms for {len(ranks)} inputs")

    def letters(text: str) -> list[str]:
        if not all(c.isascii() and c.isalpha() for c in text):
            raise node.fail(f"equation {equation!r}: labels must be letters, got {text!r}")
        return list(text)

    split_terms = []
    for term, rank in zip(terms, ranks):
        head, dots, tail = term.partition("...")
        named = letters(head) + letters(tail)
        extra_dims = rank - len(named)
        if (not dots and extra_dims) or extra_dims < 0:
            raise node.fail(f"equation {equation!r}: term {term!r} does not match an input of rank {rank}")
        split_terms.append((letters(head), extra_dims if dots else 0, letters(tail)))
    width = max((dims for _, dims, _ in split_terms), default=0)
    ellipsis = [f"...{j}" for j in range(width)]
    labels = [head + ellipsis[width - dims:] + tail for head, dims, tail in split_terms]
    if arrow:
        head, dots, tail = rhs.partition("...")
        output = letters(head) + (ellipsis if dots else []) + letters(tail)
    else:  # implicit: the ellipsis dims, then the labels used once, in ASCII order
        counts: dict[str, int] = {}
        for term in labels:
            for label in term:
                counts[label] = counts.get(label, 0) + 1
        once = [label for label, n in counts.items() if n == 1 and not label.startswith("...")]
        output = ellipsis + sorted(once)
    if len(set(output)) != len(output):
        raise node.fail(f"equation {equation!r}: an output label repeats")
    missing = [label for label in output if not any(label in term for term in labels)]
    if missing:
        raise node.fail(f"equation {equation!r}: output label {missing[0]!r} is in no input")
    return labels, output


def _diagonal(operand: _Operand, node: NodeContext) -> _Operand:
    """Merge every repeated label of one operand into one axis (the diagonal)."""
    while len(set(operand.labels)) != len(operand.labels):
        label = next(lb for lb in operand.labels if operand.labels.count(lb) > 1)
        first = operand.labels.index(label)
        second = operand.labels.index(label, first + 1)
        size = operand.shape[first]
        if operand.shape[second] != size:
            raise node.fail(f"label {label!r} repeats over axes of sizes {size} and {operand.shape[second]}")
        others = [i for i in range(len(operand.labels)) if i not in (first, second)]
        kept = [operand.labels[i] for i in others]
        perm = others + [first, second]
        moved = _Operand(op.transpose(operand.expr, perm), [operand.shape[i] for i in perm],
                         kept + [label, label + "'"])
        flat = moved.reshape([operand.shape[i] for i in others] + [size * size], kept + [label])
        # the (i, i) entries of an n x n block are every (n+1)-th of its n*n
        rank = len(flat.shape)
        expr = extra.strided_slice(flat.expr, flat.shape, [rank - 1], [0], [size * size], [size + 1])
        operand = _Operand(expr, list(flat.shape[:-1]) + [size], kept + [label])
    return operand


def _sum_out(operand: _Operand, needed: set[str]) -> _Operand:
    """Sum the axes whose labels nothing after this operand needs."""
    drop = [i for i, label in enumerate(operand.labels) if label not in needed]
    if not drop:
        return operand
    kept = [i for i in range(len(operand.labels)) if i not in drop]
    return _Operand(op.sum(operand.expr, axis=drop), [operand.shape[i] for i in kept],
                    [operand.labels[i] for i in kept])


def _broadcast(operand: _Operand, sizes: dict[str, int]) -> _Operand:
    target = [sizes.get(label, d) for label, d in zip(operand.labels, operand.shape)]
    if target == list(operand.shape):
        return operand
    return _Operand(extra.broadcast_to(operand.expr, target), target, operand.labels)


def _contract(a: _Operand, b: _Operand, keep: set[str], node: NodeContext) -> _Operand:
    """``a`` and ``b`` as one batched matmul: shared labels that are still needed are the
    batch, the other shared ones are summed, the rest are rows and columns."""
    shared = [label for label in a.labels if label in b.labels]
    sizes = {}
    for label in shared:
        sa, sb = a.size(label), b.size(label)
        if sa != sb and 1 not in (sa, sb):
            raise node.fail(f"label {label!r} has sizes {sa} and {sb} in different operands")
        sizes[label] = max(sa, sb)
    a, b = _broadcast(a, sizes), _broadcast(b, sizes)
    batch = [label for label in shared if label in keep]
    summed = [label for label in shared if label not in keep]
    rows = [label for label in a.labels if label not in b.labels]
    cols = [label for label in b.labels if label not in a.labels]

    def extent(labels: Sequence[str]) -> int:
        return math.prod(sizes.get(label) or (a.size(label) if label in a.labels else b.size(label))
                         for label in labels)

    left = a.transpose(batch + rows + summed).reshape([extent(batch), extent(rows), extent(summed)],
                                                       ["B", "M", "K"])
    right = b.transpose(batch + summed + cols).reshape([extent(batch), extent(summed), extent(cols)],
                                                        ["B", "K", "N"])
    product = _Operand(op.matmul(left.expr, right.expr), [extent(batch), extent(rows), extent(cols)],
                       ["B", "M", "N"])
    labels = batch + rows + cols
    return product.reshape([extent([label]) for label in labels], labels)


@converter("Einsum", since=12)
def _einsum(node: NodeContext) -> Expr:
    equation = _text(node.attr("equation", "")).replace(" ", "")
    count = len(node.inputs)
    shapes = [node.shape(node.input(i)) for i in range(count)]
    labels, output = _einsum_terms(node, equation, [len(s) for s in shapes])
    operands = [_diagonal(_Operand(node.arg(i), shapes[i], labels[i]), node) for i in range(count)]
    result = None
    for position, operand in enumerate(operands):
        later = {label for other in operands[position + 1:] for label in other.labels}
        needed = set(output) | later
        if result is None:
            result = _sum_out(operand, needed)
            continue
        operand = _sum_out(operand, needed | set(result.labels))
        result = _contract(_sum_out(result, needed | set(operand.labels)), operand, needed, node)
    assert result is not None
    return result.transpose(output).expr

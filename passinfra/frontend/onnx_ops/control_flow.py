"""ONNX control flow with static shapes: If, Scan (opset 8 and 9+ forms) and Loop.

The IR has static shapes and no control flow, so, as the recurrent ops are unrolled
(:mod:`.recurrent`), a control-flow node becomes its subgraphs imported in line. Each
subgraph arrives as a :class:`~passinfra.frontend.onnx_subgraph.Subgraph` attribute and
is imported with the importer's own machinery (so it may hold function ops and nested
control flow, and read values of the scopes around it by name):

* ``If``: a condition known at import (a constant, or folded from constants and shapes)
  imports only the branch taken. Otherwise both branches are imported (ONNX branches have
  no side effects) and every output is ``where(cond, then, else)``, which needs the two
  branches to give each output the same static type; when they do not, the node is an
  error naming the output and both types.
* ``Scan``: unrolled over the static scan length; each step imports the body with the
  state variables and the step's slice of every scan input (read from the end for a
  reverse direction), and each scan output stacks the steps' values along its axis (in
  reverse step order for a reverse direction). The opset 8 form has a batch axis in front
  of every input: it is unrolled per batch entry and the results stacked; its
  ``sequence_lens`` must be known and equal the full length (ragged batches would need
  masking, which no exporter emits for Scan).
* ``Loop``: unrolled when the trip count ``M`` is known (or absent) and the condition is
  known at every step: the condition input must be absent or known, and the body's
  condition output must fold to a known value at every step; the loop stops after the
  step where it turns false, as ONNX's does. A trip count or condition that depends on
  runtime values is a dynamic number of iterations, hence dynamic output shapes: an
  error that says so. Loop-carried values may change shape from step to step (each step
  has static shapes); scan outputs must keep one shape to stack. With zero iterations a
  scan output is empty, of the element type the body declares (an error if it declares
  no static one).

Unrolling costs IR size linear in the steps, so more than ``MAX_UNROLLED_STEPS`` steps
(the recurrent ops' limit) is an error. Slices and stacks of known arrays are done with
NumPy, so loops over constants fold away at import; on expressions a step's slice is a
``take`` with a (1,) index constant, so equal steps make structurally equal kernels that
FuseOps creates once, and the steps' values are joined by a tree of concatenations (see
``recurrent._concatenate_tree``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from passinfra.frontend.onnx_ops.context import NodeContext, Value
from passinfra.frontend.onnx_ops.recurrent import MAX_UNROLLED_STEPS, _concatenate_tree
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.ir import op
from passinfra.ir.types import TensorType


def _known_scalar(node: NodeContext, value: np.ndarray, what: str) -> np.generic:
    if value.size != 1:
        raise node.fail(f"{what} must hold one element, got shape {value.shape}")
    return value.reshape(-1)[0]


def _type(node: NodeContext, value: Value) -> TensorType:
    return node.tensor_type(value)


def _check_steps(node: NodeContext, steps: int, what: str) -> None:
    if steps > MAX_UNROLLED_STEPS:
        raise node.fail(
            f"{what} unrolls into {steps} steps, above the limit of {MAX_UNROLLED_STEPS} "
            "(the IR has no loops: every step is imported)"
        )


# --------------------------------------------------------------------------- slices and stacks


class _Steps:
    """Per-step slices of values and stacks of per-step values, with NumPy for known
    arrays and IR ops for expressions."""

    def __init__(self, node: NodeContext) -> None:
        self.node = node
        self._indices: dict[int, Value] = {}

    def at(self, value: Value, axis: int, i: int) -> Value:
        """``value`` at position ``i`` of ``axis``, that axis dropped."""
        if isinstance(value, np.ndarray):
            return np.take(value, i, axis=axis)
        if i not in self._indices:  # one (1,) constant per step, shared by every slice
            self._indices[i] = self.node.expr(np.asarray([i], dtype=np.int64))
        shape = self.node.shape(value)
        return op.reshape(op.take(value, self._indices[i], axis=axis), shape[:axis] + shape[axis + 1 :])

    def stack(self, values: Sequence[Value], axis: int, what: str) -> Value:
        """``values`` (one per step, all of one type) stacked along a new ``axis``."""
        types = {(tuple(self.node.shape(v)), self.node.dtype(v)) for v in values}
        if len(types) > 1:
            listed = ", ".join(f"{dtype}{list(shape)}" for shape, dtype in sorted(types))
            raise self.node.fail(f"{what} changes type from step to step ({listed}), so it cannot be stacked")
        if all(isinstance(v, np.ndarray) for v in values):
            return np.stack(values, axis=axis)
        shape = self.node.shape(values[0])
        pieces = [op.reshape(self.node.expr(v), (1, 1, *shape)) for v in values]
        stacked = op.reshape(_concatenate_tree(pieces), (len(values), *shape))
        if axis == 0:
            return stacked
        order = list(range(1, len(shape) + 1))
        order.insert(axis, 0)
        return op.transpose(stacked, order)


def _axis(node: NodeContext, axis: int, rank: int, what: str) -> int:
    if not -rank <= axis < rank:
        raise node.fail(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


# --------------------------------------------------------------------------- If


@converter("If", since=1)
def _if(node: NodeContext) -> list[Value]:
    cond = node.input(0)
    then_branch, else_branch = node.attr("then_branch"), node.attr("else_branch")
    if isinstance(cond, np.ndarray):
        taken = then_branch if bool(_known_scalar(node, cond, "the condition")) else else_branch
        return taken.run([])
    cond_type = _type(node, cond)
    if int(np.prod(cond_type.shape)) != 1:
        raise node.fail(f"the condition must hold one element, got shape {cond_type.shape}")
    then_values, else_values = then_branch.run([]), else_branch.run([])
    if len(then_values) != len(else_values):
        raise node.fail(
            f"the branches give {len(then_values)} and {len(else_values)} outputs; "
            "with a runtime condition both are imported and must agree"
        )
    select = op.reshape(node.expr(cond), ())
    results = []
    for index, (a, b) in enumerate(zip(then_values, else_values)):
        ta, tb = _type(node, a), _type(node, b)
        if ta != tb:
            raise node.fail(
                f"the condition is a runtime value and output {index} differs between the branches "
                f"({ta.dtype}{list(ta.shape)} vs {tb.dtype}{list(tb.shape)}): the IR has static shapes, "
                "so both branches must give each output the same type to select between them"
            )
        results.append(op.where(select, node.expr(a), node.expr(b)))
    return results


# --------------------------------------------------------------------------- Scan


def _scan(
    node: NodeContext,
    states: list[Value],
    scans: list[Value],
    in_axes: Sequence[int],
    in_reverse: Sequence[bool],
    out_axes: Sequence[int],
    out_reverse: Sequence[bool],
    steps: _Steps,
) -> tuple[list[Value], list[Value]]:
    """One scan (no batch axis): the final states and the stacked scan outputs."""
    body = node.attr("body")
    num_outputs = body.num_outputs - len(states)
    if num_outputs < 0:
        raise node.fail(f"the body gives {body.num_outputs} outputs, fewer than the {len(states)} states")
    lengths = {node.shape(x)[axis] for x, axis in zip(scans, in_axes)}
    if len(lengths) != 1:
        raise node.fail(f"the scan inputs have different lengths along their scan axes: {sorted(lengths)}")
    length = lengths.pop()
    if length == 0:
        raise node.fail("the scan length is 0: the scan outputs would have no static element type")
    collected: list[list[Value]] = [[] for _ in range(num_outputs)]
    for t in range(length):
        slices = [
            steps.at(x, axis, length - 1 - t if rev else t)
            for x, axis, rev in zip(scans, in_axes, in_reverse)
        ]
        outputs = body.run([*states, *slices])
        states = outputs[: len(states)]
        for j, value in enumerate(outputs[len(states) :]):
            collected[j].append(value)
    stacked = []
    for j, values in enumerate(collected):
        ordered = values[::-1] if out_reverse[j] else values
        rank = len(node.shape(values[0])) + 1
        axis = _axis(node, out_axes[j], rank, f"scan_output_axes[{j}]")
        stacked.append(steps.stack(ordered, axis, f"scan output {j}"))
    return states, stacked


def _list_attr(node: NodeContext, name: str, count: int) -> list[int]:
    values = list(node.attr(name, [0] * count))
    if len(values) != count:
        raise node.fail(f"attribute {name} has {len(values)} entries, expected {count}")
    return [int(v) for v in values]


def _directions(node: NodeContext, name: str, count: int) -> list[bool]:
    values = _list_attr(node, name, count)
    if any(v not in (0, 1) for v in values):
        raise node.fail(f"attribute {name} must hold 0 (forward) or 1 (reverse), got {values}")
    return [bool(v) for v in values]


@converter("Scan", since=9)
def _scan9(node: NodeContext) -> list[Value]:
    m = int(node.attr("num_scan_inputs"))
    inputs = list(node.inputs)
    if not 1 <= m <= len(inputs):
        raise node.fail(f"num_scan_inputs is {m}, but the node has {len(inputs)} inputs")
    if any(v is None for v in inputs):
        raise node.fail("Scan inputs cannot be omitted")
    states, scans = inputs[: len(inputs) - m], inputs[len(inputs) - m :]
    body = node.attr("body")
    k = body.num_outputs - len(states)
    in_axes = [
        _axis(node, a, len(node.shape(x)), f"scan_input_axes[{i}]")
        for i, (a, x) in enumerate(zip(_list_attr(node, "scan_input_axes", m), scans))
    ]
    lengths = [node.shape(x)[a] for x, a in zip(scans, in_axes)]
    _check_steps(node, max(lengths, default=0), "the scan")
    final, stacked = _scan(
        node,
        states,
        scans,
        in_axes,
        _directions(node, "scan_input_directions", m),
        _list_attr(node, "scan_output_axes", k),
        _directions(node, "scan_output_directions", k),
        _Steps(node),
    )
    return [*final, *stacked]


@converter("Scan", since=8)
def _scan8(node: NodeContext) -> list[Value]:
    m = int(node.attr("num_scan_inputs"))
    lens, inputs = node.input(0), list(node.inputs[1:])
    if not 1 <= m <= len(inputs):
        raise node.fail(f"num_scan_inputs is {m}, but the node has {len(inputs)} inputs after sequence_lens")
    if any(v is None for v in inputs):
        raise node.fail("Scan inputs cannot be omitted")
    states, scans = inputs[: len(inputs) - m], inputs[len(inputs) - m :]
    batches = {node.shape(v)[0] for v in inputs if len(node.shape(v)) > 0}
    if len(batches) != 1 or any(len(node.shape(x)) < 2 for x in scans):
        raise node.fail("every input needs the same batch axis 0, and every scan input a scan axis 1")
    batch = batches.pop()
    length = node.shape(scans[0])[1]
    if lens is not None:
        if not isinstance(lens, np.ndarray):
            raise node.fail("sequence_lens must be known at import time (ragged batches are not supported)")
        if np.any(lens.reshape(-1) != length):
            raise node.fail(
                f"sequence_lens {lens.tolist()} differ from the scan length {length}: not supported"
            )
    _check_steps(node, batch * length, "the scan (batch x length)")
    k = node.attr("body").num_outputs - len(states)
    reverse = _directions(node, "directions", m)
    steps = _Steps(node)
    per_batch = []
    for b in range(batch):
        per_batch.append(
            _scan(
                node,
                [steps.at(s, 0, b) for s in states],
                [steps.at(x, 0, b) for x in scans],
                [0] * m,
                reverse,
                [0] * k,
                [False] * k,
                steps,
            )
        )
    finals = [steps.stack([run[0][i] for run in per_batch], 0, f"state {i}") for i in range(len(states))]
    outputs = [steps.stack([run[1][j] for run in per_batch], 0, f"scan output {j}") for j in range(k)]
    return [*finals, *outputs]


# --------------------------------------------------------------------------- Loop


def _bound(body, index: int, value: np.ndarray) -> np.ndarray:
    """A scalar body input (iteration number, condition) in the shape the body declares
    for it ((), or (1,) in some exporters)."""
    shape = body.declared_input_shape(index)
    return value.reshape(shape) if shape is not None and int(np.prod(shape)) == 1 else value


@converter("Loop", since=1)
def _loop(node: NodeContext) -> list[Value]:
    trip, cond = node.input(0), node.input(1)
    carried = list(node.inputs[2:])
    body = node.attr("body")
    k = body.num_outputs - 1 - len(carried)
    if k < 0:
        raise node.fail(
            f"the body gives {body.num_outputs} outputs, fewer than 1 + {len(carried)} carried values"
        )
    if trip is not None and not isinstance(trip, np.ndarray):
        raise node.runtime_value(
            0, "the trip count M is a runtime value: a dynamic number of iterations is a dynamic shape, "
            "and the IR has static shapes")
    if cond is not None and not isinstance(cond, np.ndarray):
        raise node.runtime_value(
            1, "the condition input is a runtime value: the iterations cannot be unrolled at import")
    limit = None if trip is None else int(_known_scalar(node, trip, "the trip count M"))
    going = True if cond is None else bool(_known_scalar(node, cond, "the condition"))
    collected: list[list[Value]] = [[] for _ in range(k)]
    iteration = 0
    while going and (limit is None or iteration < limit):
        _check_steps(node, iteration + 1, "the loop")
        outputs = body.run(
            [
                _bound(body, 0, np.asarray(iteration, dtype=np.int64)),
                _bound(body, 1, np.asarray(going, dtype=np.bool_)),
                *carried,
            ]
        )
        if not isinstance(outputs[0], np.ndarray):
            raise node.fail(
                f"the body's condition output depends on runtime values (at iteration {iteration}): "
                "the number of iterations is dynamic, so the loop cannot be unrolled"
            )
        going = bool(_known_scalar(node, outputs[0], "the body's condition output"))
        carried = outputs[1 : 1 + len(carried)]
        for j, value in enumerate(outputs[1 + len(carried) :]):
            collected[j].append(value)
        iteration += 1
    steps = _Steps(node)
    stacked = []
    for j, values in enumerate(collected):
        if values:
            stacked.append(steps.stack(values, 0, f"scan output {j}"))
            continue
        declared = body.declared_output(1 + len(carried) + j)
        if declared is None:
            raise node.fail(
                f"the loop runs no iteration and the body declares no static type for scan output {j}"
            )
        shape, dtype = declared
        stacked.append(np.zeros((0, *shape), dtype=dtype))
    return [*carried, *stacked]

"""``tree_ensemble``: ONNX ai.onnx.ml TreeEnsemble (opset 5): decision trees over the
rows of ``x`` (N, F), their leaf weights aggregated per target into (N, n_targets).

The trees are attributes, in a flat table the converter builds from ONNX's encoding:
interior node ``i`` tests feature ``features[i]`` against ``splits[i]`` by ``modes[i]``
(``leq lt gte gt eq neq``, or ``member``: equal to one of ``members[i]``); a NaN feature
also takes the true branch where ``missing_true[i]``. Its children ``true_children[i]``
and ``false_children[i]`` are references: ``r >= 0`` is interior node ``r``, ``r < 0``
is leaf ``-r - 1``, which adds ``leaf_weights`` to target ``leaf_targets``. ``roots``
holds one reference per tree. ``aggregate`` combines the leaves a row reaches: ``sum``,
``average`` (the sum divided by the number of trees), ``min`` or ``max``; a target no
leaf reaches is 0, as in onnxruntime.

Where the spec is silent: comparisons are in the input's dtype (float16 widened to
float32, exactly); sums run over the trees in order, in float64 for float64 input, else
float32, and are rounded once to the input's dtype. The post transforms are separate ops
(the converter composes them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op._rel import (
    FLOAT_DTYPES,
    REQUIRED,
    expect_dtype,
    expect_ndim,
    expect_tensor,
    register_tensor_op,
)
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, Type

__all__ = ["tree_ensemble", "MODES", "AGGREGATES", "depth"]

MODES = ("leq", "lt", "gte", "gt", "eq", "neq", "member")
AGGREGATES = ("average", "sum", "min", "max")
_TABLES = ("features", "modes", "splits", "members", "missing_true", "true_children", "false_children")


def depth(attrs: Attrs) -> int:
    """The most interior nodes any row passes through (IRTypeError on a reference out of
    range or a cycle); walked without recursion, so deep trees are fine."""
    count = len(attrs["features"])
    leaves = len(attrs["leaf_weights"])
    deepest = [0] * count  # 0: not yet known
    state = [0] * count  # 0 new, 1 on the current path, 2 done

    def check(ref: int) -> None:
        if not -leaves <= ref < count:
            raise IRTypeError(f"tree reference {ref} is out of range ({count} interior nodes, "
                              f"{leaves} leaves)")

    for root in attrs["roots"]:
        check(root)
        if root < 0 or state[root] == 2:
            continue
        stack = [root]
        while stack:
            node = stack[-1]
            if state[node] == 0:
                state[node] = 1
                for child in (attrs["true_children"][node], attrs["false_children"][node]):
                    check(child)
                    if child >= 0 and state[child] == 1:
                        raise IRTypeError(f"tree node {child} is its own descendant (a cycle)")
                    if child >= 0 and state[child] == 0:
                        stack.append(child)
                continue
            stack.pop()
            if state[node] == 1:
                state[node] = 2
                children = (attrs["true_children"][node], attrs["false_children"][node])
                below = [deepest[c] for c in children if c >= 0]
                deepest[node] = 1 + max(below, default=0)
    return max((deepest[r] if r >= 0 else 0 for r in attrs["roots"]), default=0)


def _checked(attrs: Attrs, features: int) -> None:
    count = len(attrs["features"])
    for name in _TABLES:
        if len(attrs[name]) != count:
            raise IRTypeError(f"{name} must hold one entry per interior node ({count}), "
                              f"got {len(attrs[name])}")
    if len(attrs["leaf_targets"]) != len(attrs["leaf_weights"]):
        raise IRTypeError(f"leaf_targets ({len(attrs['leaf_targets'])}) and leaf_weights "
                          f"({len(attrs['leaf_weights'])}) differ in length")
    unknown = sorted(set(attrs["modes"]) - set(MODES))
    if unknown:
        raise IRTypeError(f"unknown tree node mode {unknown[0]!r}; use one of {', '.join(MODES)}")
    if attrs["aggregate"] not in AGGREGATES:
        raise IRTypeError(f"unknown aggregate {attrs['aggregate']!r}; use one of {', '.join(AGGREGATES)}")
    if not isinstance(attrs["n_targets"], int) or attrs["n_targets"] < 1:
        raise IRTypeError(f"n_targets must be a positive int, got {attrs['n_targets']!r}")
    bad = [f for f in attrs["features"] if not 0 <= f < features]
    if bad:
        raise IRTypeError(f"feature id {bad[0]} is out of range for rows of {features} features")
    bad = [t for t in attrs["leaf_targets"] if not 0 <= t < attrs["n_targets"]]
    if bad:
        raise IRTypeError(f"leaf target id {bad[0]} is out of range for n_targets {attrs['n_targets']}")
    if not attrs["roots"]:
        raise IRTypeError("a tree ensemble needs at least one tree")
    depth(attrs)


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    x = expect_tensor(arg_types[0], "the input")
    expect_ndim(x, 2, "the input", "N, F")
    expect_dtype(x, FLOAT_DTYPES, "the input")
    _checked(attrs, x.shape[1])
    return TensorType((x.shape[0], attrs["n_targets"]), x.dtype)


def _taken(attrs: Attrs, node: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Whether rows at interior nodes ``node`` with feature values ``values`` go true."""
    splits = np.asarray(attrs["splits"], values.dtype)[node]
    modes = np.asarray([MODES.index(m) for m in attrs["modes"]])[node]
    with np.errstate(invalid="ignore"):
        tests = [values <= splits, values < splits, values >= splits, values > splits, values == splits,
                 values != splits]
    member = np.zeros(node.shape, bool)
    for k in np.nonzero(modes == MODES.index("member"))[0]:
        member[k] = values[k] in np.asarray(attrs["members"][node[k]], values.dtype)
    taken = np.choose(modes, [*tests, member])
    missing = np.asarray(attrs["missing_true"], bool)[node]
    return taken | (missing & np.isnan(values))


def _impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    x = np.asarray(args[0])
    compare = x.astype(np.float32) if x.dtype.itemsize < 4 else x  # half widened exactly
    work = np.float64 if x.dtype == np.float64 else np.float32
    rows = np.arange(x.shape[0])
    aggregate, targets = attrs["aggregate"], attrs["n_targets"]
    out = np.zeros((x.shape[0], targets), work)
    hit = np.zeros((x.shape[0], targets), bool)
    true_children = np.asarray(attrs["true_children"], np.int64)
    false_children = np.asarray(attrs["false_children"], np.int64)
    for root in attrs["roots"]:
        ref = np.full(x.shape[0], root, np.int64)
        while (ref >= 0).any():
            inside = np.nonzero(ref >= 0)[0]
            node = ref[inside]
            values = compare[inside, np.asarray(attrs["features"], np.int64)[node]]
            ref[inside] = np.where(_taken(attrs, node, values), true_children[node], false_children[node])
        leaf = -ref - 1
        target = np.asarray(attrs["leaf_targets"], np.int64)[leaf]
        weight = np.asarray(attrs["leaf_weights"], work)[leaf]
        current = out[rows, target]
        if aggregate in ("sum", "average"):
            out[rows, target] = current + weight
        else:
            best = np.minimum(current, weight) if aggregate == "min" else np.maximum(current, weight)
            out[rows, target] = np.where(hit[rows, target], best, weight)
        hit[rows, target] = True
    if aggregate == "average":
        out = out / work(len(attrs["roots"]))
    return out.astype(x.dtype)


register_tensor_op(
    "tree_ensemble",
    attrs={"n_targets": REQUIRED, "aggregate": "sum", "roots": REQUIRED, "features": REQUIRED,
           "modes": REQUIRED, "splits": REQUIRED, "members": REQUIRED, "missing_true": REQUIRED,
           "true_children": REQUIRED, "false_children": REQUIRED, "leaf_targets": REQUIRED,
           "leaf_weights": REQUIRED},
    num_inputs=1, type_rel=_relation, impl=_impl, pattern=OpPattern.OPAQUE,
    doc="ONNX ai.onnx.ml TreeEnsemble: decision trees (attributes) aggregated per target",
)


def tree_ensemble(x: Any, n_targets: int, roots: Sequence[int], features: Sequence[int], modes: Sequence[str],
                  splits: Sequence[float], true_children: Sequence[int], false_children: Sequence[int],
                  leaf_targets: Sequence[int], leaf_weights: Sequence[float],
                  members: Sequence[Sequence[float]] | None = None,
                  missing_true: Sequence[bool] | None = None, aggregate: str = "sum") -> Call:
    """Evaluate the trees (see the module docstring for the table) on the rows of ``x``."""
    count = len(features)
    return call_op(
        "tree_ensemble", x, n_targets=int(n_targets), aggregate=str(aggregate), roots=tuple(map(int, roots)),
        features=tuple(map(int, features)), modes=tuple(map(str, modes)), splits=tuple(map(float, splits)),
        members=tuple(tuple(map(float, m)) for m in (members or [()] * count)),
        missing_true=tuple(map(bool, missing_true or [False] * count)),
        true_children=tuple(map(int, true_children)), false_children=tuple(map(int, false_children)),
        leaf_targets=tuple(map(int, leaf_targets)), leaf_weights=tuple(map(float, leaf_weights)))

"""ONNX ai.onnx.ml TreeEnsemble (ai.onnx.ml opset 5) -> ``tree_ensemble`` and its post transform.

ONNX encodes each interior node's children as an index plus a flag saying whether the
index is a leaf's; the IR op takes one reference per child (``r >= 0`` interior node,
``r < 0`` leaf ``-r - 1``). ``membership_values`` lists the members of the ``member``
nodes in node order, each set closed by a NaN. A root whose two children are the same
leaf is that leaf (a tree of one leaf), as in the ONNX reference.

Post transforms, by the spec's numbering: NONE (0), SOFTMAX (1), LOGISTIC (2),
SOFTMAX_ZERO (3: zeros stay 0 and are left out of the softmax). onnxruntime 1.32 reads 1
as LOGISTIC and 2 as SOFTMAX (its own enum's order); the spec is followed here. PROBIT
(4) needs the inverse error function, which the IR does not have: it is rejected.
``nodes_hitrates`` only guides optimizers and is ignored.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import numpy_helper

from passinfra.frontend.onnx_ops.context import NodeContext
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.ir import op
from passinfra.ir.expr import Expr
from passinfra.ir.op import tree_ensemble as tree_op

ML = "ai.onnx.ml."  # the converter table's prefix for the domain
_POST_TRANSFORMS = ("none", "softmax", "logistic", "softmax_zero", "probit")


def _array(node: NodeContext, name: str, required: bool = True) -> np.ndarray | None:
    value = node.attr(name)
    if value is None:
        if required:
            raise node.fail(f"attribute {name} is required")
        return None
    return numpy_helper.to_array(value) if not isinstance(value, (list, tuple)) else np.asarray(value)


def _reference(index: int, is_leaf: int) -> int:
    return -index - 1 if is_leaf else index


def _members(node: NodeContext, modes: list[str]) -> list[tuple[float, ...]]:
    values = _array(node, "membership_values", required=False)
    sets: list[list[float]] = [[]]
    for v in (values.reshape(-1).tolist() if values is not None else []):
        if np.isnan(v):
            sets.append([])
        else:
            sets[-1].append(v)
    count = modes.count("member")
    closed = sets[:-1] if sets[-1] == [] else sets  # the last set's NaN is optional
    if len(closed) != count:
        raise node.fail(f"membership_values holds {len(closed)} NaN-separated sets for {count} member nodes")
    members = iter(closed)
    return [tuple(next(members)) if mode == "member" else () for mode in modes]


@converter(ML + "TreeEnsemble")
def _tree_ensemble(node: NodeContext) -> Expr:
    mode_codes = _array(node, "nodes_modes").reshape(-1).tolist()
    bad = [m for m in mode_codes if not 0 <= m < len(tree_op.MODES)]
    if bad:
        raise node.fail(f"unknown nodes_modes value {bad[0]} (0..{len(tree_op.MODES) - 1})")
    modes = [tree_op.MODES[m] for m in mode_codes]
    true_ids, true_leafs = node.attr("nodes_truenodeids"), node.attr("nodes_trueleafs")
    false_ids, false_leafs = node.attr("nodes_falsenodeids"), node.attr("nodes_falseleafs")
    if any(v is None for v in (true_ids, true_leafs, false_ids, false_leafs)):
        raise node.fail("nodes_truenodeids, nodes_trueleafs, nodes_falsenodeids and nodes_falseleafs "
                        "are required")
    if not len(true_ids) == len(true_leafs) == len(false_ids) == len(false_leafs) == len(modes):
        raise node.fail("the nodes_* attributes differ in length")
    roots = []
    for root in node.attr("tree_roots") or []:
        # a root whose both branches are the same leaf is a tree of that one leaf
        one_leaf = 0 <= root < len(modes) and true_leafs[root] and false_leafs[root]
        if one_leaf and true_ids[root] == false_ids[root]:
            roots.append(_reference(true_ids[root], 1))
        else:
            roots.append(root)
    aggregate = node.attr("aggregate_function", 1)
    post = node.attr("post_transform", 0)
    if not 0 <= aggregate < len(tree_op.AGGREGATES) or not 0 <= post < len(_POST_TRANSFORMS):
        raise node.fail(f"unknown aggregate_function {aggregate} or post_transform {post}")
    if _POST_TRANSFORMS[post] == "probit":
        raise node.fail("post_transform PROBIT (4) is not supported (no inverse error function)")
    missing = node.attr("nodes_missing_value_tracks_true") or [0] * len(modes)
    n_targets = node.attr("n_targets")
    if n_targets is None:
        raise node.fail("attribute n_targets is required")
    scores = tree_op.tree_ensemble(
        node.arg(0), n_targets, roots, node.attr("nodes_featureids") or [], modes,
        _array(node, "nodes_splits").reshape(-1).tolist(),
        [_reference(i, leaf) for i, leaf in zip(true_ids, true_leafs)],
        [_reference(i, leaf) for i, leaf in zip(false_ids, false_leafs)],
        node.attr("leaf_targetids") or [], _array(node, "leaf_weights").reshape(-1).tolist(),
        members=_members(node, modes), missing_true=missing, aggregate=tree_op.AGGREGATES[aggregate])
    return _post_transform(node, scores, _POST_TRANSFORMS[post])


def _post_transform(node: NodeContext, scores: Expr, kind: str) -> Any:
    if kind == "softmax":
        return op.nn.softmax(scores, axis=-1)
    if kind == "logistic":
        return op.sigmoid(scores)
    if kind == "softmax_zero":
        zero = node.expr(np.zeros((), np.dtype(node.dtype(node.input(0)))))
        shifted = op.exp(op.subtract(scores, op.max(scores, axis=-1, keepdims=True)))
        kept = op.where(op.equal(scores, zero), zero, shifted)
        return op.divide(kept, op.sum(kept, axis=-1, keepdims=True))
    return scores

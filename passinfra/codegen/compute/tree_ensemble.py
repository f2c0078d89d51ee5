"""Compute rule of ``tree_ensemble`` (:mod:`passinfra.ir.op.tree_ensemble`): an :class:`ExternOp`.

The trees are attributes, so each is unrolled into a nest of IfThenElse statements (one
comparison per interior node, with the feature index a constant) whose leaves update the
row's per-target accumulators; the nest is built bottom-up from an explicit post-order,
without recursion. Per row: accumulators cleared, every tree in order, then the
accumulators (divided by the number of trees for ``average``) stored in the input's dtype.
Sums are in float64 for float64 input, else float32.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from passinfra import tir
from passinfra.codegen.compute.base import ExternOp, TensorHandle, imm, output_shape, register_compute, seq
from passinfra.ir.attrs import Attrs
from passinfra.ir.types import Type

Expr = tir.PrimExpr
_COMPARE = {"leq": tir.LE, "lt": tir.LT, "gte": tir.GE, "gt": tir.GT, "eq": tir.EQ, "neq": tir.NE}
Leaf = Callable[[int], tir.Stmt]  # leaf index -> the update it makes


def _condition(attrs: Attrs, node: int, value: Expr) -> Expr:
    """Whether ``value`` (the node's feature) takes the node's true branch."""
    mode = attrs["modes"][node]
    dtype = value.dtype

    def const(v: float) -> Expr:
        return tir.FloatImm(float(v), dtype)

    if mode == "member":
        members = attrs["members"][node]
        test: Expr = tir.IntImm(0, "bool")
        for k, member in enumerate(members):
            equal = tir.EQ(value, const(member))
            test = equal if k == 0 else tir.Or(test, equal)
    else:
        test = _COMPARE[mode](value, const(attrs["splits"][node]))
    if attrs["missing_true"][node]:
        test = tir.Or(test, tir.NE(value, value))  # NaN: the only value unequal to itself
    return test


def _tree(attrs: Attrs, root: int, feature: Callable[[int], Expr], leaf: Leaf) -> tir.Stmt:
    """The IfThenElse nest of the tree at reference ``root``."""
    if root < 0:
        return leaf(-root - 1)
    built: dict[int, tir.Stmt] = {}
    stack = [root]
    while stack:
        node = stack[-1]
        children = (attrs["true_children"][node], attrs["false_children"][node])
        pending = [c for c in children if c >= 0 and c not in built]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        if node in built:
            continue
        branches = [built[c] if c >= 0 else leaf(-c - 1) for c in children]
        test = _condition(attrs, node, feature(attrs["features"][node]))
        built[node] = tir.IfThenElse(test, branches[0], branches[1])
    return built[root]


@register_compute("tree_ensemble")
def _rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    (x,) = inputs
    shape, dtype = output_shape(out_type), x.dtype
    work = "float64" if dtype == "float64" else "float32"
    targets, aggregate = attrs["n_targets"], attrs["aggregate"]
    extremal = aggregate in ("min", "max")

    def row(out_buffer: tir.Buffer, n: Expr) -> tir.Stmt:
        acc = tir.Buffer("tree_acc", (targets,), work)
        hit = tir.Buffer("tree_hit", (targets,), "bool")

        def feature(index: int) -> Expr:
            value = x.load(n, tir.IntImm(index))
            return value if value.dtype in ("float32", "float64") else tir.Cast("float32", value)

        def leaf(index: int) -> tir.Stmt:
            target = tir.IntImm(attrs["leaf_targets"][index])
            weight = imm(attrs["leaf_weights"][index], work)
            if not extremal:
                return tir.BufferStore(acc, acc.load(target) + weight, (target,))
            best = (tir.Min if aggregate == "min" else tir.Max)(acc.load(target), weight)
            return seq(tir.BufferStore(acc, tir.Select(hit.load(target), best, weight), (target,)),
                       tir.BufferStore(hit, imm(1, "bool"), (target,)))

        t = tir.TVar("t")
        clear = [tir.BufferStore(acc, imm(0, work), (t,))]
        if extremal:
            clear.append(tir.BufferStore(hit, imm(0, "bool"), (t,)))
        start = tir.For(t, tir.IntImm(0), tir.IntImm(targets), tir.ForKind.SERIAL, seq(*clear))
        trees = [_tree(attrs, root, feature, leaf) for root in attrs["roots"]]
        s = tir.TVar("t")
        value = acc.load(s)
        if aggregate == "average":
            value = value / imm(len(attrs["roots"]), work)
        if value.dtype != dtype:
            value = tir.Cast(dtype, value)
        store = tir.For(s, tir.IntImm(0), tir.IntImm(targets), tir.ForKind.SERIAL,
                        tir.BufferStore(out_buffer, value, (n, s)))
        body = seq(start, *trees, store)
        return tir.Allocate(acc, tir.Allocate(hit, body) if extremal else body)

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (out_buffer,) = outputs
        n = tir.TVar("n")
        return tir.For(n, tir.IntImm(0), tir.IntImm(shape[0]), tir.ForKind.SERIAL, row(out_buffer, n))

    return ExternOp("tree_ensemble", ((shape, dtype),), build)

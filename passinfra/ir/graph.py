"""The dataflow graph of a function and its post-dominator tree (fusion's analyses).

:class:`IndexedForwardGraph` numbers every node of a function body in topological order
(producers before consumers) and records, for each node, the consumers it feeds and the
*edge pattern* of each use: how the consumer reads it (an elementwise read, a broadcast,
an arbitrary injective gather, a reduction, ...). A node whose value leaves the reach of
the graph's fusion edges (it is a function body, a Let value, an If branch, a tuple
field that is not a tensor, or it is used from another scope) is marked ``extern_ref``:
it must stay a real value, so it can end a fused group but never disappear into one.

Scopes: Let, If and nested Function literals open new scopes (each child its own), and
an edge never crosses a scope. So fusion happens inside one dataflow region only: a
Let-bound value, an If branch or a closure body is fused on its own, and a node shared
between two regions is kept as a value. Nested functions marked ``Primitive`` are
leaves (already fused).

:class:`PostDominatorTree` gives, for each node, the nearest node every path from it to
the function result passes through, together with the strongest (largest) edge pattern
met on the way. Both are built iteratively, so chains of any length are fine.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from passinfra.ir.expr import Call, Constant, Expr, Function, Tuple, TupleGetItem
from passinfra.ir.op.registry import Op, OpPattern
from passinfra.ir.schema import KindTable
from passinfra.ir.types import TensorType, TupleType, Type

# dtypes of scalar constants that may be copied into a fused function (as in TVM)
SIMPLE_SCALAR_DTYPES = frozenset({
    "float32", "float64", "float16", "bfloat16", "bool",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
})

# per node kind, from its schema: its children, and whether each child opens a scope of
# its own (a binding, a branch, a closure body: kinds that are neither dataflow nor leaves)
_CHILDREN = KindTable(lambda schema: schema.children)
_OPENS_SCOPE = KindTable(lambda schema: schema.opens_scope)


@dataclass(eq=False)
class GraphNode:
    """One node of the graph: an expression with its fusion pattern and its uses."""

    expr: Expr
    index: int
    scope: int
    pattern: OpPattern = OpPattern.OPAQUE
    # indexes of every child node (all dependencies, fusion edges or not), in order
    inputs: list[int] = field(default_factory=list)
    # (consumer index, edge pattern) for each fusable use of this node
    outputs: list[tuple[int, OpPattern]] = field(default_factory=list)
    extern_ref: bool = False


def is_primitive(func: Function) -> bool:
    """True for a function already produced by fusion (attr ``Primitive`` set)."""
    return bool(func.attrs.get("Primitive", 0))


def graph_children(expr: Expr) -> tuple[Expr, ...]:
    """Children of ``expr`` as graph nodes: its schema's children, except that a call's
    Op callee and the inside of a primitive function are not nodes of their own."""
    if isinstance(expr, Call) and isinstance(expr.op, Op):
        return expr.args
    if isinstance(expr, Function) and is_primitive(expr):
        return ()
    try:
        return _CHILDREN[type(expr)](expr)
    except KeyError:
        return ()  # not a graph-level node (a PrimFunc)


def type_of(expr: Expr) -> Type | None:
    """The inferred type of ``expr``, or None when inference has not reached it."""
    return expr._checked_type


def is_simple_scalar_constant(expr: Expr) -> bool:
    """A 0-d constant of a plain dtype: cheap enough to copy into a fused function."""
    return isinstance(expr, Constant) and expr.data.ndim == 0 and expr.dtype in SIMPLE_SCALAR_DTYPES


def _all_tensor_fields(ty: Type | None) -> bool:
    return isinstance(ty, TupleType) and all(isinstance(f, TensorType) for f in ty.fields)


class IndexedForwardGraph:
    """The nodes of a function body in topological order, with their fusion edges.

    Build with :meth:`from_function` (or :meth:`from_expr`); type inference must have
    run, because edge patterns depend on shapes.
    """

    def __init__(self) -> None:
        self.nodes: list[GraphNode] = []
        self.index_of: dict[Expr, int] = {}

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[GraphNode]:
        return iter(self.nodes)

    def node_of(self, expr: Expr) -> GraphNode:
        return self.nodes[self.index_of[expr]]

    @classmethod
    def from_function(cls, func: Function) -> IndexedForwardGraph:
        """The graph of ``func.body``; the body itself is the (extern) result."""
        return cls.from_expr(func.body)

    @classmethod
    def from_expr(cls, root: Expr) -> IndexedForwardGraph:
        graph = cls()
        graph._add_nodes(root)
        graph._add_edges()
        graph.nodes[graph.index_of[root]].extern_ref = True
        return graph

    def _add_nodes(self, root: Expr) -> None:
        """Number the nodes in post-order; a node's scope is the one it is first met in."""
        next_scope = 1
        seen: set[Expr] = set()
        stack: list[tuple[Expr, int, bool]] = [(root, 0, False)]
        while stack:
            expr, scope, expanded = stack.pop()
            if expanded:
                self.index_of[expr] = len(self.nodes)
                self.nodes.append(GraphNode(expr, len(self.nodes), scope))
                continue
            if expr in seen:
                continue
            seen.add(expr)
            stack.append((expr, scope, True))
            children = graph_children(expr)
            opens_scope = bool(children) and _OPENS_SCOPE[type(expr)]
            pending = []
            for child in children:
                child_scope = scope
                if opens_scope:
                    child_scope, next_scope = next_scope, next_scope + 1
                pending.append((child, child_scope, False))
            stack.extend(item for item in reversed(pending) if item[0] not in seen)

    def _add_edges(self) -> None:
        for node in self.nodes:
            expr = node.expr
            children = graph_children(expr)
            node.inputs = [self.index_of[child] for child in children]
            if isinstance(expr, Call):
                self._call_edges(node, expr)
            elif isinstance(expr, Tuple):
                node.pattern = OpPattern.TUPLE
                for child in node.inputs:
                    fusable = isinstance(type_of(self.nodes[child].expr), TensorType)
                    self._use(child, node, OpPattern.INJECTIVE if fusable else None)
            elif isinstance(expr, TupleGetItem):
                # reading a field of a tuple of tensors is a (free) injective op; a
                # tuple holding other things stays a value
                fusable = _all_tensor_fields(type_of(expr.tuple_value))
                node.pattern = OpPattern.INJECTIVE if fusable else OpPattern.OPAQUE
                self._use(node.inputs[0], node, OpPattern.INJECTIVE if fusable else None)
            elif is_simple_scalar_constant(expr):
                node.pattern = OpPattern.ELEMWISE
            else:
                # Var, GlobalVar, big Constant, Let, If, Function: opaque; the children
                # of Let/If/Function are region results, so they are extern
                node.pattern = OpPattern.OPAQUE
                for child in node.inputs:
                    self._use(child, node, None)

    def _call_edges(self, node: GraphNode, call: Call) -> None:
        if not isinstance(call.op, Op):
            # a call of a function value: opaque, and reads its inputs opaquely
            node.pattern = OpPattern.OPAQUE
            for child in node.inputs:
                self._use(child, node, OpPattern.OPAQUE)
            return
        # a stateful op must run exactly where it is written
        pattern = OpPattern.OPAQUE if call.op.stateful else call.op.pattern
        node.pattern = pattern
        out_type = type_of(call)
        for child in node.inputs:
            edge = pattern
            if edge == OpPattern.BROADCAST:
                arg_type = type_of(self.nodes[child].expr)
                if (isinstance(arg_type, TensorType) and isinstance(out_type, TensorType)
                        and arg_type.shape == out_type.shape):
                    edge = OpPattern.ELEMWISE  # no actual broadcasting on this input
            self._use(child, node, edge)

    def _use(self, producer: int, consumer: GraphNode, edge: OpPattern | None) -> None:
        """Record that ``consumer`` reads ``producer``; None (or a use from another scope)
        makes the producer an external reference instead of a fusion edge."""
        source = self.nodes[producer]
        if edge is None or source.scope != consumer.scope:
            source.extern_ref = True
        else:
            source.outputs.append((consumer.index, edge))


class PostDominatorTree:
    """Immediate post-dominators of an :class:`IndexedForwardGraph`'s nodes.

    ``parent[i]`` is the nearest node all uses of node ``i`` flow into (None for an
    extern node or one without uses), ``pattern[i]`` the largest edge pattern on the
    paths from ``i`` to it, ``depth[i]`` the depth in the tree (roots have depth 1).
    """

    def __init__(self, graph: IndexedForwardGraph) -> None:
        size = len(graph)
        self.parent: list[int | None] = [None] * size
        self.depth: list[int] = [1] * size
        self.pattern: list[OpPattern] = [OpPattern.OPAQUE] * size
        # consumers come after producers, so walking backwards sees them first
        for index in range(size - 1, -1, -1):
            node = graph.nodes[index]
            if node.extern_ref or not node.outputs:
                continue
            parent, pattern = self._lca_of_outputs(node.outputs)
            self.parent[index] = parent
            self.pattern[index] = pattern
            self.depth[index] = self.depth[parent] + 1 if parent is not None else 1

    def _lca_of_outputs(self, outputs: list[tuple[int, OpPattern]]) -> tuple[int | None, OpPattern]:
        pattern = OpPattern.ELEMWISE
        parent: int | None = outputs[0][0]
        pattern = max(pattern, outputs[0][1])
        for consumer, edge in outputs[1:]:
            parent, pattern = self._lca(parent, consumer, pattern)
            pattern = max(pattern, edge)
        return parent, pattern

    def _lca(self, lhs: int | None, rhs: int | None, pattern: OpPattern) -> tuple[int | None, OpPattern]:
        """Least common ancestor, folding in the patterns of the tree edges walked."""
        while lhs != rhs:
            if lhs is None or rhs is None:
                return None, pattern
            if self.depth[lhs] < self.depth[rhs]:
                pattern = max(pattern, self.pattern[rhs])
                rhs = self.parent[rhs]
            elif self.depth[rhs] < self.depth[lhs]:
                pattern = max(pattern, self.pattern[lhs])
                lhs = self.parent[lhs]
            else:
                pattern = max(pattern, self.pattern[lhs], self.pattern[rhs])
                lhs, rhs = self.parent[lhs], self.parent[rhs]
        return lhs, pattern


__all__ = [
    "GraphNode", "IndexedForwardGraph", "PostDominatorTree", "graph_children", "is_primitive",
    "is_simple_scalar_constant", "type_of", "SIMPLE_SCALAR_DTYPES",
]

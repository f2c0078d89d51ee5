"""FuseOps: partition each function's dataflow into groups of ops and lift every group
into a global ``Primitive`` function (TVM's algorithm, Relax-style output).

Partition (TVM's GraphPartitioner, three phases over the post-dominator tree of
:mod:`passinfra.ir.graph`; each node tries to join the group of its immediate
post-dominator, checking every path in between):

* phase 0: an OUT_EWISE_FUSABLE op (conv2d, dense, matmul, pools) absorbs the
  elementwise/broadcast epilogue it flows into, when the post-dominator is reached only
  through elementwise edges and every op on the way is at most broadcast. Elementwise
  and broadcast ops join a post-dominator that is injective or a reduction (phases 0
  and 1): this is how ``sum(exp(x))`` becomes one group whose master is the reduce.
* phase 1: injective ops (and tuples) join a post-dominator when every path to it,
  the post-dominator's group included, is injective. Hence, as in TVM, a reduction
  does not take injective producers (``sum(reshape(x))`` stays two groups), nor does it
  take any consumer: a COMM_REDUCE group only grows backwards.
* phase 2: injective ops fuse into an intermediate tuple already fused into injective
  consumers (``concatenate((exp(a), reshape(b)))``).

OPAQUE ops (softmax, batch_norm, layer_norm, dropout, stateful ops) stand alone; a group
never exceeds ``max_fuse_depth`` nodes (256, TVM's default); fusing only ever merges a
node with nodes on paths to its post-dominator, so groups have a single output and the
groups stay acyclic (checked anyway when the caller is rebuilt: a cycle is an IRError).

Lifting. Each group holding at least one op call becomes a function
``fn (p0, p1, ...) { ... }`` with attr ``Primitive=1`` whose parameters are the group's
inputs annotated with their inferred types; the caller calls it by GlobalVar. A group
with several outputs used outside returns a Tuple and the caller reads it with
TupleGetItem. Scalar constants of plain dtypes are copied into the function; every other
constant (a weight) is passed as an argument, so equal blocks with different weights
share one function. Structurally equal functions are created once (structural
hash + equality). Names are ``fused_`` + the op names with dots as underscores
(``fused_nn_conv2d_nn_bias_add_nn_relu``), cut at 80 characters between two op names,
with ``_1``, ``_2``, ... for distinct functions of one name; numbering follows module
order and, inside a function, the evaluation order of the groups, never hashes or ids.

Tuples: a tuple-valued op (split) is injective and fuses like any; an opaque one
(batch_norm) stands alone and returns its tuple, and the TupleGetItems reading it fuse
into their consumers (the group takes the whole tuple as a parameter) or, if nothing
fusable reads them, stay in the caller. Tuples and TupleGetItems are never lifted on
their own (a group without an op call stays in the caller).

Regions: Let values and bodies, If conditions and branches and nested Function bodies
are fused as separate dataflow regions (see :mod:`passinfra.ir.graph`); calls of
GlobalVars or function values are opaque. Functions with attr ``Primitive`` or
``SkipOptimization`` are left as they are. The new functions follow the existing ones in
the module. Effective opt level 0 (``fuse_opt_level=0``, or -1 with ``opt_level=0``)
fuses nothing: every op call becomes a primitive function of its own (still shared).

Symbolic dimensions: a primitive function takes the sizes of its dims from its arguments
(a dim that is a variable alone binds it, and ``past + seq`` binds ``past`` once ``seq``
is known: see :mod:`passinfra.runtime.shape_binding`); a dim no argument gives is the
caller's dimension of that name (an ``arange(past, past + seq)`` reads no tensor at all).
So a group is lifted only if every variable of its parameters' types, of its values'
types and of its calls' attrs follows from its parameters or from the fused function's
own parameters; a group that fails this stays in the caller as plain op calls. Static
groups are never affected. Lifted symbolic functions print their dims
(``def @fused_add[batch, seq](...)``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import ClassVar

from passinfra.errors import IRError
from passinfra.ir.dims import DimVar, SymDim, free_vars, linear_unknown
from passinfra.ir.expr import Call, Expr, Function, GlobalVar, Tuple, TupleGetItem, Var
from passinfra.ir.graph import (
    IndexedForwardGraph,
    PostDominatorTree,
    graph_children,
    is_primitive,
    is_simple_scalar_constant,
    type_of,
)
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op, OpPattern
from passinfra.ir.schema import map_children
from passinfra.ir.structural import structural_equal, structural_hash
from passinfra.ir.type_infer import infer_type, keep_type
from passinfra.ir.types import TensorType, TupleType, Type
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass

MAX_FUSE_DEPTH = 256
MAX_FUNCTION_NAME_LENGTH = 80

ELEMWISE = OpPattern.ELEMWISE
BROADCAST = OpPattern.BROADCAST
INJECTIVE = OpPattern.INJECTIVE
COMM_REDUCE = OpPattern.COMM_REDUCE
OUT_EWISE_FUSABLE = OpPattern.OUT_EWISE_FUSABLE
TUPLE = OpPattern.TUPLE
OPAQUE = OpPattern.OPAQUE

# fcond(pattern of a group on the path, whether it is the sink's group) -> may fuse
PathCondition = Callable[[OpPattern, bool], bool]


def _at_most_broadcast(kind: OpPattern, is_sink: bool) -> bool:
    return kind <= BROADCAST


def _at_most_injective(kind: OpPattern, is_sink: bool) -> bool:
    return kind <= INJECTIVE


def _into_elemwise_sink(kind: OpPattern, is_sink: bool) -> bool:
    # ops on parallel branches may be injective; the sink may be anything but opaque
    # (its group may already hold a conv2d or a reduce as master)
    if not is_sink:
        return kind <= INJECTIVE
    return kind <= COMM_REDUCE or kind == OUT_EWISE_FUSABLE


class GraphPartitioner:
    """Union-find groups over the nodes of an :class:`IndexedForwardGraph`.

    Every node starts in a group of its own; ``partition()`` returns, per node index,
    the index of the root node of its group.
    """

    def __init__(self, graph: IndexedForwardGraph, opt_level: int, max_fuse_depth: int = MAX_FUSE_DEPTH):
        self.graph = graph
        self.opt_level = opt_level
        self.max_fuse_depth = max_fuse_depth
        size = len(graph)
        self._parent: list[int | None] = [None] * size
        self._pattern: list[OpPattern] = [node.pattern for node in graph.nodes]
        self._has_anchor: list[bool] = [p == OUT_EWISE_FUSABLE for p in self._pattern]
        self._num_nodes: list[int] = [1] * size

    def partition(self) -> list[int]:
        if self.opt_level > 0:
            tree = PostDominatorTree(self.graph)
            for phase in (0, 1, 2):
                self._run_fuse(tree, phase)
        return [self.find_root(index) for index in range(len(self.graph))]

    def find_root(self, group: int) -> int:
        root = group
        while (up := self._parent[root]) is not None:
            root = up
        while group != root:  # path compression
            self._parent[group], group = root, self._parent[group]  # type: ignore[assignment]
        return root

    def _run_fuse(self, tree: PostDominatorTree, phase: int) -> None:
        for index in range(len(self.graph)):
            pattern = self._pattern[index]  # the node's own group record, as in TVM
            sink = tree.parent[index]
            if pattern == OPAQUE or sink is None:
                continue
            if phase == 2:
                self._fuse_into_tuple(index, sink, pattern)
                continue
            if self.find_root(index) == self.find_root(sink):
                continue  # already fused
            if self._pattern[sink] == TUPLE:
                continue  # tuples take their fields only in phase 2
            dom_pattern = tree.pattern[index]
            if pattern == OUT_EWISE_FUSABLE:
                if phase == 0 and dom_pattern == ELEMWISE:
                    self._fuse_if(index, sink, _at_most_broadcast)
            elif pattern <= BROADCAST:
                if dom_pattern <= INJECTIVE or dom_pattern == COMM_REDUCE:
                    self._fuse_if(index, sink, _into_elemwise_sink)
            elif pattern in (INJECTIVE, TUPLE):
                if phase == 1:  # after phase 0, so out_ewise_fusable ops finish first
                    self._fuse_if(index, sink, _at_most_injective)
            # COMM_REDUCE: a reduce never joins its consumers

    def _fuse_into_tuple(self, index: int, sink: int, pattern: OpPattern) -> None:
        """Phase 2: an injective op joins a tuple that already sits in an injective group."""
        if pattern > INJECTIVE:
            return
        sink_root_pattern = self._pattern[self.find_root(sink)]
        if sink_root_pattern == TUPLE:
            return  # the tuple is a group's result: its fields stay separate
        if self._pattern[sink] == TUPLE and sink_root_pattern <= INJECTIVE:
            self._fuse_if(index, sink, _at_most_injective)

    def _fuse_if(self, src: int, sink: int, fcond: PathCondition) -> None:
        # TVM checks the size first, before the kind rules; both only refuse, so doing it
        # here (only for fusions the rules allow) gives the same groups, faster
        if self._count_fused_nodes(src, sink) > self.max_fuse_depth:
            return
        if self._check_path(src, sink, fcond):
            self._commit_fuse(src, sink)

    def _nodes_up_to(self, src: int, sink: int) -> list[int]:
        """Nodes on the paths from ``src``'s consumers to ``sink`` (sink included, once)."""
        nodes = self.graph.nodes
        seen = {src}
        found: list[int] = []
        stack = [consumer for consumer, _ in nodes[src].outputs]
        while stack:
            index = stack.pop()
            if index in seen:
                continue
            seen.add(index)
            found.append(index)
            if index != sink:
                stack.extend(consumer for consumer, _ in nodes[index].outputs)
        return found

    def _check_path(self, src: int, sink: int, fcond: PathCondition) -> bool:
        return all(
            fcond(self._pattern[self.find_root(index)], index == sink)
            for index in self._nodes_up_to(src, sink)
        )

    def _commit_fuse(self, src: int, sink: int) -> None:
        target = sink
        for index in [src, *self._nodes_up_to(src, sink)]:
            if index != sink:
                self._merge(index, target)

    def _merge(self, child: int, parent: int) -> None:
        child, parent = self.find_root(child), self.find_root(parent)
        if child == parent:
            return
        self._num_nodes[parent] += self._num_nodes[child]
        self._parent[child] = parent
        if self._has_anchor[child]:
            # the group now has an out_ewise_fusable master; at most one per group
            self._has_anchor[parent] = True
            self._pattern[parent] = max(self._pattern[child], self._pattern[parent])

    def _count_fused_nodes(self, child: int, sink: int) -> int:
        """Size of the sink's group if ``child`` and everything between joined it."""
        sink_root = self.find_root(sink)
        roots = {self.find_root(index) for index in [child, *self._nodes_up_to(child, sink)]}
        roots.discard(sink_root)
        return self._num_nodes[sink_root] + sum(self._num_nodes[root] for root in roots)


# ----------------------------------------------------------------------------- rebuild

Lookup = Callable[[Expr], Expr]


def rebuild(expr: Expr, lookup: Lookup) -> Expr:
    """``expr`` with its graph children replaced by ``lookup(child)``; leaves (and nodes
    whose children did not change) are returned as they are.

    Generic over node kinds (the rebuild comes from the kind's schema); the graph decides
    what a child is: an Op callee is not one (it stays), nor is anything inside a
    primitive function (a leaf of the graph)."""
    if not graph_children(expr):
        return expr
    return map_children(expr, lambda child: child if isinstance(child, Op) else lookup(child))


# ------------------------------------------------------------------------------ lifting


def _is_op_call(expr: Expr) -> bool:
    return isinstance(expr, Call) and isinstance(expr.op, Op)


def fused_function_name(op_names: list[str]) -> str:
    """``fused_`` + op names (dots as underscores), cut between op names at 80 chars."""
    name = "fused"
    for op_name in op_names:
        longer = f"{name}_{op_name.replace('.', '_')}"
        if len(longer) > MAX_FUNCTION_NAME_LENGTH and name != "fused":
            break
        name = longer
    return name


class FusedFunctionTable:
    """The primitive functions created so far: shared when structurally equal, named
    uniquely in creation order."""

    def __init__(self, taken_names: set[str]) -> None:
        self._taken = set(taken_names)
        self._by_hash: dict[int, list[tuple[Function, GlobalVar]]] = {}
        self._by_key: dict[Hashable, GlobalVar] = {}
        self.functions: list[tuple[GlobalVar, Function]] = []

    def intern(self, func: Function, base_name: str, key: Hashable | None = None) -> GlobalVar:
        """The GlobalVar of a function structurally equal to ``func``, made if new.

        ``key`` (optional) is an exact fingerprint of the group ``func`` was built from:
        equal keys imply structurally equal functions, so a hit skips hashing, which is
        what keeps a chain of 100,000 identical groups fast."""
        if key is not None and key in self._by_key:
            return self._by_key[key]
        bucket = self._by_hash.setdefault(structural_hash(func), [])
        for existing, gv in bucket:  # noqa: B007  (gv is the answer when found)
            if structural_equal(existing, func):
                break
        else:
            gv = GlobalVar(self._fresh_name(base_name))
            bucket.append((func, gv))
            self.functions.append((gv, func))
        if key is not None:
            self._by_key[key] = gv
        return gv

    def _fresh_name(self, base: str) -> str:
        name, suffix = base, 0
        while name in self._taken:
            suffix += 1
            name = f"{base}_{suffix}"
        self._taken.add(name)
        return name


def unit_order(graph: IndexedForwardGraph, unit_of: list[int]) -> list[int]:
    """The units (lifted groups, or single nodes) in a dependency order, earliest first
    node first among the ready ones; raises IRError if the units depend on each other in
    a cycle (fusion must never create one)."""
    consumers: dict[int, set[int]] = {}
    indegree: dict[int, int] = {}
    first_index: dict[int, int] = {}
    for node in graph.nodes:
        unit = unit_of[node.index]
        first_index.setdefault(unit, node.index)
        indegree.setdefault(unit, 0)
        for child in node.inputs:
            producer = unit_of[child]
            if producer != unit and unit not in consumers.setdefault(producer, set()):
                consumers[producer].add(unit)
                indegree[unit] += 1
    ready = [(first_index[u], u) for u, degree in indegree.items() if degree == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, unit = heapq.heappop(ready)
        order.append(unit)
        for consumer in sorted(consumers.get(unit, ())):
            indegree[consumer] -= 1
            if indegree[consumer] == 0:
                heapq.heappush(ready, (first_index[consumer], consumer))
    if len(order) != len(indegree):
        stuck = sorted(u for u, degree in indegree.items() if degree > 0)
        shown = ", ".join(repr(graph.nodes[u].expr) for u in stuck[:5])
        raise IRError(f"fusion made a dependency cycle between {len(stuck)} groups (rooted at {shown})")
    return order



def _group_key(
    graph: IndexedForwardGraph, group: list[int], local: dict[int, Expr], outputs: list[int]
) -> Hashable | None:
    """An exact fingerprint of a group's function: node kinds, op names, attrs, wiring,
    parameter types and (by identity) the constants copied in. None when the group holds
    a node kind it does not describe (then only structural hashing dedups it)."""
    position = {index: k for k, index in enumerate(group)}

    def ref(child: int) -> Hashable:
        if child in position:
            return ("node", position[child])
        replacement = local[child]
        if isinstance(replacement, Var):
            return ("param", replacement.name_hint, type_of(graph.nodes[child].expr))
        return ("const", replacement)  # a Constant: equal only to itself

    parts: list[Hashable] = []
    for index in group:
        expr = graph.nodes[index].expr
        refs = tuple(ref(child) for child in graph.nodes[index].inputs)
        if _is_op_call(expr):
            parts.append(("call", expr.op.name, expr.attrs, refs))
        elif isinstance(expr, Tuple):
            parts.append(("tuple", refs))
        elif isinstance(expr, TupleGetItem):
            parts.append(("getitem", expr.index, refs))
        elif is_simple_scalar_constant(expr):
            parts.append(("const", expr))
        else:
            return None
    return tuple(parts), tuple(position[index] for index in outputs)


def _bound_by(param_types: list) -> set[DimVar]:
    """The dimension variables a call binds from arguments of ``param_types``: each whole
    dimension, then (as shape_binding._solve_linear_dims does) a variable given as
    ``past + seq`` once the others are known."""
    bound = {var for ty in param_types if ty is not None for var in _whole_dims(ty)}
    expression_dims = [dim for ty in param_types if ty is not None for tensor in _tensor_types(ty)
                       for dim in tensor.shape if isinstance(dim, SymDim) and type(dim) is not DimVar]
    progress = True
    while progress:
        progress = False
        for dim in expression_dims:
            solved = linear_unknown(dim, bound)
            if solved is not None and solved[0] not in bound:
                bound.add(solved[0])
                progress = True
    return bound


class _FunctionFuser:
    """Fuses one function: partitions its graph, lifts the groups, rebuilds the body."""

    def __init__(self, func: Function, opt_level: int, max_fuse_depth: int, table: FusedFunctionTable):
        self.func = func
        self.table = table
        self.graph = IndexedForwardGraph.from_function(func)
        self.roots = GraphPartitioner(self.graph, opt_level, max_fuse_depth).partition()
        self.new_of: dict[int, Expr] = {}
        # the dims the fused function's own parameters give: a lifted group may use them
        self.caller_dims = _bound_by([p.checked_type if p._checked_type is not None else p.type_annotation
                                      for p in func.params])

    def run(self) -> Function:
        graph = self.graph
        members: dict[int, list[int]] = {}
        for index, root in enumerate(self.roots):
            members.setdefault(root, []).append(index)
        lifted = {
            root for root, group in members.items()
            if any(_is_op_call(graph.nodes[i].expr) for i in group) and self._binds_its_dims(group)
        }
        unit_of = [root if root in lifted else index for index, root in enumerate(self.roots)]
        new_of = self.new_of
        lookup = lambda expr: new_of[graph.index_of[expr]]
        for unit in unit_order(graph, unit_of):
            if unit in lifted:
                self._lift(members[unit])
            else:
                new_of[unit] = rebuild(graph.nodes[unit].expr, lookup)
        body = lookup(self.func.body)
        if body is self.func.body:
            return self.func
        return Function(self.func.params, body, self.func.ret_type, self.func.attrs)

    def _group_inputs(self, group: list[int]) -> list[int]:
        """The nodes outside ``group`` that its members read (each once, in order)."""
        in_group = set(group)
        inputs: dict[int, None] = {}
        for index in group:
            for child in self.graph.nodes[index].inputs:
                if child not in in_group:
                    inputs[child] = None
        return list(inputs)

    def _binds_its_dims(self, group: list[int]) -> bool:
        """Whether every dimension variable the lifted ``group`` would use is a whole
        dimension of one of its parameters (module docstring); True when all is static."""
        nodes = self.graph.nodes
        used: set[DimVar] = set()
        for index in group:
            expr = nodes[index].expr
            used.update(_type_vars(type_of(expr)))
            if isinstance(expr, Call) and expr.attrs.has_dims:
                used.update(_attr_vars(tuple(expr.attrs.values())))
        input_types = [type_of(nodes[child].expr) for child in self._group_inputs(group)]
        for ty in input_types:
            used.update(_type_vars(ty))
        if not used:  # a static group: nothing to bind
            return True
        # what the call's binding gives, then the caller's own (its dims by name)
        return used <= (_bound_by(input_types) | self.caller_dims)

    def _lift(self, group: list[int]) -> None:
        """Make ``group`` (node indexes, topological) a primitive function and call it."""
        nodes = self.graph.nodes
        in_group = set(group)
        local: dict[int, Expr] = {}
        params: list[Var] = []
        call_args: list[Expr] = []
        for index in group:
            for child in nodes[index].inputs:
                if child in in_group or child in local:
                    continue
                expr = nodes[child].expr
                if is_simple_scalar_constant(expr):
                    local[child] = expr  # copied in: cheap, and lets codegen see the value
                else:
                    local[child] = param = Var(f"p{len(params)}", type_of(expr))
                    params.append(param)
                    call_args.append(self.new_of[child])
        index_of = self.graph.index_of
        lookup = lambda expr: local[index_of[expr]]
        for index in group:
            # same-typed children (parameters of their types, the same constants): the
            # node's type carries over, and the kernel's type inference finds it done
            local[index] = rebuild(nodes[index].expr, lookup)
            keep_type(local[index], nodes[index].expr)
        outputs = [
            index for index in group
            if nodes[index].extern_ref or any(c not in in_group for c, _ in nodes[index].outputs)
        ]
        if not outputs:
            raise IRError(f"fused group rooted at {nodes[group[-1]].expr!r} has no output")
        body = local[outputs[0]] if len(outputs) == 1 else Tuple([local[i] for i in outputs])
        prim = Function(params, body, attrs={"Primitive": 1})
        op_names = [nodes[i].expr.op.name for i in group if _is_op_call(nodes[i].expr)]
        key = _group_key(self.graph, group, local, outputs)
        call = Call(self.table.intern(prim, fused_function_name(op_names), key), call_args)
        if len(outputs) == 1:
            self.new_of[outputs[0]] = call
        else:
            for position, index in enumerate(outputs):
                self.new_of[index] = TupleGetItem(call, position)


def _tensor_types(ty: Type | None) -> list[TensorType]:
    if isinstance(ty, TensorType):
        return [ty]
    if isinstance(ty, TupleType):
        return [tensor for field in ty.fields for tensor in _tensor_types(field)]
    return []


def _type_vars(ty: Type | None) -> tuple[DimVar, ...]:
    return ty.dim_vars if isinstance(ty, Type) else ()


def _whole_dims(ty: Type | None) -> set[DimVar]:
    """The variables that are a whole dimension of ``ty``: those a call's argument of this
    type gives a size to (an expression dim such as ``past + seq`` gives none)."""
    return {dim for tensor in _tensor_types(ty) for dim in tensor.shape if type(dim) is DimVar}


def _attr_vars(value: object) -> set[DimVar]:
    if isinstance(value, SymDim):
        return set(free_vars(value))
    if isinstance(value, tuple):
        return {var for item in value for var in _attr_vars(item)}
    return set()


def _should_fuse(func: object) -> bool:
    return (
        isinstance(func, Function)
        and not is_primitive(func)
        and not func.attrs.get("SkipOptimization", False)
    )


def fuse_ops(
    mod: IRModule,
    fuse_opt_level: int = -1,
    opt_level: int = 2,
    *,
    max_fuse_depth: int = MAX_FUSE_DEPTH,
) -> IRModule:
    """A new module where each function's ops are fused into global primitive functions.

    ``fuse_opt_level`` -1 means "use ``opt_level``" (the pass context's level); an
    effective level 0 lifts every op call alone. The input module is not changed (type
    inference caches types on its nodes, which is allowed). See the module docstring.
    """
    if not isinstance(mod, IRModule):
        raise IRError(f"fuse_ops needs an IRModule, got {type(mod).__name__}")
    if isinstance(max_fuse_depth, bool) or not isinstance(max_fuse_depth, int) or max_fuse_depth < 1:
        raise IRError(f"max_fuse_depth must be a positive int, got {max_fuse_depth!r}")
    level = opt_level if fuse_opt_level == -1 else fuse_opt_level
    infer_type(mod)
    table = FusedFunctionTable({gv.name_hint for gv in mod.functions})
    result = IRModule(attrs=mod.attrs)
    for gv, func in mod.functions.items():
        if _should_fuse(func):
            result[gv] = _FunctionFuser(func, level, max_fuse_depth, table).run()
        else:
            result[gv] = func
    for gv, prim in table.functions:
        result[gv] = prim
    return result


register_config("relay.FuseOps.max_depth", int)


@register_pass("FuseOps")
@dataclass(frozen=True)
class FuseOps(ModulePass):
    """The FuseOps module pass (opt_level 0, requires InferType): :func:`fuse_ops` with
    ``fuse_opt_level`` (-1: the context's opt_level) and the ``relay.FuseOps.max_depth``
    config (default 256)."""

    fuse_opt_level: int = -1
    info: ClassVar[PassInfo] = PassInfo(0, "FuseOps", ("InferType",))

    def pass_func(self, mod: IRModule, ctx: PassContext) -> IRModule:
        depth = ctx.get_config("relay.FuseOps.max_depth", MAX_FUSE_DEPTH)
        return fuse_ops(mod, self.fuse_opt_level, ctx.opt_level, max_fuse_depth=depth)


__all__ = [
    "FuseOps", "fuse_ops", "GraphPartitioner", "FusedFunctionTable", "fused_function_name", "rebuild",
    "unit_order", "MAX_FUSE_DEPTH",
]

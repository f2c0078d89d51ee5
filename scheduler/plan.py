"""The plan of a pipeline run: what runs, in which order, and what can run together.

``build_plan`` expands a pipeline once under a PassContext, exactly as Sequential would
run it (enabling rule, ``required`` dependencies resolved transitively through the
registry), into a tree of invocations whose leaves are numbered in run order. From the
leaves come:

* ``graph``: a networkx DiGraph with one node per leaf invocation (attrs: pass, kind,
  stage), an edge from each leaf to the next (program order) and an edge from each
  ``required`` dependency to its dependent;
* ``stages``: runs of consecutive function passes (one :class:`FunctionStage`, run as a
  batch per function on the workers) separated by module passes (:class:`ModuleBarrier`,
  run in the driver). A function pass that reads the module (``reads_module``) starts a
  stage of its own, because it must see every function as the previous pass left it.
  A function stage followed by a module pass that declares itself type inference
  (``PassInfo.infers_types``, as InferType does) is marked ``types_wanted``: its workers
  infer the types of what they return, so that pass in the driver finds them cached, and
  the workers' resident copies carry them into the next stage. The scheduler reads the
  declaration, never a pass's name.

The executor walks the same tree, so the hooks it calls match an in-process run.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import networkx as nx

from passinfra.transform import FunctionPass, Pass, PassContext, PassError, Sequential, get_pass


@dataclass
class PlanNode:
    """One pass invocation; a Sequential has children, every other pass is a leaf."""

    pass_: Pass
    children: list[PlanNode] = field(default_factory=list)
    leaf_index: int = -1  # run order among leaves; -1 for a Sequential
    dependency_of: int | None = None  # leaf index of the pass that required this one
    stage: int = -1

    @property
    def name(self) -> str:
        return self.pass_.info.name

    @property
    def kind(self) -> str:
        if isinstance(self.pass_, Sequential):
            return "sequential"
        return "function" if isinstance(self.pass_, FunctionPass) else "module"


@dataclass
class FunctionStage:
    """Consecutive function passes run per function on the workers without a round trip."""

    index: int
    leaves: list[PlanNode]
    # the next stage is a type-inference pass (``infers_types``): type inference is cheaper
    # on the workers (in parallel, and their own copies then carry the types) than in the driver
    types_wanted: bool = False

    kind = "function"

    @property
    def passes(self) -> list[Pass]:
        return [leaf.pass_ for leaf in self.leaves]


@dataclass
class ModuleBarrier:
    """A module pass: it runs in the driver and waits for every function."""

    index: int
    leaves: list[PlanNode]

    kind = "module"

    @property
    def passes(self) -> list[Pass]:
        return [leaf.pass_ for leaf in self.leaves]


Stage = FunctionStage | ModuleBarrier


@dataclass
class Plan:
    root: PlanNode
    leaves: list[PlanNode]
    stages: list[Stage]
    graph: nx.DiGraph

    def describe(self) -> str:
        """A readable listing of the stages (used by ``raypass plan``)."""
        lines = []
        for stage in self.stages:
            names = ", ".join(leaf.name for leaf in stage.leaves)
            where = "workers, batched per function" if stage.kind == "function" else "driver"
            lines.append(f"stage {stage.index}: {stage.kind} [{names}] ({where})")
        return "\n".join(lines)


def infers_types(pass_: Pass) -> bool:
    """Whether ``pass_`` declares itself type inference (``PassInfo.infers_types``): its
    work, caching a type on every node, is work the workers can do ahead of it."""
    return pass_.info.infers_types


def needs_types(pass_: Pass) -> bool:
    """Whether ``pass_`` reads the types a type-inference pass caches: it requires (by
    registry name) a pass that declares ``infers_types``.

    A required name the registry cannot make into a pass counts as not declaring it:
    resolving ``required`` reports that error where it always did (a Sequential), and
    a pass called bare runs without its dependencies anyway."""
    for name in pass_.info.required:
        try:
            if infers_types(get_pass(name)):
                return True
        except PassError:
            continue
    return False


def reads_module(pass_: Pass) -> bool:
    """Whether a function pass needs the whole module as the previous pass left it.

    Function passes say so with a ``reads_module`` attribute; one that does not say is
    assumed to read it (correct first: the price is a stage boundary)."""
    return bool(getattr(pass_, "reads_module", True))


def _expand(pipeline: Pass, ctx: PassContext) -> tuple[PlanNode, list[PlanNode]]:
    leaves: list[PlanNode] = []
    root = PlanNode(pipeline)
    # depth-first, children in order: an explicit stack of iterators keeps leaf order;
    # a dependency is entered with the marker -1 (resolved to its dependent afterwards)
    work: list[Iterator[tuple[PlanNode, int | None]]] = [iter([(root, None)])]
    while work:
        try:
            node, dependency_of = next(work[-1])
        except StopIteration:
            work.pop()
            continue
        if isinstance(node.pass_, Sequential):
            node.children = []
            entries: list[tuple[PlanNode, int | None]] = []
            for step in node.pass_.enabled_steps(ctx):
                step_nodes = [PlanNode(p) for p in step]
                node.children.extend(step_nodes)
                entries.extend((child, -1 if child is not step_nodes[-1] else None) for child in step_nodes)
            work.append(iter(entries))
        else:
            node.leaf_index = len(leaves)
            node.dependency_of = dependency_of
            leaves.append(node)
    return root, leaves


def _stages(leaves: list[PlanNode], batch: bool) -> list[Stage]:
    stages: list[Stage] = []
    for leaf in leaves:
        if leaf.kind == "function":
            current = stages[-1] if stages else None
            joins = (
                batch
                and isinstance(current, FunctionStage)
                and not reads_module(leaf.pass_)
            )
            if joins:
                current.leaves.append(leaf)
            else:
                stages.append(FunctionStage(len(stages), [leaf]))
        else:
            stages.append(ModuleBarrier(len(stages), [leaf]))
        leaf.stage = stages[-1].index
    for stage, following in zip(stages, stages[1:]):
        if (
            isinstance(stage, FunctionStage)
            and isinstance(following, ModuleBarrier)
            and infers_types(following.leaves[0].pass_)
        ):
            stage.types_wanted = True
    return stages


def build_plan(pipeline: Pass, ctx: PassContext | None = None, batch: bool = True) -> Plan:
    """Expand ``pipeline`` under ``ctx`` (default: the current context).

    ``batch=False`` gives every function pass a stage of its own (what the executor
    does when an instrument needs to see the module between passes).
    """
    ctx = PassContext.current() if ctx is None else ctx
    root, leaves = _expand(pipeline, ctx)
    # dependencies: a leaf marked -1 was pulled in by the next non-dependency leaf
    owner: int | None = None
    for leaf in reversed(leaves):
        if leaf.dependency_of == -1:
            leaf.dependency_of = owner
        else:
            owner = leaf.leaf_index
    stages = _stages(leaves, batch)
    graph = nx.DiGraph()
    for leaf in leaves:
        graph.add_node(
            _node_id(leaf), name=leaf.name, kind=leaf.kind, stage=leaf.stage, leaf_index=leaf.leaf_index
        )
    for before, after in zip(leaves, leaves[1:]):
        graph.add_edge(_node_id(before), _node_id(after), relation="order")
    for leaf in leaves:
        if leaf.dependency_of is not None:
            graph.add_edge(_node_id(leaf), _node_id(leaves[leaf.dependency_of]), relation="required")
    return Plan(root, leaves, stages, graph)


def _node_id(leaf: PlanNode) -> str:
    return f"{leaf.leaf_index}:{leaf.name}"

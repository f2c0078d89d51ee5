"""Resolution of ``PassInfo.required`` into a networkx DAG and a run order.

Edges point from a dependency to its dependent (``u -> v``: u runs before v). Each node
carries ``required`` (the names it requires, in declared order). The scheduler's plan
and ``raypass passes`` display this graph.
"""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx

from passinfra.transform.errors import PassCycleError, PassDependencyError
from passinfra.transform.passes import Pass
from passinfra.transform.registry import get_pass, is_registered


def required_graph(roots: Pass | str | Iterable[Pass | str]) -> nx.DiGraph:
    """The transitive ``required`` graph of one or more passes (or registered names).

    Raises PassDependencyError naming an unknown name and the pass that required it,
    and PassCycleError naming every pass on a cycle.
    """
    root_list = [roots] if isinstance(roots, (Pass, str)) else list(roots)
    graph = nx.DiGraph()
    # a root pass need not be registered: its own info is used for its name
    local_required: dict[str, tuple[str, ...]] = {}
    for root in root_list:
        name = root.info.name if isinstance(root, Pass) else root
        if isinstance(root, Pass):
            local_required[name] = root.info.required
        elif not is_registered(name):
            raise PassDependencyError(f"unknown pass {name!r}: it is not registered")
    pending = [root.info.name if isinstance(root, Pass) else root for root in root_list]
    while pending:
        name = pending.pop()
        if name in graph and "required" in graph.nodes[name]:
            continue
        required = local_required[name] if name in local_required else get_pass(name).info.required
        graph.add_node(name, required=required)
        for dep in required:
            if dep not in local_required and not is_registered(dep):
                raise PassDependencyError(
                    f"pass {name!r} requires unknown pass {dep!r}; register it with "
                    "transform.register_pass or fix the name"
                )
            graph.add_edge(dep, name)
            if "required" not in graph.nodes[dep]:
                pending.append(dep)
    _check_acyclic(graph)
    return graph


def resolve_required(root: Pass | str) -> list[str]:
    """The names of every pass ``root`` requires, transitively, in a run order where each
    pass comes after what it requires (declared order otherwise); ``root`` excluded."""
    graph = required_graph(root)
    root_name = root.info.name if isinstance(root, Pass) else root
    order: list[str] = []
    placed: set[str] = {root_name}
    # iterative post-order DFS following each node's declared `required` order
    stack: list[tuple[str, int]] = [(root_name, 0)]
    while stack:
        name, index = stack.pop()
        required = graph.nodes[name]["required"]
        if index < len(required):
            stack.append((name, index + 1))
            dep = required[index]
            if dep not in placed:
                placed.add(dep)
                stack.append((dep, 0))
        elif name != root_name:
            order.append(name)
    return order


def _check_acyclic(graph: nx.DiGraph) -> None:
    try:
        cycle_edges = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return
    # edges run dependency -> dependent; list the cycle in "requires" order instead
    before_order = [edge[0] for edge in cycle_edges]
    cycle = [before_order[0], *reversed(before_order[1:])]
    shown = " requires ".join(repr(name) for name in [*cycle, cycle[0]])
    raise PassCycleError(f"the required passes form a cycle: {shown}", cycle)

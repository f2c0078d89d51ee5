"""``raypass plan``: the build pipeline's pass DAG and its stages, as text, DOT or PNG."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from raypass_cli.common import add_context_options, make_context

PLAN_FIGSIZE = (14.0, 5.0)
PLAN_DPI = 100


def build_plan_of_build(args: argparse.Namespace) -> Any:
    from passinfra.build import compile_pipeline
    from scheduler.plan import build_plan

    return build_plan(compile_pipeline(), make_context(args))


def plan_dot(plan: Any) -> str:
    """DOT text: one cluster per stage, order edges solid, ``required`` edges dashed."""
    lines = ["digraph raypass_plan {", "  rankdir=LR;", '  node [shape=box, fontname="Helvetica"];']
    for stage in plan.stages:
        where = "workers" if stage.kind == "function" else "driver"
        lines.append(f"  subgraph cluster_{stage.index} {{")
        lines.append(f'    label="stage {stage.index}: {stage.kind} ({where})";')
        for leaf in stage.leaves:
            lines.append(f'    "{leaf.leaf_index}:{leaf.name}";')
        lines.append("  }")
    for source, target, data in plan.graph.edges(data=True):
        style = ' [style=dashed, label="required"]' if data.get("relation") == "required" else ""
        lines.append(f'  "{source}" -> "{target}"{style};')
    lines.append("}")
    return "\n".join(lines) + "\n"


def plan_png(plan: Any, path: str | Path) -> tuple[int, int]:
    """Draw the DAG (x = run order, colour = stage); returns the image size in pixels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    graph = plan.graph
    pos = {
        node: (data["leaf_index"], (data["leaf_index"] % 3) * 0.5) for node, data in graph.nodes(data=True)
    }
    colours = plt.get_cmap("tab20")
    node_colours = [colours(data["stage"] % 20) for _, data in graph.nodes(data=True)]
    fig, ax = plt.subplots(figsize=PLAN_FIGSIZE, dpi=PLAN_DPI)
    order = [(u, v) for u, v, d in graph.edges(data=True) if d.get("relation") != "required"]
    required = [(u, v) for u, v, d in graph.edges(data=True) if d.get("relation") == "required"]
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_color=node_colours, node_size=500)
    nx.draw_networkx_edges(graph, pos, ax=ax, edgelist=order, arrows=True)
    nx.draw_networkx_edges(
        graph,
        pos,
        ax=ax,
        edgelist=required,
        style="dashed",
        edge_color="red",
        connectionstyle="arc3,rad=0.3",
        arrows=True,
    )
    labels = {node: data["name"] for node, data in graph.nodes(data=True)}
    nx.draw_networkx_labels(graph, pos, labels, ax=ax, font_size=7)
    ax.set_title(
        f"build pipeline: {len(plan.leaves)} passes in {len(plan.stages)} stages (colour = stage; "
        "red dashed = required)"
    )
    ax.axis("off")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=PLAN_DPI)
    width, height = fig.canvas.get_width_height()
    plt.close(fig)
    return width, height


def cmd_plan(args: argparse.Namespace) -> int:
    plan = build_plan_of_build(args)
    print(plan.describe())
    if args.dot:
        Path(args.dot).write_text(plan_dot(plan))
        print(f"wrote the plan as DOT to {args.dot}")
    if args.png:
        width, height = plan_png(plan, args.png)
        print(f"wrote the plan picture to {args.png} ({width}x{height})")
    return 0


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("plan", help="show the build pipeline's pass DAG and stages")
    add_context_options(parser)
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--png", metavar="FILE", help="draw the DAG into a PNG file")
    output.add_argument("--dot", metavar="FILE", help="write the DAG as Graphviz DOT text")
    parser.set_defaults(func=cmd_plan)

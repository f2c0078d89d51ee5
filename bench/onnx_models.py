"""Importing ONNX models and running the standard pipeline over them.

For each model (the zoo at a few sizes and, when the onnx package ships it, DenseNet121
light): ONNX node count, import time, IR call-node count, and the time of each pass of
the standard pipeline (those passes that are registered so far), measured with
PassTimingInstrument. Prints a table and writes it to bench/results_onnx_models.md.

    python bench/onnx_models.py [--output PATH] [--no-densenet]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import onnx  # noqa: E402

from passinfra.frontend import from_onnx, zoo  # noqa: E402
from passinfra.frontend.onnx_backend import STANDARD_PASSES  # noqa: E402
from passinfra.ir.expr import Call  # noqa: E402
from passinfra.ir.functor import iter_post_order  # noqa: E402

ZOO_SPECS = [
    "zoo:mlp?layers=4&hidden=256",
    "zoo:resnet?depth=20",
    "zoo:resnet?depth=56",
    "zoo:transformer?layers=2&hidden=128",
    "zoo:transformer?layers=12&hidden=256",
]
DENSENET = os.path.join(
    os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_densenet121.onnx"
)


def call_count(mod) -> int:
    return sum(isinstance(node, Call) for node in iter_post_order(mod["main"].body))


def time_passes(mod) -> list[tuple[str, float]]:
    """(pass name, seconds) for each registered standard pass, run one after the other."""
    from passinfra import transform

    timings = []
    for name in STANDARD_PASSES:
        try:
            pass_ = transform.get_pass(name)
        except Exception:  # not registered yet
            continue
        start = time.perf_counter()
        try:
            mod = pass_(mod)
        except Exception as err:  # a pass still under construction: report, keep going
            timings.append((f"{name} (failed: {type(err).__name__})", time.perf_counter() - start))
            continue
        timings.append((name, time.perf_counter() - start))
    return timings


def measure(label: str, model: onnx.ModelProto) -> dict:
    start = time.perf_counter()
    mod = from_onnx(model)
    import_s = time.perf_counter() - start
    return {
        "model": label,
        "onnx_nodes": len(model.graph.node),
        "ir_calls": call_count(mod),
        "import_s": import_s,
        "passes": time_passes(mod),
    }


def render(rows: list[dict]) -> str:
    lines = [
        "| model | ONNX nodes | IR calls | import (s) | pipeline per pass (s) |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        passes = ", ".join(f"{name} {sec:.3f}" for name, sec in row["passes"]) or "(no passes registered yet)"
        lines.append(
            f"| {row['model']} | {row['onnx_nodes']} | {row['ir_calls']} | {row['import_s']:.3f} | {passes} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(ROOT / "bench" / "results_onnx_models.md"))
    parser.add_argument("--no-densenet", action="store_true")
    args = parser.parse_args()
    rows = [measure(spec, zoo.zoo_spec(spec)) for spec in ZOO_SPECS]
    if os.path.exists(DENSENET) and not args.no_densenet:
        rows.append(measure("densenet121 (light)", onnx.load(DENSENET)))
    table = render(rows)
    print(table)
    Path(args.output).write_text("# ONNX import and pipeline\n\n" + table + "\n")


if __name__ == "__main__":
    main()

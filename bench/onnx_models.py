"""Importing ONNX models and compiling them with the standard pipeline.

For each model (the zoo at a few sizes and, when the onnx package ships it, DenseNet121
light): ONNX node count, import time, IR call-node count, then ``passinfra.build(mod,
opt_level=3)`` (the whole pipeline: graph passes, FuseOps, lowering, loop passes, C,
compile, link) timed per pass with PassTimingInstrument, with a cold object cache (a fresh
``codegen.cache_dir``) so CompileC's time is the compiler's, not a cache lookup. Also the
number of primitive functions after FuseOps (kernels) and one run of the library.

Writes a table to bench/results_onnx_models.md.

    python -m bench.onnx_models [--output PATH] [--no-densenet] [--quick]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bench.common import fresh_cache_dir, machine_notes, markdown_table
from passinfra.build import build
from passinfra.frontend import from_onnx, zoo
from passinfra.instrument import PassTimingInstrument
from passinfra.ir.expr import Call
from passinfra.ir.functor import iter_post_order
from passinfra.transform.context import PassContext

ROOT = Path(__file__).resolve().parent.parent

ZOO_SPECS = [
    "zoo:mlp?layers=4&hidden=256",
    "zoo:resnet?depth=20",
    "zoo:resnet?depth=56",
    "zoo:transformer?layers=2&hidden=128",
    "zoo:transformer?layers=12&hidden=256",
]
QUICK_SPECS = ZOO_SPECS[:2]
DENSENET = os.path.join(
    os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_densenet121.onnx"
)
# passes that account for less than this share of the build are folded into "other"
SHOWN_SHARE = 0.02


def call_count(mod) -> int:
    return sum(isinstance(node, Call) for node in iter_post_order(mod["main"].body))


def pass_seconds(timings: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds per pass name, summed over its runs, for the passes inside the build's
    Sequentials (containers, descended into); a pass's nested runs count in its time."""
    totals: dict[str, float] = {}
    stack = list(reversed(timings))  # popped in run order
    while stack:
        entry = stack.pop()
        if entry["name"].startswith("build_"):
            stack.extend(reversed(entry["children"]))
            continue
        totals[entry["name"]] = totals.get(entry["name"], 0.0) + entry["total_us"] / 1e6
    return totals


def input_arrays(mod) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    arrays = []
    for param in mod["main"].params:
        ty = param.type_annotation
        if ty.dtype.startswith("float"):
            arrays.append(rng.standard_normal(ty.shape).astype(ty.dtype))
        else:  # token ids and the like: small non-negative integers
            arrays.append(rng.integers(0, 2, ty.shape).astype(ty.dtype))
    return arrays


def measure(label: str, model: onnx.ModelProto) -> dict[str, Any]:
    start = time.perf_counter()
    mod = from_onnx(model)
    import_s = time.perf_counter() - start
    timing = PassTimingInstrument()
    with fresh_cache_dir() as cache_dir:
        with PassContext(instruments=[timing], config={"codegen.cache_dir": cache_dir}):
            start = time.perf_counter()
            lib = build(mod, opt_level=3)
            build_s = time.perf_counter() - start
            passes = pass_seconds(timing.timings())  # read before the context clears it
    arrays = input_arrays(mod)
    start = time.perf_counter()
    lib(*arrays)
    run_s = time.perf_counter() - start
    return {
        "model": label,
        "onnx_nodes": len(model.graph.node),
        "ir_calls": call_count(mod),
        "kernels": len(lib.metadata.get("kernels", [])),
        "import_s": import_s,
        "build_s": build_s,
        "run_s": run_s,
        "passes": passes,
    }


def render(rows: list[dict[str, Any]]) -> str:
    header = ["model", "ONNX nodes", "IR calls", "kernels", "import (s)", "build (s)", "run (s)",
              "passes, slowest first (s)"]
    table = []
    for row in rows:
        ranked = sorted(row["passes"].items(), key=lambda item: -item[1])
        shown = [(name, sec) for name, sec in ranked if sec >= SHOWN_SHARE * row["build_s"]]
        other = sum(sec for name, sec in ranked) - sum(sec for _, sec in shown)
        cells = ", ".join(f"{name} {sec:.3f}" for name, sec in shown) + f", other {other:.3f}"
        table.append([row["model"], row["onnx_nodes"], row["ir_calls"], row["kernels"],
                      f"{row['import_s']:.3f}", f"{row['build_s']:.2f}", f"{row['run_s']:.3f}", cells])
    return markdown_table(header, table)


def render_all_passes(rows: list[dict[str, Any]]) -> str:
    """Every pass's seconds per model, in the order passes first appear."""
    names: list[str] = []
    for row in rows:
        names += [name for name in row["passes"] if name not in names]
    order = {name: i for i, name in enumerate(names)}
    names.sort(key=lambda name: order[name])
    header = ["pass"] + [row["model"] for row in rows]
    table = [[name] + [f"{row['passes'].get(name, 0.0):.3f}" for row in rows] for name in names]
    return markdown_table(header, table)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.onnx_models", description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(ROOT / "bench" / "results_onnx_models.md"))
    parser.add_argument("--no-densenet", action="store_true")
    parser.add_argument("--quick", action="store_true", help="two small zoo models only")
    args = parser.parse_args()
    specs = QUICK_SPECS if args.quick else ZOO_SPECS
    rows = []
    for spec in specs:
        rows.append(measure(spec, zoo.zoo_spec(spec)))
        print(f"{spec}: build {rows[-1]['build_s']:.2f}s", flush=True)
    if os.path.exists(DENSENET) and not args.no_densenet and not args.quick:
        rows.append(measure("densenet121 (light)", onnx.load(DENSENET)))
    notes = "\n".join(f"- {key}: {value}" for key, value in machine_notes().items())
    text = (
        "# ONNX import and build\n\n"
        "`python -m bench.onnx_models`. Import with `from_onnx`; build with "
        "`passinfra.build(mod, opt_level=3)` under a PassTimingInstrument, cold object cache. "
        "IR calls: call nodes in `main` after import. Kernels: compiled primitive functions. "
        "Run: one call of the library on random inputs. Pass times are summed over a pass's "
        f"runs; passes under {SHOWN_SHARE:.0%} of the build are folded into `other` in the "
        "first table.\n\n"
        + render(rows)
        + "\n\n## Every pass (s)\n\n"
        + render_all_passes(rows)
        + "\n\n## Machine\n\n"
        + notes
        + "\n"
    )
    print(text)
    Path(args.output).write_text(text)


if __name__ == "__main__":
    main()

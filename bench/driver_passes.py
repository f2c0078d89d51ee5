"""The driver's serial passes: the part of a build that no number of workers shortens.

Every pass before the kernel stage (LowerToPrimFunc ... CompileC) runs in the driver, on
the model's one graph function and then, after FuseOps, as module passes over all the
kernels: on a 16-core pool they are most of a DenseNet-121 build once its kernels
compile on 15 workers. This times them pass by pass, as a build runs them (opt_level 3,
the build's own pipeline, ``passinfra.build.COMPILE_PIPELINE`` up to the kernel stage),
on each model, in a fresh process per (tree, model, round) so no cache on an IR node
carries over, rounds interleaved; ``--baseline DIR`` (a checkout of an earlier commit)
measures that tree side by side with this one. Loading the model is not part of it; the
passes run under what ``raypass compile`` builds under where the tree has it (the loaded
objects frozen: ``raypass_cli.common.loaded_objects_frozen``), and the time the garbage
collector took during them is reported beside.

    python -m bench.driver_passes [--models densenet121,resnet50,transformer] [--repeats 5]
                                  [--passes graph|lowering] [--baseline DIR] [--output PATH]

``--passes lowering`` times the kernels' lowering instead (LowerToPrimFunc .. CodegenC,
after the graph passes): what a local build runs on one core and workers spread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.before_after import model_arg
from bench.common import machine_notes, markdown_table, publish

ROOT = Path(__file__).resolve().parent.parent

# run in the measured tree (its PYTHONPATH), printing {"pass": seconds, ...} as JSON
_CHILD = r"""
import contextlib, gc, json, sys, time
from passinfra.build import COMPILE_PIPELINE, _passes
from passinfra.instrument.base import PassInstrument
from passinfra.transform import PassContext
from raypass_cli.common import load_model


class Clock(PassInstrument):
    def __init__(self):
        super().__init__()
        self.seconds, self.started = {}, 0.0

    def run_before_pass(self, mod, info):
        self.started = time.perf_counter()

    def run_after_pass(self, mod, info):
        self.seconds[info.name] = self.seconds.get(info.name, 0.0) + time.perf_counter() - self.started


try:  # what `raypass compile` builds under, where the tree has it
    from raypass_cli.common import loaded_objects_frozen
except ImportError:
    loaded_objects_frozen = contextlib.nullcontext
collecting = {"seconds": 0.0, "since": 0.0}


def collector(phase, info):
    if phase == "start":
        collecting["since"] = time.perf_counter()
    else:
        collecting["seconds"] += time.perf_counter() - collecting["since"]


mod = load_model(sys.argv[1])
graph = COMPILE_PIPELINE[:COMPILE_PIPELINE.index("LowerToPrimFunc")]
lowering = COMPILE_PIPELINE[COMPILE_PIPELINE.index("LowerToPrimFunc"):COMPILE_PIPELINE.index("CompileC")]
clock = Clock()
with loaded_objects_frozen(), PassContext(opt_level=3, instruments=[clock]):
    if sys.argv[2] == "lowering":  # the graph passes first, untimed
        for name in graph:
            mod = _passes((name,))[0](mod)
        clock.seconds.clear()
    gc.callbacks.append(collector)
    started = time.perf_counter()
    for name in (graph if sys.argv[2] == "graph" else lowering):
        # one pass at a time: the passes the Sequential's own InferType runs are timed too
        mod = _passes((name,))[0](mod)
    total = time.perf_counter() - started
print(json.dumps({"total": total, "collector": collecting["seconds"], **clock.seconds}))
"""


def measure(tree: Path, model: str, passes: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", _CHILD, model, passes], capture_output=True, text=True,
                          env=env, cwd=tree, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{tree} {model}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.driver_passes",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="densenet121,resnet50,transformer")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline", default=None, help="an earlier checkout, measured beside this one")
    parser.add_argument("--passes", choices=("graph", "lowering"), default="graph",
                        help="the graph passes (default), or the kernels' lowering (LowerToPrimFunc .. "
                        "CodegenC, after the graph passes)")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results_driver_passes.md"))
    args = parser.parse_args(argv)

    space = Path(tempfile.mkdtemp(prefix="rp-driver-passes-"))
    trees = {"after": ROOT} if args.baseline is None else {"before": Path(args.baseline), "after": ROOT}
    models = {name: model_arg(name, space) for name in args.models.split(",")}
    samples: dict[tuple[str, str], list[dict[str, float]]] = {}
    for round_ in range(args.repeats + 1):  # the first round warms the machine's caches up
        for model, spec in models.items():
            for tree_name, tree in trees.items():
                result = measure(tree, spec, args.passes)
                print(f"round {round_} {model} {tree_name}: {result['total'] * 1e3:.0f} ms", flush=True)
                if round_:
                    samples.setdefault((model, tree_name), []).append(result)

    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1e3:.0f} [{min(values) * 1e3:.0f}-{max(values) * 1e3:.0f}]"

    rows, detail = [], []
    for model in models:
        totals = {tree: [s["total"] for s in samples[(model, tree)]] for tree in trees}
        collector = {tree: [s["collector"] for s in samples[(model, tree)]] for tree in trees}
        row = [model, *(ms(totals[tree]) for tree in trees), *(ms(collector[tree]) for tree in trees)]
        if "before" in trees:
            ratios = sorted(a / b for a, b in zip(totals["after"], totals["before"]))  # round by round
            row.append(f"{statistics.median(ratios):.2f} [{ratios[0]:.2f}-{ratios[-1]:.2f}]")
        rows.append(row)
        def median_ms(name: str, tree: str, model: str = model) -> float:
            return statistics.median(s.get(name, 0.0) for s in samples[(model, tree)]) * 1e3

        passes = sorted({name for s in samples[(model, "after")] for name in s} - {"total", "collector"},
                        key=lambda name: -median_ms(name, "after"))
        for name in passes:
            cells = [median_ms(name, tree) for tree in trees]
            if max(cells) >= 3.0:
                detail.append([model, name, *(f"{cell:.1f}" for cell in cells)])
    tree_names = list(trees)
    header = ["model", *(f"{tree} ms" for tree in tree_names),
              *(f"{tree}: in the garbage collector, ms" for tree in tree_names)]
    header += ["after / before"] if "before" in trees else []
    notes = machine_notes()
    text = "\n".join([
        "# The driver's serial passes" if args.passes == "graph" else "# The kernels' lowering passes",
        "",
        f"`python -m bench.driver_passes --models {args.models} --repeats {args.repeats} "
        f"--passes {args.passes}{' --baseline ' + args.baseline if args.baseline else ''}`; "
        f"{notes['machine']}, load {notes['load average (1, 5, 15 min)']}. "
        + ("Every pass before the kernel stage" if args.passes == "graph" else
           "The kernels' lowering passes (LowerToPrimFunc .. CodegenC, after the graph passes)")
        + ", as a build runs them (opt_level 3), in a fresh process per tree, model and round; "
        "medians of "
        f"{args.repeats} interleaved rounds [min-max], after one warm-up round.",
        "",
        markdown_table(header, rows),
        "",
        "Per pass (medians, ms; passes of at least 3 ms):",
        "",
        markdown_table(["model", "pass", *(f"{tree} ms" for tree in tree_names)], detail),
        "",
    ])
    publish(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

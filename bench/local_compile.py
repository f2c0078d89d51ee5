"""A local build's kernels compiled on every core: ``codegen.compile_jobs`` (default: the
CPUs this process may use) against one compile at a time (``codegen.compile_jobs=1``,
what the local backend did before).

In-process, CompileC starts every kernel's compile ahead on threads, one compiler
process each, and takes the results in module order (``passinfra/codegen/passes/
compile_c.py``). This times whole ``raypass compile MODEL --no-cache --backend local``
processes of each model both ways, interleaved, after a warm-up round, and checks that
the library and weights are byte-identical.

    python -m bench.local_compile [--models densenet121,resnet50,transformer] [--repeats 3]
                                  [--output PATH]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench.before_after import built_seconds, model_arg
from bench.common import machine_notes, markdown_table, publish
from bench.scaling_curve import Runner
from passinfra.runtime.cpus import available_cpus

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {"one compile at a time": ["--config", "codegen.compile_jobs=1"], "every core": []}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.local_compile",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="densenet121,resnet50,transformer")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results_local_compile.md"))
    args = parser.parse_args(argv)

    space = Path(tempfile.mkdtemp(prefix="rp-local-compile-"))
    try:
        return _run(args, space)
    finally:
        shutil.rmtree(space, ignore_errors=True)  # the saved models and libraries


def _run(args: argparse.Namespace, space: Path) -> int:
    runner = Runner(space)
    models = {name: model_arg(name, space) for name in args.models.split(",")}
    whole: dict[tuple[str, str], list[float]] = {}
    builds: dict[tuple[str, str], list[float]] = {}
    identical: dict[str, bool] = {}
    for round_ in range(args.repeats + 1):  # the first round warms up, uncounted
        for model, spec in models.items():
            for variant, extra in VARIANTS.items():
                lib = space / f"{model}-{'one' if extra else 'all'}.so"
                seconds, done = runner.raypass(["compile", spec, "--no-cache", "--backend", "local", "-o",
                                                str(lib), *extra])
                print(f"round {round_} {model} {variant}: {seconds:.2f} s", flush=True)
                if round_:
                    whole.setdefault((model, variant), []).append(seconds)
                    builds.setdefault((model, variant), []).append(built_seconds(done.stdout))
            one, every = (space / f"{model}-{kind}.so" for kind in ("one", "all"))
            identical[model] = all(Path(f"{one}{ext}").read_bytes() == Path(f"{every}{ext}").read_bytes()
                                   for ext in ("", ".weights.bin"))

    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"

    rows = []
    for model in models:
        one, every = (whole[(model, variant)] for variant in VARIANTS)
        ratios = sorted(b / a for a, b in zip(one, every))  # round by round
        rows.append([model, cell(one), cell(every), cell(builds[(model, "one compile at a time")]),
                     cell(builds[(model, "every core")]),
                     f"{statistics.median(ratios):.2f} [{ratios[0]:.2f}-{ratios[-1]:.2f}]",
                     "yes" if identical[model] else "NO"])
    notes = machine_notes()
    text = "\n".join([
        "# Local builds: the kernels compiled on every core",
        "",
        f"`python -m bench.local_compile --models {args.models} --repeats {args.repeats}`; "
        f"{notes['machine']}, {available_cpus()} CPUs for this process, load "
        f"{notes['load average (1, 5, 15 min)']}. Whole "
        "`raypass compile MODEL --no-cache --backend local` processes, seconds, medians of "
        f"{args.repeats} interleaved rounds [min-max] after a warm-up round.",
        "",
        markdown_table(["model", "whole, one compile at a time", "whole, every core",
                        "build, one at a time", "build, every core", "every core / one at a time",
                        "library identical"], rows),
        "",
    ])
    publish(args.output, text)
    return 0 if all(identical.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

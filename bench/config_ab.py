"""Whole compiles with one ``--config KEY=VALUE`` against another, interleaved: what a
scheduler or codegen switch is worth as a user waits for it.

Each round runs ``raypass compile MODEL --no-cache`` once per variant (``--backend ray``
on a warm pool of ``--workers`` started first, or ``--backend local``), in the same order,
after one uncounted warm-up round; every variant's library must be byte-identical to
the first's. From each run's ``--trace`` it also reports the function stages' efficiency:
the workers' busy time over (workers x the stages' wall time).

    python -m bench.config_ab --config scheduler.work_queue=true --config scheduler.work_queue=false
        [--models densenet121,resnet50] [--workers 2] [--repeats 3] [--output PATH]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench.before_after import model_arg
from bench.common import machine_notes, markdown_table
from bench.scaling_curve import Runner

ROOT = Path(__file__).resolve().parent.parent


def stage_efficiency(trace: Path) -> float:
    """Workers' busy seconds in the shipped function stages over workers x their wall."""
    document = json.loads(trace.read_text())
    workers = document["otherData"]["raypass_run"]["num_workers"] or 1
    stages = [e for e in document["traceEvents"]
              if e["ph"] == "X" and e["cat"] == "stage" and not e["args"]["ran_in_driver"]]
    wall = sum(e["dur"] for e in stages)
    busy = sum(e["args"]["worker_seconds"] for e in stages) * 1e6
    return busy / (workers * wall) if wall else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.config_ab", description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", required=True, help="KEY=VALUE, one per variant")
    parser.add_argument("--models", default="densenet121,resnet50")
    parser.add_argument("--backend", choices=("ray", "local"), default="ray")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results_config_ab.md"))
    args = parser.parse_args(argv)
    space = Path(tempfile.mkdtemp(prefix="rp-ab-config-"))
    runner = Runner(space)
    pool = args.workers if args.backend == "ray" else None
    rows = []
    try:
        if pool:
            runner.raypass(["pool", "start", "--workers", str(pool)], pool)
        for model in (m.strip() for m in args.models.split(",") if m.strip()):
            spec = model_arg(model, space)
            times: dict[str, list[float]] = {config: [] for config in args.config}
            efficiency: dict[str, list[float]] = {config: [] for config in args.config}
            for round_index in range(args.repeats + 1):
                for variant, config in enumerate(args.config):
                    backend = ["--backend", "ray", "--workers", str(pool)] if pool else ["--backend", "local"]
                    trace = space / f"trace-{variant}.json"
                    command = ["compile", spec, "--no-cache", "-o", f"v{variant}.so", *backend,
                               "--config", config, "--trace", str(trace)]
                    seconds, _ = runner.raypass(command, pool)
                    print(f"[config_ab] {model} {config}: {seconds:.2f} s", file=sys.stderr, flush=True)
                    if (space / f"v{variant}.so").read_bytes() != (space / "v0.so").read_bytes():
                        raise SystemExit(f"{model}: the library of {config} differs from {args.config[0]}'s")
                    if round_index > 0:
                        times[config].append(seconds)
                        if pool:
                            efficiency[config].append(stage_efficiency(trace))
            base = statistics.median(times[args.config[0]])
            for config in args.config:
                median = statistics.median(times[config])
                rows.append([model, f"`{config}`", f"{median:.2f}",
                             f"{min(times[config]):.2f}-{max(times[config]):.2f}", f"{median / base:.2f}",
                             f"{statistics.median(efficiency[config]):.0%}" if efficiency[config] else "-"])
    finally:
        if pool:
            runner.raypass(["pool", "stop"], pool)
        shutil.rmtree(space, ignore_errors=True)
    notes = machine_notes()
    text = "\n".join([
        "# Whole compiles, one config against another", "",
        f"`python -m bench.config_ab {' '.join(f'--config {c}' for c in args.config)} --models {args.models} "
        f"--backend {args.backend} --workers {args.workers} --repeats {args.repeats}`; {notes['machine']}, "
        f"load {notes['load average (1, 5, 15 min)']}. Whole `raypass compile --no-cache` processes"
        f"{' on a warm pool' if pool else ''}, interleaved, {args.repeats} rounds after a warm-up; medians "
        "(min-max); libraries byte-identical across the variants. Stage efficiency: the workers' busy time "
        "in the shipped function stages over workers x those stages' wall time (median).", "",
        markdown_table(["model", "config", "median s", "range s", "/ first", "stage efficiency"], rows), "",
    ])
    Path(args.output).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Whole ``raypass compile`` processes of two source trees, interleaved (issue 28).

What a user waits for: ``raypass compile MODEL --no-cache -o LIB`` from the start of
the process to its exit, with the code of the tree ``--before`` (a checkout of an earlier
commit, e.g. ``git worktree add /tmp/before <commit>``) and of this checkout, side by
side: every round runs every (tree, backend) once, each round starting one further down
the list (a variant does not always follow the same one), after one warm-up round that is
not counted. Backends:

* ``local``: in-process (this checkout's is the baseline of the ratios);
* ``no pool``: ``--backend ray --workers N`` with no pool running: the compile starts a
  private pool of its own;
* ``warm pool``: ``--backend ray --workers N`` on a pool of that tree's code, started
  with ``raypass pool start --workers N`` before the rounds (each tree has its own pool
  directory: a pool serves only drivers of its own sources).

Each run's library is compared with the local one of its tree (bytes of the .so and of
the weights): parallel equals sequential. Writes a markdown table (medians, min-max, ratios to local).
With ``--stages`` it also reports the kernel stages' wall times from each compile's trace.
With ``--pool-starts ROUNDS`` it first times ``raypass pool start`` of each tree (``--models ''``:
only that), with the machine's busy CPU during each start: a pool's processes, not this one's.

    python -m bench.before_after --before /tmp/before [--models densenet121,resnet50,transformer]
(transformer: the zoo's, 24 layers x 512, saved as an ONNX file with external data)
                                 [--repeats 3] [--workers 2] [--auto] [--stages] [--pool-starts ROUNDS]
                                 [--output bench/results_before_after.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import machine_notes, markdown_table, python_path

ROOT = Path(__file__).resolve().parent.parent

ZOO = {"mlp": "zoo:mlp"}
LIGHT = ("densenet121", "resnet50")
# compiled from its saved ONNX file (weights as external data), as a user has it: built
# from the zoo spec, the process would spend 3 s making random weights and checking them
TRANSFORMER = {"layers": 24, "hidden": 512}
BACKENDS = ("local", "no pool", "warm pool")
# with --auto, this checkout also under --backend auto, with and without its warm pool
AUTO_BACKENDS = ("auto, no pool", "auto, warm pool")
TIMEOUT_S = 1800.0


def model_arg(name: str, space: Path) -> str:
    if name in ZOO:
        return ZOO[name]
    import onnx

    if name == "transformer":
        path = space / "transformer.onnx"
        if not path.exists():
            from passinfra.frontend.zoo.onnx_models import transformer

            onnx.save_model(transformer(**TRANSFORMER), str(path), save_as_external_data=True,
                            all_tensors_to_one_file=True, location="transformer.data", size_threshold=1024)
        return str(path)

    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"
    if not path.exists():
        raise SystemExit(f"unknown model {name!r}: one of {', '.join((*LIGHT, *ZOO, 'transformer'))}")
    return str(path)


@dataclass
class Variant:
    tree: str  # "before" or "after"
    backend: str
    times: list[float] = field(default_factory=list)
    builds: list[float] = field(default_factory=list)
    identical: list[bool] = field(default_factory=list)
    # with --stages: the wall ms of the build's kernel stages, by STAGE_KINDS' label
    stages: dict[str, list[float]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.backend}, {self.tree}"


class Trees:
    def __init__(self, before: Path, workers: int, space: Path) -> None:
        self.roots = {"before": before.resolve(), "after": ROOT}
        self.workers = workers
        self.space = space

    def env(self, tree: str, pool: bool) -> dict[str, str]:
        env = dict(os.environ, PYTHONPATH=python_path(self.roots[tree]), COLUMNS="200")
        env.pop("RAY_ADDRESS", None)
        # a pool is found only through its own directory; a no-pool run gets an empty one
        env["RAYPASS_POOL_DIR"] = str(self.space / (f"pool-{tree}" if pool else f"nopool-{tree}"))
        env["RAY_TMPDIR"] = str(self.space / f"ray-{tree}")
        return env

    def raypass(self, tree: str, args: list[str], pool: bool) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "raypass_cli.main", *args]
        return subprocess.run(command, cwd=self.space, env=self.env(tree, pool), capture_output=True,
                              text=True, timeout=TIMEOUT_S)


def built_seconds(stdout: str) -> float:
    for line in stdout.splitlines():
        if " built in " in line:
            return float(line.split(" built in ")[1].split("s")[0])
    return float("nan")


# the function stages --stages reports, by a pass each holds (from the build's trace)
STAGE_KINDS = {"lowering stage": "LowerToPrimFunc", "compile stage": "CompileC", "build_compile": None}
# ... and how evenly the compile stage kept the workers busy: their mean busy time over the
# busiest one's (1.0: every worker finished together)
BALANCE = "compile stage balance"


def stage_walls(trace: Path) -> dict[str, float]:
    """Wall ms of the build's pipeline and its kernel stages in a ``--trace`` file, and the
    compile stage's :data:`BALANCE` where workers ran it."""
    events = json.loads(trace.read_text())
    spans = [e for e in (events["traceEvents"] if isinstance(events, dict) else events) if e.get("ph") == "X"]
    walls = {}
    for label, held in STAGE_KINDS.items():
        for span in spans:
            name = span["name"]
            stage_holds = name.startswith("stage ") and held is not None and held in name.split(":")[1]
            if stage_holds or (held is None and name == label):
                walls[label] = span["dur"] / 1e3
                if held == "CompileC":
                    walls.update(_balance(spans, span))
                break
    return walls


def _balance(spans: list[dict], stage: dict) -> dict[str, float]:
    """:data:`BALANCE` of ``stage`` from its workers' CompileC spans (the worker lanes of
    raypass_cli/trace.py: tids 1.., below the stage lanes)."""
    busy: dict[int, float] = {}
    for span in spans:
        inside = stage["ts"] <= span["ts"] <= stage["ts"] + stage["dur"]
        if span["name"] == "CompileC" and 0 < span["tid"] < 10000 and inside:
            busy[span["tid"]] = busy.get(span["tid"], 0.0) + span["dur"]
    if len(busy) < 2:
        return {}
    return {BALANCE: statistics.fmean(busy.values()) / max(busy.values())}


def busy_cpu_seconds() -> float:
    """CPU seconds this machine has spent busy since boot, every process's (/proc/stat):
    a pool's start-up runs in processes this one does not wait for."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(f) for f in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def time_pool_starts(trees: Trees, rounds: int) -> list[list[str]]:
    """``raypass pool start --workers N`` of each tree ``rounds`` times, alternating which
    goes first, each stopped before the next: (tree, median wall s, range, median busy CPU s
    of the machine during the start, range) rows."""
    seconds: dict[str, list[float]] = {"before": [], "after": []}
    cpu: dict[str, list[float]] = {"before": [], "after": []}
    for index in range(rounds):
        for tree in ("before", "after") if index % 2 == 0 else ("after", "before"):
            busy, started = busy_cpu_seconds(), time.perf_counter()
            done = trees.raypass(tree, ["pool", "start", "--workers", str(trees.workers)], pool=True)
            seconds[tree].append(time.perf_counter() - started)
            cpu[tree].append(busy_cpu_seconds() - busy)
            trees.raypass(tree, ["pool", "stop"], pool=True)
            if done.returncode != 0:
                raise SystemExit(f"pool start ({tree}) failed: {done.stderr[-2000:]}")
            print(f"[before_after] pool start, {tree}: {seconds[tree][-1]:.2f} s, machine CPU "
                  f"{cpu[tree][-1]:.2f} s", file=sys.stderr, flush=True)
            time.sleep(2.0)  # the stopped pool's processes gone
    def summary(values: list[float]) -> list[str]:
        return [f"{statistics.median(values):.2f}", f"{min(values):.2f}-{max(values):.2f}"]

    return [[tree, *summary(seconds[tree]), *summary(cpu[tree])] for tree in ("before", "after")]


def run_round(trees: Trees, model: str, variants: list[Variant], counted: bool, shift: int = 0,
              stages: bool = False) -> None:
    """Every variant once, starting at ``shift`` (rounds rotate the order, so no variant
    always runs right after the same one: a warm pool's compile leaves its workers busy for
    a moment, which the next compile pays)."""
    out = trees.space / "out"
    out.mkdir(exist_ok=True)
    shift %= len(variants)
    for variant in variants[shift:] + variants[:shift]:
        # parallel equals sequential, per tree (the local library of this round or, rotated
        # after it, the last one: the same bytes)
        reference = out / f"{model}-{variant.tree}-local.so"
        args = ["compile", model_arg(model, trees.space), "--no-cache", "-o"]
        lib = out / f"{model}-{variant.tree}-{variant.backend.replace(' ', '_')}.so"
        lib = lib.with_name(lib.name.replace(",", ""))
        kind = "auto" if variant.backend.startswith("auto") else "ray"
        backend = ["--backend", "local"] if variant.backend == "local" else [
            "--backend", kind, "--workers", str(trees.workers)]
        trace = out / f"{model}-{variant.tree}-{variant.backend.replace(' ', '_')}.trace.json"
        if stages:
            backend += ["--trace", str(trace)]
        started = time.perf_counter()
        done = trees.raypass(variant.tree, [*args, str(lib), *backend], variant.backend.endswith("warm pool"))
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{model} {variant.label} failed:\n{done.stderr[-3000:]}")
        last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        print(f"[before_after] {model} {variant.label}: {seconds:.2f} s  {last[-100:]}", file=sys.stderr,
              flush=True)
        if counted:
            variant.times.append(seconds)
            variant.builds.append(built_seconds(done.stdout))
            if stages:
                for label, wall in stage_walls(trace).items():
                    variant.stages.setdefault(label, []).append(wall)
            if variant.backend != "local":
                same = all((Path(f"{lib}{ext}").read_bytes() == Path(f"{reference}{ext}").read_bytes())
                           for ext in ("", ".weights.bin"))
                variant.identical.append(same)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.before_after", description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, type=Path, help="the source tree to compare against")
    parser.add_argument("--models", default="densenet121,resnet50,transformer")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--auto", action="store_true", help="also --backend auto (this checkout)")
    parser.add_argument("--backends", default=",".join(BACKENDS[1:]),
                        help="of 'no pool' and 'warm pool', which run (local always does)")
    parser.add_argument("--stages", action="store_true",
                        help="also the kernel stages' wall times, from each compile's --trace")
    parser.add_argument("--pool-starts", type=int, default=0, metavar="ROUNDS",
                        help="also time `raypass pool start` of each tree, this many rounds, first")
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results_before_after.md")
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    space = Path(tempfile.mkdtemp(prefix="rp-ab-"))
    trees = Trees(args.before, args.workers, space)
    started = time.time()
    results: dict[str, list[Variant]] = {}
    backends = [name for name in BACKENDS[1:] if name in args.backends.split(",")]
    pooled = ("warm pool" in backends or args.auto) and bool(models)
    starts: list[list[str]] = []
    try:
        if args.pool_starts:
            starts = time_pool_starts(trees, args.pool_starts)
        for tree in ("before", "after") if pooled else ():
            done = trees.raypass(tree, ["pool", "start", "--workers", str(args.workers)], pool=True)
            if done.returncode != 0:
                raise SystemExit(f"pool start ({tree}) failed: {done.stderr[-2000:]}")
        for model in models:
            variants = [Variant("after", "local"), Variant("before", "local")] + [
                Variant(tree, backend) for backend in backends for tree in ("before", "after")]
            if args.auto:
                variants += [Variant("after", backend) for backend in AUTO_BACKENDS]
            results[model] = variants
            for round_index in range(args.repeats + 1):
                run_round(trees, model, variants, counted=round_index > 0, shift=round_index,
                          stages=args.stages)
    finally:
        for tree in ("before", "after") if pooled else ():
            trees.raypass(tree, ["pool", "stop"], pool=True)
        shutil.rmtree(space, ignore_errors=True)
    rows = []
    for model, variants in results.items():
        base = statistics.median(variants[0].times)
        for variant in variants:
            median = statistics.median(variant.times)
            build = statistics.median(variant.builds)
            rows.append([
                model, variant.label, f"{median:.2f}", f"{min(variant.times):.2f}-{max(variant.times):.2f}",
                f"{median / base:.2f}", f"{build:.2f}", f"{median - build:.2f}",
                "-" if variant.backend == "local" else ("yes" if all(variant.identical) else "NO"),
            ])
    header = ["model", "variant", "median s", "range s", "/ local", "build s (reported)",
              "rest s (outside the build)", "library identical to local"]
    notes = machine_notes()
    chosen = f" --backends '{args.backends}'" if args.backends != ",".join(BACKENDS[1:]) else ""
    chosen += f" --pool-starts {args.pool_starts}" if args.pool_starts else ""
    chosen += " --stages" if args.stages else ""
    def spread(values: list[float], digits: int) -> str:
        return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"

    stage_rows = [[model, variant.label, *(
        spread(variant.stages[label], 2 if label == BALANCE else 0) if variant.stages.get(label) else "-"
        for label in (*STAGE_KINDS, BALANCE))]
        for model, variants in results.items() for variant in variants] if args.stages else []
    stage_table = [
        "Wall ms of the compile pipeline (`build_compile`) and of its kernel stages, from each compile's "
        "`--trace`, medians [min-max], and the compile stage's balance: its workers' mean CompileC time "
        "over the busiest one's (1.00: they finished together):", "",
        markdown_table(["model", "variant", *STAGE_KINDS, BALANCE], stage_rows), "",
    ] if stage_rows else []
    start_table = [
        f"`raypass pool start --workers {args.workers}`, {args.pool_starts} rounds (each stopped before the "
        "next), wall seconds and the machine's busy CPU seconds during it (every process's, "
        "/proc/stat):", "",
        markdown_table(["tree", "median s", "range s", "machine CPU s", "range CPU s"], starts), "",
    ] if starts else []
    text = "\n".join([
        "# Whole compiles before and after (issue 28)", "",
        f"`python -m bench.before_after --before {args.before} --models {args.models} --repeats "
        f"{args.repeats} --workers {args.workers}{' --auto' if args.auto else ''}{chosen}`: "
        f"{time.time() - started:.0f} s; whole `raypass compile "
        "MODEL --no-cache` processes, interleaved rounds after one warm-up round, medians and min-max. "
        "`before` is the tree given, `after` this checkout; both warm pools ran during all rounds "
        f"(idle unless used). Machine: {notes.get('machine', '?')}.", "",
        *start_table,
        *([markdown_table(header, rows), ""] if rows else []),
        *stage_table,
    ])
    args.output.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

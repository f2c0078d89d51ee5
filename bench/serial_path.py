"""Issue 16, item 3 ("a shorter serial path"): what of a build no worker count shortens.

    python -m bench.serial_path [--quick] [--repeats N] [--baseline DIR] [--output FILE]

Three measurements, each in whole processes:

1. Depth: ``raypass compile`` of ``zoo:transformer?layers=8&hidden=256`` and of
   ``layers=80`` (saved as ONNX files first), ``--backend local``, each run with a fresh
   ``--cache-dir`` (a cold compile cache; the command's timing instruments keep the
   whole-build cache out), and again with ``--no-cache``. Identical
   layers dedupe to the same kernels, so the 80-layer build compiles no more C than the
   8-layer one: what grows is the serial path (and the weights: 25 MB vs 250 MB). Reported:
   the wall-time ratio layers=80 / layers=8 (target <= 1.5x), and the same ratio of the
   processes' CPU time (user + sys, with the C compilers they ran), which the load other
   processes put on this machine disturbs less.
2. The serial fraction of the 24-layer transformer's build (``zoo:transformer?layers=24``)
   on ``Scheduler(backend="ray", num_workers=2)``, cold cache: the part of
   ``passinfra.build`` outside the function stages the workers ran (graph passes on the
   single ``main``, InferType, FuseOps, the link step, loading the library, the build
   cache), as a share of the build; a breakdown of it by pass; and the simulator's
   speedup over the in-process build at 16 and 64 workers (``bench/simulator.py``:
   ``workload_from_run`` on the last N=2 run, overheads fitted from it).
3. The link step of the 80-layer model in-process (PlanMemory, HostCodegen, LinkLibrary,
   then loading the library), where the weights make the serial path grow with depth.

Variants are interleaved: round after round, every tree and model once. ``--baseline DIR``
(a checkout, e.g. ``git archive HEAD | tar -x -C DIR``) measures that tree side by side
with this one, so "before" and "after" share the machine's load. The second and third
measurements run in a subprocess per tree and round (the second with its own private Ray
instance, shut down at the end), which prints its numbers as JSON.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_OUTPUT = ROOT / "bench" / "results_serial_path.md"
DEPTH_MODELS = {
    "layers=8": "zoo:transformer?layers=8&hidden=256",
    "layers=80": "zoo:transformer?layers=80&hidden=256",
}
SERIAL_MODEL = "zoo:transformer?layers=24"
TARGET_DEPTH_RATIO = 1.5
SIMULATED_WORKERS = (16, 64)
CACHE_MODES = {"fresh cache dir": "fresh", "--no-cache": "none"}
_JSON_MARK = "SERIAL_PATH_JSON:"
_CLI = "from raypass_cli.main import cli; cli()"  # the `raypass` command's own entry


# ----- summaries -----------------------------------------------------------------------------
def _median_range(values: list[float], unit: str = "s", digits: int = 2) -> str:
    return (
        f"{statistics.median(values):.{digits}f} {unit} [{min(values):.{digits}f}-{max(values):.{digits}f}]"
    )


def _ratio(numerator: list[float], denominator: list[float]) -> tuple[float, float, float]:
    """Ratio of medians, with the range pairing the extremes the pessimistic way round."""
    return (
        statistics.median(numerator) / statistics.median(denominator),
        min(numerator) / max(denominator),
        max(numerator) / min(denominator),
    )


def _ratio_text(value: tuple[float, float, float]) -> str:
    return f"{value[0]:.2f}x [{value[1]:.2f}-{value[2]:.2f}]"


def _verdict(value: float, target: float) -> str:
    if value <= target:
        return "met"
    return f"MISSED by {value - target:.2f} ({100 * (value - target) / target:.0f}%)"


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


# ----- 1. depth: whole `raypass compile` processes -------------------------------------------
@dataclass
class Runs:
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)


def export_onnx(directory: Path) -> dict[str, Path]:
    """The depth models as ONNX files (built by this tree's zoo)."""
    import onnx

    from passinfra.frontend.zoo import zoo_spec

    paths = {}
    for label, spec in DEPTH_MODELS.items():
        path = directory / f"transformer_{label.replace('=', '')}_hidden256.onnx"
        onnx.save(zoo_spec(spec), str(path))
        paths[label] = path
    return paths


def compile_process(tree: Path, model: Path, work: Path, cache_mode: str) -> tuple[float, float]:
    """One whole ``raypass compile`` of ``model`` with ``tree``'s code: (wall, CPU seconds
    of the process and the compilers it ran)."""
    with tempfile.TemporaryDirectory(dir=work) as scratch:
        cache = ["--cache-dir", str(Path(scratch) / "cache")] if cache_mode == "fresh" else ["--no-cache"]
        command = [
            sys.executable,
            "-c",
            _CLI,
            "compile",
            str(model),
            "-o",
            str(Path(scratch) / "model.so"),
            "--backend",
            "local",
            *cache,
        ]
        env = dict(os.environ, PYTHONPATH=str(tree))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=1800)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} (tree {tree}) exited {done.returncode}: {done.stderr[-2000:]}"
        )
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure_depth(trees: dict[str, Path], repeats: int, work: Path) -> dict[tuple[str, str, str], Runs]:
    """(tree, cache mode, model) -> runs; one warm-up round, then ``repeats`` rounds."""
    models = export_onnx(work)
    runs: dict[tuple[str, str, str], Runs] = {}
    for round_index in range(repeats + 1):
        for mode_label, mode in CACHE_MODES.items():
            for tree_label, tree in trees.items():
                for model_label, model in models.items():
                    wall, cpu = compile_process(tree, model, work, mode)
                    if round_index:
                        entry = runs.setdefault((tree_label, mode_label, model_label), Runs())
                        entry.walls.append(wall)
                        entry.cpus.append(cpu)
    return runs


def depth_report(
    runs: dict[tuple[str, str, str], Runs], trees: list[str]
) -> tuple[list[str], list[list[str]]]:
    low, high = DEPTH_MODELS
    rows, headline = [], []
    for mode_label in CACHE_MODES:
        for tree in trees:
            small, large = runs[(tree, mode_label, low)], runs[(tree, mode_label, high)]
            wall_ratio = _ratio(large.walls, small.walls)
            rows.append(
                [
                    tree,
                    mode_label,
                    _median_range(small.walls),
                    _median_range(large.walls),
                    _ratio_text(wall_ratio),
                    _ratio_text(_ratio(large.cpus, small.cpus)),
                    _verdict(wall_ratio[0], TARGET_DEPTH_RATIO),
                ]
            )
            headline.append(
                [
                    f"depth: compile layers=80 / layers=8 ({mode_label}), {tree}",
                    f"{wall_ratio[0]:.2f}x",
                    f"{wall_ratio[1]:.2f}-{wall_ratio[2]:.2f}",
                    f"<= {TARGET_DEPTH_RATIO}x",
                    _verdict(wall_ratio[0], TARGET_DEPTH_RATIO),
                ]
            )
    count = len(next(iter(runs.values())).walls)
    lines = [
        f"Whole `raypass compile MODEL.onnx -o LIB --backend local` processes, {count} interleaved "
        "rounds after a warm-up round (median [min-max]); the ratio's range pairs the extremes "
        "pessimistically. CPU = user + sys of the process and the C compilers it ran.",
        "",
        _table(
            [
                "tree",
                "caches",
                f"{low} wall",
                f"{high} wall",
                "wall ratio",
                "CPU ratio",
                f"target <= {TARGET_DEPTH_RATIO}x",
            ],
            rows,
        ),
    ]
    return lines, headline


# ----- 2. the serial fraction at N=2 and the simulator (runs inside a tree) -------------------
# Every measured build starts with a full garbage collection: in a process that has built
# before, a collection of the whole heap (25-150 ms here) lands at some point of a build,
# and where it lands shifts with every allocation the code under test makes. Collecting
# first keeps it out of every build, so trees compare without that lottery (whole
# `raypass compile` processes, section 1, keep it: one full collection each).
def _build_once(mod: Any, sched: Any) -> tuple[float, Any]:
    import passinfra
    from passinfra.transform import PassContext

    with tempfile.TemporaryDirectory(prefix="raypass-serial-cache-") as cache:
        with PassContext(config={"codegen.cache_dir": cache}):
            gc.collect()  # see the comment above
            started = time.perf_counter()
            passinfra.build(mod, opt_level=3, scheduler=sched)
            wall = time.perf_counter() - started
    return wall, (sched.last_run if sched is not None else None)


def _worker_stage_seconds(run: Any) -> float:
    return sum(s.wall_seconds for s in run.stages if s.kind == "function" and not s.ran_in_driver)


def _breakdown(mod: Any, sched: Any) -> dict[str, float]:
    """Driver seconds of one N=2 build by part, from a timed (so uncached) build."""
    import passinfra
    from passinfra.instrument import PassTimingInstrument
    from passinfra.transform import PassContext

    timing = PassTimingInstrument()
    with tempfile.TemporaryDirectory(prefix="raypass-serial-cache-") as cache:
        with PassContext(config={"codegen.cache_dir": cache}, instruments=[timing]):
            gc.collect()
            started = time.perf_counter()
            passinfra.build(mod, opt_level=3, scheduler=sched)
            wall = time.perf_counter() - started
            tree = timing.timings()
    run = sched.last_run
    leaves: dict[str, float] = {}
    stack = list(tree)
    while stack:
        entry = stack.pop()
        if entry["children"]:
            stack.extend(entry["children"])
        else:
            leaves[entry["name"]] = leaves.get(entry["name"], 0.0) + entry["total_us"] / 1e6
    parts = {
        "graph passes on main (function stages run in the driver)": sum(
            s.wall_seconds for s in run.stages if s.kind == "function" and s.ran_in_driver
        ),
        "InferType (module pass)": sum(e.seconds for e in run.driver_events if e.name == "InferType"),
        "FuseOps (module pass)": sum(e.seconds for e in run.driver_events if e.name == "FuseOps"),
        "kernel stage on the workers (parallel)": _worker_stage_seconds(run),
        "PlanMemory": leaves.get("PlanMemory", 0.0),
        "HostCodegen": leaves.get("HostCodegen", 0.0),
        "LinkLibrary": leaves.get("LinkLibrary", 0.0),
    }
    parts["other (executor, typing the input, loading the library)"] = wall - sum(parts.values())
    parts["build wall"] = wall
    return parts


def serial_worker(builds: int) -> dict[str, Any]:
    """One process's measurements of the 24-layer build (see the module docstring)."""
    from bench import simulator
    from bench.common import (
        noop_round_trip_seconds,
        ray_scheduler,
        submit_seconds_per_call,
        transfer_bandwidth,
    )
    from passinfra.build import compile_pipeline
    from passinfra.frontend import from_onnx
    from passinfra.frontend.zoo import zoo_spec
    from passinfra.transform import PassContext
    from scheduler import build_plan

    mod = from_onnx(zoo_spec(SERIAL_MODEL))
    with PassContext(opt_level=3):
        leaf_stage = simulator.plan_leaf_stages(build_plan(compile_pipeline()))
    sched = ray_scheduler(2)
    try:
        _build_once(mod, None)  # warm-up: imports, first compiles of each code path
        _build_once(mod, sched)
        result: dict[str, Any] = {"local": [], "n2": [], "serial": [], "fraction": [], "after_scheduler": []}
        run = None
        for _ in range(builds):
            result["local"].append(_build_once(mod, None)[0])
            wall, run = _build_once(mod, sched)
            serial = wall - _worker_stage_seconds(run)
            result["n2"].append(wall)
            result["serial"].append(serial)
            result["fraction"].append(serial / wall)
            result["after_scheduler"].append(wall - run.wall_seconds)
        assert run is not None
        # the simulator: per-function costs of the last N=2 run, its serial part plus the
        # time after the scheduler (link, loading, the cache)
        after = result["n2"][-1] - run.wall_seconds
        workload = simulator.workload_from_run(run, leaf_stage, extra_serial=after)
        overheads = simulator.fit_overheads(
            run, noop_round_trip_seconds(sched), submit_seconds_per_call(sched), transfer_bandwidth()
        )
        counts = (1, 2, *SIMULATED_WORKERS)
        data = simulator.curve(workload, overheads, counts)
        local = statistics.median(result["local"])
        result["simulated_speedup"] = {str(n): local / seconds for n, seconds in zip(counts, data.simulated)}
        result["simulated_serial_seconds"] = workload.serial_seconds
        result["largest_function_seconds"] = max(max(costs.values()) for costs in workload.stages if costs)
        result["kernel_stage_functions"] = max(len(costs) for costs in workload.stages)
        timed = [_breakdown(mod, sched) for _ in range(2)]
        result["breakdown"] = {part: statistics.median(t[part] for t in timed) for part in timed[0]}
        # in the untimed builds, the whole-build cache works too: its key (a structural
        # hash of the input) and its store join the link step and the loading
        result["breakdown"]["untimed builds: after the scheduler (link, load, build cache)"] = (
            statistics.median(result["after_scheduler"])
        )
        return result
    finally:
        sched.shutdown()
        import ray

        ray.shutdown()


def run_workers(trees: dict[str, Path], rounds: int, worker_args: list[str]) -> dict[str, dict[str, Any]]:
    """``python -m bench.serial_path WORKER_ARGS`` in each tree, ``rounds`` times (the
    trees' order alternating); per tree, the workers' lists concatenated, their scalars
    and dict entries collected into lists."""
    merged: dict[str, dict[str, Any]] = {label: {} for label in trees}
    for round_index in range(rounds):
        order = list(trees.items())
        if round_index % 2:  # alternate which tree goes first: neither always follows the other
            order.reverse()
        for label, tree in order:
            command = [sys.executable, "-m", "bench.serial_path", *worker_args]
            env = dict(os.environ, PYTHONPATH=str(tree))
            done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
            lines = [line for line in done.stdout.splitlines() if line.startswith(_JSON_MARK)]
            if done.returncode != 0 or not lines:
                raise RuntimeError(
                    f"{' '.join(worker_args)} in {tree} exited {done.returncode}: {done.stderr[-3000:]}"
                )
            data = json.loads(lines[-1][len(_JSON_MARK) :])
            target = merged[label]
            for key, value in data.items():
                if isinstance(value, list):
                    target.setdefault(key, []).extend(value)
                elif isinstance(value, dict):
                    for name, number in value.items():
                        target.setdefault(key, {}).setdefault(name, []).append(number)
                else:
                    target.setdefault(key, []).append(value)
    return merged


def serial_report(data: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    trees = list(data)
    rows = []
    for tree in trees:
        d = data[tree]
        rows.append(
            [
                tree,
                _median_range(d["local"]),
                _median_range(d["n2"]),
                _median_range(d["serial"], digits=3),
                f"{statistics.median(d['fraction']):.0%} [{min(d['fraction']):.0%}-{max(d['fraction']):.0%}]",
                _median_range(d["simulated_serial_seconds"], digits=3),
                *(_median_range(d["simulated_speedup"][str(n)], "x") for n in SIMULATED_WORKERS),
            ]
        )
    names = list(next(iter(data.values()))["breakdown"])
    breakdown_rows = [
        [name, *(f"{1e3 * statistics.median(data[tree]['breakdown'][name]):.0f}" for tree in trees)]
        for name in names
    ]
    count = len(next(iter(data.values()))["n2"])
    lines = [
        f"`passinfra.build` of `{SERIAL_MODEL}` with a fresh cache directory per build: in-process "
        f'and `Scheduler(backend="ray", num_workers=2)`, {count} builds each (median [min-max]), '
        "in one subprocess per tree and round, each build after a full garbage collection. "
        "Serial = build wall minus the function stages the "
        "workers ran; the simulator starts from the last N=2 run and gives the speedup over "
        "the measured in-process build.",
        "",
        f"The kernel stage has {statistics.median(next(iter(data.values()))['kernel_stage_functions']):.0f} "
        "functions (identical layers dedupe to the same kernels), the slowest taking "
        + ", ".join(
            f"{1e3 * statistics.median(data[tree]['largest_function_seconds']):.0f} ms ({tree})"
            for tree in trees
        )
        + ": once every worker holds one function the stage lasts as long as that one, so the "
        "simulated speedup stops growing well before 64 workers; the serial part and that "
        "function are what is left.",
        "",
        _table(
            [
                "tree",
                "in-process",
                "ray N=2",
                "serial at N=2",
                "serial fraction",
                "simulator's serial part",
                *(f"simulated speedup, {n} workers" for n in SIMULATED_WORKERS),
            ],
            rows,
        ),
        "",
        "Where a ray N=2 build's driver time goes (ms; per round the median of two timed builds, "
        "which skip the whole-build cache; then the median over rounds):",
        "",
        _table(["part", *trees], breakdown_rows),
    ]
    headline = []
    for tree in trees:
        d = data[tree]
        headline.append(
            [
                f"24-layer build at N=2: serial fraction, {tree}",
                f"{statistics.median(d['fraction']):.0%}",
                f"{min(d['fraction']):.0%}-{max(d['fraction']):.0%}",
                "-",
                "-",
            ]
        )
        for n in SIMULATED_WORKERS:
            values = d["simulated_speedup"][str(n)]
            headline.append(
                [
                    f"24-layer build: simulated speedup at {n} workers, {tree}",
                    f"{statistics.median(values):.2f}x",
                    f"{min(values):.2f}-{max(values):.2f}",
                    "-",
                    "-",
                ]
            )
    return lines, headline


# ----- 3. the link step of the deep model (runs inside a tree) ----------------------------------
LINK_PARTS = ("PlanMemory", "HostCodegen", "LinkLibrary")


def link_worker(repeats: int) -> dict[str, Any]:
    """The link step (``passinfra.build.run_link``) of the 80-layer model, then loading
    the library, ``repeats`` times after a warm-up, each with a fresh cache directory."""
    from passinfra.build import compile_pipeline, run_link
    from passinfra.frontend import from_onnx
    from passinfra.frontend.zoo import zoo_spec
    from passinfra.instrument import PassTimingInstrument
    from passinfra.ir.type_infer import infer_type
    from passinfra.runtime.module import Module
    from passinfra.transform import PassContext

    mod = from_onnx(zoo_spec(DEPTH_MODELS["layers=80"]))
    ret_type = infer_type(mod["main"], mod).ret_type
    with tempfile.TemporaryDirectory(prefix="raypass-serial-cache-") as cache:
        with PassContext(opt_level=3, config={"codegen.cache_dir": cache}):
            compiled = compile_pipeline()(mod)
    result: dict[str, Any] = {name: [] for name in ("link step", *LINK_PARTS, "loading the library")}
    for index in range(repeats + 1):
        timing = PassTimingInstrument()
        with tempfile.TemporaryDirectory(prefix="raypass-serial-cache-") as cache:
            with PassContext(opt_level=3, config={"codegen.cache_dir": cache}, instruments=[timing]):
                gc.collect()
                started = time.perf_counter()
                artifact = run_link(compiled, ret_type).build_artifact()
                linked = time.perf_counter()
                Module(artifact.library, artifact.metadata, artifact.weights)
                loaded = time.perf_counter()
                passes = {entry["name"]: entry["total_us"] / 1e6 for entry in timing.timings()[0]["children"]}
        if index:
            result["link step"].append(linked - started)
            result["loading the library"].append(loaded - linked)
            for name in LINK_PARTS:
                result[name].append(passes.get(name, 0.0))
    return result


def link_report(data: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    trees = list(data)
    parts = list(next(iter(data.values())))
    rows = [
        [part, *(_median_range([1e3 * v for v in data[tree][part]], "ms", 0) for tree in trees)]
        for part in parts
    ]
    count = len(next(iter(data.values()))["link step"])
    lines = [
        f"`passinfra.build.run_link` on the compiled `{DEPTH_MODELS['layers=80']}` (252 MB of weights), "
        f"then `runtime.Module` on its products; in-process, a fresh cache directory each time, {count} "
        "runs per tree (median [min-max]) in one subprocess per tree and round, each after a full "
        "garbage collection.",
        "",
        _table(["part", *trees], rows),
    ]
    headline = [
        [
            f"80-layer link step, {tree}",
            f"{1e3 * statistics.median(data[tree]['link step']):.0f} ms",
            f"{1e3 * min(data[tree]['link step']):.0f}-{1e3 * max(data[tree]['link step']):.0f}",
            "-",
            "-",
        ]
        for tree in trees
    ]
    return lines, headline


# ----- main ---------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.serial_path", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds instead of 5")
    parser.add_argument("--repeats", type=int, default=None, help="rounds of the depth runs (default 5)")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="another checkout to measure side by side (labelled 'before')",
    )
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--note", default="", help="a line to write under the title (what the trees are)")
    parser.add_argument("--skip-depth", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--skip-serial", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serial-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--builds", type=int, default=3, help=argparse.SUPPRESS)
    parser.add_argument("--skip-link", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--link-worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serial_worker:
        print(_JSON_MARK + json.dumps(serial_worker(args.builds)), flush=True)
        return 0
    if args.link_worker:
        print(_JSON_MARK + json.dumps(link_worker(args.builds)), flush=True)
        return 0
    from bench.common import machine_notes

    repeats = args.repeats or (3 if args.quick else 5)
    trees = {"this tree": ROOT}
    if args.baseline is not None:
        trees = {"before": args.baseline.resolve(), "after": ROOT}
    notes_before = machine_notes()
    started = time.perf_counter()
    sections: list[str] = []
    headline: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="raypass-serial-path-") as work:
        if not args.skip_depth:
            lines, rows = depth_report(measure_depth(trees, repeats, Path(work)), list(trees))
            sections += ["## 1. Depth: layers=80 vs layers=8 (hidden=256)", "", *lines, ""]
            headline += rows
        if not args.skip_serial:
            rounds = max(2, (repeats + 1) // 2)
            data = run_workers(trees, rounds, ["--serial-worker", "--builds", str(args.builds)])
            lines, rows = serial_report(data)
            sections += [
                "## 2. The 24-layer transformer: serial fraction at N=2, simulated scaling",
                "",
                *lines,
                "",
            ]
            headline += rows
        if not args.skip_link:
            data = run_workers(
                trees, max(2, (repeats + 1) // 2), ["--link-worker", "--builds", str(args.builds)]
            )
            lines, rows = link_report(data)
            sections += ["## 3. The link step of the 80-layer model", "", *lines, ""]
            headline += rows
    notes_after = machine_notes()
    text = [
        "# Serial path (issue 16, item 3)",
        "",
        f"`python -m bench.serial_path{' --quick' if args.quick else ''}"
        f"{' --baseline ' + str(args.baseline) if args.baseline else ''}`; trees: "
        + ", ".join(f"{label} = `{path}`" for label, path in trees.items())
        + f"; {time.perf_counter() - started:.0f} s.",
        "",
        *([args.note, ""] if args.note else []),
        _table(["comparison", "value (median)", "range", "target", "verdict"], headline),
        "",
        *sections,
        "## Machine",
        "",
        _table(
            ["", "value"],
            [[k, v] for k, v in notes_before.items()]
            + [["load average at the end", notes_after["load average (1, 5, 15 min)"]]],
        ),
        "",
    ]
    args.output.write_text("\n".join(text))
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Item 1: the full build (passes + codegen), in-process vs ray N=1 vs N=2, cold cache.

Each run builds with a fresh ``codegen.cache_dir``, so every kernel is compiled. The
three variants run interleaved (>= 5 rounds after a warm-up). Reported per model: the
wall-time ratios, worker busy efficiency (sum of worker busy time / (N x scheduler
wall)), the per-stage breakdown of the N=2 run, the driver overhead (sending functions,
merging results) and the serial fraction (module passes and linking, which run in the
driver whatever N is). The measured runs are kept for the simulator (item 2).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from bench.common import (
    MIN_REPEATS,
    Sample,
    fresh_cache_dir,
    interleaved,
    markdown_table,
    noop_round_trip_seconds,
    ratio,
    ray_scheduler,
    submit_seconds_per_call,
    transfer_bandwidth,
    verdict,
)

TARGET_N2_SPEEDUP = 1.8
TARGET_N1_SLOWDOWN = 1.15


@dataclass
class ModelScaling:
    """Everything measured for one model."""

    label: str
    module: Any
    walls: dict[str, Sample] = field(default_factory=dict)
    runs: dict[int, Any] = field(default_factory=dict)  # N -> RunStats of the last run
    scheduler_walls: dict[int, list[float]] = field(default_factory=dict)
    link_seconds: dict[int, list[float]] = field(default_factory=dict)
    leaf_stage: dict[int, int] = field(default_factory=dict)


def densenet_path() -> str | None:
    import onnx

    path = os.path.join(
        os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_densenet121.onnx"
    )
    return path if os.path.exists(path) else None


def models(quick: bool) -> tuple[list[tuple[str, Any]], list[str]]:
    """(label, IRModule) pairs and notes on what was substituted."""
    from passinfra.frontend import from_onnx, zoo

    notes = []
    chosen = [("zoo transformer (24 layers)", from_onnx(zoo.transformer(layers=24)))]
    path = densenet_path()
    if path is not None and not quick:
        chosen.append(("DenseNet-121 (ONNX light, random weights)", from_onnx(path)))
    else:
        reason = (
            "--quick (it takes minutes per build)" if path is not None else "the ONNX test data is absent"
        )
        notes.append(f"DenseNet-121 replaced by the zoo resnet (depth 20) because of {reason}.")
        chosen.append(("zoo resnet (depth 20)", from_onnx(zoo.resnet(depth=20))))
    return chosen, notes


def build_once(mod: Any, sched: Any, record: ModelScaling | None, workers: int) -> float:
    """One cold build; returns its wall seconds and keeps the scheduler's counters."""
    import passinfra
    from passinfra.transform import PassContext

    with fresh_cache_dir() as cache, PassContext(config={"codegen.cache_dir": cache}):
        started = time.perf_counter()
        passinfra.build(mod, opt_level=3, scheduler=sched)
        wall = time.perf_counter() - started
    if sched is not None and record is not None:
        run = sched.last_run
        record.runs[workers] = run
        record.scheduler_walls.setdefault(workers, []).append(run.wall_seconds)
        record.link_seconds.setdefault(workers, []).append(wall - run.wall_seconds)
    return wall


def build_leaf_stages() -> dict[int, int]:
    """Leaf -> function stage of the build's compile pipeline (as the scheduler plans it)."""
    from bench.simulator import plan_leaf_stages
    from passinfra.build import compile_pipeline
    from passinfra.transform import PassContext
    from scheduler import build_plan

    with PassContext(opt_level=3):
        return plan_leaf_stages(build_plan(compile_pipeline()))


def measure(label: str, mod: Any, schedulers: dict[int, Any], repeats: int) -> ModelScaling:
    record = ModelScaling(label, mod, leaf_stage=build_leaf_stages())
    variants = {
        "in-process": lambda: build_once(mod, None, None, 0),
        "ray N=1": lambda: build_once(mod, schedulers[1], record, 1),
        "ray N=2": lambda: build_once(mod, schedulers[2], record, 2),
    }
    record.walls = interleaved(variants, repeats)
    return record


def efficiency(run: Any) -> float:
    """Sum of worker busy time / (N x the scheduler's wall time)."""
    busy = sum(run.worker_busy_seconds.values())
    return busy / (max(1, run.num_workers) * run.wall_seconds)


def driver_overhead(run: Any) -> tuple[float, float]:
    """(seconds sending functions + merging results, seconds in module passes)."""
    stage_parts = sum(
        e.seconds for e in run.driver_events if e.name.startswith(("send functions", "merge results"))
    )
    module_passes = sum(
        e.seconds for e in run.driver_events if not e.name.startswith(("send functions", "merge results"))
    )
    return stage_parts, module_passes


def stage_table(run: Any) -> str:
    rows = []
    for stage in run.stages:
        rows.append(
            [
                stage.index,
                ", ".join(stage.passes),
                stage.functions,
                stage.remote_calls,
                f"{stage.bytes_sent / 1e6:.2f}",
                f"{stage.bytes_received / 1e6:.2f}",
                f"{stage.wall_seconds:.3f}",
                f"{stage.worker_seconds:.3f}",
            ]
        )
    return markdown_table(
        ["stage", "passes", "functions", "calls", "MB sent", "MB received", "wall s", "worker busy s"], rows
    )


def report_model(record: ModelScaling) -> tuple[str, list[list[str]]]:
    """Markdown for one model and its headline rows."""
    import statistics

    local, one, two = (record.walls[k] for k in ("in-process", "ray N=1", "ray N=2"))
    speedup = ratio(local, two)
    slowdown = ratio(one, local)
    lines = [f"### {record.label}", ""]
    lines.append(
        markdown_table(
            ["variant", "build wall median [IQR]", "runs"],
            [[name, sample.spread(), len(sample.values)] for name, sample in record.walls.items()],
        )
    )
    lines.append("")
    lines.append(
        f"- ray N=2 speedup over in-process: {speedup.text()} (target >= {TARGET_N2_SPEEDUP}x): "
        f"{verdict(speedup.median, TARGET_N2_SPEEDUP, True)}"
    )
    lines.append(
        f"- ray N=1 time / in-process: {slowdown.text()} (target <= {TARGET_N1_SLOWDOWN}x): "
        f"{verdict(slowdown.median, TARGET_N1_SLOWDOWN, False)}"
    )
    for workers in (1, 2):
        run = record.runs[workers]
        stage_parts, module_passes = driver_overhead(run)
        scheduler_wall = statistics.median(record.scheduler_walls[workers])
        link = statistics.median(record.link_seconds[workers])
        build_wall = record.walls[f"ray N={workers}"].median
        serial = (module_passes + link) / build_wall
        lines.append(
            f"- N={workers} (last run): worker busy efficiency {efficiency(run):.0%}; driver overhead "
            f"(send + merge) {stage_parts:.3f} s; module passes {module_passes:.3f} s; link etc. after the "
            f"scheduler {link:.3f} s (median); serial fraction (module passes + link) / build wall "
            f"{serial:.0%}; scheduler wall median {scheduler_wall:.3f} s; remote calls {run.remote_calls}; "
            f"{run.bytes_sent / 1e6:.2f} MB sent, {run.bytes_received / 1e6:.2f} MB received"
        )
    lines += ["", "Per-stage breakdown (ray N=2, last run):", "", stage_table(record.runs[2]), ""]
    headline = [
        [
            f"build {record.label}: ray N=2 vs in-process",
            f"{speedup.median:.2f}x",
            f"{speedup.low:.2f}-{speedup.high:.2f}",
            f">= {TARGET_N2_SPEEDUP}x",
            verdict(speedup.median, TARGET_N2_SPEEDUP, True),
        ],
        [
            f"build {record.label}: ray N=1 / in-process",
            f"{slowdown.median:.2f}x",
            f"{slowdown.low:.2f}-{slowdown.high:.2f}",
            f"<= {TARGET_N1_SLOWDOWN}x",
            verdict(slowdown.median, TARGET_N1_SLOWDOWN, False),
        ],
    ]
    return "\n".join(lines), headline


@dataclass
class ScalingData:
    records: list[ModelScaling]
    call_latency: float  # no-op actor round trip, seconds
    submit_per_call: float  # driver seconds to submit one call
    bandwidth: float  # bytes per second through the object store


def run(quick: bool) -> tuple[str, list[list[str]], ScalingData]:
    """Markdown section, headline rows, and the measured data (for the simulator)."""
    repeats = MIN_REPEATS
    chosen, notes = models(quick)
    schedulers = {1: ray_scheduler(1), 2: ray_scheduler(2)}
    records = []
    try:
        for label, mod in chosen:
            records.append(measure(label, mod, schedulers, repeats))
        data = ScalingData(
            records,
            noop_round_trip_seconds(schedulers[2]),
            submit_seconds_per_call(schedulers[2]),
            transfer_bandwidth(),
        )
    finally:
        for sched in schedulers.values():
            sched.shutdown()
    body = [
        "Full build (graph passes, FuseOps, lowering, loop passes, C rendering and compilation, "
        f"then linking) with a cold compile cache per run; {repeats} interleaved rounds after one "
        "warm-up round. Spreads are interquartile ranges; a ratio's spread pairs the quartiles "
        "pessimistically.",
        "",
    ]
    body += [f"Note: {note}" for note in notes]
    headline: list[list[str]] = []
    for record in records:
        text, rows = report_model(record)
        body += ["", text]
        headline += rows
    return "\n".join(body), headline, data

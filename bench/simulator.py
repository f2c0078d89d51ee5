"""Scaling past this machine: simulate the scheduler's makespan for 1 to 256 workers.

Input: what a real run measured (``Scheduler.last_run``): the seconds of every (pass,
function) on the workers, grouped into the plan's function stages, and the driver time
that no worker count changes (module passes, linking). Overheads come from the same run
and from micro-measurements (no-op call latency, submit cost, transfer bandwidth).

The policy is the scheduler's own: functions are placed by LPT (``scheduler.assign.lpt``,
here on the measured costs, which is where its rebalancing converges), each worker's
functions are cut in module order into ``CALLS_PER_WORKER`` batch calls
(``scheduler.chunking``), an actor runs its calls one after the other, and a stage ends
when its slowest worker does. A stage then costs

    driver (per function + per call) + transfer (bytes / bandwidth) + one call latency
    + max over workers (its functions' seconds + its calls x worker cost per call)

and a run costs the serial driver time plus its stages. The bound is the ideal the
overheads and the placement can only approach (Amdahl with the largest function): per
stage ``max(total / N, largest function)``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.assign import lpt
from scheduler.chunking import CALLS_PER_WORKER

WORKER_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_STAGE_DRIVER_EVENTS = ("send functions", "merge results")


@dataclass(frozen=True)
class Overheads:
    """What distribution costs besides the work itself (seconds, bytes, bytes/second)."""

    call_latency: float = 0.0  # round trip of a no-op actor call
    driver_per_call: float = 0.0  # driver CPU to submit and merge one batch call
    driver_per_function: float = 0.0  # driver CPU per function per stage (pack, unpack)
    worker_per_call: float = 0.0  # worker time per call beyond its passes (spec, packing)
    bytes_per_function: float = 0.0  # sent + received per function per stage
    bandwidth: float = math.inf

    def describe(self) -> list[tuple[str, str]]:
        bandwidth = "inf" if math.isinf(self.bandwidth) else f"{self.bandwidth / 1e6:.0f} MB/s"
        return [
            ("per-call latency (no-op round trip)", f"{self.call_latency * 1e3:.3f} ms"),
            ("driver CPU per call (submit)", f"{self.driver_per_call * 1e6:.0f} us"),
            ("driver CPU per function per stage (send + merge)", f"{self.driver_per_function * 1e6:.0f} us"),
            ("worker time per call beyond passes", f"{self.worker_per_call * 1e3:.3f} ms"),
            ("bytes per function per stage", f"{self.bytes_per_function:.0f} B"),
            ("transfer bandwidth", bandwidth),
        ]


@dataclass
class Workload:
    """Measured work: per function stage, function -> seconds; plus serial driver time."""

    stages: list[dict[str, float]] = field(default_factory=list)
    serial_seconds: float = 0.0

    @property
    def work_seconds(self) -> float:
        return sum(sum(costs.values()) for costs in self.stages)

    def local_seconds(self) -> float:
        """The in-process estimate: all the work, one after the other, no overheads."""
        return self.serial_seconds + self.work_seconds


def batch_calls(
    functions: int, calls_per_worker: int = CALLS_PER_WORKER, batch_size: int | None = None
) -> int:
    """How many batch calls one worker's ``functions`` are cut into (as scheduler.chunking does)."""
    if functions == 0:
        return 0
    size = batch_size or max(1, math.ceil(functions / calls_per_worker))
    return math.ceil(functions / size)


def stage_seconds(
    costs: Mapping[str, float],
    workers: int,
    overheads: Overheads = Overheads(),
    calls_per_worker: int = CALLS_PER_WORKER,
    batch_size: int | None = None,
    placement: Mapping[str, int] | None = None,
) -> float:
    """Simulated wall time of one function stage on ``workers`` workers."""
    if not costs:
        return 0.0
    if placement is None:
        placement = lpt(costs, [0.0] * workers)
    loads = [0.0] * workers
    counts = [0] * workers
    for name, slot in placement.items():
        loads[slot] += costs[name]
        counts[slot] += 1
    calls = [batch_calls(n, calls_per_worker, batch_size) for n in counts]
    slowest = max(load + n_calls * overheads.worker_per_call for load, n_calls in zip(loads, calls))
    functions = len(costs)
    driver = functions * overheads.driver_per_function + sum(calls) * overheads.driver_per_call
    transfer = functions * overheads.bytes_per_function / overheads.bandwidth
    return driver + transfer + overheads.call_latency + slowest


def makespan(workload: Workload, workers: int, overheads: Overheads = Overheads(), **policy: Any) -> float:
    """Simulated wall time of the whole run on ``workers`` workers."""
    return workload.serial_seconds + sum(
        stage_seconds(costs, workers, overheads, **policy) for costs in workload.stages
    )


def bound(workload: Workload, workers: int) -> float:
    """The best any placement could do without overheads: per stage the larger of a
    perfect split and the largest function, plus the serial part (Amdahl)."""
    total = workload.serial_seconds
    for costs in workload.stages:
        if costs:
            total += max(sum(costs.values()) / workers, max(costs.values()))
    return total


@dataclass
class Curve:
    workers: list[int]
    simulated: list[float]  # seconds
    bound: list[float]
    local_seconds: float

    def speedup(self) -> list[float]:
        return [self.local_seconds / t for t in self.simulated]

    def bound_speedup(self) -> list[float]:
        return [self.local_seconds / t for t in self.bound]

    def efficiency_vs_bound(self, workers: int) -> float:
        """simulated speedup / bound speedup at ``workers`` (1.0 = reaches the bound)."""
        i = self.workers.index(workers)
        return self.bound[i] / self.simulated[i]


def curve(workload: Workload, overheads: Overheads, worker_counts: Iterable[int] = WORKER_COUNTS) -> Curve:
    counts = list(worker_counts)
    return Curve(
        counts,
        [makespan(workload, n, overheads) for n in counts],
        [bound(workload, n) for n in counts],
        workload.local_seconds(),
    )


# ----- from a measured run ----------------------------------------------------------------
def _is_stage_driver_event(name: str) -> bool:
    return name.startswith(_STAGE_DRIVER_EVENTS)


def workload_from_run(run: Any, leaf_stage: Mapping[int, int], extra_serial: float = 0.0) -> Workload:
    """The Workload a ray run measured. ``leaf_stage`` maps a plan leaf index to its
    function stage's index (``plan_leaf_stages``); ``run`` is a ``RunStats``. The serial
    part is the run's wall time outside its function stages, plus ``extra_serial`` (work
    the scheduler did not run, e.g. linking after it)."""
    per_stage: dict[int, dict[str, float]] = {}
    for event in run.events:
        costs = per_stage.setdefault(leaf_stage[event.leaf], {})
        costs[event.function] = costs.get(event.function, 0.0) + event.seconds
    stages = []
    for stage in run.stages:
        costs = dict(per_stage.get(stage.index, {}))
        for i in range(stage.functions - len(costs)):  # functions no pass of the stage touched
            costs[f"<idle {i}>"] = 0.0
        stages.append(costs)
    in_stages = sum(stage.wall_seconds for stage in run.stages)
    serial = max(0.0, run.wall_seconds - in_stages) + extra_serial
    return Workload(stages, serial)


def plan_leaf_stages(plan: Any) -> dict[int, int]:
    """Leaf index -> function stage index, from a ``scheduler.Plan``."""
    return {
        leaf.leaf_index: stage.index
        for stage in plan.stages
        if stage.kind == "function"
        for leaf in stage.leaves
    }


def fit_overheads(run: Any, call_latency: float, driver_per_call: float, bandwidth: float) -> Overheads:
    """Overheads of a measured run: the per-function and per-call parts from its counters,
    the latency, submit cost and bandwidth from micro-measurements."""
    functions = sum(stage.functions for stage in run.stages) or 1
    driver_stage_seconds = sum(e.seconds for e in run.driver_events if _is_stage_driver_event(e.name))
    calls = run.remote_calls or 1
    busy = sum(run.worker_busy_seconds.values())
    passes = sum(event.seconds for event in run.events)
    return Overheads(
        call_latency=call_latency,
        driver_per_call=driver_per_call,
        driver_per_function=max(0.0, driver_stage_seconds - calls * driver_per_call) / functions,
        worker_per_call=max(0.0, busy - passes) / calls,
        bytes_per_function=(run.bytes_sent + run.bytes_received) / functions,
        bandwidth=bandwidth,
    )


def relative_error(simulated: float, measured: float) -> float:
    return (simulated - measured) / measured


def validation_rows(
    workload: Workload, overheads: Overheads, measured: Mapping[int, float]
) -> list[list[str]]:
    """``[workers, measured s, simulated s, error]`` for each measured worker count."""
    rows = []
    for workers, seconds in sorted(measured.items()):
        simulated = makespan(workload, workers, overheads)
        rows.append(
            [
                str(workers),
                f"{seconds:.3f}",
                f"{simulated:.3f}",
                f"{100 * relative_error(simulated, seconds):+.1f}%",
            ]
        )
    return rows


def plot(curves: Mapping[str, Curve], measured: Mapping[str, Sequence[tuple[int, float]]], path: str) -> None:
    """Speedup over in-process vs workers (log-log), simulated and bound per model, with
    the measured points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for index, (label, data) in enumerate(curves.items()):
        color = f"C{index}"
        ax.plot(data.workers, data.speedup(), "o-", color=color, label=f"{label}: simulated")
        ax.plot(
            data.workers,
            data.bound_speedup(),
            "--",
            color=color,
            label=f"{label}: bound (Amdahl, largest function)",
        )
        points = measured.get(label, ())
        if points:
            ax.plot(
                [w for w, _ in points],
                [s for _, s in points],
                "x",
                color=color,
                markersize=10,
                label=f"{label}: measured",
            )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("workers")
    ax.set_ylabel("speedup over in-process")
    ax.set_title("Build scaling: simulated from measured costs")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----- a whole process, calibrated on its trace ----------------------------------------------
@dataclass
class TracedStage:
    """A function stage as one traced run measured it."""

    index: int
    wall: float
    costs: dict[str, float]  # function -> seconds of its passes (wherever they ran)
    overhead: float  # the stage's wall beyond its busiest lane: shipping, latency, merging
    driver_share: float  # of the wall, the driver's sending and merging (it shares the CPUs)


@dataclass
class TraceProfile:
    """What one ``raypass compile --trace`` run says about its build: the serial path (all
    that no worker count changes: the process outside the build, module passes, stages
    run in the driver) and, per shipped function stage, each function's cost and what
    shipping added. Costs are normalized to an uncontended CPU (see :func:`contention`)."""

    workers: int  # of the traced run
    cpus: int  # of the machine it ran on
    process_seconds: float
    serial_seconds: float
    stages: list[TracedStage] = field(default_factory=list)

    @property
    def work_seconds(self) -> float:
        return sum(sum(stage.costs.values()) for stage in self.stages)


def contention(workers: int, driver_share: float, cpus: int) -> float:
    """How much slower a worker's passes run when ``workers`` of them and a driver busy
    ``driver_share`` of the time share ``cpus`` CPUs (1: a CPU each)."""
    return max(1.0, (workers + driver_share) / max(1, cpus))


def profile_from_trace(document: Mapping[str, Any], process_seconds: float | None = None) -> TraceProfile:
    """The profile of one traced run (the JSON of ``raypass compile --trace``).
    ``process_seconds``: the whole process as measured from outside (default: the trace's
    extent, from the process's start to its last slice)."""
    events = [e for e in document["traceEvents"] if e.get("ph") == "X"]
    run = document.get("otherData", {}).get("raypass_run", {})
    workers, cpus = int(run.get("num_workers") or 1), int(run.get("cpus") or os.cpu_count() or 1)
    extent = (max(e["ts"] + e["dur"] for e in events) - min(e["ts"] for e in events)) / 1e6 if events else 0.0
    process = process_seconds if process_seconds is not None else extent
    driver_seconds: dict[int, float] = {}
    for event in events:
        if event["cat"] == "driver" and event["name"].startswith(_STAGE_DRIVER_EVENTS):
            index = int(event["name"].rsplit("(stage ", 1)[1].rstrip(")"))
            driver_seconds[index] = driver_seconds.get(index, 0.0) + event["dur"] / 1e6
    work: dict[int, list[dict[str, Any]]] = {}
    for event in events:
        if event["cat"] == "function":
            work.setdefault(int(event["args"].get("stage", -1)), []).append(event)
    stages = []
    for event in events:
        if event["cat"] != "stage" or event["args"].get("ran_in_driver"):
            continue
        index, wall = int(event["args"]["stage"]), event["dur"] / 1e6
        share = min(1.0, driver_seconds.get(index, 0.0) / wall) if wall > 0 else 0.0
        slowdown = contention(workers, share, cpus)
        costs: dict[str, float] = {}
        lanes: dict[int, float] = {}
        for piece in work.get(index, []):
            seconds = piece["dur"] / 1e6
            costs[piece["args"]["function"]] = costs.get(piece["args"]["function"], 0.0) + seconds / slowdown
            lanes[piece["tid"]] = lanes.get(piece["tid"], 0.0) + seconds
        busiest = max(lanes.values(), default=0.0)
        stages.append(TracedStage(index, wall, costs, max(0.0, wall - busiest), share))
    serial = max(0.0, process - sum(stage.wall for stage in stages))
    return TraceProfile(workers, cpus, process, serial, sorted(stages, key=lambda stage: stage.index))


def predict(profile: TraceProfile, workers: int, cpus: int | None = None) -> float:
    """The whole process on ``workers`` workers (on ``cpus`` CPUs, default the traced
    machine's): the serial path, and per stage what shipping added plus the functions
    placed by LPT, as slow as ``workers`` contend for the CPUs."""
    cpus = cpus or profile.cpus
    total = profile.serial_seconds
    for stage in profile.stages:
        slowdown = contention(workers, stage.driver_share, cpus)
        costs = {name: seconds * slowdown for name, seconds in stage.costs.items()}
        loads = [0.0] * workers
        for name, slot in lpt(costs, [0.0] * workers).items():
            loads[slot] += costs[name]
        total += stage.overhead + max(loads, default=0.0)
    return total


def amdahl_bound(profile: TraceProfile, workers: int) -> float:
    """The fastest the whole process could be on ``workers`` workers: the measured serial
    path, and the stages' work split perfectly (no stage shorter than its largest
    function) with nothing paid for shipping."""
    total = profile.serial_seconds
    for stage in profile.stages:
        if stage.costs:
            total += max(sum(stage.costs.values()) / workers, max(stage.costs.values()))
    return total


# ----- the benchmark section ----------------------------------------------------------------
TARGET_FRACTION_OF_BOUND = 0.8
TARGET_WORKERS = 16


def run(data: Any, plot_path: str) -> tuple[str, list[list[str]]]:
    """Simulate each model measured by bench/scaling.py; markdown and headline rows."""
    from bench.common import markdown_table, verdict

    lines = [
        "Workload: the per-(pass, function) seconds of the last measured ray N=1 build, grouped by "
        "the plan's function stages; serial part: that run's driver time outside its function "
        "stages plus linking (median). Policy: LPT on measured costs (scheduler/assign.py), "
        f"{CALLS_PER_WORKER} batch calls per worker and stage (scheduler/chunking.py).",
        "",
    ]
    curves: dict[str, Curve] = {}
    measured_points: dict[str, list[tuple[int, float]]] = {}
    headline = []
    for record in data.records:
        import statistics

        run_one = record.runs[1]
        link = statistics.median(record.link_seconds[1])
        workload = workload_from_run(run_one, record.leaf_stage, extra_serial=link)
        overheads = fit_overheads(run_one, data.call_latency, data.submit_per_call, data.bandwidth)
        measured = {n: statistics.median(record.walls[f"ray N={n}"].values) for n in (1, 2)}
        local = record.walls["in-process"].median
        data_curve = curve(workload, overheads)
        data_curve.local_seconds = local  # speedups are over the measured in-process build
        curves[record.label] = data_curve
        measured_points[record.label] = [(n, local / seconds) for n, seconds in measured.items()]
        fraction = data_curve.efficiency_vs_bound(TARGET_WORKERS)
        lines += [f"### {record.label}", ""]
        lines.append(
            markdown_table(["overhead parameter", "measured"], [list(p) for p in overheads.describe()])
        )
        lines += ["", "Validation against the measured builds (median wall, whole build):", ""]
        lines.append(
            markdown_table(
                ["workers", "measured s", "simulated s", "error"],
                validation_rows(workload, overheads, measured),
            )
        )
        lines += [
            "",
            f"In-process build (measured median): {local:.3f} s; simulated in-process work "
            f"(serial + all function work): {workload.local_seconds():.3f} s; largest single "
            f"function-stage cost: {max((max(c.values()) for c in workload.stages if c), default=0):.3f} s.",
            "",
        ]
        rows = []
        for i, workers in enumerate(data_curve.workers):
            rows.append(
                [
                    workers,
                    f"{data_curve.simulated[i]:.3f}",
                    f"{data_curve.speedup()[i]:.2f}x",
                    f"{data_curve.bound_speedup()[i]:.2f}x",
                    f"{data_curve.bound[i] / data_curve.simulated[i]:.0%}",
                ]
            )
        lines.append(markdown_table(["workers", "simulated s", "speedup", "bound speedup", "of bound"], rows))
        lines.append("")
        lines.append(
            f"- simulated speedup at {TARGET_WORKERS} workers = {fraction:.2f} of the bound "
            f"(target >= {TARGET_FRACTION_OF_BOUND}): {verdict(fraction, TARGET_FRACTION_OF_BOUND, True)}"
        )
        lines.append("")
        errors = [abs(relative_error(makespan(workload, n, overheads), measured[n])) for n in measured]
        headline.append(
            [
                f"simulated {record.label}: speedup at {TARGET_WORKERS} workers / bound",
                f"{fraction:.2f}",
                f"sim. error vs measured N=1,2: {max(errors):.0%}",
                f">= {TARGET_FRACTION_OF_BOUND}",
                verdict(fraction, TARGET_FRACTION_OF_BOUND, True),
            ]
        )
    plot(curves, measured_points, plot_path)
    lines.append(f"![speedup vs workers]({os.path.basename(plot_path)})")
    return "\n".join(lines), headline

"""The trace of a build: Chrome trace-event JSON (opens in Perfetto / chrome://tracing)
and a timeline picture, both with one lane for the driver and one per worker.

Slices: every pass run seen by the driver (nested: a Sequential contains its passes),
the scheduler's driver spans (sending functions, merging results, module passes), on
the worker lanes one slice per (pass, function) the workers measured, whose args carry
the facts the pass reported about that run (CompileC: ``cache_hit``) and its stage, and
on a lane of their own the function stages (functions, calls, bytes, whether the driver
ran it). The run's counters and the machine's CPU count are in the document's
``otherData`` (``raypass_run``): with the slices, what ``bench/simulator.py`` needs to
predict the same build on another number of workers.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raypass_cli.process_start import process_start_time
from scheduler.stats import RunStats

if TYPE_CHECKING:
    from passinfra.instrument import PassTimingInstrument

DRIVER_TID = 0
TRACE_PID = 1
STAGES_TID = 10_000  # the function stages' lane, after every worker's


@dataclass(frozen=True)
class Span:
    name: str
    start: float  # time.time()
    seconds: float
    category: str


def pass_spans(timing: PassTimingInstrument) -> list[Span]:
    """The wall-clock span of every pass run in the driver: the timing instrument's own
    measurements (read before its context exits), so the trace's pass slices and the
    timing table are one set of numbers (two instruments, each stamping its own hooks,
    differed whenever the machine ran something else between their stamps)."""
    return [Span(name, wall, seconds, "pass") for name, wall, seconds in timing.spans()]


# ----- the process around the build ----------------------------------------------------------
# what the user waits for besides the build: interpreter start and imports, loading the
# model, writing the outputs; on the driver's lane (they never overlap its passes)
PROCESS_CATEGORY = "process"
STARTUP_SPAN = "start-up (interpreter, imports)"
LOAD_SPAN = "load the model"
WRITE_SPAN = "write the outputs"
class ProcessSpans:
    """Spans of the process outside the build: ``with spans.measure(LOAD_SPAN): ...``."""

    def __init__(self) -> None:
        started = process_start_time()
        self.spans: list[Span] = [Span(STARTUP_SPAN, started, time.time() - started, PROCESS_CATEGORY)]

    def measure(self, name: str) -> _Measured:
        return _Measured(self, name)

    def seconds(self, name: str) -> float:
        return sum(span.seconds for span in self.spans if span.name == name)

    def summary(self) -> str:
        """"outside the build: start-up 0.31 s, loading the model 0.12 s, ..." """
        parts = [f"{span.name} {span.seconds:.2f}s" for span in self.spans]
        return "outside the build: " + ", ".join(parts)


class _Measured:
    def __init__(self, owner: ProcessSpans, name: str) -> None:
        self._owner, self._name = owner, name

    def __enter__(self) -> None:
        self._wall, self._started = time.time(), time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        seconds = time.perf_counter() - self._started
        self._owner.spans.append(Span(self._name, self._wall, seconds, PROCESS_CATEGORY))


def worker_tid(slot: int) -> int:
    return slot + 1


def trace_events(spans: list[Span], stats: RunStats | None) -> list[dict[str, Any]]:
    """Trace events (``ph: "X"`` complete slices, times in microseconds from the first
    event) plus the lane names."""
    slices: list[tuple[str, str, float, float, int, dict[str, Any]]] = [
        (span.name, span.category, span.start, span.seconds, DRIVER_TID, {}) for span in spans
    ]
    workers: set[int] = set()
    if stats is not None:
        for event in stats.driver_events:
            slices.append((event.name, "driver", event.start, event.seconds, DRIVER_TID, {}))
        for stage in stats.stages:
            if stage.kind == "function" and stage.start:
                args = {"stage": stage.index, "functions": stage.functions,
                        "remote_calls": stage.remote_calls, "bytes_sent": stage.bytes_sent,
                        "bytes_received": stage.bytes_received, "ran_in_driver": stage.ran_in_driver,
                        "worker_seconds": stage.worker_seconds}
                slices.append((f"stage {stage.index}: {', '.join(stage.passes)}", "stage", stage.start,
                               stage.wall_seconds, STAGES_TID, args))
        for work in stats.events:
            workers.add(work.worker)
            slices.append(
                (
                    work.pass_name,
                    "function",  # a (pass, function) run, on the lane of whoever ran it
                    work.start,
                    work.seconds,
                    worker_tid(work.worker),
                    {**dict(work.facts), "function": work.function, "leaf": work.leaf, "stage": work.stage},
                )
            )
        workers.update(stats.worker_pids)
    origin = min((start for _, _, start, _, _, _ in slices), default=0.0)
    events: list[dict[str, Any]] = [_lane_name(DRIVER_TID, "driver")]
    for slot in sorted(slot for slot in workers if slot >= 0):  # work done in the driver is on its lane
        pid = stats.worker_pids.get(slot) if stats is not None else None
        events.append(_lane_name(worker_tid(slot), f"worker {slot}" + (f" (pid {pid})" if pid else "")))
    if any(tid == STAGES_TID for _, _, _, _, tid, _ in slices):
        events.append(_lane_name(STAGES_TID, "function stages"))
    for name, category, start, seconds, tid, args in slices:
        events.append(
            {
                "name": name,
                "cat": category,
                "ph": "X",
                "pid": TRACE_PID,
                "tid": tid,
                "ts": round((start - origin) * 1e6, 3),
                "dur": round(seconds * 1e6, 3),
                "args": args,
            }
        )
    return events


def _lane_name(tid: int, name: str) -> dict[str, Any]:
    # metadata events carry ts/dur 0 so every event has the same fields
    return {
        "name": "thread_name",
        "ph": "M",
        "pid": TRACE_PID,
        "tid": tid,
        "ts": 0,
        "dur": 0,
        "args": {"name": name},
    }


def write_trace(path: str | Path, spans: list[Span], stats: RunStats | None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any] = {"traceEvents": trace_events(spans, stats), "displayTimeUnit": "ms"}
    if stats is not None:
        document["otherData"] = {"raypass_run": {**stats.as_dict(), "cpus": os.cpu_count()}}
    path.write_text(json.dumps(document))
    return path


# ----- the timeline picture ------------------------------------------------------------------
TIMELINE_WIDTH_INCHES = 12.0
TIMELINE_DPI = 100
LEGEND_ENTRIES = 16  # passes named in the legend, the longest first
LEGEND_COLUMNS = 4
WAIT_COLOUR = "lightgrey"
STAGE_COLOUR = "wheat"


def write_timeline_png(path: str | Path, spans: list[Span], stats: RunStats | None) -> tuple[Path, int, int]:
    """Draw the slices with workers as lanes (the driver on top, the function stages at
    the bottom); returns (path, width, height) in pixels. Only the leaf pass spans of the
    driver are drawn (no nesting). Colours are passes, named in the legend; the driver's
    time in a stage that runs on the workers (sending, waiting, merging) is grey and
    labelled, and each stage is labelled with its number."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    events = [e for e in trace_events(_leaf_spans(spans), stats) if e["ph"] == "X"]
    shipped = [e for e in events if e["cat"] == "stage" and not e["args"]["ran_in_driver"]]
    waiting = [e for e in events
               if e["tid"] == DRIVER_TID and e["cat"] == "pass" and _within_a_stage(e, shipped)]
    passes = [e for e in events if e["cat"] != "stage" and not any(e is w for w in waiting)]
    seconds: dict[str, float] = {}
    for event in passes:
        seconds[event["name"]] = seconds.get(event["name"], 0.0) + event["dur"]
    names = sorted(seconds, key=lambda name: -seconds[name])
    tab20 = plt.get_cmap("tab20")
    palette = [tab20(i) for i in range(20) if i not in (14, 15)]  # its greys are the wait's
    colour_of = {name: palette[i % len(palette)] for i, name in enumerate(names)}
    lanes = sorted({e["tid"] for e in events} | {DRIVER_TID})
    shown = names[:LEGEND_ENTRIES]  # the passes that took longest
    legend_rows = -(-len(shown) // LEGEND_COLUMNS) + bool(waiting)
    height_inches = 1.5 + 0.5 * len(lanes) + 0.25 * legend_rows
    fig, ax = plt.subplots(figsize=(TIMELINE_WIDTH_INCHES, height_inches), dpi=TIMELINE_DPI)
    row_of = {tid: len(lanes) - 1 - i for i, tid in enumerate(lanes)}
    end_ms = max((e["ts"] + e["dur"] for e in events), default=1.0) / 1e3
    for event in events:
        start_ms, length_ms = event["ts"] / 1e3, max(event["dur"] / 1e3, 1e-3)
        label = None
        if event["cat"] == "stage":
            colour, label = STAGE_COLOUR, f"stage {event['args']['stage']}"
        elif any(event is w for w in waiting):
            colour, label = WAIT_COLOUR, "driver: sends, waits for the workers, merges"
        else:
            colour = colour_of[event["name"]]
        ax.broken_barh([(start_ms, length_ms)], (row_of[event["tid"]] - 0.4, 0.8), facecolors=colour,
                       edgecolor="none")
        if label is not None and length_ms > 0.08 * end_ms:  # room for the words
            ax.text(start_ms + length_ms / 2, row_of[event["tid"]], label, ha="center", va="center",
                    fontsize=8)
    ax.set_yticks([row_of[tid] for tid in lanes])
    ax.set_yticklabels([_lane_label(tid) for tid in lanes])
    ax.set_xlabel("milliseconds since the build started")
    ax.set_title("raypass build timeline (colour = pass)")
    ax.set_ylim(-0.6, len(lanes) - 0.4)
    handles = [Patch(color=colour_of[name], label=name) for name in shown]
    if waiting:
        handles.append(Patch(color=WAIT_COLOUR, label="driver during a stage on the workers"))
    if handles:
        below = -0.35 / max(1, len(lanes)) - 0.12  # under the axis label, whatever the lanes
        ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, below), ncol=LEGEND_COLUMNS,
                  fontsize=8, frameon=False)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=TIMELINE_DPI)
    width, height = fig.canvas.get_width_height()
    plt.close(fig)
    return path, width, height


def _within_a_stage(event: dict[str, Any], stages: list[dict[str, Any]]) -> bool:
    """Whether most of ``event`` lies inside one of ``stages`` (the driver's span of a
    batched stage's first pass covers the stage: its passes ran on the workers)."""
    start, end = event["ts"], event["ts"] + event["dur"]
    for stage in stages:
        overlap = min(end, stage["ts"] + stage["dur"]) - max(start, stage["ts"])
        if overlap > 0.5 * event["dur"]:
            return True
    return False


def _lane_label(tid: int) -> str:
    if tid == DRIVER_TID:
        return "driver"
    return "stages" if tid == STAGES_TID else f"worker {tid - 1}"


def _leaf_spans(spans: list[Span]) -> list[Span]:
    """Spans that contain no other span (a Sequential's span covers its passes)."""
    ordered = sorted(spans, key=lambda s: (s.start, -s.seconds))
    leaves = []
    for i, span in enumerate(ordered):
        following = ordered[i + 1] if i + 1 < len(ordered) else None
        contains_next = following is not None and following.start < span.start + span.seconds
        if not contains_next:
            leaves.append(span)
    return leaves

"""Tables the CLI prints with rich: the timing of a build, its workers, the passes.

The numbers of the timing table come from the PassTimingInstrument (driver wall time
per pass, and the worker CPU the scheduler merged into it) and from the scheduler's
per-(pass, function) events (the slowest function): the same events the trace draws, so
a pass's worker slices in the trace sum to its "worker CPU" here.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from passinfra.codegen.passes.compile_c import compile_counts
from scheduler.stats import RunStats

if TYPE_CHECKING:  # rich is imported when a table is printed: a plain compile prints none
    from rich.console import Console
    from rich.table import Table

# the Sequentials of passinfra.build: their time is the sum of their passes
_PIPELINE_NAMES = frozenset({"build_compile", "build_link"})


def console() -> Console:
    """A console for stdout; off a terminal a fixed wide width keeps rows on one line."""
    from rich.console import Console

    if sys.stdout.isatty():
        return Console()
    return Console(width=160, no_color=True, highlight=False)


@dataclass
class PassRow:
    name: str
    runs: int = 0
    wall_ms: float = 0.0
    worker_cpu_ms: float | None = None
    functions: int | None = None
    slowest: str = ""
    slowest_ms: float = 0.0


def timing_rows(timings: list[dict[str, Any]], stats: RunStats | None) -> list[PassRow]:
    """One row per pass name (runs summed), in order of first run."""
    rows: dict[str, PassRow] = {}
    stack = list(reversed(timings))
    while stack:
        entry = stack.pop()
        stack.extend(reversed(entry["children"]))
        if entry["children"] or entry["name"] in _PIPELINE_NAMES:
            continue  # a Sequential: its passes have rows of their own
        row = rows.setdefault(entry["name"], PassRow(entry["name"]))
        row.runs += 1
        row.wall_ms += entry["total_us"] / 1e3
        workers = entry["workers"]
        if workers is not None:
            row.worker_cpu_ms = (row.worker_cpu_ms or 0.0) + workers["cpu_us"] / 1e3
            row.functions = (row.functions or 0) + workers["functions"]
    for event in stats.events if stats is not None else ():
        row = rows.get(event.pass_name)
        if row is not None and event.seconds * 1e3 >= row.slowest_ms:
            row.slowest, row.slowest_ms = event.function, event.seconds * 1e3
    return list(rows.values())


def timing_table(rows: list[PassRow]) -> Table:
    from rich.table import Table

    table = Table(title="Pass timing", title_justify="left")
    table.add_column("pass")
    table.add_column("runs", justify="right")
    table.add_column("wall ms", justify="right")
    table.add_column("worker CPU ms", justify="right")
    table.add_column("functions", justify="right")
    table.add_column("slowest function")
    for row in rows:
        cpu = "-" if row.worker_cpu_ms is None else f"{row.worker_cpu_ms:.3f}"
        functions = "-" if row.functions is None else str(row.functions)
        slowest = f"{row.slowest} ({row.slowest_ms:.3f} ms)" if row.slowest else "-"
        table.add_row(row.name, str(row.runs), f"{row.wall_ms:.3f}", cpu, functions, slowest)
    total_wall = sum(row.wall_ms for row in rows)
    total_cpu = sum(row.worker_cpu_ms or 0.0 for row in rows)
    table.add_section()
    table.add_row("total", "", f"{total_wall:.3f}", f"{total_cpu:.3f}", "", "")
    # the workers run a whole batched stage when its first pass starts
    table.caption = "wall: driver time (a batched stage's time shows on its first pass)"
    return table


def worker_table(stats: RunStats) -> Table | None:
    """Per worker: pid, functions run, busy seconds, busy share of the time the function
    stages ran (Ray start-up and driver-only passes excluded), and the kernels CompileC
    compiled there (cache hits among them)."""
    from rich.table import Table

    if not stats.worker_busy_seconds:
        return None
    where = stats.workers or stats.backend_reason
    table = Table(title=f"Workers ({stats.backend}: {where})", title_justify="left")
    for column in ("worker", "pid", "function runs", "busy s", "busy share", "kernels", "cache hits"):
        table.add_column(column, justify="right")
    stage_seconds = sum(stage.wall_seconds for stage in stats.stages if stage.kind == "function") or 1.0
    compiles = compile_counts(stats.facts)
    for slot in sorted(stats.worker_busy_seconds):
        busy = stats.worker_busy_seconds[slot]
        pid = stats.worker_pids.get(slot)
        runs = str(stats.worker_functions.get(slot, 0))
        kernels, hits = compiles.get(pid, (0, 0)) if pid is not None else (0, 0)
        table.add_row(str(slot), str(pid or "?"), runs, f"{busy:.3f}", f"{busy / stage_seconds:.0%}",
                      str(kernels), str(hits))
    table.caption = f"busy share: of the {stage_seconds:.3f}s the function stages ran"
    return table


def compile_summary(stats: RunStats) -> str | None:
    """Where CompileC ran and how many of its objects came from the cache, per process:
    ``kernels: worker 0 (pid 11) 7 compiled, 0 cache hits; ...`` (None: nothing compiled)."""
    compiles = compile_counts(stats.facts)
    if not compiles:
        return None
    slot_of = {pid: slot for slot, pid in stats.worker_pids.items()}
    parts = []
    # the driver first, then the workers by slot (a replaced worker's old pid: by pid, last)
    for pid in sorted(compiles, key=lambda pid: (pid != os.getpid(), slot_of.get(pid, len(slot_of)), pid)):
        kernels, hits = compiles[pid]
        where = f"worker {slot_of[pid]}" if pid in slot_of else "driver" if pid == os.getpid() else "worker"
        parts.append(f"{where} (pid {pid}) {kernels - hits} compiled, {hits} cache hits")
    return "kernels: " + "; ".join(parts)


def print_timing(timings: list[dict[str, Any]], stats: RunStats | None) -> list[PassRow]:
    out = console()
    rows = timing_rows(timings, stats)
    out.print(timing_table(rows))
    if stats is not None:
        workers = worker_table(stats)
        if workers is not None:
            out.print(workers)
        else:
            out.print(f"backend: {stats.backend} ({stats.backend_reason})")
        compiles = compile_summary(stats)
        if compiles is not None:
            out.print(compiles)
    return rows


def passes_table() -> Table:
    """Every registered pass: name, kind, opt_level, required."""
    from rich.table import Table

    from passinfra.transform import ModulePass, Sequential, get_pass, list_passes

    table = Table(title="Registered passes", title_justify="left")
    for column in ("name", "kind", "opt_level", "required"):
        table.add_column(column)
    for name in list_passes():
        pass_ = get_pass(name)
        if isinstance(pass_, Sequential):
            kind = "sequential"
        elif isinstance(pass_, ModulePass):
            kind = "module"
        else:
            kind = "function"
        table.add_row(name, kind, str(pass_.info.opt_level), ", ".join(pass_.info.required) or "-")
    return table

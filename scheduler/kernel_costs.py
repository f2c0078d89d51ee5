"""How long building one kernel takes on this machine: what ``backend="auto"`` weighs.

auto estimates a build's parallel work as its predicted kernels x seconds per kernel
(``scheduler.auto``). The reference machine's constant (0.04 s: 2-core EPYC, gcc -O2)
was a third to a half of what the same kernels took on a 16-core Xeon, and a third of
what the 24-layer transformer's (large softmax and GEMM kernels) took on the reference
machine itself: work estimated that low made Ray look not worth its fixed costs where it
was the faster path (the transformer on a 15-worker warm pool: 0.87 of local, auto kept
local). So every run on workers whose kernels were compiled (no object from the kernel
cache, which would make the work look cheap) records its kernel stages' work per
predicted kernel (``kernel_costs.json`` beside the pool's record), and the estimate
takes the median of the last few; a machine with none yet uses the constant.

The files say what they measured (``MEASURES``): a kernel's cost changed its meaning when
kernels began to compile several to a compiler call (compile units: a kernel's build is
about 0.6 of what it was alone), and measurements of the old kind would have held the
median for four more builds. A file of another kind reads as none.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from passinfra.codegen.passes.compile_c import PASS_NAME, compile_records
from passinfra.ir.module import IRModule
from scheduler.stats import RunStats

FILE_NAME = "kernel_costs.json"
# of those seconds, the C compiler's share (what an in-process build runs
# codegen.compile_jobs at a time): the same runs, a file of its own
SHARE_FILE_NAME = "kernel_compile_share.json"
KEEP = 7  # the newest measurements kept
# what the numbers are of: a kernel built as the pipeline builds it (since compile units,
# its share of its unit's compile); change it when that changes
MEASURES = "kernel in a compile unit"
# a run with fewer kernels than this says little about a kernel's cost (one slow kernel
# dominates it)
MIN_KERNELS = 8


def _path(name: str = FILE_NAME) -> Path:
    from scheduler import pool

    return pool.pool_dir() / name


def _read(name: str) -> list[float]:
    try:
        data = json.loads(_path(name).read_text())
        if not isinstance(data, dict) or data.get("measures") != MEASURES:
            return []  # measurements of another kind (or from before files said which)
        return [float(s) for s in data["values"]][-KEEP:]
    except (OSError, ValueError, TypeError, KeyError):  # none yet, or a foreign file
        return []


def _write(name: str, values: list[float]) -> None:
    from scheduler.pool.startup_times import write_json

    write_json(_path(name), {"measures": MEASURES, "values": values[-KEEP:]})


def measured() -> list[float]:
    """Seconds per predicted kernel recorded on this machine (oldest first)."""
    return _read(FILE_NAME)


def compile_shares() -> list[float]:
    """The compiler's share of a kernel's seconds, as runs here measured it (oldest first)."""
    return _read(SHARE_FILE_NAME)


def expected_compile_share(default: float) -> float:
    """The compiler's share of a kernel's seconds on this machine (the constant where no
    run measured it)."""
    shares = compile_shares()
    return statistics.median(shares) if shares else default


def expected(default: float) -> tuple[float, str]:
    """Seconds per predicted kernel, and where the number comes from."""
    times = measured()
    if times:
        return statistics.median(times), f"measured here, {len(times)} builds"
    return default, "prior"


def record_run(stats: RunStats, mod: IRModule) -> float | None:
    """Record what a finished run on workers says a kernel costs here (None: it says
    nothing: no kernel stage ran on workers, too few kernels, or any came from the cache)."""
    from scheduler.auto import KERNEL_PASSES, predicted_kernels

    stages = [stage for stage in stats.stages
              if stage.kind == "function" and not stage.ran_in_driver and KERNEL_PASSES & set(stage.passes)]
    if not stages:
        return None
    compiled = compile_records(stats.facts)
    if len(compiled) < MIN_KERNELS or any(hit for _, hit in compiled.values()):
        return None
    seconds = sum(stage.worker_seconds for stage in stages) / predicted_kernels(mod)
    if not seconds > 0:
        return None
    _write(FILE_NAME, [*measured(), round(seconds, 5)])
    indexes = {stage.index for stage in stages}
    runs = [event for event in stats.events if event.stage in indexes]
    total = sum(event.seconds for event in runs)
    if total > 0:
        compiling = sum(event.seconds for event in runs if event.pass_name == PASS_NAME)
        _write(SHARE_FILE_NAME, [*compile_shares(), round(compiling / total, 4)])
    return seconds


__all__ = ["FILE_NAME", "MEASURES", "SHARE_FILE_NAME", "compile_shares", "expected", "expected_compile_share",
           "measured", "record_run"]

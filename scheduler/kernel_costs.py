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
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from passinfra.codegen.passes.compile_c import compile_records
from passinfra.ir.module import IRModule
from scheduler.stats import RunStats

FILE_NAME = "kernel_costs.json"
KEEP = 7  # the newest measurements kept
# a run with fewer kernels than this says little about a kernel's cost (one slow kernel
# dominates it)
MIN_KERNELS = 8


def _path() -> Path:
    from scheduler import pool

    return pool.pool_dir() / FILE_NAME


def measured() -> list[float]:
    """Seconds per predicted kernel recorded on this machine (oldest first)."""
    try:
        return [float(s) for s in json.loads(_path().read_text())][-KEEP:]
    except (OSError, ValueError, TypeError):  # none yet, or a foreign file
        return []


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
    from scheduler.pool.startup_times import write_json

    write_json(_path(), [*measured(), round(seconds, 5)][-KEEP:])
    return seconds


__all__ = ["FILE_NAME", "expected", "measured", "record_run"]

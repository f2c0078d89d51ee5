"""Item 6: a large module of distinct primitive functions through the lowering passes.

Each function is a small fused elementwise group (``Primitive`` attr, distinct shapes and
constants), lowered and rendered to C by the codegen function passes (no C compiler, so
the measurement is the scheduler's, not cc's). For two module sizes (a tenth, and all),
on ray N=2: scheduler wall per function, driver overhead per function (sending
functions, merging results), and the peak RSS of the driver and of each worker.
"""

from __future__ import annotations

import resource
import time
from typing import Any

from bench.common import markdown_table, peak_rss_mib, ray_scheduler
from passinfra import ir
from passinfra.ir import op
from passinfra.transform import PassContext, Sequential, get_pass

LOWERING_PASSES = (
    "LowerToPrimFunc",
    "Simplify",
    "StorageFlatten",
    "VectorizeLoop",
    "UnrollLoop",
    "RemoveNoOp",
    "CodegenC",
)
FULL_FUNCTIONS = 5000
QUICK_FUNCTIONS = 500
FLAT_TOLERANCE = 1.5  # driver cost per function may grow this much from 1/10 to full size


def primitive_module(count: int) -> ir.IRModule:
    mod = ir.IRModule()
    for i in range(count):
        x = ir.var("x", (4, 8 + i % 61))
        body = op.nn.relu(op.add(op.multiply(x, ir.const(1.0 + i)), ir.const(float(i % 13))))
        if i % 2:
            body = op.tanh(body)
        mod[f"fused_{i}"] = ir.Function([x], body).with_attr("Primitive", 1)
    return mod


def pipeline() -> Sequential:
    return Sequential([get_pass("InferType")] + [get_pass(name) for name in LOWERING_PASSES], opt_level=0)


def driver_peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def measure(count: int, sched: Any) -> dict[str, Any]:
    mod = primitive_module(count)
    seq = pipeline()
    with PassContext(opt_level=3):
        started = time.perf_counter()
        sched.run(seq, mod)
        wall = time.perf_counter() - started
    run = sched.last_run
    driver = sum(
        e.seconds for e in run.driver_events if e.name.startswith(("send functions", "merge results"))
    )
    return {
        "functions": count,
        "wall": wall,
        "work": sum(e.seconds for e in run.events),
        "driver": driver,
        "calls": run.remote_calls,
        "bytes": run.bytes_sent + run.bytes_received,
        "driver_rss": driver_peak_mib(),
        "worker_rss": [peak_rss_mib(pid) for _, pid in sorted(run.worker_pids.items())],
    }


def run(quick: bool) -> tuple[str, list[list[str]]]:
    total = QUICK_FUNCTIONS if quick else FULL_FUNCTIONS
    sched = ray_scheduler(2)
    try:
        measure(50, sched)  # warm-up: imports and first calls on the workers
        results = [measure(total // 10, sched), measure(total, sched)]
    finally:
        sched.shutdown()
    rows = []
    for r in results:
        n = r["functions"]
        workers = ", ".join("n/a" if m is None else f"{m:.0f}" for m in r["worker_rss"])
        rows.append(
            [
                n,
                f"{r['wall']:.2f}",
                f"{r['wall'] / n * 1e3:.3f}",
                f"{r['work'] / n * 1e3:.3f}",
                f"{r['driver'] / n * 1e6:.0f}",
                r["calls"],
                f"{r['bytes'] / n:.0f}",
                f"{r['driver_rss']:.0f}",
                workers,
            ]
        )
    small, large = results
    growth = (large["driver"] / large["functions"]) / max(1e-12, small["driver"] / small["functions"])
    flat = (
        "flat" if growth <= FLAT_TOLERANCE else f"NOT flat (grew {growth:.2f}x, tolerance {FLAT_TOLERANCE}x)"
    )
    body = (
        f"Module of distinct primitive functions through {', '.join(LOWERING_PASSES)} on ray N=2 "
        "(one run per size after a 50-function warm-up). Peak RSS is the process's high-water mark so far "
        "(driver: getrusage; workers: /proc VmHWM), so it includes earlier benchmarks in this process.\n\n"
        + markdown_table(
            [
                "functions",
                "wall s",
                "wall per function ms",
                "pass work per function ms",
                "driver send+merge per function us",
                "remote calls",
                "bytes per function",
                "driver peak RSS MiB",
                "worker peak RSS MiB",
            ],
            rows,
        )
        + f"\n\nDriver overhead per function from {small['functions']} to {large['functions']} functions: "
        f"x{growth:.2f} ({flat})."
    )
    headline = [
        [
            f"large module: driver overhead per function, {large['functions']} vs {small['functions']} "
            "functions",
            f"{growth:.2f}x",
            "one run each",
            f"<= {FLAT_TOLERANCE}x (flat)",
            "met" if growth <= FLAT_TOLERANCE else f"MISSED by {growth - FLAT_TOLERANCE:.2f}",
        ]
    ]
    return body, headline

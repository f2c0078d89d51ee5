"""Measure the constants of ``backend="auto"``'s cost model (``scheduler.auto.CostModel``).

* ``seconds_per_kernel``: in-process builds of zoo models (cold kernel cache): the
  seconds of the per-kernel passes (lowering to CompileC), over the kernels the model
  predicts (``scheduler.auto.predicted_kernels``);
* ``startup_seconds``: a scheduler's private pool, from spawn to workers ready (what a
  ``ray`` run without a warm pool pays at most, before hiding it);
* ``call_seconds``: a stage of trivial functions sent one function per call, minus the
  same stage in one call, per call (on that private pool).

    python -m bench.auto_costs [--repeats 3]

Prints each constant (median and range) next to the value in the code, and writes
bench/results_auto_costs.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from passinfra.build import compile_pipeline
from passinfra.instrument import PassTimingInstrument
from passinfra.ir.type_infer import infer_module
from passinfra.transform import PassContext, Sequential
from scheduler.auto import CostModel, predicted_kernels
from scheduler.pool import startup_times

ROOT = Path(__file__).resolve().parent.parent

KERNEL_STAGE_PASSES = {
    "LowerToPrimFunc", "Simplify", "StorageFlatten", "VectorizeLoop", "UnrollLoop", "LoopPartition",
    "RemoveNoOp", "CodegenC", "CompileC",
}
MODELS = ("zoo:mlp", "zoo:resnet?depth=8", "zoo:transformer?layers=2")


def _kernel_seconds(timings: list[dict]) -> float:
    total, stack = 0.0, list(timings)
    while stack:
        entry = stack.pop()
        if entry["name"] in KERNEL_STAGE_PASSES:
            total += entry["total_us"] / 1e6
        else:
            stack.extend(entry["children"])
    return total


def seconds_per_kernel(spec: str) -> float:
    from raypass_cli.common import load_model

    mod = load_model(spec)
    infer_module(mod)
    kernels = predicted_kernels(mod)
    timing = PassTimingInstrument()
    with tempfile.TemporaryDirectory() as cache, PassContext(
        opt_level=3, instruments=[timing], config={"codegen.cache_dir": cache}
    ):
        compile_pipeline()(mod)
        seconds = _kernel_seconds(timing.timings())
    return seconds / kernels


def private_pool_seconds() -> tuple[float, float]:
    """(spawn to ready, seconds per batch call) on a private pool of two workers."""
    from passinfra.testing import chain_module, identity
    from scheduler import Scheduler

    started = time.perf_counter()
    with Scheduler(backend="ray", num_workers=2) as sched:
        sched.start_workers()
        startup = time.perf_counter() - started
        pipeline = Sequential([identity], opt_level=0)
        mod = chain_module(64, length=2)
        per_call = {}
        for batch in (64, 1):
            with PassContext(opt_level=0, config={"scheduler.batch_size": batch}):
                sched.run(pipeline, mod)  # functions resident: the next run measures calls only
                t0 = time.perf_counter()
                sched.run(pipeline, mod)
                per_call[batch] = (time.perf_counter() - t0, sched.last_run.remote_calls)
    (many_s, many_calls), (few_s, few_calls) = per_call[1], per_call[64]
    return startup, max(0.0, (many_s - few_s) / max(1, many_calls - few_calls))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.auto_costs", description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results_auto_costs.md"))
    args = parser.parse_args(argv)
    samples: dict[str, list[float]] = {"seconds_per_kernel": [], "startup_seconds": [], "call_seconds": []}
    for _ in range(args.repeats):
        samples["seconds_per_kernel"].append(statistics.median(seconds_per_kernel(m) for m in MODELS))
        startup, call = private_pool_seconds()
        samples["startup_seconds"].append(startup)
        samples["call_seconds"].append(call)
    model = CostModel()
    in_code = {"seconds_per_kernel": model.seconds_per_kernel, "call_seconds": model.call_seconds,
               # measured by every private pool start; this is the prior for two workers
               "startup_seconds": startup_times.prior(2)}
    rows = ["| constant | median | range | in the code |", "|---|---|---|---|"]
    for name, values in samples.items():
        rows.append(f"| {name} | {statistics.median(values):.4f} | {min(values):.4f}-{max(values):.4f} | "
                    f"{in_code[name]:.4f} |")
    text = "\n".join(
        ["# The constants of `backend=\"auto\"` (bench/auto_costs.py)", "",
         f"{args.repeats} repeats; seconds per kernel: median over {', '.join(MODELS)}.", "", *rows, ""]
    )
    Path(args.output).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

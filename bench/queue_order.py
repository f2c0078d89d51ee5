"""The kernel stage's work queue: node-count order against the measured costs of an
earlier build (``scheduler.function_costs``).

The queue hands functions to whichever worker is free, largest first. How long the
stage lasts on N workers then depends on where its slowest functions sit in that order:
one started last holds the stage after every other worker is done. This compiles a model
twice on a 2-worker ray backend (in-process driver, a private Ray, no kernel cache), takes
the kernel stage's measured seconds per function from each, and replays the second
build's stage as greedy list scheduling on N = 1 .. 15 workers in two orders: by node
count (what a build without earlier measurements uses) and by the first build's measured
seconds (what the next build of the same model uses: its costs are not the ones it is
replayed with, as they would not be). Reported beside the ideal (work / N). It replays the queue's order,
not its chunking or the per-call overheads (``bench/simulator.py`` models those): the
difference between the two columns is what the order alone is worth.

    python -m bench.queue_order [--model densenet121] [--output PATH]
"""

from __future__ import annotations

import argparse
import heapq
import sys
import tempfile
from pathlib import Path

from bench.common import machine_notes, markdown_table, publish

ROOT = Path(__file__).resolve().parent.parent
COUNTS = (1, 2, 4, 8, 15)


def list_schedule(order: list[str], seconds: dict[str, float], workers: int) -> float:
    """When the last of ``workers`` finishes, each taking the next function of ``order``
    as it becomes free."""
    free = [(0.0, slot) for slot in range(workers)]
    for name in order:
        at, slot = heapq.heappop(free)
        heapq.heappush(free, (at + seconds[name], slot))
    return max(at for at, _ in free)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.queue_order", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="densenet121")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results_queue_order.md"))
    args = parser.parse_args(argv)

    import ray

    from bench.before_after import model_arg
    from passinfra.build import build
    from passinfra.transform import PassContext
    from raypass_cli.common import load_model
    from scheduler import Scheduler
    from scheduler.assign import estimated_cost
    from scheduler.auto import KERNEL_PASSES

    space = Path(tempfile.mkdtemp(prefix="rp-queue-order-"))
    mod = load_model(model_arg(args.model, space))
    scheduler = Scheduler(backend="ray", num_workers=2, address="local", cpus_per_worker=1)
    builds: list[dict[str, float]] = []  # per build: the kernel stage's seconds per function
    try:
        for _ in range(2):
            with PassContext(config={"codegen.no_cache": True, "codegen.build_cache": False}):
                build(mod, scheduler=scheduler)
            stats = scheduler.last_run
            stage = next(s for s in stats.stages if s.kind == "function" and KERNEL_PASSES & set(s.passes))
            seconds: dict[str, float] = {}
            for event in stats.events:
                if event.stage == stage.index:
                    seconds[event.function] = seconds.get(event.function, 0.0) + event.seconds
            builds.append(seconds)
        # the node counts the queue saw: the stage's input, rebuilt as the build made it
        from passinfra.build import COMPILE_PIPELINE, _passes

        with PassContext(opt_level=3):
            for name in COMPILE_PIPELINE[:COMPILE_PIPELINE.index("LowerToPrimFunc")]:
                mod = _passes((name,))[0](mod)
    finally:
        scheduler.shutdown()
        if ray.is_initialized():
            ray.shutdown()
    earlier, captured = builds  # the order from the first build, the costs of the second
    names = [gv.name_hint for gv in mod.functions if gv.name_hint in captured]
    nodes = {name: estimated_cost(mod[name]) for name in names}
    by_nodes = sorted(names, key=lambda name: -nodes[name])  # stable: ties in module order
    by_seconds = sorted(names, key=lambda name: -earlier.get(name, 0.0))
    slowest = max(names, key=captured.__getitem__)
    work = sum(captured[name] for name in names)
    rows = []
    for workers in COUNTS:
        ideal = work / workers
        old, new = list_schedule(by_nodes, captured, workers), list_schedule(by_seconds, captured, workers)
        rows.append([workers, f"{ideal:.3f}", f"{old:.3f} ({old / ideal:.2f})",
                     f"{new:.3f} ({new / ideal:.2f})", f"{new / old:.2f}"])
    notes = machine_notes()
    text = "\n".join([
        "# The kernel stage's queue order",
        "",
        f"`python -m bench.queue_order --model {args.model}`; {notes['machine']}, load "
        f"{notes['load average (1, 5, 15 min)']}. Two `--no-cache` builds on 2 ray workers measured the "
        f"kernel stage ({', '.join(stage.passes)}): {len(names)} functions, {work:.2f} s of work, the "
        f"slowest `{slowest}` {captured[slowest] * 1e3:.0f} ms (median "
        f"{sorted(captured.values())[len(names) // 2] * 1e3:.0f} ms), number "
        f"{by_nodes.index(slowest) + 1} of {len(names)} in node-count order (second build). The second "
        "build's stage replayed as list scheduling on N workers, in node-count order and in the order of "
        "the first build's measured seconds (what the second build's queue reads from "
        "`function_costs.json`), seconds (over the ideal):",
        "",
        markdown_table(["workers", "ideal (work / N)", "node-count order", "measured-cost order",
                        "measured / node-count"], rows),
        "",
    ])
    publish(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

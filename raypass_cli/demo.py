"""``raypass demo``: compile the zoo transformer on a local Ray instance with every
core, show the timing table, check the library against the reference interpreter, and
write a trace and a timeline picture."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from raypass_cli.common import command_scheduler, load_model, load_plugins
from raypass_cli.compile import add_build_options, compile_model
from raypass_cli.report import print_timing
from raypass_cli.run import random_input
from raypass_cli.trace import write_timeline_png, write_trace

# big enough that FuseOps leaves dozens of kernels to spread over the workers, small
# enough to compile in well under a minute on two cores
DEFAULT_MODEL = "zoo:transformer?layers=4&hidden=64&seq=16"
# the compiled C and the interpreter round float32 differently; fused GELU/softmax chains
# of a few layers stay far below this
TOLERANCE = 1e-3


def _check(lib: Any, mod: Any, seed: int) -> tuple[float, bool]:
    import passinfra

    rng = np.random.default_rng(seed)
    vocab = 16
    arrays = [random_input(spec["shape"], spec["dtype"], rng, high=vocab) for spec in lib.metadata["inputs"]]
    compiled = np.asarray(lib(*arrays))
    reference = np.asarray(passinfra.evaluate(mod, *arrays))
    diff = float(np.max(np.abs(compiled.astype(np.float64) - reference.astype(np.float64))))
    scale = max(1.0, float(np.max(np.abs(reference))))
    return diff, diff <= TOLERANCE * scale


def cmd_demo(args: argparse.Namespace) -> int:
    load_plugins(args.plugin)
    out_dir = Path(args.out_dir)
    print(
        f"raypass demo: compiling {args.model} with the {args.backend} backend "
        f"({args.workers or os.cpu_count()} workers), opt_level {args.opt_level}"
    )
    # the demo shows the workers at work: the driver waits for them instead of compiling
    # the small model itself while they start (a --config of the user's comes later and wins)
    args.config = ["scheduler.head_start=false", *(args.config or [])]
    with command_scheduler(args) as scheduler:
        mod = load_model(args.model)
        if args.backend == "ray":
            # ... for every worker: a private pool serves from its first one on, and one
            # that came up after the small model was built would show nothing
            scheduler.start_workers()
        outcome = compile_model(mod, args, scheduler)
    stats = outcome.stats
    for note in stats.notes:
        print(f"raypass: note: {note}", file=sys.stderr)
    kernels = len(set(outcome.library.metadata.get("kernels", [])))
    print(
        f"built {kernels} kernels in {outcome.seconds:.2f}s "
        f"({stats.remote_calls} remote calls, {stats.num_workers} workers)"
    )
    if stats.backend == "ray":
        print(f"workers: {stats.workers}" + (
            f"; starting them took {stats.startup_seconds:.2f}s, {stats.startup_hidden_seconds:.2f}s of it "
            "hidden behind the driver's serial work" if stats.startup_seconds else "; no start-up"))
        if stats.workers == "private pool":
            print("(`raypass pool start` keeps workers warm: compiles then skip the start-up)")
    print_timing(outcome.timings, stats)
    diff, ok = _check(outcome.library, mod, args.seed)
    print(
        f"check against the reference interpreter: max abs difference {diff:.3g} -> "
        f"{'PASS' if ok else 'FAIL'}"
    )
    trace = write_trace(out_dir / "trace.json", outcome.spans, stats)
    png, width, height = write_timeline_png(out_dir / "timeline.png", outcome.spans, stats)
    print(f"trace:    {trace} (open it in https://ui.perfetto.dev)")
    print(f"timeline: {png} ({width}x{height})")
    return 0 if ok else 1


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("demo", help="compile the zoo transformer on Ray, time it, verify it, trace it")
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        metavar="MODEL",
        help=f"the model to compile (default {DEFAULT_MODEL})",
    )
    parser.add_argument(
        "--out-dir",
        default="raypass-demo",
        metavar="DIR",
        help="where the trace and the timeline go (default ./raypass-demo)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the check's random input")
    add_build_options(parser, default_backend="ray")
    parser.set_defaults(func=cmd_demo)

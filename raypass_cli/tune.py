"""``raypass tune MODEL --trials N --db FILE``: search each kernel's schedule on worker
processes and record the fastest in a tuning database (:mod:`passinfra.tuning`), which
``raypass compile --tuning-db FILE`` applies."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from raypass_cli.common import CliUserError, load_model, parse_dims, parse_shapes


def cmd_tune(args: argparse.Namespace) -> int:
    from passinfra.tuning import tune

    if args.trials < 1:
        raise CliUserError(f"--trials must be at least 1, got {args.trials}")
    if args.workers < 1:
        raise CliUserError(f"--workers must be at least 1, got {args.workers}")
    mod = load_model(args.model, parse_shapes(args.shapes), parse_dims(args.dim))

    def report(line: str) -> None:
        if not args.quiet:
            print(f"[tune] {line}", file=sys.stderr, flush=True)

    try:
        result = tune(mod, args.trials, args.db, workers=args.workers, cache_dir=args.cache_dir,
                      report=report)
    except KeyboardInterrupt:
        print(f"raypass: interrupted; what was measured is in {args.db}", file=sys.stderr)
        return 130
    _print_tables(result)
    print(f"wrote {args.db}: {len(result.kernels)} kernels tuned, {result.skipped_known} already recorded, "
          f"{result.measured} candidates measured in {result.seconds:.1f}s on {args.workers} worker(s)")
    return 0


def _print_tables(result: Any) -> None:
    """What the search did, per kernel and per worker process."""
    from rich.console import Console
    from rich.table import Table

    kernels = Table(title="Tuning: kernels")
    for column in ("kernel", "calls", "candidates", "best us", "vs the rules", "schedule"):
        kernels.add_column(column, justify="left" if column in ("kernel", "schedule") else "right")
    for kernel in result.kernels:
        kernels.add_row(kernel["name"], str(kernel["calls"]), str(kernel["candidates"]),
                        f"{kernel['seconds'] * 1e6:.1f}", f"{kernel['speedup']:.2f}x", kernel["schedule"])
    workers = Table(title="Tuning: workers")
    for column in ("worker pid", "candidates", "busy s"):
        workers.add_column(column, justify="right")
    for pid, stats in sorted(result.workers.items()):
        workers.add_row(str(pid), str(int(stats["candidates"])), f"{stats['busy_seconds']:.1f}")
    console = Console(width=120)
    if result.kernels:
        console.print(kernels)
    if result.workers:
        console.print(workers)


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "tune",
        help="search each kernel's schedule and record the fastest in a tuning database",
        description="Tune MODEL's kernels (an .onnx file, a text-IR file or zoo:NAME?k=v&...): each "
        "candidate schedule is compiled and timed on worker processes, each pinned to its own CPUs; "
        "the fastest per kernel goes to --db, which `raypass compile --tuning-db` applies.",
    )
    parser.add_argument("model", metavar="MODEL", help="model.onnx, model.txt (text IR) or zoo:NAME")
    parser.add_argument("--trials", type=int, default=32, metavar="N",
                        help="candidates to measure in all, the rules' choice of each kernel included "
                        "(default 32)")
    parser.add_argument("--db", required=True, metavar="FILE", help="the tuning database to add to (JSON)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="measuring processes, each on its share of the CPUs (default 1)")
    parser.add_argument("--shapes", action="append", default=[], metavar="NAME=D0,D1,...",
                        help="static input shapes for an ONNX model (repeatable)")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=LO..HI",
                        help="bounds of an ONNX model's symbolic dimension (repeatable)")
    parser.add_argument("--cache-dir", default=None, metavar="DIR", help="compiled-kernel cache directory")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.set_defaults(func=cmd_tune)

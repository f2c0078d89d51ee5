"""``raypass tune MODEL --trials N --db FILE``: search each kernel's schedule on worker
processes of this machine or on Ray actors (``--backend ray [--address]``) and record the
fastest in a tuning database (:mod:`passinfra.tuning`), which ``raypass compile
--tuning-db FILE`` applies. ``--trace FILE`` writes every job as a slice on its worker's
lane (Chrome trace JSON)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from raypass_cli.common import CliUserError, load_model, parse_dims, parse_shapes


def cmd_tune(args: argparse.Namespace) -> int:
    from passinfra.tuning import tune

    if args.trials < 1:
        raise CliUserError(f"--trials must be at least 1, got {args.trials}")
    if args.workers < 1:
        raise CliUserError(f"--workers must be at least 1, got {args.workers}")
    if args.minutes is not None and args.minutes <= 0:
        raise CliUserError(f"--minutes must be positive, got {args.minutes:g}")
    if args.backend == "local" and args.address:
        raise CliUserError("--address is for --backend ray")
    mod = load_model(args.model, parse_shapes(args.shapes), parse_dims(args.dim))

    def report(line: str) -> None:
        if not args.quiet:
            print(f"[tune] {line}", file=sys.stderr, flush=True)

    runner = _ray_runner(args) if args.backend == "ray" else None
    pinned = _pinned_cpus(args) if args.backend == "local" else None
    try:
        result = tune(mod, args.trials, args.db, workers=args.workers, cache_dir=args.cache_dir,
                      report=report, runner=runner, minutes=args.minutes, cpus_per_worker=pinned)
    except KeyboardInterrupt:
        print(f"raypass: interrupted; what was measured is in {args.db}", file=sys.stderr)
        return 130
    finally:
        if runner is not None:
            runner.close()
    _print_tables(result)
    where = "Ray worker(s)" if runner is not None else "worker process(es)"
    print(f"wrote {args.db}: {len(result.kernels)} kernels tuned, {result.skipped_known} already recorded, "
          f"{result.measured} candidates measured in {result.seconds:.1f}s on {args.workers} {where}")
    check = result.model_check
    if check:
        verdict = "kept" if check["kept"] else "not kept: the rules' schedules stay"
        print(f"the model with the {check['kernels']} tuned kernels: {check['tuned'] * 1e3:.3f} ms per call "
              f"against {check['rules'] * 1e3:.3f} ms with the rules' ({verdict})")
    if result.not_started:
        print(f"the {args.minutes:g}-minute budget left {result.not_started} of the --trials candidates "
              "unmeasured")
    if result.lost_workers:
        print(f"{result.lost_workers} worker(s) died under a job and were replaced (their jobs ran again; "
              f"{result.given_up} given up)")
    if args.trace:
        _write_trace(Path(args.trace), result)
        print(f"wrote the tuning trace to {args.trace}")
    return 0


def _pinned_cpus(args: argparse.Namespace) -> int | None:
    """Local worker processes pinned to ``--cpus-per-worker`` whole CPUs each (None: each
    on its share of this process's CPUs)."""
    from passinfra.runtime.cpus import available_cpus

    per = args.cpus_per_worker
    if per is None:
        return None
    if per < 1 or per != int(per):
        raise CliUserError(f"--cpus-per-worker must be a whole number of CPUs for local workers, got {per:g}")
    needed, cpus = args.workers * int(per), available_cpus()
    if needed > cpus:
        raise CliUserError(f"{args.workers} worker(s) of {int(per)} CPUs need {needed} CPUs; this process "
                           f"may use {cpus}")
    return int(per)


def _ray_runner(args: argparse.Namespace) -> Any:
    from passinfra.runtime.cpus import available_cpus
    from scheduler.tuning import RayRunner

    # on this machine each worker gets its share of the CPUs; on a cluster, one CPU unless told
    share = 1.0 if args.address else max(1.0, float(available_cpus() // args.workers))
    cpus = args.cpus_per_worker if args.cpus_per_worker is not None else share
    if cpus <= 0:
        raise CliUserError(f"--cpus-per-worker must be positive, got {cpus:g}")
    return RayRunner(args.workers, address=args.address, cpus_per_worker=cpus, cache_dir=args.cache_dir)


def _write_trace(path: Path, result: Any) -> None:
    """Chrome trace JSON: a lane per worker slot, a slice per job (candidate or re-measure)."""
    origin = min((job["start"] for job in result.jobs), default=0.0)
    events: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
                                     "args": {"name": "raypass tune"}}]
    for slot in sorted({job["slot"] for job in result.jobs}):
        events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": slot + 1,
                       "args": {"name": f"worker {slot}"}})
    for job in result.jobs:
        events.append({"name": job["kernel"], "cat": job["kind"], "ph": "X", "pid": 1, "tid": job["slot"] + 1,
                       "ts": (job["start"] - origin) * 1e6, "dur": job["seconds"] * 1e6,
                       "args": {"kind": job["kind"], "schedules": job["schedules"], "worker pid": job["pid"],
                                "us per call": [round(t * 1e6, 3) for t in job["seconds_per_call"]]}})
    summary = {"measured": result.measured, "lost_workers": result.lost_workers, "seconds": result.seconds}
    document = {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"raypass_tune": summary}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))


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
    parser.add_argument("--minutes", type=float, default=None, metavar="M",
                        help="time budget: no candidate starts once the re-measure of the finalists "
                        "needs the time left (the rules' choices are measured whatever the budget)")
    parser.add_argument("--db", required=True, metavar="FILE", help="the tuning database to add to (JSON)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="measuring workers, each on its share of the CPUs (default 1)")
    parser.add_argument("--backend", choices=("local", "ray"), default="local",
                        help="local: worker processes of this machine (default); ray: Ray actors, in a "
                        "private Ray instance or on the cluster at --address")
    parser.add_argument("--address", default=None, metavar="ADDR",
                        help="the Ray cluster to tune on (host:port or auto), with --backend ray")
    parser.add_argument("--cpus-per-worker", type=float, default=None, metavar="C",
                        help="CPUs each worker gets and its libraries' threads (default: this "
                        "machine's CPUs / --workers; 1 on a cluster); local workers are pinned to "
                        "whole CPUs, the rest stay unused")
    parser.add_argument("--trace", default=None, metavar="FILE",
                        help="write the tuning as a Chrome trace (one lane per worker)")
    parser.add_argument("--shapes", action="append", default=[], metavar="NAME=D0,D1,...",
                        help="static input shapes for an ONNX model (repeatable)")
    parser.add_argument("--dim", action="append", default=[], metavar="NAME=LO..HI",
                        help="bounds of an ONNX model's symbolic dimension (repeatable)")
    parser.add_argument("--cache-dir", default=None, metavar="DIR", help="compiled-kernel cache directory")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.set_defaults(func=cmd_tune)

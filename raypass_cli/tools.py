"""Small subcommands: ``passes``, ``replay``, ``bench``."""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

from raypass_cli.common import CliUserError


def cmd_passes(args: argparse.Namespace) -> int:
    from raypass_cli.report import console, passes_table

    console().print(passes_table())
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from scheduler.reproducer import read_header, run_replay

    if not Path(args.repro).is_file():
        raise CliUserError(f"reproducer {args.repro!r} does not exist")
    repro = read_header(args.repro)
    pipeline = repro.pipeline
    print(
        f"replaying {args.repro}: {len(pipeline)} passes from {pipeline[0] if pipeline else '-'}; "
        f"the original run failed in {repro.pass_name} on {repro.function} ({repro.error_type})"
    )
    # a pass that cannot be found raises PassNotFoundError here: a user error (exit 2)
    result = run_replay(args.repro, plugins=args.plugin)
    if result.failure is None:
        assert result.module is not None
        print(f"the replay finished without an error ({len(result.module)} functions); "
              "the failure did not reproduce")
        if args.print_ir:
            print(result.module.astext())
        return 0
    if result.reproduced:
        print(f"the failure reproduced: {result.failure.describe()}")
    else:
        # a different error is not the recorded failure; it still is a failure (exit 1)
        print(f"the failure did not reproduce; the replay failed differently: {result.failure.describe()}")
        print(f"(the original run: {repro.fields.get('error', '?')}, in pass {repro.pass_name!r} "
              f"on function {repro.function!r})")
    if args.debug:
        raise result.failure.error
    return 1


def bench_directory() -> Path | None:
    """``bench/`` of the current directory, else of the repository this package is in."""
    import scheduler

    for candidate in (Path.cwd() / "bench", Path(scheduler.__file__).resolve().parents[1] / "bench"):
        if (candidate / "__main__.py").is_file():
            return candidate
    return None


def cmd_bench(args: argparse.Namespace, rest: list[str]) -> int:
    directory = bench_directory()
    if directory is None:
        raise CliUserError(
            "no bench/__main__.py in the current directory or the raypass checkout; "
            "run `raypass bench` from the repository root"
        )
    spec = importlib.util.spec_from_file_location("raypass_bench_main", directory / "__main__.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # the benchmarks import their siblings (bench/common.py) by directory or as package
    sys.path.insert(0, str(directory.parent))
    sys.path.insert(0, str(directory))
    spec.loader.exec_module(module)
    argv = (["--quick"] if args.quick else []) + rest
    result = module.main(argv)
    return int(result or 0)


def add_parsers(sub: Any) -> None:
    passes = sub.add_parser("passes", help="list the registered passes (name, kind, opt_level, required)")
    passes.set_defaults(func=cmd_passes)

    replay = sub.add_parser("replay", help="re-run a reproducer file written by a failed run")
    replay.add_argument("repro", metavar="REPRO", help="a repro-*.txt file")
    replay.add_argument("--print-ir", action="store_true", help="print the module the replay produced")
    replay.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="FILE.py",
        help="run a Python file that registers passes or config keys first (repeatable), instead "
        "of the plugin files the reproducer recorded (run by default while they exist)",
    )
    replay.set_defaults(func=cmd_replay)

    bench = sub.add_parser("bench", help="run the benchmarks (bench/__main__.py); other options pass through")
    bench.add_argument("--quick", action="store_true", help="the small, fast configuration")
    bench.set_defaults(func=cmd_bench, takes_rest=True)

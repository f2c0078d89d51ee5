"""Small subcommands: ``passes``, ``replay``, ``bench``."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
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


def bench_main() -> Callable[[list[str]], int | None]:
    """``bench.__main__.main``: the benchmarks are the ``bench`` package, which ships with
    raypass (an editable install maps it to the checkout's bench/)."""
    try:
        module = importlib.import_module("bench.__main__")
    except ModuleNotFoundError as error:
        # only the package itself missing is the user's setup; a module the benchmarks
        # import that is missing (onnxruntime, ...) stays an error with its traceback
        if error.name not in ("bench", "bench.__main__"):
            raise
        raise CliUserError(
            "the benchmarks (the bench package) are not installed; install raypass from its "
            "checkout (`pip install -e .`, as `make test` does) and run `raypass bench` again"
        ) from None
    return module.main


def cmd_bench(args: argparse.Namespace, rest: list[str]) -> int:
    main = bench_main()
    argv = (["--quick"] if args.quick else []) + rest
    return int(main(argv) or 0)


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

    bench = sub.add_parser("bench", help="run the benchmarks (python -m bench); other options pass through")
    bench.add_argument("--quick", action="store_true", help="the small, fast configuration")
    bench.set_defaults(func=cmd_bench, takes_rest=True)

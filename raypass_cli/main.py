"""The ``raypass`` command line: the argument parser, dispatch and exit statuses.

Each subcommand (or group of small ones) has a module of its own in this package; this
module only wires them into one parser and maps errors to exit statuses. User errors
print one line on stderr and exit with status 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

# the compiler and the subcommands are imported where they are used, not here: the
# `raypass` command first offers itself to a warm driver (raypass_cli.forkserver), and a
# command it serves must not have paid for them
EXIT_FAILURE = 1
EXIT_USER_ERROR = 2  # raypass_cli.common's, the status of a user's error


def _cmd_ops(args: argparse.Namespace) -> int:
    from passinfra.ir import list_ops

    ops = list_ops()
    width = max(len(op.name) for op in ops)
    print(f"{'op':<{width}}  {'pattern':<17}  {'inputs':>6}  stateful")
    for op in ops:
        inputs = "any" if op.num_inputs < 0 else str(op.num_inputs)
        stateful = "yes" if op.stateful else ""
        print(f"{op.name:<{width}}  {op.pattern.name.lower():<17}  {inputs:>6}  {stateful}")
    print(f"{len(ops)} ops")
    return 0


def build_parser() -> argparse.ArgumentParser:
    import passinfra
    from raypass_cli import compile as compile_command
    from raypass_cli import demo, plan, pool, run, tools, tune

    parser = argparse.ArgumentParser(prog="raypass", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"raypass {passinfra.__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    compile_command.add_parser(sub)
    run.add_parser(sub)
    plan.add_parser(sub)
    demo.add_parser(sub)
    pool.add_parser(sub)
    tune.add_parser(sub)
    tools.add_parsers(sub)
    ops = sub.add_parser("ops", help="list the registered ops with their fusion pattern kind")
    ops.set_defaults(func=_cmd_ops)
    return parser


def user_error_types() -> tuple[type[BaseException], ...]:
    """Errors that mean the command was wrong, not raypass: exit status 2."""
    from passinfra.errors import ParseError, SymbolicSizeError
    from passinfra.frontend import OnnxImportError, UnsupportedOpsError
    from passinfra.frontend.zoo import ZooSpecError
    from passinfra.runtime.shape_binding import DimBindingError
    from passinfra.transform import PassArgumentError, PassConfigError, PassDependencyError, PassNotFoundError
    from passinfra.tuning.database import TuningDatabaseError
    from raypass_cli.common import CliUserError
    from scheduler.reproducer import ReproducerError

    return (
        CliUserError,
        UnsupportedOpsError,
        OnnxImportError,
        ZooSpecError,
        PassNotFoundError,
        PassConfigError,
        PassDependencyError,
        PassArgumentError,
        ParseError,
        ReproducerError,
        SymbolicSizeError,
        DimBindingError,
        TuningDatabaseError,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """The ``raypass`` command on ``argv`` (None: this process's command line, which a
    warm driver may run instead: ``raypass_cli.forkserver``); its exit status."""
    if argv is None:
        from raypass_cli.forkserver import run_in_warm_driver

        served = run_in_warm_driver(sys.argv[1:])
        if served is not None:
            return served
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USER_ERROR
    if rest and not getattr(args, "takes_rest", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    from passinfra.errors import RaypassError

    try:
        return args.func(args, rest) if getattr(args, "takes_rest", False) else args.func(args)
    except (RaypassError, OSError) as err:
        from passinfra.codegen.cc_driver import CompileInterrupted

        if isinstance(err, CompileInterrupted):
            # the Ctrl-C stopped a compiler (every process of the group gets it) before
            # this process took it: the same interruption
            return _interrupted()
        if args.debug:
            raise
        user_error = isinstance(err, user_error_types()) or isinstance(err, OSError)
        kind = "error" if user_error else f"{type(err).__name__}"
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"raypass: {kind}: {message}", file=sys.stderr)
        if not user_error:
            print("raypass: run again with --debug for the traceback", file=sys.stderr)
        return EXIT_USER_ERROR if user_error else EXIT_FAILURE
    except KeyboardInterrupt:
        return _interrupted()


def _interrupted() -> int:
    """After Ctrl-C: the compiles still running stopped (one in a background thread would
    hold the exit), the one line, exit status 130."""
    from passinfra.codegen.cc_driver import stop_compiles

    stop_compiles()
    print("raypass: interrupted", file=sys.stderr)
    return 130


def cli() -> None:
    """The ``raypass`` command: :func:`main`, then a quick exit.

    Tearing the interpreter down frees every object of the build one at a time (0.11 s
    after a DenseNet-121 compile), time the user waits for with nothing left to do. What
    an exit must still do is done first: non-daemon threads finish, the atexit handlers
    run (the finalizers that remove temporary directories, Ray's shutdown, logging), and
    the output is flushed. An exception that escapes :func:`main` (``--debug``) takes the
    ordinary way out, with its traceback."""
    exit_quickly(run_command(None))


def run_command(argv: list[str] | None) -> int:
    """:func:`main` on ``argv``, its ``SystemExit`` (argparse's) as an exit status."""
    try:
        code = main(argv)
    except SystemExit as stop:
        code = stop.code
    if code is None:
        return 0
    if not isinstance(code, int):
        print(code, file=sys.stderr)
        return EXIT_FAILURE
    return code


# seconds an interrupted command (exit 130) waits for its other threads: the user asked it
# to stop, and a thread stuck in a library's shutdown must not hold it
INTERRUPTED_JOIN_SECONDS = 10.0


def exit_quickly(code: int, last: Callable[[int], None] | None = None) -> None:
    """End the process with ``code`` once what an exit must do is done (:func:`cli`);
    ``last(code)`` runs just before, with the status the process will have."""
    import atexit
    import os
    import threading
    import time

    deadline = time.monotonic() + INTERRUPTED_JOIN_SECONDS if code == 130 else None
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            code = code or EXIT_FAILURE
    if last is not None:
        last(code)
    os._exit(code)


if __name__ == "__main__":
    cli()

"""``raypass compile MODEL -o LIB``: build a model into a library (or emit C / final IR).

:func:`compile_model` is the part ``raypass demo`` shares: it sets up the PassContext
from the options (typed config, instruments), runs the build with a Scheduler under a
progress display, and returns what the reports need.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from passinfra.instrument import DumpIR, PassPrintingInstrument, PassTimingInstrument
from passinfra.ir.module import IRModule
from passinfra.transform import PassContext
from raypass_cli.common import (
    CliUserError,
    add_context_options,
    add_scheduler_options,
    command_scheduler,
    context_kwargs,
    load_model,
    loaded_objects_frozen,
    parse_dims,
    parse_shapes,
    parse_specializations,
    split_names,
)
from raypass_cli.progress import BuildProgress
from raypass_cli.report import print_timing
from raypass_cli.trace import LOAD_SPAN, WRITE_SPAN, ProcessSpans, Span, pass_spans, write_trace
from scheduler.stats import RunStats

EMIT_KINDS = ("c", "ir")


@dataclass
class BuildOutcome:
    library: Any = None  # runtime.Module, unless emitting
    emitted: str = ""  # C or IR text when emitting
    seconds: float = 0.0
    started: float = 0.0  # time.time() when the build began
    timings: list[dict[str, Any]] = field(default_factory=list)
    stats: RunStats | None = None
    spans: list[Span] = field(default_factory=list)


def add_build_options(parser: argparse.ArgumentParser, default_backend: str = "auto") -> None:
    add_context_options(parser)
    add_scheduler_options(parser, default_backend)
    parser.add_argument("--cache-dir", default=None, metavar="DIR", help="compiled-kernel cache directory")
    parser.add_argument("--no-cache", action="store_true", help="compile every kernel, use no cache")
    parser.add_argument(
        "--tuning-db",
        default=None,
        metavar="FILE",
        help="schedule each kernel as this tuning database (raypass tune) records it for this machine",
    )
    parser.add_argument(
        "--specialize",
        action="append",
        default=[],
        metavar="NAME=N[,NAME=N]",
        help="also compile static kernels for these sizes of a dynamic model's dimensions, "
        "used when a call has them (repeatable, e.g. --specialize seq=1)",
    )
    parser.add_argument(
        "--plugin",
        action="append",
        default=[],
        metavar="FILE.py",
        help="run a Python file that registers passes or config keys first (repeatable)",
    )


def _instruments(args: argparse.Namespace) -> list[Any]:
    instruments: list[Any] = []
    before = split_names(getattr(args, "print_ir_before", []) or [])
    after = split_names(getattr(args, "print_ir_after", []) or [])
    if before or after:
        instruments.append(PassPrintingInstrument(before, after))
    if getattr(args, "dump_ir", None):
        instruments.append(DumpIR(args.dump_ir))
    return instruments


def _build_config(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if getattr(args, "tuning_db", None):
        from passinfra.codegen.passes.apply_tuning_records import TUNING_DB_CONFIG

        config[TUNING_DB_CONFIG] = str(args.tuning_db)
    if getattr(args, "specialize", None):
        from passinfra.codegen.passes.specialize_kernels import SPECIALIZE_CONFIG

        config[SPECIALIZE_CONFIG] = parse_specializations(args.specialize)
    if args.cache_dir:
        config["codegen.cache_dir"] = str(args.cache_dir)
    if args.no_cache:
        config["codegen.no_cache"] = True
    return config


def compile_model(
    mod: IRModule,
    args: argparse.Namespace,
    scheduler: Any,
    emit: str | None = None,
    live_progress: bool | None = None,
) -> BuildOutcome:
    """Build ``mod`` under the PassContext the options describe."""
    import passinfra
    from passinfra.build import compile_pipeline, link_pipeline, run_link

    kwargs = context_kwargs(args, _build_config(args))
    timing = PassTimingInstrument()
    others = [timing, *_instruments(args)]
    # the display shows the plan the scheduler runs (it hands it over as the run starts),
    # then the link step, which the build runs in this process after it
    progress = BuildProgress([link_pipeline()], live=live_progress)
    outcome = BuildOutcome()
    started = time.perf_counter()
    outcome.started = time.time()
    with progress, PassContext(instruments=[*others, progress], **kwargs):
        if emit is None:
            outcome.library = passinfra.build(mod, opt_level=args.opt_level, scheduler=scheduler)
        else:
            outcome.emitted = _emit(emit, scheduler.run(compile_pipeline(), mod), run_link)
        # read before the context exits: the timing instrument clears itself on exit
        outcome.timings = timing.timings()
        outcome.spans = pass_spans(timing)
    outcome.seconds = time.perf_counter() - started
    outcome.stats = scheduler.last_run
    return outcome


def backend_summary(stats: RunStats) -> str:
    """"ray backend (warm pool at ..., 2 workers)", "local backend (auto: ...)"."""
    details = []
    if stats.backend == "ray" and not stats.num_workers:
        details.append("every stage ran in the driver: none was worth shipping before the workers were up")
    elif stats.backend == "ray":
        details.append(f"{stats.workers}, {stats.num_workers} workers")
        if stats.startup_seconds:
            hidden = stats.startup_hidden_seconds
            details.append(f"start-up {stats.startup_seconds:.1f}s, {hidden:.1f}s of it hidden")
    if stats.backend_reason.startswith("auto:"):
        details.append(stats.backend_reason.split(";")[0])
    return f"{stats.backend} backend" + (f" ({'; '.join(details)})" if details else "")


def _emit(kind: str, compiled: IRModule, link: Any) -> str:
    if kind == "ir":
        return compiled.astext()
    from passinfra.codegen.artifacts import kernel_c_source
    from passinfra.tir import PrimFunc

    sources = [(gv, kernel_c_source(func)) for gv, func in compiled.items() if isinstance(func, PrimFunc)]
    parts = [f"/* {gv.name_hint} */\n{source}" for gv, source in sources if source is not None]
    host = link(compiled).host  # the link step's products (run_link)
    if host is not None:
        parts.append(f"/* host code: raypass_main */\n{host.c_source}")
    return "\n\n".join(parts) + "\n"


def cmd_compile(args: argparse.Namespace) -> int:
    from raypass_cli.common import load_plugins

    process = ProcessSpans()  # from the process's start to here: interpreter and imports
    load_plugins(args.plugin)
    if args.emit is None and not args.output:
        raise CliUserError("compile needs -o LIB (or --emit c|ir to write source instead)")
    with command_scheduler(args) as scheduler:
        with process.measure(LOAD_SPAN):
            mod = load_model(args.model, parse_shapes(args.shapes), parse_dims(args.dim))
        with loaded_objects_frozen():
            outcome = compile_model(mod, args, scheduler, emit=args.emit)
    for note in outcome.stats.notes:
        print(f"raypass: note: {note}", file=sys.stderr)
    with process.measure(WRITE_SPAN):
        _write_outputs(args, outcome)
    if args.timing:
        print_timing(outcome.timings, outcome.stats)
        print(process.summary())
    if args.trace:
        path = write_trace(args.trace, [*process.spans, *outcome.spans], outcome.stats)
        print(f"wrote the trace to {path} (open it in https://ui.perfetto.dev)")
    return 0


def _write_outputs(args: argparse.Namespace, outcome: BuildOutcome) -> None:
    if args.emit is not None:
        if args.output and args.output != "-":
            Path(args.output).write_text(outcome.emitted)
            what = "generated C" if args.emit == "c" else "final IR"
            print(f"wrote the {what} to {args.output} (built on the {backend_summary(outcome.stats)})")
        else:
            sys.stdout.write(outcome.emitted)
        return
    outcome.library.export_library(args.output)
    kernels = len(set(outcome.library.metadata.get("kernels", [])))
    specialized = len(outcome.library.metadata.get("specialized_kernels", []))
    print(
        f"wrote {args.output} (+ .raypass.json, .weights.bin): {kernels} kernels"
        f"{f' (+{specialized} specialized)' if specialized else ''}, "
        f"built in {outcome.seconds:.2f}s on the {backend_summary(outcome.stats)}"
    )


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "compile",
        help="compile a model into a library (or emit C / IR)",
        description="Compile MODEL (an .onnx file, a text-IR file or zoo:NAME?k=v&...).",
    )
    parser.add_argument(
        "model", metavar="MODEL", help="model.onnx, model.txt (text IR) or zoo:transformer?layers=2"
    )
    parser.add_argument(
        "-o", "--output", metavar="LIB", help="the library to write (with --emit: the source file)"
    )
    parser.add_argument(
        "--shapes",
        action="append",
        default=[],
        metavar="NAME=D0,D1,...",
        help="static input shapes for an ONNX model (repeatable)",
    )
    parser.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=LO..HI",
        help="bounds of an ONNX model's symbolic dimension, inclusive; LO.. for no upper bound (repeatable)",
    )
    add_build_options(parser)
    parser.add_argument("--timing", action="store_true", help="print the pass timing table")
    parser.add_argument("--trace", metavar="FILE", help="write a Chrome trace-event JSON of the build")
    parser.add_argument(
        "--print-ir-before",
        action="append",
        default=[],
        metavar="PASS[,PASS]",
        help="print the module before these passes",
    )
    parser.add_argument(
        "--print-ir-after",
        action="append",
        default=[],
        metavar="PASS[,PASS]",
        help="print the module after these passes",
    )
    parser.add_argument("--dump-ir", metavar="DIR", help="write the module after every pass into DIR")
    parser.add_argument(
        "--emit",
        choices=EMIT_KINDS,
        default=None,
        help="write the generated C or the final IR (to -o, or stdout) instead of a library",
    )
    parser.set_defaults(func=cmd_compile)

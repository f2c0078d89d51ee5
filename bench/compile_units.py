"""The C compiler's CPU per kernel: each kernel its own translation unit, or compile
units (GroupKernels, ``passinfra/codegen/compile_units.py``).

A compiler call pays a fixed cost before the kernel's own code (the driver, cc1 and the
assembler starting, the shared declarations parsed). This compiles a model's kernels
through the same ``compile_c`` a build calls (no cache), one call at a time so that the
compilers' CPU time is what is measured (``RUSAGE_CHILDREN``), both ways, interleaved:

* each kernel alone (``codegen.compile_unit_bytes=0``, what CompileC did before);
* the compile units GroupKernels makes with the default settings.

It also measures the fixed cost alone (a translation unit of the shared declarations and
no code), reports the units' sizes, and replays each compile's measured CPU on N workers
(largest first, each to the least loaded): the longest worker's load, alone and in units.
Whole ``raypass compile`` processes with and without units: ``python -m
bench.before_after --before <tree of the commit before>``.

    python -m bench.compile_units [--models densenet121,resnet50,transformer] [--repeats 3] [--output PATH]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.before_after import model_arg
from bench.common import machine_notes, markdown_table, publish
from bench.compile_overhead import kernel_sources
from passinfra.codegen.cc_driver import CompilerSettings, compile_c
from passinfra.codegen.compile_units import plan_units, split_source, unit_source

ROOT = Path(__file__).resolve().parent.parent
SPAN_WORKERS = (2, 4, 8, 15)


def compilers_cpu(sources: list[str], settings: CompilerSettings) -> tuple[float, float]:
    """(wall seconds, the compiler processes' CPU seconds) of compiling ``sources``, one at a time."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    for source in sources:
        compile_c(source, settings, name="kernel")
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def each_cpu(sources: list[str], settings: CompilerSettings) -> list[float]:
    """The compiler processes' CPU seconds of each of ``sources``, compiled one at a time."""
    return [compilers_cpu([source], settings)[1] for source in sources]


def lpt_makespan(seconds: list[float], workers: int) -> float:
    """The longest worker's load when the compiles go to ``workers`` largest first, each to
    the least loaded (what the work queue does with measured costs)."""
    loads = [0.0] * workers
    for cost in sorted(seconds, reverse=True):
        loads[loads.index(min(loads))] += cost
    return max(loads)


def unit_sources(kernels: dict[str, str]) -> tuple[list[str], list[int]]:
    """The translation units GroupKernels makes of ``kernels`` (defaults), and their sizes in kernels."""
    units = plan_units(list(kernels.items()))
    sources = [kernels[unit[0]] if len(unit) == 1 else
               unit_source(unit, [split_source(kernels[name]) for name in unit]) for unit in units]
    return sources, [len(unit) for unit in units]


def empty_kernel(kernels: dict[str, str]) -> str:
    """A translation unit with the declarations a kernel opens with (the most any kernel
    of ``kernels`` shares) and no code: what every compiler call pays for."""
    widest = max(kernels.values(), key=lambda source: len(split_source(source).shared))
    parts = split_source(widest)
    return "\n".join(f"/* rp-shared: {role} */\n{text}" for role, text in parts.shared) + "\nint rp_empty;\n"


def fixed_cost(kernels: dict[str, str], settings: CompilerSettings, calls: int = 40) -> float:
    """CPU ms of one compiler call on a translation unit of declarations and no code."""
    return compilers_cpu([empty_kernel(kernels)] * calls, settings)[1] / calls * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compile_units",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="densenet121,resnet50,transformer")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results_compile_units.md"))
    args = parser.parse_args(argv)

    settings = CompilerSettings(use_cache=False)
    rows, fits, replays = [], [], []
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix="rp-compile-units-") as space:  # a saved model, if any
            kernels = kernel_sources(model_arg(model, Path(space)))
        units, sizes = unit_sources(kernels)
        alone_runs, unit_runs, fixed, spans = [], [], [], []
        for round_ in range(args.repeats):
            alone_runs.append(compilers_cpu(list(kernels.values()), settings))
            unit_runs.append(compilers_cpu(units, settings))
            fixed.append(fixed_cost(kernels, settings))
            if round_ == 0:  # one more pass, each compile timed on its own
                alone_each, units_each = each_cpu(list(kernels.values()), settings), each_cpu(units, settings)
                spans = [(workers, lpt_makespan(alone_each, workers), lpt_makespan(units_each, workers))
                         for workers in SPAN_WORKERS]
            print(f"round {round_} {model}: alone {alone_runs[-1][1]:.2f} s CPU, "
                  f"units {unit_runs[-1][1]:.2f} s", flush=True)

        def cell(values: list[float]) -> str:
            return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"

        per_kernel = statistics.median(cpu for _, cpu in alone_runs) / len(kernels) * 1e3
        fixed_ms = f"{statistics.median(fixed):.1f} [{min(fixed):.1f}-{max(fixed):.1f}]"
        fits.append([model, str(len(kernels)), fixed_ms, f"{per_kernel:.1f}",
                     f"{statistics.median(fixed) / per_kernel:.0%}"])
        ratios = sorted(u[1] / a[1] for a, u in zip(alone_runs, unit_runs))
        replays.append([model, *(f"{alone:.2f} / {grouped:.2f}" for _, alone, grouped in spans)])
        rows.append([model, str(len(kernels)), str(len(units)),
                     f"{min(sizes)}-{statistics.median(sizes):.0f}-{max(sizes)}",
                     cell([cpu for _, cpu in alone_runs]), cell([cpu for _, cpu in unit_runs]),
                     f"{statistics.median(ratios):.2f} [{ratios[0]:.2f}-{ratios[-1]:.2f}]",
                     cell([wall for wall, _ in alone_runs]), cell([wall for wall, _ in unit_runs])])
    notes = machine_notes()
    text = "\n".join([
        "# Compile units: the C compiler's CPU, kernels alone against units (issue 28)",
        "",
        f"`python -m bench.compile_units --models {args.models} --repeats {args.repeats}`; "
        f"{notes['machine']}, load {notes['load average (1, 5, 15 min)']}. Each model's kernels compiled "
        "through `compile_c` "
        "(no cache), one compiler call at a time; CPU is the compiler processes' (user + system); medians "
        "of interleaved rounds [min-max].",
        "",
        "## Each kernel alone: what a call costs",
        "",
        "The fixed cost: a translation unit of the declarations kernels open with and no code (40 "
        "calls a round); against it, a kernel's mean compiler CPU alone.",
        "",
        markdown_table(["model", "kernels", "fixed CPU ms per call", "CPU ms per kernel alone",
                        "fixed share"], fits),
        "",
        "## All kernels: alone, or in compile units",
        "",
        markdown_table(["model", "kernels", "units", "kernels per unit (min-median-max)",
                        "CPU s, alone", "CPU s, units", "units / alone (CPU)", "wall s, alone",
                        "wall s, units"], rows),
        "",
        "## A replay on more workers (an estimate, not a measurement)",
        "",
        "Each compile's CPU measured alone here, handed to N workers largest first (each to the "
        "least loaded, as the work queue does with measured costs): the longest worker's seconds, "
        "kernels alone / units. It leaves out shipping and the cores' contention.",
        "",
        markdown_table(["model", *(f"{workers} workers" for workers in SPAN_WORKERS)], replays),
        "",
    ])
    publish(args.output, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

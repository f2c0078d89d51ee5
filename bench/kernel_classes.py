"""Kernels that differ only in their constants: how many a model has, and what compiling
one of each would cost the C compiler (issue 28, the compile's CPU).

A 2-core compile of DenseNet-121 is bound by the C compiler (cc1 half of all CPU samples,
``bench/results_scale_out_pool_2core.md``): 197 kernels, each 20-30 ms of compiler CPU in
compile units, whatever the schedule. Its dense blocks repeat the same layers at growing
channel counts, so most kernels are the same C but for their numbers (shapes, strides,
offsets). This measures that headroom before anything is built for it:

* a kernel's *class*: its own C code (after the shared declarations, see
  :mod:`passinfra.codegen.compile_units`) with its name and every numeric literal
  replaced by a placeholder; kernels of one class would be one compiled function taking
  the numbers that differ as arguments;
* the C compiler's CPU (user + system of its processes, one compile at a time, no cache)
  for every kernel in the compile units GroupKernels makes, against the same units'
  rules applied to one kernel of each class: the most such shape-generic kernels could
  save. It leaves out what they would add (each kernel keeps a small entry point that
  passes its numbers) and what they could cost at run time (loop bounds known only then).

The text-level classes are an upper bound of what a generic kernel at the IR level could
merge: a literal that must stay a constant (a vector shuffle's immediate, a stack array's
size, an unroll count) would split a class there.

    python -m bench.kernel_classes [--models densenet121,resnet50,transformer] [--repeats 3] [--output PATH]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

from bench.before_after import model_arg
from bench.common import report
from bench.compile_overhead import kernel_sources
from bench.compile_units import compilers_cpu, unit_sources
from passinfra.codegen.cc_driver import CompilerSettings
from passinfra.codegen.compile_units import split_source

ROOT = Path(__file__).resolve().parent.parent
# a numeric literal of C: decimal, hex or float, with its suffixes
_NUMBER = re.compile(r"(?<![\w.])(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)[uUlLfF]*(?![\w.])")


def kernel_class(name: str, source: str) -> str:
    """The kernel's own C with its name and its numbers replaced: equal for kernels that
    differ only in their numbers (the whole source for C without the markers)."""
    parts = split_source(source)
    own = parts.own if parts is not None else source
    return _NUMBER.sub("#", re.sub(rf"\b{re.escape(name)}", "KERNEL", own))


def literals(name: str, source: str) -> list[str]:
    parts = split_source(source)
    own = parts.own if parts is not None else source
    return _NUMBER.findall(re.sub(rf"\b{re.escape(name)}", "KERNEL", own))


def classes(kernels: dict[str, str]) -> dict[str, list[str]]:
    """Class -> its kernels, in module order (the first is the class's representative)."""
    found: dict[str, list[str]] = {}
    for name, source in kernels.items():
        found.setdefault(kernel_class(name, source), []).append(name)
    return found


def varying_numbers(members: list[str], kernels: dict[str, str]) -> int:
    """How many of a class's literal positions differ between its kernels: the arguments
    one generic kernel of the class would take."""
    columns = zip(*(literals(name, kernels[name]) for name in members))
    return sum(len(set(column)) > 1 for column in columns)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kernel_classes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="densenet121,resnet50,transformer")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results_kernel_classes.md"))
    args = parser.parse_args(argv)

    settings = CompilerSettings(use_cache=False)
    rows = []
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix="rp-kernel-classes-") as space:
            kernels = kernel_sources(model_arg(model, Path(space)))
        found = classes(kernels)
        representatives = {members[0]: kernels[members[0]] for members in found.values()}
        every, _ = unit_sources(kernels)
        one_each, _ = unit_sources(representatives)
        all_cpu, rep_cpu = [], []
        for round_ in range(args.repeats):
            all_cpu.append(compilers_cpu(every, settings)[1])
            rep_cpu.append(compilers_cpu(one_each, settings)[1])
            print(f"round {round_} {model}: every kernel {all_cpu[-1]:.2f} s CPU, one a class {rep_cpu[-1]:.2f} s",
                  flush=True)
        sizes = sorted((len(members) for members in found.values()), reverse=True)
        arguments = [varying_numbers(members, kernels) for members in found.values() if len(members) > 1]
        ratios = sorted(r / a for a, r in zip(all_cpu, rep_cpu))
        rows.append([model, len(kernels), len(found), ", ".join(map(str, sizes[:6])),
                     f"{max(arguments, default=0)}", len(every), len(one_each),
                     f"{statistics.median(all_cpu):.2f} [{min(all_cpu):.2f}-{max(all_cpu):.2f}]",
                     f"{statistics.median(rep_cpu):.2f} [{min(rep_cpu):.2f}-{max(rep_cpu):.2f}]",
                     f"{statistics.median(ratios):.2f} [{ratios[0]:.2f}-{ratios[-1]:.2f}]"])
    description = (
        "Classes: kernels whose own C is the same but for their numbers. CPU: the C compiler's "
        "processes (user + system), the units GroupKernels makes of every kernel against units of "
        "one kernel a class (its first), compiled one at a time without the cache, "
        f"{args.repeats} interleaved rounds, median [min-max]. An upper bound of what shape-generic "
        "kernels could save: it leaves out their entry points and any run-time cost.")
    report("Kernels alike but for their numbers: the compiler's headroom (issue 28)",
           f"python -m bench.kernel_classes --models {args.models} --repeats {args.repeats}", description,
           ["model", "kernels", "classes", "largest classes", "most differing numbers in a class",
            "units, every kernel", "units, one a class", "compiler CPU s, every kernel",
            "compiler CPU s, one a class", "one a class / every kernel"],
           rows, Path(args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())

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

``--run-time N`` also measures what a generic kernel would cost at run time, for the N
largest classes of the first model: the class's first kernel with every number that
differs in the class read from an array set before the call (an ``extern const`` the
compiler cannot see), against each kernel as compiled today, one thread, outputs compared
bit for bit; once with the default flags and once with GCC's ``cheap`` vectorizer cost
model (``-O2``'s ``very-cheap`` one vectorizes no loop whose trip count it does not know).

``--whole N``: what sharing does as a user sees it, ``codegen.share_kernel_code`` off
against on: N interleaved rounds (after one uncounted) of whole ``raypass compile MODEL
--no-cache --backend local`` processes of each model, then the two libraries' outputs on
one random input (bit for bit, one and two threads) and their latency (best of blocks of
calls, interleaved rounds, one thread and the default). Written to ``--output`` (default
``bench/results_shared_kernels.md``).

    python -m bench.kernel_classes [--models densenet121,resnet50,transformer] [--repeats 3]
        [--run-time N] [--whole N] [--output PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.before_after import model_arg
from bench.common import markdown_table, report
from bench.compile_overhead import kernel_sources
from bench.compile_units import compilers_cpu, unit_sources
from passinfra.codegen.c_renderer import KERNEL_MARKER
from passinfra.codegen.cc_driver import CompilerSettings
from passinfra.codegen.compile_units import split_source

ROOT = Path(__file__).resolve().parent.parent
# the kernels as each is rendered for itself: what the classes are measured on (with
# codegen.share_kernel_code, the builds' default, most kernels' C calls a generic kernel)
UNSHARED = {"codegen.share_kernel_code": False}
# a numeric literal of C: decimal, hex or float, with its suffixes
_NUMBER = re.compile(r"(?<![\w.])(?:0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
                     r"[uUlLfF]*(?![\w.])")


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


def _best_call(entry: Any, pointers: Any, calls: int = 30) -> float:
    entry(pointers)
    return min(_timed(entry, pointers) for _ in range(calls))


def _timed(entry: Any, pointers: Any) -> float:
    started = time.perf_counter()
    entry(pointers)
    return time.perf_counter() - started


def _buffers(func: Any) -> tuple[list[np.ndarray], Any]:
    rng = np.random.default_rng(1)
    arrays = [(rng.standard_normal(max(b.size, 1)) * 0.1).astype(b.dtype) if np.dtype(b.dtype).kind == "f"
              else np.zeros(max(b.size, 1), b.dtype) for b in func.params]
    return arrays, (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])


def run_time_rows(model: str, largest: int) -> list[list[Any]]:
    """Generic / specialized kernel time for the ``largest`` classes of ``model`` (docstring)."""
    space = Path(tempfile.mkdtemp(prefix="rp-kernel-classes-"))  # removed at the end
    try:
        return _run_time_rows(model, largest, space)
    finally:
        shutil.rmtree(space, ignore_errors=True)


def _run_time_rows(model: str, largest: int, space: Path) -> list[list[Any]]:
    import onnx

    from bench.codegen import LIGHT_DIR, random_light_weights
    from bench.vs_onnxruntime import build_library
    from passinfra import tir
    from passinfra.codegen.cc_driver import compile_c, link_shared

    lib, compiled = build_library(random_light_weights(onnx.load(f"{LIGHT_DIR}/light_{model}.onnx")),
                                  str(space / "cache"), UNSHARED)
    lib.set_num_threads(1)
    ctypes.CDLL(lib._cdll._name, mode=ctypes.RTLD_GLOBAL)  # the runtime the generic kernels call
    funcs = {f.attrs["global_symbol"]: f for f in compiled.functions.values() if isinstance(f, tir.PrimFunc)}
    found = classes({name: func.attrs["c_source"] for name, func in funcs.items()})
    rows = []
    for members in sorted(found.values(), key=len, reverse=True)[:largest]:
        head, _, _ = funcs[members[0]].attrs["c_source"].partition("\n" + KERNEL_MARKER + "\n")
        numbers = {m: literals(m, funcs[m].attrs["c_source"]) for m in members}
        owns = {m: split_source(funcs[m].attrs["c_source"]).own for m in members}
        varying = [i for i, column in enumerate(zip(*numbers.values())) if len(set(column)) > 1]
        first = numbers[members[0]]
        if any(not first[i].lower().startswith("0x") and re.search(r"[.eEfF]", first[i]) for i in varying):
            continue  # a float that differs: not an integer argument
        own = re.sub(rf"\b{re.escape(members[0])}", "GENERIC", owns[members[0]])
        found_numbers = list(_NUMBER.finditer(own))
        for slot, i in reversed(list(enumerate(varying))):
            match = found_numbers[i]
            own = own[:match.start()] + f"rp_k[{slot}]" + own[match.end():]
        source = f"{head}\n{KERNEL_MARKER}\nextern const int64_t rp_k[{len(varying)}];\n{own}"
        ratios = []
        for flags in ("", " -fvect-cost-model=cheap"):
            settings = CompilerSettings(use_cache=False, cflags=CompilerSettings().cflags + flags)
            objects = [("generic", compile_c(source, settings, name="generic")),
                       ("numbers", compile_c(f"long long rp_k[{len(varying)}];", settings, name="numbers"))]
            path = space / f"generic-{len(rows)}{flags.strip()}.so"
            path.write_bytes(link_shared(objects, settings))
            generic_lib = ctypes.CDLL(str(path))
            generic = generic_lib.GENERIC_packed
            generic.restype, generic.argtypes = ctypes.c_int, [ctypes.c_void_p]
            slots = (ctypes.c_int64 * len(varying)).in_dll(generic_lib, "rp_k")
            total_generic = total_specialized = 0.0
            for member in members[:: max(1, len(members) // 6)][:6]:
                for slot, i in enumerate(varying):
                    slots[slot] = int(numbers[member][i].rstrip("uUlL"), 0)
                specialized = getattr(lib._cdll, member + "_packed")
                specialized.restype, specialized.argtypes = ctypes.c_int, [ctypes.c_void_p]
                (mine, mine_p), (theirs, theirs_p) = _buffers(funcs[member]), _buffers(funcs[member])
                specialized(mine_p)
                generic(theirs_p)
                if not all(np.array_equal(a, b) for a, b in zip(mine, theirs)):
                    raise SystemExit(f"the generic kernel of {members[0]} differs from {member}")
                total_specialized += min(_best_call(specialized, mine_p) for _ in range(3))
                total_generic += min(_best_call(generic, theirs_p) for _ in range(3))
            ratios.append(total_generic / total_specialized)
        rows.append([model, f"`{members[0]}`", len(members), len(varying), *(f"{r:.2f}" for r in ratios)])
        print(rows[-1], flush=True)
    return rows


SHARE_VARIANTS = {"share off": "codegen.share_kernel_code=false",
                  "share on": "codegen.share_kernel_code=true"}


def whole_rows(models: list[str], rounds: int) -> tuple[list[list[Any]], list[list[Any]]]:
    """(compile rows, library rows) of the ``--whole`` comparison (module docstring)."""
    from bench.before_after import built_seconds
    from bench.common import best_of_block
    from bench.scaling_curve import Runner
    from passinfra.runtime.module import load_module

    space = Path(tempfile.mkdtemp(prefix="rp-shared-kernels-"))
    runner = Runner(space)
    compile_rows, library_rows = [], []
    for model in models:
        path = model_arg(model, space)
        times: dict[str, list[float]] = {name: [] for name in SHARE_VARIANTS}
        builds: dict[str, list[float]] = {name: [] for name in SHARE_VARIANTS}
        cpu: dict[str, list[float]] = {name: [] for name in SHARE_VARIANTS}
        for round_ in range(rounds + 1):  # the first round warms up, uncounted
            for name, config in SHARE_VARIANTS.items():
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                seconds, done = runner.raypass(["compile", path, "--no-cache", "--backend", "local",
                                                "--config", config, "-o", f"{model}-{name[-3:].strip()}.so"])
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if round_:
                    times[name].append(seconds)
                    builds[name].append(built_seconds(done.stdout))
                    cpu[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            done_now = ", ".join(f"{n} {v[-1]:.2f} s" for n, v in times.items() if v)
            print(f"{model} round {round_}: {done_now}", flush=True)
        off, on = (statistics.median(times[name]) for name in SHARE_VARIANTS)
        compile_rows.append([model, rounds, *(f"{statistics.median(times[n]):.2f} [{min(times[n]):.2f}-"
                                                f"{max(times[n]):.2f}]" for n in SHARE_VARIANTS),
                             *(f"{statistics.median(builds[n]):.2f}" for n in SHARE_VARIANTS),
                             f"{on / off:.2f}",
                             *(f"{statistics.median(cpu[n]):.2f}" for n in SHARE_VARIANTS),
                             f"{statistics.median(cpu['share on']) / statistics.median(cpu['share off']):.2f}"
                             ])
        libraries = [load_module(space / f"{model}-{name[-3:].strip()}.so") for name in SHARE_VARIANTS]
        defaults = [lib.num_threads for lib in libraries]
        rng = np.random.default_rng(0)
        inputs = [rng.standard_normal(spec["shape"]).astype(spec["dtype"])
                  for spec in libraries[0].metadata["inputs"]]
        same = []
        for threads in (1, 2):
            outputs = []
            for lib in libraries:
                lib.set_num_threads(threads)
                result = lib(*inputs)
                outputs.append(result if isinstance(result, tuple) else (result,))
            same.append(all(np.array_equal(a, b) for a, b in zip(*outputs)))
        latency: dict[tuple[int, int], list[float]] = {}
        for _ in range(9):
            for threads in (1, 0):
                for index, lib in enumerate(libraries):
                    lib.set_num_threads(threads or defaults[index])
                    time.sleep(0.02)
                    call = functools.partial(lib, *inputs)
                    latency.setdefault((index, threads), []).append(best_of_block(call, 10))
        cells = []
        for threads in (1, 0):
            off_ms, on_ms = (statistics.median(latency[(i, threads)]) * 1e3 for i in (0, 1))
            cells += [f"{off_ms:.2f}", f"{on_ms:.2f}", f"{on_ms / off_ms:.2f}"]
        library_rows.append([model, "yes" if all(same) else "NO", *cells])
    shutil.rmtree(space, ignore_errors=True)
    return compile_rows, library_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.kernel_classes",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="densenet121,resnet50,transformer")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--run-time", type=int, default=0, metavar="N",
                        help="also time generic kernels of the first model's N largest classes")
    parser.add_argument("--whole", type=int, default=0, metavar="ROUNDS",
                        help="whole compiles and the libraries, sharing off against on (only this)")
    parser.add_argument("--output")
    args = parser.parse_args(argv)
    if args.whole:
        output = Path(args.output or ROOT / "bench" / "results_shared_kernels.md")
        compile_rows, library_rows = whole_rows(args.models.split(","), args.whole)
        report("Kernels sharing their code: whole compiles and the libraries (issue 28)",
               f"python -m bench.kernel_classes --whole {args.whole} --models {args.models}",
               "Whole `raypass compile MODEL --no-cache --backend local` processes with "
               "`codegen.share_kernel_code` off and on, interleaved rounds after one uncounted, "
               "seconds: median [min-max], the builds' own seconds (their `built in`), and the CPU "
               "of each process and its C compilers (user + system; the machine's noise moves it "
               "less than the wall time).",
               ["model", "rounds", "process s, off", "process s, on", "build s, off", "build s, on",
                "on / off", "CPU s, off", "CPU s, on", "CPU on / off"], compile_rows, output)
        section = ("\n## The libraries\n\nOutputs on one random input, bit for bit at one and two threads; "
                   "latency in ms, median of 9 interleaved rounds of the best of 10 calls, one thread and "
                   "the default.\n\n" + markdown_table(
                       ["model", "outputs identical", "1 thread off", "1 thread on", "on / off",
                        "default off", "default on", "on / off"], library_rows) + "\n")
        print(section)
        with open(output, "a") as out:
            out.write(section)
        return 0
    args.output = args.output or str(ROOT / "bench" / "results_kernel_classes.md")

    settings = CompilerSettings(use_cache=False)
    rows = []
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory(prefix="rp-kernel-classes-") as space:
            kernels = kernel_sources(model_arg(model, Path(space)), UNSHARED)
        found = classes(kernels)
        representatives = {members[0]: kernels[members[0]] for members in found.values()}
        every, _ = unit_sources(kernels)
        one_each, _ = unit_sources(representatives)
        all_cpu, rep_cpu = [], []
        for round_ in range(args.repeats):
            all_cpu.append(compilers_cpu(every, settings)[1])
            rep_cpu.append(compilers_cpu(one_each, settings)[1])
            print(f"round {round_} {model}: every kernel {all_cpu[-1]:.2f} s CPU, "
                  f"one a class {rep_cpu[-1]:.2f} s", flush=True)
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
    if args.run_time:
        model = args.models.split(",")[0]
        table = markdown_table(["model", "class (its first kernel)", "kernels", "numbers read at run time",
                                "generic / specialized, default flags", "... with the cheap cost model"],
                               run_time_rows(model, args.run_time))
        section = (f"\n## Generic kernels at run time: the {args.run_time} largest classes of {model}\n\n"
                   "Each class's first kernel with the numbers that differ read from an array, against up to "
                   "six of its kernels as compiled today (sum of the best of 30 calls, best of 3 rounds, one "
                   "thread; outputs equal bit for bit; the model with random weights, whose classes differ a "
                   f"little from the table above: `--run-time {args.run_time}`).\n\n{table}\n")
        print(section)
        with open(args.output, "a") as out:
            out.write(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the C compiler costs per kernel call, and how much of it is overhead.

CompileC runs the system C compiler once per kernel (one translation unit each, so an
object depends on its kernel alone and the library's bytes on nothing the scheduler
decides). A call pays a fixed cost (the driver, cc1 and the assembler starting, the
assembly handed between them, and the kernel's preamble being parsed) before the
kernel's own code. This measures, through the same ``compile_c`` a build calls (no
cache), interleaved, each change to that cost against the form before it:

* the C library: declared by the kernel's preamble itself (now), or through the system
  headers ``<math.h> <stdint.h> <stdlib.h> <string.h>`` (before);
* the assembly: through a pipe from cc1 to the assembler (``-pipe``, now), or through a
  temporary file (before);
* the fixed cost (an empty translation unit, the preamble alone) and a model's whole
  kernel set compiled one kernel at a time in each form, and whether the forms give
  byte-identical objects.

    python -m bench.compile_overhead [--model densenet121] [--repeats 5] [--output PATH]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from bench.common import Sample, interleaved, machine_notes, markdown_table
from passinfra.codegen import c_renderer
from passinfra.codegen.cc_driver import CompilerSettings, compile_c

ROOT = Path(__file__).resolve().parent.parent

SYSTEM_HEADERS = c_renderer.SYSTEM_HEADERS
DECLARED = c_renderer.LIBC_DECLARATIONS  # the block kernels open with


def with_system_headers(source: str) -> str:
    """``source`` as the renderer wrote kernels before: the system headers instead of
    the preamble's own declarations."""
    if DECLARED not in source:
        raise ValueError("the kernel does not open with the renderer's C library declarations")
    return source.replace(DECLARED, SYSTEM_HEADERS, 1)


def kernel_sources(model: str, config: dict | None = None) -> dict[str, str]:
    """Each kernel's C source, as a build renders it for ``model`` (a light ONNX model
    name, or a path or zoo spec the CLI accepts) under the PassContext ``config``."""
    import onnx

    from passinfra.build import compile_pipeline
    from passinfra.codegen.artifacts import kernel_c_source
    from passinfra.tir import PrimFunc
    from passinfra.transform import PassContext
    from raypass_cli.common import load_model

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{model}.onnx"
    mod = load_model(str(light) if light.exists() else model)
    with PassContext(opt_level=3, disabled_pass=["CompileC"], config=config or {}):
        compiled = compile_pipeline()(mod)
    sources = {}
    for gv, func in compiled.items():
        if isinstance(func, PrimFunc):
            source = kernel_c_source(func)
            if source is not None:
                sources[gv.name_hint] = source
    return sources


def compile_all(sources: dict[str, str], settings: CompilerSettings) -> tuple[float, dict[str, bytes]]:
    started = time.perf_counter()
    objects = {name: compile_c(source, settings, name="kernel") for name, source in sources.items()}
    return time.perf_counter() - started, objects


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.compile_overhead", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--model", default="densenet121")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=40, help="compiles per fixed-cost sample")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results_compile_overhead.md"))
    args = parser.parse_args(argv)

    now = CompilerSettings(use_cache=False)
    files = CompilerSettings(use_cache=False, pipe=False)
    preamble = c_renderer.PREAMBLE
    fixed = {
        "empty translation unit, temporary file": ("int rp_unused;\n", files),
        "empty translation unit, -pipe": ("int rp_unused;\n", now),
        "preamble, system headers, -pipe": (with_system_headers(preamble), now),
        "preamble, own declarations, temporary file": (preamble, files),
        "preamble, own declarations, -pipe (now)": (preamble, now),
    }

    def per_call(source: str, settings: CompilerSettings):
        def run() -> float:
            started = time.perf_counter()
            for _ in range(args.calls):
                compile_c(source, settings)
            return (time.perf_counter() - started) / args.calls
        return run

    fixed_samples = interleaved({name: per_call(*form) for name, form in fixed.items()}, args.repeats)

    sources = kernel_sources(args.model)
    headers = {n: with_system_headers(s) for n, s in sources.items()}
    forms = {"system headers, temporary file (two changes ago)": (headers, files),
             "own declarations, temporary file (before)": (sources, files),
             "own declarations, -pipe (now)": (sources, now)}
    objects: dict[str, dict[str, bytes]] = {}

    def whole_set(form: str):
        def run() -> float:
            seconds, objects[form] = compile_all(*forms[form])
            return seconds
        return run

    set_samples = interleaved({form: whole_set(form) for form in forms}, args.repeats)
    oldest, before, current = (objects[form] for form in forms)
    identical = sum(oldest[name] == before[name] == current[name] for name in sources)

    def ms(sample: Sample, per: int = 1) -> str:
        values = sorted(v / per * 1e3 for v in sample.values)
        return f"{statistics.median(values):.1f} ({values[0]:.1f}-{values[-1]:.1f})"

    rows = [[name, ms(sample)] for name, sample in fixed_samples.items()]
    set_rows = [[form, f"{sample.median:.2f} ({min(sample.values):.2f}-{max(sample.values):.2f})",
                 ms(sample, len(sources))] for form, sample in set_samples.items()]
    first, second, third = set_samples.values()
    ratios = sorted(c / b for b, c in zip(second.values, third.values))  # round by round
    fixed_now = fixed_samples["preamble, own declarations, -pipe (now)"].median
    notes = machine_notes()
    text = "\n".join([
        "# The C compiler's cost per kernel: fixed overhead against the kernel's own work",
        "",
        f"`python -m bench.compile_overhead --model {args.model} --repeats {args.repeats}`; "
        f"{notes['machine']}, {notes['cc']}, load {notes['load average (1, 5, 15 min)']}. "
        "Every compile goes through "
        "`compile_c` with no cache (temporary directory, C file, compiler process), as CompileC "
        "runs it. Medians of interleaved rounds, (min-max).",
        "",
        f"## Fixed cost of one compile call (ms; {args.calls} calls per sample)",
        "",
        markdown_table(["translation unit", "ms per call"], rows),
        "",
        f"## {args.model}: its {len(sources)} kernels, one compile each",
        "",
        markdown_table(["kernel form", "seconds, all kernels", "ms per kernel"], set_rows),
        "",
        f"-pipe / temporary file: {third.median / second.median:.2f} (round by round "
        f"{ratios[0]:.2f}-{ratios[-1]:.2f}); own declarations / system headers: "
        f"{second.median / first.median:.2f}. Objects byte-identical in all three forms: "
        f"{identical} of {len(sources)}. Of a kernel's compile, the fixed cost is now "
        f"{fixed_now / (third.median / len(sources)):.0%}.",
        "",
    ])
    Path(args.output).write_text(text)
    print(text)
    return 0 if identical == len(sources) else 1


if __name__ == "__main__":
    sys.exit(main())

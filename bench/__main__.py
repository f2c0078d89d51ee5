"""Run every benchmark and write bench/results.md and the PNG plots.

    python -m bench [--quick] [--only scaling,simulator,...] [--output bench/results.md]

(``raypass bench`` calls :func:`main`.) Each section measures its comparisons side by
side in this run; nothing in results.md is typed in by hand. A section that fails is
reported as failed with its error, and the others still run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import (
    BENCH_DIR,
    ROOT,
    cpu_times,
    headline_rows,
    machine_notes,
    markdown_table,
    steal_percent,
)

SECTIONS = (
    "scaling",
    "simulator",
    "scheduler",
    "large_module",
    "cache",
    "anchors",
    "ir_scaling",
    "onnx_models",
    "end_to_end",
    "serial_path",
    "weights_memory",
    "threads",
    "vs_onnxruntime",
    "dynamic_shapes",
    "tuning",
    "quantized",
)
TITLES = {
    "scaling": "1. Build scaling: in-process vs ray N=1 vs N=2",
    "simulator": "2. Scaling past this machine (simulator)",
    "scheduler": "Scheduler (issue 5): F functions of pass work",
    "large_module": "6. A large module of primitive functions",
    "cache": "5. Compile cache",
    "anchors": "3-4. Anchors: Apache TVM and onnxruntime",
    "ir_scaling": "IR scaling (bench/ir_scaling.py)",
    "onnx_models": "ONNX import and pipeline (bench/onnx_models.py)",
    "end_to_end": "End-to-end compile latency (bench/end_to_end.py)",
    "serial_path": "The serial path of a build (bench/serial_path.py)",
    "weights_memory": "Peak memory against the weights (bench/weights_memory.py)",
    "threads": "Threads in the compiled library (bench/threads.py)",
    "vs_onnxruntime": "Inference latency against onnxruntime (bench/vs_onnxruntime.py)",
    "dynamic_shapes": "One library for every size (bench/dynamic_shapes.py)",
    "tuning": "Kernel tuning on worker processes (bench/tuning.py)",
    "quantized": "Quantized models against onnxruntime and float32 (bench/quantized.py)",
}
HEADLINE_HEADER = ["comparison", "ratio (median)", "spread", "target", "verdict"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes; finishes in under 10 minutes")
    parser.add_argument("--only", default="", help=f"comma-separated sections: {', '.join(SECTIONS)}")
    parser.add_argument("--output", default=str(BENCH_DIR / "results.md"))
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()] or list(SECTIONS)
    unknown = [name for name in chosen if name not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    if "simulator" in chosen and "scaling" not in chosen:
        chosen.insert(0, "scaling")  # the simulator works from the scaling runs
    args.sections = [name for name in SECTIONS if name in chosen]
    return args


def _script(name: str, extra: list[str]) -> Callable[[bool], tuple[str, list[list[str]]]]:
    """An older benchmark script run as a subprocess (``python -m bench.NAME`` from the
    checkout); its own results file is linked (a quick run writes a separate file, so it
    never replaces the full run's)."""

    def run(quick: bool) -> tuple[str, list[list[str]]]:
        results = f"results_{name}{'_quick' if quick else ''}.md"
        command = [
            sys.executable,
            "-m",
            f"bench.{name}",
            *extra,
            "--output",
            str(BENCH_DIR / results),
        ]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=3600)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-2000:]}")
        headline = headline_rows((BENCH_DIR / results).read_text())
        return f"See [{results}]({results}).\n\n{done.stdout.strip()}", headline

    return run


def run_sections(
    sections: list[str], quick: bool, output: Path, on_section: Callable[[list[str], list[list[str]]], None]
) -> tuple[list[str], list[list[str]]]:
    from bench import anchors, cache_bench, large_module, scaling, scheduler, simulator

    parts: list[str] = []
    headline: list[list[str]] = []
    scaling_data: Any = None
    runners: dict[str, Callable[[bool], tuple[str, list[list[str]]]]] = {
        "scheduler": scheduler.run,
        "large_module": large_module.run,
        "cache": cache_bench.run,
        "anchors": anchors.run,
        "ir_scaling": _script("ir_scaling", ["--sizes", "1000,10000"] if quick else []),
        "onnx_models": _script("onnx_models", ["--no-densenet"] if quick else []),
        "end_to_end": _script("end_to_end", ["--quick"] if quick else []),
        "serial_path": _script("serial_path", ["--quick"] if quick else []),
        "weights_memory": _script("weights_memory", ["--quick"] if quick else []),
        "threads": _script(
            "threads", ["--repeats", "5", "--no-densenet", "--no-build-cost"] if quick else []
        ),
        "vs_onnxruntime": _script("vs_onnxruntime", ["--repeats", "5", "--only", "zoo"] if quick else []),
        "dynamic_shapes": _script(
            "dynamic_shapes", ["--repeats", "3", "--build-rounds", "1"] if quick else []
        ),
        "tuning": _script("tuning", ["--trials", "12", "--rounds", "1", "--repeats", "5"] if quick else []),
        "quantized": _script(
            "quantized", ["--hidden", "512", "--mlp", "1408", "--repeats", "5"] if quick else []
        ),
    }
    for name in sections:
        started = time.perf_counter()
        print(f"[bench] {name} ...", file=sys.stderr, flush=True)
        try:
            if name == "scaling":
                body, rows, scaling_data = scaling.run(quick)
            elif name == "simulator":
                if scaling_data is None:
                    raise RuntimeError("the scaling section did not produce measurements")
                body, rows = simulator.run(scaling_data, str(output.parent / "scaling_simulated.png"))
            else:
                body, rows = runners[name](quick)
        except Exception:  # report and go on: one broken section must not hide the others
            body, rows = (
                "FAILED:\n\n```\n" + traceback.format_exc()[-3000:] + "\n```",
                [[TITLES[name], "n/a", "n/a", "n/a", "FAILED (see section)"]],
            )
        seconds = time.perf_counter() - started
        print(f"[bench] {name} done in {seconds:.0f} s", file=sys.stderr, flush=True)
        parts.append(f"## {TITLES[name]}\n\n_section time: {seconds:.0f} s_\n\n{body}\n")
        headline += rows
        on_section(parts, headline)  # a run killed later still leaves what it measured
    return parts, headline


def render(
    parts: list[str],
    headline: list[list[str]],
    quick: bool,
    seconds: float,
    notes_before: dict[str, str],
    load_after: str,
) -> str:
    mode = "--quick" if quick else "full"
    lines = [
        "# raypass benchmarks",
        "",
        f"Generated by `python -m bench{' --quick' if quick else ''}` ({mode} run) in {seconds:.0f} s "
        f"({seconds / 60:.1f} min). Every number below comes from this run. Ratios are of medians of "
        "interleaved runs; absolute times are reported, not claimed.",
        "",
        "## Machine and noise",
        "",
        markdown_table(["", ""], [[k, v] for k, v in notes_before.items()]),
        "",
        f"Load average at the end (1, 5, 15 min): {load_after}. The machine is shared (other processes ran "
        "tests during the benchmark); a load above the CPU count means the timings include contention.",
        "",
        "## Headline",
        "",
        markdown_table(HEADLINE_HEADER, headline),
        "",
    ]
    return "\n".join(lines + parts)


def main(argv: list[str] | None = None) -> int:
    import os

    args = parse_args(argv)
    output = Path(args.output)
    started = time.perf_counter()
    notes = machine_notes()
    cpu_at_start = cpu_times()

    def write(parts: list[str], headline: list[list[str]]) -> None:
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        notes["CPU time taken by the hypervisor (steal) during the run"] = steal_percent(cpu_at_start)
        output.write_text(render(parts, headline, args.quick, time.perf_counter() - started, notes, load))

    try:
        parts, headline = run_sections(args.sections, args.quick, output, write)
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    seconds = time.perf_counter() - started
    write(parts, headline)
    print(markdown_table(HEADLINE_HEADER, headline))
    print(f"\nwrote {output} in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

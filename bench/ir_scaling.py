"""How the IR's core operations scale with program size (principle 2 of DESIGN.md).

Times print, parse, structural hash, pickle, unpickle, visit, mutate, type inference and
evaluation on chains of ``add`` calls of each size (median of a few runs), prints a table
with the ratio between the two largest sizes (10x more nodes: linear means ~10), and
writes the table to bench/results_ir_scaling.md.

    python -m bench.ir_scaling [--sizes 1000,10000,100000] [--repeats 3] [--output PATH]
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from passinfra import evaluate, ir
from passinfra.testing import make_chain

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_SIZES = (1_000, 10_000, 100_000)
DEFAULT_OUTPUT = ROOT / "bench" / "results_ir_scaling.md"
CHAIN_INPUT = np.array([0.5, -1.0], dtype="float32")


class AddToSubtract(ir.ExprMutator):
    """A rewriting mutator: every add becomes a subtract (so every node is rebuilt)."""

    def visit_call(self, call: ir.Call) -> ir.Expr:
        new = super().visit_call(call)
        if new.op is ir.Op.get("add"):
            return ir.Call(ir.Op.get("subtract"), new.args, new.attrs)
        return new


# name -> (setup(n) -> argument, operation(argument)). Every run gets a freshly built
# chain, so caches on nodes (structural hash, inferred types) never hide the work.
def _fresh(n: int) -> ir.IRModule:
    return make_chain(n, "add")


OPERATIONS: dict[str, tuple[Callable[[int], Any], Callable[[Any], Any]]] = {
    "print": (_fresh, lambda mod: mod.astext()),
    "parse": (lambda n: _fresh(n).astext(), ir.parse),
    "hash": (_fresh, ir.structural_hash),
    "pickle": (_fresh, lambda mod: pickle.dumps(mod, protocol=5)),
    "unpickle": (lambda n: pickle.dumps(_fresh(n), protocol=5), pickle.loads),
    "visit": (lambda n: _fresh(n)["main"], lambda func: ir.ExprVisitor().visit(func)),
    "mutate": (lambda n: _fresh(n)["main"], lambda func: AddToSubtract().visit(func)),
    "infer_type": (_fresh, ir.infer_type),
    "evaluate": (_fresh, lambda mod: evaluate(mod, CHAIN_INPUT)),
}


# CPU time of this process by default: the operations are single-threaded Python, and
# other load on the machine (parallel test runs) would otherwise skew the ratios
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}


def time_once(
    setup: Callable[[int], Any], operation: Callable[[Any], Any], n: int, clock: Callable[[], float]
) -> float:
    argument = setup(n)
    gc.collect()
    gc.disable()  # as timeit does: a collection mid-run would be charged to the operation
    try:
        start = clock()
        operation(argument)
        return clock() - start
    finally:
        gc.enable()


def measure(sizes: list[int], repeats: int, clock: Callable[[], float]) -> dict[str, dict[int, float]]:
    """Median seconds per operation and size."""
    results: dict[str, dict[int, float]] = {}
    for name, (setup, operation) in OPERATIONS.items():
        results[name] = {}
        for n in sizes:
            runs = [time_once(setup, operation, n, clock) for _ in range(repeats)]
            results[name][n] = statistics.median(runs)
            print(f"  {name:<10} n={n:>7}: {results[name][n] * 1e3:9.1f} ms", file=sys.stderr)
    return results


def render(results: dict[str, dict[int, float]], sizes: list[int], repeats: int, clock: str) -> str:
    header = ["operation", *(f"n={n:,} (ms)" for n in sizes)]
    ratio_title = None
    if len(sizes) >= 2:
        ratio_title = f"ratio {sizes[-1]:,}/{sizes[-2]:,}"
        header.append(ratio_title)
    setting = (
        f"Median {clock} time of {repeats} runs, Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"recursion limit {sys.getrecursionlimit()}."
    )
    if ratio_title:
        setting += f" Linear operations have a ratio near {sizes[-1] / sizes[-2]:g}, the ratio of the sizes."
    lines = [
        "# IR scaling on add chains",
        "",
        setting,
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    for name, by_size in results.items():
        row = [name, *(f"{by_size[n] * 1e3:.1f}" for n in sizes)]
        if ratio_title:
            small = by_size[sizes[-2]]
            row.append(f"{by_size[sizes[-1]] / small:.1f}" if small > 0 else "n/a")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.ir_scaling", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)),
                        help="comma-separated chain lengths (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement (default: %(default)s)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                        help="cpu: process time (robust to other load); wall: elapsed time")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="markdown file for the table")
    args = parser.parse_args(argv)
    try:
        args.sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    except ValueError:
        parser.error(f"--sizes must be comma-separated integers, got {args.sizes!r}")
    if not args.sizes or min(args.sizes) < 1:
        parser.error("--sizes needs at least one positive size")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = measure(args.sizes, args.repeats, CLOCKS[args.clock])
    table = render(results, args.sizes, args.repeats, args.clock)
    print(table)
    args.output.write_text(table)
    print(f"written to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

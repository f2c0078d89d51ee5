"""The runtime's integer GEMM alone, two trees side by side: ``rp_qgemm_i8`` of each tree's
``c/qgemm.c`` on the shapes of real quantized models, one thread; with ``--models``, the
whole QDQ models those shapes come from.

Each tree's runtime (``conv_runtime.runtime_source`` and the thread pool, rendered by that
tree's own raypass) is compiled into a shared object with the library's flags and loaded
with ctypes; each shape is a uint8 activation times an int8 weight in the GEMM's panels
(``qgemm_panels.to_panels``), zero point 3, requantized to uint8 per column (a QDQ
convolution's epilogue), checked against NumPy's exact result. Weights of the full 8 bits
(onnxruntime's default: on AVX2 without VNNI the body that widens to 16 bits) or of 7
(``reduce_range``: VPMADDUBSW). Interleaved rounds, each a block of back-to-back calls
whose best call is the round's value; the best round per tree (this machine's noise comes
in bursts that a median keeps), in microseconds.

``--models``: bench.conv_models' MobileNetV3-like, RegNetX-like and ResNet-50 through
onnxruntime's ``quantize_static`` (bench.quantized.static_qdq: QDQ, per-channel int8
weights of 8 bits or, ``--bits 7``, 7), each built by each tree in a process of its own
(its own raypass, its own runtime), on one thread or ``--threads``; the processes answer in
turn (each first in every other round), round after round, with the best of a block of
calls; milliseconds, the best round per tree, and the median of the rounds' ratios (two
threads on a shared machine: a round's best varies more than one thread's).

    python -m bench.qgemm_shapes --before /tmp/before [--bits 8] [--rounds 25]
        [--shapes mobilenet|resnet | --models [--threads N]] [--output FILE]
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from bench.common import ROOT, best_of_block, python_path, report

# (M, K, N): the pointwise convolutions of bench.conv_models.mobilenet (pixels, input and
# output channels) and the 1x1 and classifier GEMMs of ResNet-50
SHAPES = {
    "mobilenet": [(3136, 16, 16), (3136, 16, 72), (784, 72, 24), (784, 24, 88), (784, 88, 24),
                  (784, 24, 96), (196, 96, 40), (196, 40, 240), (196, 240, 40), (196, 40, 120),
                  (196, 120, 48), (196, 48, 144), (196, 144, 48), (196, 48, 288), (49, 288, 96),
                  (49, 96, 576), (49, 576, 96)],
    "resnet": [(3136, 64, 64), (3136, 64, 256), (784, 512, 128), (784, 128, 512), (196, 1024, 256),
               (49, 2048, 512), (1, 2048, 1000)],
}
CALLS = 20  # a block: back-to-back calls, the best one counted
CFLAGS = ["-O2", "-fPIC", "-fno-math-errno", "-std=c11", "-ffp-contract=off"]
_RENDER = ("from passinfra.codegen.conv_runtime import runtime_source\n"
           "from passinfra.codegen.thread_pool import pool_source\n"
           "import sys\n"
           "open(sys.argv[1], 'w').write(runtime_source())\n"
           "open(sys.argv[2], 'w').write(pool_source())\n")


def runtime_library(tree: Path, directory: Path) -> ctypes.CDLL:
    """``tree``'s runtime as a shared object in ``directory``, loaded, on one thread."""
    runtime, pool, library = directory / "runtime.c", directory / "pool.c", directory / "runtime.so"
    # (from the tree itself: `-c` puts the working directory first on the path)
    subprocess.run([sys.executable, "-c", _RENDER, str(runtime), str(pool)], check=True, cwd=tree,
                   env={**os.environ, "PYTHONPATH": python_path(tree)})
    command = ["cc", *CFLAGS, "-shared", "-o", str(library), str(runtime), str(pool), "-lm", "-lpthread"]
    subprocess.run(command, check=True)
    loaded = ctypes.CDLL(str(library))
    loaded.raypass_set_num_threads(1)
    return loaded


class Case:
    """One shape's operands and a bound call of a runtime's ``rp_qgemm_i8``."""

    def __init__(self, shape: tuple[int, int, int], bits: int) -> None:
        from passinfra.ir.op.qgemm_panels import to_panels

        m, k, n = shape
        rng = np.random.default_rng(m * 7919 + k * 31 + n)
        limit = 63 if bits == 7 else 127
        self.a = rng.integers(0, 256, (m, k)).astype(np.uint8)
        weight = rng.integers(-limit, limit + 1, (k, n)).astype(np.int8)
        self.panels = to_panels(weight)
        self.za, self.zb, self.zero = np.array([3], np.uint8), np.zeros(n, np.int8), np.array([7], np.uint8)
        self.bias = rng.integers(-1000, 1000, n).astype(np.int32)
        self.scale = (rng.random(n) * 1e-3).astype(np.float32)
        self.out = np.zeros((m, n), np.uint8)
        sums = (self.a.astype(np.int64) - 3) @ weight.astype(np.int64) + self.bias
        self.expected = np.clip(np.rint(sums.astype(np.float32) * self.scale) + 7, 0, 255).astype(np.uint8)
        self.shape = shape

    def call(self, library: ctypes.CDLL) -> Callable[[], None]:
        m, k, n = self.shape
        pointer = [ctypes.c_void_p(x.ctypes.data) for x in (self.a, self.panels, self.za, self.zb, self.out)]
        epilogue = [ctypes.c_void_p(x.ctypes.data) for x in (self.bias, self.scale, self.zero)]
        sizes = [ctypes.c_int64(v) for v in (m, n, k, 0, 1, 0, 1, 1, 1)]
        args = [*pointer, *sizes, *epilogue, *(ctypes.c_int64(v) for v in (2, 1, 1))]
        function = library.rp_qgemm_i8
        function.restype = ctypes.c_int

        def run() -> None:
            if function(*args) != 0:
                raise RuntimeError("rp_qgemm_i8 failed")
        return run


MODELS = ("mobilenet", "regnet", "resnet50")
MODEL_CALLS = 10  # a block of whole-model calls
# a tree's process: builds the model it is given, then answers each line on stdin with the
# best of a block of calls (seconds) on one thread
_SERVE = ("import sys, time\n"
          "import numpy as np, onnx\n"
          "from passinfra.build import build\n"
          "from passinfra.frontend import from_onnx\n"
          "from passinfra.transform import PassContext\n"
          "model = onnx.load(sys.argv[1])\n"
          "with PassContext(opt_level=3, config={'codegen.cache_dir': sys.argv[2]}):\n"
          "    lib = build(from_onnx(model))\n"
          "lib.set_num_threads(int(sys.argv[4]))\n"
          "shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]\n"
          "x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)\n"
          "calls = int(sys.argv[3])\n"
          "lib(x)\n"
          "print('ready', flush=True)\n"
          "for _ in sys.stdin:\n"
          "    best = float('inf')\n"
          "    for _ in range(calls):\n"
          "        started = time.perf_counter(); lib(x); best = min(best, time.perf_counter() - started)\n"
          "    print(best, flush=True)\n")


def _serve(tree: Path, model: Path, cache: Path, threads: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", _SERVE, str(model), str(cache), str(MODEL_CALLS),
                                str(threads)],
                               cwd=tree, env={**os.environ, "PYTHONPATH": python_path(tree)},
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if process.stdout.readline().strip() != "ready":
        process.kill()
        raise SystemExit(f"{tree}: the model did not build")
    return process


def _ask(process: subprocess.Popen) -> float:
    process.stdin.write("\n")
    process.stdin.flush()
    return float(process.stdout.readline())


def compare_models(trees: dict[str, Path], bits: int, rounds: int, tmp: Path,
                   threads: int = 1) -> list[list[str]]:
    """Rows of the whole models: (model, before ms, after ms, after / before, the median and
    quartiles of the rounds' after / before)."""
    from bench import conv_models
    from bench.quantized import static_qdq

    rows = []
    for name in MODELS:
        model = tmp / f"{name}.onnx"
        onnx.save(static_qdq(getattr(conv_models, name)(), str(tmp), reduce_range=bits == 7), model)
        processes = {label: _serve(tree, model, tmp / f"cache-{label}", threads)
                     for label, tree in trees.items()}
        try:
            times: dict[str, list[float]] = {label: [] for label in processes}
            for index in range(rounds):  # each tree first in every other round
                for label in list(processes)[::1 if index % 2 == 0 else -1]:
                    times[label].append(_ask(processes[label]))
        finally:
            for process in processes.values():
                process.stdin.close()
                process.wait(timeout=60)
        best = {label: min(values) for label, values in times.items()}
        ratios = np.array(times["after"]) / np.array(times["before"])
        rows.append([name, f"{best['before'] * 1e3:.2f}", f"{best['after'] * 1e3:.2f}",
                     f"{best['after'] / best['before']:.3f}",
                     f"{np.median(ratios):.3f} "
                     f"[{np.percentile(ratios, 25):.3f}-{np.percentile(ratios, 75):.3f}]"])
        print(" | ".join(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.qgemm_shapes", description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the tree to compare with (a worktree)")
    parser.add_argument("--after", type=Path, default=ROOT)
    parser.add_argument("--bits", type=int, choices=[7, 8], default=8)
    parser.add_argument("--shapes", choices=sorted(SHAPES), default="mobilenet")
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--models", action="store_true", help="the whole QDQ models instead of the shapes")
    parser.add_argument("--threads", type=int, default=1, help="the models' threads (--models)")
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.models:
        with tempfile.TemporaryDirectory(prefix="raypass-bench-qgemm-") as tmp:
            trees = {"before": args.before.resolve(), "after": args.after.resolve()}
            rows = compare_models(trees, args.bits, args.rounds, Path(tmp), args.threads)
        threads = "one thread" if args.threads == 1 else f"{args.threads} threads"
        report("Quantized models, before and after",
               f"python -m bench.qgemm_shapes --models --bits {args.bits} --rounds {args.rounds} "
               f"--threads {args.threads}",
               f"QDQ models ({args.bits}-bit weights), {threads}, milliseconds: the best of {args.rounds} "
               f"interleaved rounds of {MODEL_CALLS} calls, each tree's build in a process of its own; "
               "and the median [quartiles] of the rounds' ratios.",
               ["model", "before ms", "after ms", "after / before", "rounds' after / before"], rows,
               args.output)
        return 0
    rows, totals = [], {"before": 0.0, "after": 0.0}
    with tempfile.TemporaryDirectory(prefix="raypass-bench-qgemm-") as tmp:
        libraries = {}
        for name, tree in (("before", args.before), ("after", args.after)):
            (Path(tmp) / name).mkdir()
            libraries[name] = runtime_library(tree.resolve(), Path(tmp) / name)
        for shape in SHAPES[args.shapes]:
            case = Case(shape, args.bits)
            runs = {name: case.call(library) for name, library in libraries.items()}
            for name, run in runs.items():
                case.out[:] = 0
                run()
                if not np.array_equal(case.out, case.expected):
                    raise SystemExit(f"{name}: rp_qgemm_i8 of {shape} differs from the exact result")
            best = {name: math.inf for name in runs}
            for _ in range(args.rounds):
                for name, run in runs.items():
                    best[name] = min(best[name], best_of_block(run, CALLS))
            for name in best:
                totals[name] += best[name]
            m, k, n = shape
            rows.append([f"{m} x {k} x {n}", f"{best['before'] * 1e6:.1f}", f"{best['after'] * 1e6:.1f}",
                         f"{best['after'] / best['before']:.2f}"])
            print(" | ".join(rows[-1]), flush=True)
    rows.append(["total", f"{totals['before'] * 1e6:.1f}", f"{totals['after'] * 1e6:.1f}",
                 f"{totals['after'] / totals['before']:.2f}"])
    report("The integer GEMM alone, before and after",
           f"python -m bench.qgemm_shapes --bits {args.bits} --shapes {args.shapes} --rounds {args.rounds}",
           f"`rp_qgemm_i8`, one thread, uint8 x int8 ({args.bits}-bit weights) requantized to uint8; "
           f"microseconds, the best of {args.rounds} interleaved rounds of {CALLS} calls; both trees' "
           "outputs equal the exact result.",
           ["M x K x N", "before us", "after us", "after / before"], rows, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

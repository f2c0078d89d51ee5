"""Float models of ``bench.vs_onnxruntime`` built by two source trees, timed interleaved
(issue 32): a code change's effect on whole models, one process a tree.

Each tree's process builds the model (``passinfra.build``, opt_level 3, a cache of its
own) and answers every request with the best of a block of calls; the rounds alternate
which tree goes first. A noisy shared machine moves both trees' timings together within
a round, so the per-round ratio after / before is the number to read (median and
quartiles), the best-of-rounds times beside it. A change to the C runtime alone
(``--runtime-only``) is compared in one process: the model built twice, linked with
either tree's runtime sources, calls alternating; that pairing is the tighter one.
``nbits:BITS`` is bench.quantized's decoder layers weight-only quantized, ``qdq:NAME`` a
model of bench.conv_models quantized as bench.quantized does (issue 33's kernels live in
the same runtime object).

    git worktree add /tmp/before <commit>
    python -m bench.float_before_after --before /tmp/before --models 'ResNet-50;conv:256,14,256,3,1,1'
                                       [--threads 1] [--rounds 15] [--config JSON] [--runtime-only]
                                       [--output FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from bench.common import ROOT, python_path, report
from bench.vs_onnxruntime import all_models, conv_relu_model

CALLS = 10  # a block of calls
# a tree's process: builds the model it is given (with the config given), then answers each
# line on stdin with the best of a block of calls (seconds)
_SERVE = ("import json, sys, time\n"
          "import numpy as np, onnx\n"
          "from passinfra.build import build\n"
          "from passinfra.frontend import from_onnx\n"
          "from passinfra.transform import PassContext\n"
          "model = onnx.load(sys.argv[1])\n"
          "config = {'codegen.cache_dir': sys.argv[2], **json.loads(sys.argv[4])}\n"
          "with PassContext(opt_level=3, config=config):\n"
          "    lib = build(from_onnx(model))\n"
          "lib.set_num_threads(int(sys.argv[3]))\n"
          "shape = lib.input_shapes()[0]\n"
          "x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)\n"
          f"calls = {CALLS}\n"
          "lib(x)\n"
          "print('ready', flush=True)\n"
          "for _ in sys.stdin:\n"
          "    best = float('inf')\n"
          "    for _ in range(calls):\n"
          "        started = time.perf_counter(); lib(x); best = min(best, time.perf_counter() - started)\n"
          "    print(best, flush=True)\n")


def _serve(tree: Path, model: Path, cache: Path, threads: int, config: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", _SERVE, str(model), str(cache), str(threads), config],
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


def _model(wanted: str) -> tuple[str, onnx.ModelProto]:
    """A model of bench.vs_onnxruntime by label substring, ``conv:C,SIZE,OC,K,STRIDE,GROUPS``
    (one convolution + bias + ReLU), ``nbits:BITS`` (bench.quantized's decoder linear
    layers, one row, weight-only quantized to BITS by onnxruntime's quantizer) or
    ``qdq:NAME`` (bench.conv_models.NAME statically quantized as bench.quantized does)."""
    if wanted.startswith("conv:"):
        spec = [int(value) for value in wanted[5:].split(",")]
        return f"conv {wanted[5:]}", conv_relu_model(*spec)
    if wanted.startswith("qdq:"):
        from bench import conv_models
        from bench.quantized import static_qdq

        with tempfile.TemporaryDirectory(prefix="raypass-qdq-") as tmp:  # the calibration's files
            model = static_qdq(getattr(conv_models, wanted[4:])(), tmp)
        return f"{wanted[4:]} QDQ (static, per-channel)", model
    if wanted.startswith("nbits:"):
        from bench.quantized import decoder_linear_layers, weight_only

        bits = int(wanted[6:])
        model = weight_only(decoder_linear_layers(), bits)
        return f"decoder linear layers, {bits}-bit weight-only, one row", model
    models = all_models()
    label = next((name for name in models if wanted in name), None)
    if label is None:
        raise SystemExit(f"no model of bench.vs_onnxruntime matches {wanted!r}")
    return label, models[label]()


def compare(trees: dict[str, Path], wanted: list[str], rounds: int, threads: int, config: str,
            tmp: Path) -> list[list[str]]:
    rows = []
    for item in wanted:
        label, model = _model(item)
        path = tmp / "model.onnx"
        onnx.save(model, path)
        processes = {name: _serve(tree, path, tmp / f"cache-{name}", threads, config)
                     for name, tree in trees.items()}
        try:
            times: dict[str, list[float]] = {name: [] for name in processes}
            for index in range(rounds):
                for name in list(processes)[::1 if index % 2 == 0 else -1]:
                    times[name].append(_ask(processes[name]))
        finally:
            for process in processes.values():
                process.stdin.close()
                process.wait(timeout=120)
        rows.append(_row(label, times))
        print(" | ".join(rows[-1]), flush=True)
    return rows


RUNTIME_FILES = ("conv_runtime.c", "matmul_nbits.c", "qgemm.c")  # conv_runtime._SOURCE's


def compare_runtimes(before: Path, wanted: list[str], rounds: int, threads: int, config: dict,
                     tmp: Path) -> list[list[str]]:
    """Rows like :func:`compare`'s for a change to the C runtime only: one process builds
    each model twice, linking the ``before`` tree's runtime sources and this tree's, and
    alternates blocks of calls of the two libraries (the tightest pairing this noisy
    machine allows: both share every moment's load). Also checks the two give the same
    bits."""
    from bench.vs_onnxruntime import build_library
    from passinfra.codegen import conv_runtime

    sources = {"before": "".join((before / "passinfra" / "codegen" / "c" / name).read_text()
                                 for name in RUNTIME_FILES),
               "after": conv_runtime._SOURCE}
    rows = []
    for item in wanted:
        label, model = _model(item)
        libraries = {}
        try:
            for name, source in sources.items():
                conv_runtime._SOURCE = source
                conv_runtime._compiles.clear()
                libraries[name], _ = build_library(model, str(tmp / f"cache-{name}"), config)
                libraries[name].set_num_threads(threads)
        finally:
            conv_runtime._SOURCE = sources["after"]
            conv_runtime._compiles.clear()
        shape = libraries["after"].input_shapes()[0]
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        same = all(np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
                   for a, b in zip(_outputs(libraries["before"](x)), _outputs(libraries["after"](x))))
        times: dict[str, list[float]] = {name: [] for name in libraries}
        for index in range(rounds):
            for name in list(libraries)[::1 if index % 2 == 0 else -1]:
                best = float("inf")
                for _ in range(CALLS):
                    started = time.perf_counter()
                    libraries[name](x)
                    best = min(best, time.perf_counter() - started)
                times[name].append(best)
        rows.append(_row(label, times) + ["yes" if same else "NO"])
        print(" | ".join(rows[-1]), flush=True)
    return rows


def _outputs(result: object) -> list[np.ndarray]:
    return [np.asarray(item) for item in result] if isinstance(result, tuple) else [np.asarray(result)]


def _row(label: str, times: dict[str, list[float]]) -> list[str]:
    ratios = np.array(times["after"]) / np.array(times["before"])
    best = {name: min(values) for name, values in times.items()}
    return [label, f"{best['before'] * 1e3:.2f}", f"{best['after'] * 1e3:.2f}",
            f"{np.median(ratios):.3f} [{np.percentile(ratios, 25):.3f}-{np.percentile(ratios, 75):.3f}]"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the tree to compare with (a worktree)")
    parser.add_argument("--after", type=Path, default=ROOT)
    parser.add_argument("--models", default="ResNet-50;SqueezeNet",
                        help="label substrings, conv:C,SIZE,OC,K,STRIDE,GROUPS, nbits:BITS or qdq:NAME, "
                             "';' between")
    parser.add_argument("--config", default="{}", help="PassContext config of both builds, JSON")
    parser.add_argument("--runtime-only", action="store_true",
                        help="the trees differ in the C runtime only: compare in one process")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    wanted = [m for m in args.models.split(";") if m]
    header = ["model", "before ms (best)", "after ms (best)", "rounds' after / before: median [q1-q3]"]
    with tempfile.TemporaryDirectory(prefix="raypass-float-ab-") as tmp:
        if args.runtime_only:
            rows = compare_runtimes(trees["before"], wanted, args.rounds, args.threads,
                                    json.loads(args.config), Path(tmp))
            header.append("same bits")
        else:
            rows = compare(trees, wanted, args.rounds, args.threads, args.config, Path(tmp))
    command = (f"python -m bench.float_before_after --before {args.before} --models '{args.models}' "
               f"--threads {args.threads} --rounds {args.rounds}"
               + (f" --config '{args.config}'" if args.config != "{}" else "")
               + (" --runtime-only" if args.runtime_only else ""))
    how = ("one process, the two runtimes' libraries alternating" if args.runtime_only
           else "one process a tree, alternating")
    report("Float models, before and after", command,
           f"{args.rounds} rounds ({how}), each the best of {CALLS} calls, {args.threads} thread(s); "
           "milliseconds; the ratio is after / before within each round.", header, rows, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Time per built-in pass on big builder models, and how each pass grows with size.

Two models, built here with the op builders (passinfra.frontend.zoo.ir_models has only the
small single-block versions):

* ``transformer``: a stack of pre-norm encoder blocks (layer_norm, multi-head attention,
  GELU MLP, dropout after each sublayer), 24 layers at scale 1;
* ``cnn``: a stack of conv2d 3x3 -> batch_norm -> relu units with a residual add every
  second unit, then global pooling and a classifier, 100 convolutions at scale 1.

Each model is built at scales 1x, 4x and 16x (layers/convolutions times the scale), and
the standard opt_level=3 pipeline (SimplifyInference, FoldConstant, FoldScaleAxis, CSE,
DCE, AlterOpLayout, FoldConstant, FuseOps, with the InferType runs the passes require)
is run on it pass by pass, each pass timed on the module the previous one produced;
ToANormalForm and ToGraphNormalForm are timed on the module as it enters FuseOps. Every
repeat rebuilds the model, so caches on nodes (types, structural hashes) never hide
work; the best of the repeats is reported.

For each pass: ms, ms per 1k nodes (nodes of the module it ran on), and the growth
exponent k of ``time ~ nodes^k`` fitted over the three sizes. n log n over a 16x range
of a few thousand nodes has k of about 1.1; the verdict allows k <= 1.25 for noise.

    python -m bench.passes [--scales 1,4,16] [--repeats 2] [--output PATH]
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from passinfra import ir, transform
from passinfra.ir import op
from passinfra.transform import PassContext

ROOT = Path(__file__).resolve().parent.parent

DEFAULT_SCALES = (1, 4, 16)
DEFAULT_OUTPUT = ROOT / "bench" / "results_passes.md"
TRANSFORMER_LAYERS = 24
CNN_CONVS = 100
# n log n on this range of sizes fits an exponent of about 1.1; allow noise on top
NLOGN_EXPONENT_LIMIT = 1.25
# a pass run this short at the biggest size did no real work (e.g. InferType with every
# type cached); its growth exponent would only measure timer noise
NO_WORK_SECONDS = 1e-3

# Small tensors: the benchmark is about the passes' work per node, not NumPy's work on
# the weights (FoldConstant evaluates folded ops for real).
SEQ, HIDDEN, HEADS, FFN = 4, 16, 2, 32
BATCH, CHANNELS, SIZE, CLASSES = 1, 4, 8, 10


# --------------------------------------------------------------------------- models


def _weight(rng: np.random.Generator, *shape: int) -> ir.Constant:
    return ir.const((rng.standard_normal(shape) * 0.1).astype("float32"))


def _linear(x: ir.Expr, rng: np.random.Generator, units: int, in_features: int) -> ir.Expr:
    return op.nn.bias_add(op.nn.dense(x, _weight(rng, units, in_features)), _weight(rng, units))


def _encoder_block(x: ir.Expr, rng: np.random.Generator) -> ir.Expr:
    head_dim = HIDDEN // HEADS

    def heads(t: ir.Expr, axes: tuple[int, int, int]) -> ir.Expr:
        return op.transpose(op.reshape(t, (SEQ, HEADS, head_dim)), axes)

    normed = op.nn.layer_norm(x, _weight(rng, HIDDEN), _weight(rng, HIDDEN))
    queries = heads(_linear(normed, rng, HIDDEN, HIDDEN), (1, 0, 2))
    keys_t = heads(_linear(normed, rng, HIDDEN, HIDDEN), (1, 2, 0))
    values = heads(_linear(normed, rng, HIDDEN, HIDDEN), (1, 0, 2))
    scores = op.multiply(op.matmul(queries, keys_t), ir.const(1.0 / math.sqrt(head_dim)))
    context = op.matmul(op.nn.softmax(scores), values)
    merged = op.reshape(op.transpose(context, (1, 0, 2)), (SEQ, HIDDEN))
    h = op.add(x, op.nn.dropout(_linear(merged, rng, HIDDEN, HIDDEN), 0.1))
    normed2 = op.nn.layer_norm(h, _weight(rng, HIDDEN), _weight(rng, HIDDEN))
    hidden = op.nn.gelu(_linear(normed2, rng, FFN, HIDDEN))
    return op.add(h, op.nn.dropout(_linear(hidden, rng, HIDDEN, FFN), 0.1))


def transformer(layers: int, seed: int = 0) -> ir.IRModule:
    """``layers`` encoder blocks on ``%x: Tensor[(SEQ, HIDDEN), float32]``."""
    rng = np.random.default_rng(seed)
    x = ir.var("x", (SEQ, HIDDEN))
    out: ir.Expr = x
    for _ in range(layers):
        out = _encoder_block(out, rng)
    return ir.IRModule({"main": ir.Function([x], out)})


def _conv_bn_relu(x: ir.Expr, rng: np.random.Generator) -> ir.Expr:
    conv = op.nn.conv2d(x, _weight(rng, CHANNELS, CHANNELS, 3, 3), padding=(1, 1))
    variance = ir.const(rng.uniform(0.5, 1.5, CHANNELS).astype("float32"))
    gamma = ir.const(rng.uniform(0.5, 1.5, CHANNELS).astype("float32"))
    norm = op.nn.batch_norm(conv, gamma, _weight(rng, CHANNELS), _weight(rng, CHANNELS), variance)
    return op.nn.relu(ir.TupleGetItem(norm, 0))


def cnn(convs: int, seed: int = 0) -> ir.IRModule:
    """``convs`` conv/bn/relu units (a residual add every second one), then a classifier."""
    rng = np.random.default_rng(seed)
    data = ir.var("data", (BATCH, CHANNELS, SIZE, SIZE))
    x: ir.Expr = data
    for i in range(convs):
        y = _conv_bn_relu(x, rng)
        x = op.add(x, y) if i % 2 else y
    pooled = op.reshape(op.nn.global_avg_pool2d(x), (BATCH, CHANNELS))
    return ir.IRModule({"main": ir.Function([data], op.nn.softmax(_linear(pooled, rng, CLASSES, CHANNELS)))})


MODELS: dict[str, tuple[Callable[[int], ir.IRModule], int, str]] = {
    "transformer": (transformer, TRANSFORMER_LAYERS, "layers"),
    "cnn": (cnn, CNN_CONVS, "convolutions"),
}


# --------------------------------------------------------------------------- timing


def standard_pipeline() -> transform.Sequential:
    return transform.Sequential(
        [transform.SimplifyInference(), transform.FoldConstant(), transform.FoldScaleAxis(),
         transform.EliminateCommonSubexpr(), transform.DeadCodeElimination(), transform.AlterOpLayout(),
         transform.FoldConstant(), transform.FuseOps()]
    )


def pipeline_steps(ctx: PassContext) -> list[transform.Pass]:
    """The leaves of the standard pipeline in run order, required InferTypes included
    (as Sequential expands them), so each pass can be timed on its own input."""
    steps: list[transform.Pass] = []
    work: list[transform.Pass] = [standard_pipeline()]
    while work:
        current = work.pop()
        if isinstance(current, transform.Sequential):
            nested = [p for step in current.enabled_steps(ctx) for p in step]
            work.extend(reversed(nested))
        else:
            steps.append(current)
    return steps


def node_count(mod: ir.IRModule) -> int:
    seen: set[int] = set()
    for func in mod.functions.values():
        seen.update(id(node) for node in ir.iter_post_order(func))
    return len(seen)


Measurement = dict[str, tuple[float, int]]  # label -> (seconds, nodes of its input)


def _timed(pass_: transform.Pass, mod: ir.IRModule, ctx: PassContext) -> tuple[ir.IRModule, float]:
    gc.collect()
    # CPU time of this process: the machine may be busy with other work, and the
    # passes are single-threaded Python
    start = time.process_time()
    out = pass_.run(mod, ctx)
    return out, time.process_time() - start


def measure_once(mod: ir.IRModule) -> Measurement:
    """Run the standard pipeline on ``mod`` pass by pass; seconds per pass label."""
    results: Measurement = {}
    counts: dict[str, int] = {}
    with PassContext(opt_level=3) as ctx:
        for pass_ in pipeline_steps(ctx):
            name = pass_.info.name
            if name == "FuseOps":  # the normal-form conversions, on the pre-fusion module
                anf, seconds = _timed(transform.ToANormalForm(), mod, ctx)
                results["ToANormalForm"] = (seconds, node_count(mod))
                _, seconds = _timed(transform.ToGraphNormalForm(), anf, ctx)
                results["ToGraphNormalForm"] = (seconds, node_count(anf))
            counts[name] = counts.get(name, 0) + 1
            label = name if counts[name] == 1 else f"{name} #{counts[name]}"
            nodes = node_count(mod)
            mod, seconds = _timed(pass_, mod, ctx)
            results[label] = (seconds, nodes)
    return results


def measure(build: Callable[[int], ir.IRModule], size: int, repeats: int) -> Measurement:
    """Best of ``repeats`` runs, each on a freshly built model."""
    best: Measurement = {}
    for _ in range(repeats):
        for label, (seconds, nodes) in measure_once(build(size)).items():
            if label not in best or seconds < best[label][0]:
                best[label] = (seconds, nodes)
    return best


def growth_exponent(nodes: list[int], seconds: list[float]) -> float:
    """Least-squares slope of log(seconds) against log(nodes)."""
    xs, ys = np.log(np.asarray(nodes, float)), np.log(np.maximum(np.asarray(seconds), 1e-9))
    return float(np.polyfit(xs, ys, 1)[0])


# --------------------------------------------------------------------------- report


def report_model(name: str, scales: tuple[int, ...], repeats: int) -> tuple[list[str], list[str]]:
    """The markdown table of one model, and the passes that grew worse than n log n."""
    build, base, unit = MODELS[name]
    measure_once(build(base))  # warm-up: first-use costs (imports, op tables) are not the pass's
    by_scale = {}
    for scale in scales:
        started = time.perf_counter()
        by_scale[scale] = measure(build, base * scale, repeats)
        print(f"  {name} x{scale}: {time.perf_counter() - started:.1f}s", file=sys.stderr)
    labels = list(by_scale[scales[0]])
    sizes = ", ".join(f"{scale}x = {base * scale} {unit}" for scale in scales)
    header = "| pass | " + " | ".join(
        f"{scale}x: ms (ms/1k nodes)" for scale in scales
    ) + " | growth exponent | within n log n |"
    lines = [f"### {name} ({sizes})", "", header, "|" + "---|" * (len(scales) + 3)]
    worse: list[str] = []
    for label in labels:
        cells, nodes, seconds = [], [], []
        for scale in scales:
            secs, count = by_scale[scale][label]
            nodes.append(count)
            seconds.append(secs)
            cells.append(f"{secs * 1e3:.1f} ({secs * 1e6 / count:.2f})")
        if max(seconds) < NO_WORK_SECONDS:
            lines.append(f"| {label} | " + " | ".join(cells) + " | - | (no work) |")
            continue
        exponent = growth_exponent(nodes, seconds)
        ok = exponent <= NLOGN_EXPONENT_LIMIT
        if not ok:
            worse.append(f"{name}: {label} (k={exponent:.2f})")
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {exponent:.2f} | {'yes' if ok else 'NO'} |")
    first = by_scale[scales[0]]
    node_sizes = ", ".join(
        f"{scale}x: {by_scale[scale]['InferType'][1]:,}" for scale in scales
    )
    total = sum(s for s, _ in first.values())
    lines += ["", f"Nodes of the input module: {node_sizes}. "
              f"Whole pipeline at 1x: {total * 1e3:.0f} ms.", ""]
    return lines, worse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.passes", description=__doc__.split("\n")[0])
    parser.add_argument("--scales", default=",".join(map(str, DEFAULT_SCALES)))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    scales = tuple(int(s) for s in args.scales.split(","))
    lines = [
        "# Built-in passes: time per pass and growth with model size",
        "",
        f"Best of {args.repeats} runs (each on a freshly built model), CPU time, Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs. Each pass is timed on the module "
        "the previous pass of the standard opt_level=3 pipeline produced; `#2` marks a second "
        "run of a pass (InferType then only types the nodes made since its last run). "
        "ms/1k nodes divides by the node count of the pass's input. The growth exponent k "
        f"fits time ~ nodes^k over the sizes; n log n here is about 1.1, and k <= "
        f"{NLOGN_EXPONENT_LIMIT} counts as within n log n. Generated by `python -m bench.passes`.",
        "",
    ]
    worse: list[str] = []
    for name in args.models.split(","):
        table, bad = report_model(name, scales, args.repeats)
        lines += table
        worse += bad
    lines.append("No pass grows worse than n log n." if not worse else
                 "Worse than n log n: " + "; ".join(worse))
    text = "\n".join(lines) + "\n"
    print(text)
    args.output.write_text(text)
    return 1 if worse else 0


if __name__ == "__main__":
    raise SystemExit(main())

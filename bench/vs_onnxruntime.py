"""Inference latency against onnxruntime (issue 18): every model, both thread settings.

1. **Latency ratio** ours / onnxruntime, same inputs, interleaved (one call of each
   variant per round: ours and onnxruntime with their default threads, then both on one
   thread), medians and ranges, on the nine onnx light models (random weights), the
   bench's zoo models and the models of :mod:`bench.conv_models` (grouped, depthwise,
   squeeze-excite and 1-D convolutions, transposed convolutions with skip concats, a
   recurrent layer, 7x7 depthwise with layer norm); geometric means against the issue's targets
   (default threads: <= 1.0 and no model above 1.5x; one thread each: <= 1.0). Outputs
   are checked against onnxruntime's.
2. **Profiles** (``--profile``): per-kernel time of our library inside the model (its
   in-model profile, :meth:`passinfra.runtime.module.Module.profile`; a kernel's calls
   summed) next to onnxruntime's own per-operator profile, on one thread
   (:mod:`bench.in_model_profile` pairs them call by node).
3. **Convolution kernels** (``--kernels``): the measurements behind the kernel rule of
   :mod:`passinfra.codegen.compute.conv_plan`: one convolution per shape, each kernel
   forced (``codegen.conv_kernel``), one thread, best of repeated calls.
4. **Build time** (``--build-time``): cold DenseNet-121 builds with the new kernel
   rules against the previous paths (config ``codegen.conv_kernel="none"`` and the
   small-window lowering switched off), interleaved; the issue allows 15% more.

Writes bench/results_vs_onnxruntime.md.

    python -m bench.vs_onnxruntime [--repeats N] [--only SUBSTRING] [--profile] [--kernels]
                                   [--build-time] [--output PATH]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import json
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench import conv_models
from bench.codegen import LIGHT_DIR, ZOO_MODELS, model_inputs, random_light_weights
from bench.common import (
    HEADLINE_TABLE_HEADER,
    Sample,
    interleaved,
    machine_notes,
    markdown_table,
    ratio,
    verdict,
)
from passinfra import tir
from passinfra.build import compile_pipeline, run_link
from passinfra.codegen import lower
from passinfra.codegen.compute.conv_direct import ConvGeometry
from passinfra.codegen.compute.conv_plan import choose_kernel, target_isa
from passinfra.frontend import from_onnx, zoo
from passinfra.ir.type_infer import infer_type
from passinfra.runtime.cpus import available_cpus
from passinfra.runtime.module import Module
from passinfra.transform import PassContext

ROOT = Path(__file__).resolve().parent.parent

LIGHT_MODELS = {
    "AlexNet": "light_bvlc_alexnet.onnx",
    "DenseNet-121": "light_densenet121.onnx",
    "Inception v1": "light_inception_v1.onnx",
    "Inception v2": "light_inception_v2.onnx",
    "ResNet-50": "light_resnet50.onnx",
    "ShuffleNet v1": "light_shufflenet.onnx",
    "SqueezeNet": "light_squeezenet.onnx",
    "VGG-19": "light_vgg19.onnx",
    "ZFNet-512": "light_zfnet512.onnx",
}
TARGET_DEFAULT_GEOMEAN, TARGET_DEFAULT_MAX, TARGET_ONE_THREAD_GEOMEAN = 1.0, 1.5, 1.0
OUTPUT = ROOT / "bench" / "results_vs_onnxruntime.md"


# --------------------------------------------------------------------------- models


def all_models() -> dict[str, Callable[[], onnx.ModelProto]]:
    """Label -> a function building the model (built one at a time: VGG-19 is 0.5 GB)."""
    models: dict[str, Callable[[], onnx.ModelProto]] = {}
    for label, name in LIGHT_MODELS.items():
        path = os.path.join(LIGHT_DIR, name)
        if os.path.exists(path):
            models[f"{label} (onnx light)"] = lambda path=path: random_light_weights(onnx.load(path))
    for label, spec in ZOO_MODELS.items():
        models[label] = lambda spec=spec: zoo.zoo_spec(spec)
    for label, builder in conv_models.MODELS.items():
        models[label] = builder
    return models


def build_library(model: onnx.ModelProto, cache_dir: str, config: dict | None = None) -> tuple[Module, Any]:
    """(the loaded library, the compiled IRModule of PrimFuncs), built as passinfra.build
    does (opt_level 3) but keeping the lowered functions for the profiler."""
    mod = from_onnx(model)
    ret_type = infer_type(mod["main"], mod).ret_type
    with PassContext(opt_level=3, config={"codegen.cache_dir": cache_dir, **(config or {})}):
        compiled = compile_pipeline()(mod)
        artifact = run_link(compiled, ret_type).build_artifact()
    return Module(artifact.library, artifact.metadata, artifact.weights), compiled


def ort_session(model: onnx.ModelProto, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads  # 0: onnxruntime's default (every core)
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _flat(result: Any) -> list[np.ndarray]:
    if isinstance(result, tuple):
        return [leaf for item in result for leaf in _flat(item)]
    return [np.asarray(result)]


# --------------------------------------------------------------------------- 1. latency


# Each round runs every variant as a block of back-to-back calls (what a user's loop
# sees) of about BLOCK_SECONDS, after an idle gap of IDLE_GAP_SECONDS, and records the
# block's median call. Single calls interleaved with the other runtime's measured each one
# right after the other had run: onnxruntime's pool threads spin on after a run returns
# and took a core from the call that followed (the zoo transformer measured 7.1 ms on our
# two threads that way, 3.9 ms alone); the gap lets the previous variant's threads park.
BLOCK_SECONDS = 0.05
MIN_BLOCK_CALLS, MAX_BLOCK_CALLS = 3, 50
IDLE_GAP_SECONDS = 0.05


def block(run: Callable[[], None], calls: int) -> Callable[[], float]:
    """A variant for :func:`interleaved`: the median of ``calls`` back-to-back calls,
    after an idle gap and one uncounted call (which finds the threads parked)."""

    def measure() -> float:
        time.sleep(IDLE_GAP_SECONDS)
        run()
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    return measure


def block_calls(run: Callable[[], None]) -> int:
    """Calls per block: about BLOCK_SECONDS of ``run`` (timed once, warm)."""
    run()
    started = time.perf_counter()
    run()
    seconds = max(time.perf_counter() - started, 1e-6)
    return max(MIN_BLOCK_CALLS, min(MAX_BLOCK_CALLS, math.ceil(BLOCK_SECONDS / seconds)))


def compare(label: str, model: onnx.ModelProto, repeats: int, cache_dir: str) -> dict[str, Any]:
    feeds = model_inputs(model)
    args = list(feeds.values())
    lib, _ = build_library(model, cache_dir)
    default_threads = lib.num_threads
    ort_default, ort_one = ort_session(model, 0), ort_session(model, 1)
    expected = ort_one.run(None, feeds)
    got = _flat(lib(*args))
    error = max(float(np.abs(g - e).max() / max(np.abs(e).max(), 1e-6)) for g, e in zip(got, expected))

    def ours(threads: int) -> Callable[[], None]:
        def run() -> None:
            lib.set_num_threads(threads)
            lib(*args)
        return run

    def ort(session: Any) -> Callable[[], None]:
        def run() -> None:
            session.run(None, feeds)
        return run

    runs = {"ours": ours(default_threads), "ort": ort(ort_default), "ours_1": ours(1), "ort_1": ort(ort_one)}
    calls = block_calls(runs["ort_1"])  # the same block length for every variant of a model
    samples = interleaved({name: block(run, calls) for name, run in runs.items()}, repeats)
    return {"model": label, "samples": samples, "error": error, "threads": default_threads, "calls": calls}


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def _ms(sample: Sample) -> str:
    return f"{sample.median * 1e3:.2f} [{min(sample.values) * 1e3:.2f}-{max(sample.values) * 1e3:.2f}]"


def _verdict(value: float, target: float) -> str:
    return "met" if value <= target else "MISSED"


def headline_table(g_default: float, worst: tuple[float, str], g_one: float, models: int) -> str:
    """The targets, shaped for results.md's headline (bench/common.py)."""
    what = "inference latency ours / onnxruntime"
    checks = [
        (f"{what}, default threads, geometric mean of {models} models", g_default, TARGET_DEFAULT_GEOMEAN),
        (f"{what}, default threads, highest ({worst[1]})", worst[0], TARGET_DEFAULT_MAX),
        (f"{what}, one thread each, geometric mean of {models} models", g_one, TARGET_ONE_THREAD_GEOMEAN),
    ]
    rows = [[name, f"{value:.2f}", "-", f"<= {target}", verdict(value, target, False)]
            for name, value, target in checks]
    return markdown_table(HEADLINE_TABLE_HEADER, rows)


def render_latency(rows: list[dict[str, Any]]) -> list[str]:
    table = []
    default_ratios, one_ratios = [], []
    for row in rows:
        s = row["samples"]
        default, one = ratio(s["ours"], s["ort"]), ratio(s["ours_1"], s["ort_1"])
        default_ratios.append(default.median)
        one_ratios.append(one.median)
        table.append([row["model"], _ms(s["ours"]), _ms(s["ort"]), default.text(),
                      _ms(s["ours_1"]), _ms(s["ort_1"]), one.text(), f"{row['error']:.1e}"])
    header = ["model", "ours ms (default threads)", "onnxruntime ms (default)", "ratio",
              "ours ms (1 thread)", "onnxruntime ms (1 thread)", "ratio (1 thread)", "max rel. diff"]
    lines = [markdown_table(header, table), ""]
    if default_ratios:
        worst = max(zip(default_ratios, (r["model"] for r in rows)))
        g_default, g_one = geomean(default_ratios), geomean(one_ratios)
        lines = [headline_table(g_default, worst, g_one, len(rows)), ""] + lines
        lines += [
            f"- geometric mean, default threads: **{g_default:.2f}** (target <= {TARGET_DEFAULT_GEOMEAN}: "
            f"{_verdict(g_default, TARGET_DEFAULT_GEOMEAN)}); highest {worst[0]:.2f} ({worst[1]}; "
            f"target none above {TARGET_DEFAULT_MAX}: {_verdict(worst[0], TARGET_DEFAULT_MAX)})",
            f"- geometric mean, one thread each: **{g_one:.2f}** (target <= {TARGET_ONE_THREAD_GEOMEAN}: "
            f"{_verdict(g_one, TARGET_ONE_THREAD_GEOMEAN)})",
        ]
    return lines


# --------------------------------------------------------------------------- 2. profiles


def _kernel_seconds(lib: Module, func: tir.PrimFunc, repeats: int) -> float:
    """Best time of one call of ``func``'s kernel on random buffers of its parameters."""
    rng = np.random.default_rng(0)
    arrays = []
    for buffer in func.params:
        dtype = np.dtype("uint16") if buffer.dtype in ("float16", "bfloat16") else np.dtype(buffer.dtype)
        size = max(buffer.size, 1)
        arrays.append((rng.standard_normal(size) * 0.1).astype(dtype) if dtype.kind == "f"
                      else np.zeros(size, dtype))  # integer inputs (indices) stay in range
    pointers = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    entry = getattr(lib._cdll, func.attrs["global_symbol"] + "_packed")
    entry.restype, entry.argtypes = ctypes.c_int, [ctypes.c_void_p]
    entry(pointers)
    best = math.inf
    for _ in range(repeats):
        started = time.perf_counter()
        entry(pointers)
        best = min(best, time.perf_counter() - started)
    return best


def kernel_ops(compiled: Any) -> dict[str, str]:
    """Each kernel's fused ops (``conv2d,add,relu``), by symbol, from the compiled module."""
    ops = {}
    for func in compiled.functions.values():
        if isinstance(func, tir.PrimFunc):
            names = func.attrs.get("op_names", ())
            ops[func.attrs["global_symbol"]] = ",".join(name.replace("nn.", "") for name in names)
    return ops


def profile_kernels(model: onnx.ModelProto, cache_dir: str, repeats: int = 5,
                    config: dict | None = None) -> tuple[float, list[tuple[float, str, int, str]]]:
    """(library latency, [(seconds per inference, kernel, calls, ops)]), one thread: each
    kernel's calls timed inside the model (:meth:`Module.profile`), medians over
    ``repeats`` runs."""
    lib, compiled = build_library(model, cache_dir, config)
    lib.set_num_threads(1)
    profile = lib.profile(*model_inputs(model).values(), runs=repeats)
    calls = collections.Counter(profile.kernels)
    ops_of = kernel_ops(compiled)
    rows = [(seconds, symbol, calls[symbol], ops_of.get(symbol, ""))
            for symbol, seconds in profile.by_kernel().items()]
    return profile.run_median, sorted(rows, reverse=True)


def profile_ort(model: onnx.ModelProto, runs: int = 10) -> tuple[float, list[tuple[float, str]]]:
    """(latency, [(seconds per inference, operator)]) of onnxruntime on one thread, from
    its own profiler."""
    import onnxruntime as ort

    feeds = model_inputs(model)
    with tempfile.TemporaryDirectory(prefix="raypass-ort-profile-") as directory:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(directory, "ort")
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        session.run(None, feeds)
        started = time.perf_counter()
        for _ in range(runs):
            session.run(None, feeds)
        latency = (time.perf_counter() - started) / runs
        events = json.loads(Path(session.end_profiling()).read_text())
    per_op: dict[str, float] = collections.defaultdict(float)
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            per_op[event["args"]["op_name"]] += event["dur"] * 1e-6 / (runs + 1)
    return latency, sorted(((s, op) for op, s in per_op.items()), reverse=True)


def render_profile(label: str, model: onnx.ModelProto, cache_dir: str, top: int = 12) -> list[str]:
    ours_s, kernels = profile_kernels(model, cache_dir)
    before_s, before = profile_kernels(model, cache_dir, config={"codegen.conv_kernel": "none"})
    ort_s, ops = profile_ort(model)
    total = sum(row[0] for row in kernels) or 1.0
    lines = [f"### {label}", "",
             f"One thread: ours {ours_s * 1e3:.2f} ms (kernels sum to {total * 1e3:.2f} ms); with the "
             f"convolution kernels off (`codegen.conv_kernel=none`, the previous paths) "
             f"{before_s * 1e3:.2f} ms; onnxruntime {ort_s * 1e3:.2f} ms (its profiler on, which "
             f"slows it a little).", ""]
    rows = [[f"{s * 1e3:.3f}", f"{100 * s / total:.0f}%", calls, f"`{symbol}`", ops]
            for s, symbol, calls, ops in kernels[:top]]
    lines += [markdown_table(["ms / inference", "share", "calls", "kernel", "ops"], rows), ""]
    before_total = sum(row[0] for row in before) or 1.0
    rows = [[f"{s * 1e3:.3f}", f"{100 * s / before_total:.0f}%", calls, f"`{symbol}`", ops]
            for s, symbol, calls, ops in before[:5]]
    header = ["ms / inference", "share", "calls", "kernel", "ops"]
    lines += ["Previous paths, top five:", "", markdown_table(header, rows), ""]
    rows = [[f"{s * 1e3:.3f}", op] for s, op in ops[:8]]
    lines += ["onnxruntime, per operator type:", "", markdown_table(["ms / inference", "operator"], rows), ""]
    return lines


# --------------------------------------------------------------------------- 3. kernels


# (label, channels, size, out channels, kernel, stride, groups)
KERNEL_SHAPES = [
    ("depthwise 3x3, 56x56x128", 128, 56, 128, 3, 1, 128),
    ("depthwise 3x3, 14x14x512", 512, 14, 512, 3, 1, 512),
    ("depthwise 5x5, 28x28x240", 240, 28, 240, 5, 1, 240),
    ("depthwise 7x7, 56x56x96 (ConvNeXt)", 96, 56, 96, 7, 1, 96),
    ("depthwise 3x3 s2, 112x112x32", 32, 112, 32, 3, 2, 32),
    ("depthwise x2 multiplier, 28x28x64", 64, 28, 128, 3, 1, 64),
    ("grouped Cg=4, 28x28x128", 128, 28, 128, 3, 1, 32),
    ("grouped Cg=8, 28x28x64", 64, 28, 64, 3, 1, 8),
    ("grouped Cg=16, 28x28x128 (RegNet)", 128, 28, 128, 3, 1, 8),
    ("grouped Cg=48, 14x14x240", 240, 14, 240, 3, 1, 5),
    ("grouped 1x1 g4, 28x28x272 (ShuffleNet)", 272, 28, 272, 1, 1, 4),
    ("grouped 5x5 g2, 27x27 96->256 (AlexNet conv2)", 96, 27, 256, 5, 1, 2),
    ("grouped 3x3 g2, 13x13x384 (AlexNet conv4)", 384, 13, 384, 3, 1, 2),
    ("groups 1, 3x3, 32x32x16 (resnet20)", 16, 32, 16, 3, 1, 1),
    ("groups 1, 3x3, 16x16x32 (resnet20)", 32, 16, 32, 3, 1, 1),
    ("groups 1, 3x3, 8x8x64 (resnet20)", 64, 8, 64, 3, 1, 1),
    ("groups 1, 1x1, 112x112 16->96", 16, 112, 96, 1, 1, 1),
    ("groups 1, 3x3 s2, 224x224 3->16 (stem)", 3, 224, 16, 3, 2, 1),
    ("groups 1, 7x7 s2, 224x224 3->64 (ResNet stem)", 3, 224, 64, 7, 2, 1),
    ("groups 1, 3x3, 56x56x64 (ResNet-50)", 64, 56, 64, 3, 1, 1),
    ("groups 1, 3x3, 14x14x256 (ResNet-50)", 256, 14, 256, 3, 1, 1),
    ("groups 1, 3x3, 7x7x512 (ResNet-50)", 512, 7, 512, 3, 1, 1),
    ("groups 1, 1x1, 14x14 1024->256 (ResNet-50)", 1024, 14, 256, 1, 1, 1),
]
KERNEL_SETTINGS = ("none", "direct", "group_gemm", "microkernel")


def conv_relu_model(channels: int, size: int, out_channels: int, kernel: int, stride: int,
                    groups: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weight_shape = (out_channels, channels // groups, kernel, kernel)
    weight = (rng.standard_normal(weight_shape) * 0.1).astype(np.float32)
    bias = rng.standard_normal(out_channels).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[kernel, kernel], group=groups,
                              strides=[stride, stride], pads=[kernel // 2] * 4),
             helper.make_node("Relu", ["c"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    initializers = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")]
    graph = helper.make_graph(nodes, "conv", [x], [y], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def kernel_table(cache_dir: str, repeats: int) -> list[str]:
    rows = []
    for label, channels, size, out_channels, kernel, stride, groups in KERNEL_SHAPES:
        model = conv_relu_model(channels, size, out_channels, kernel, stride, groups)
        out_size = (size + 2 * (kernel // 2) - kernel) // stride + 1
        flops = 2 * out_size * out_size * out_channels * (channels // groups) * kernel * kernel
        attrs = {"strides": (stride, stride), "dilation": (1, 1), "padding": (kernel // 2,) * 4,
                 "groups": groups}
        weight_shape = (kernel, kernel, channels // groups, out_channels)
        geometry = ConvGeometry.of(attrs, (1, size, size, channels), weight_shape,
                                   (1, out_size, out_size, out_channels))
        cells, best = [], {}
        for setting in KERNEL_SETTINGS:
            lib, compiled = build_library(model, cache_dir, {"codegen.conv_kernel": setting})
            lib.set_num_threads(1)
            (func,) = [f for f in compiled.functions.values()
                       if isinstance(f, tir.PrimFunc) and "nn.conv2d" in f.attrs.get("op_names", ())]
            seconds = _kernel_seconds(lib, func, repeats)
            best[setting] = seconds
            cells.append(f"{seconds * 1e3:.3f} ms, {flops / seconds / 1e9:.0f} GF/s")
        rule = choose_kernel(geometry, use_blas=True, isa=target_isa())  # this machine's rule
        fastest = min(best, key=best.get)
        rows.append([label, *cells, f"{rule}{'' if rule == fastest else f' (fastest: {fastest})'}"])
    header = ["convolution (+bias+ReLU, batch 1)", "none: im2col+BLAS (groups 1) / loop nest", "direct",
              "group_gemm", "microkernel", "rule"]
    return [markdown_table(header, rows), ""]


# --------------------------------------------------------------------------- 4. build time


@contextlib.contextmanager
def previous_paths() -> Iterator[None]:
    """The lowering as it was before the kernel rules: no small-window expressions."""
    original = lower._Lowerer._combined_taps
    lower._Lowerer._combined_taps = lambda self, desc, out_vars: None
    try:
        yield
    finally:
        lower._Lowerer._combined_taps = original


def build_time(rounds: int) -> list[str]:
    import passinfra

    path = os.path.join(LIGHT_DIR, LIGHT_MODELS["DenseNet-121"])
    mod = from_onnx(random_light_weights(onnx.load(path)))

    def cold(previous: bool) -> Callable[[], float]:
        def run() -> float:
            with tempfile.TemporaryDirectory(prefix="raypass-bench-cache-") as cache:
                config = {"codegen.cache_dir": cache}
                if previous:
                    config["codegen.conv_kernel"] = "none"
                with PassContext(config=config), (previous_paths() if previous else contextlib.nullcontext()):
                    started = time.perf_counter()
                    passinfra.build(mod)
                    return time.perf_counter() - started
        return run

    samples = interleaved({"new": cold(False), "previous": cold(True)}, rounds, warmup=0)
    growth = ratio(samples["new"], samples["previous"])
    return [markdown_table(["DenseNet-121 cold build", "seconds: median [q1-q3]"],
                           [["kernel rules of this change", samples["new"].spread()],
                            ["previous paths", samples["previous"].spread()]]), "",
            f"- build time ratio new / previous: {growth.text()} (the issue allows at most 1.15: "
            f"{'met' if growth.median <= 1.15 else 'MISSED'})", ""]


# --------------------------------------------------------------------------- main


def models_main(argv: list[str] | None, module: str, doc: str, default_models: tuple[str, ...], output: Path,
                compare: Callable[[str, onnx.ModelProto, int], dict[str, Any]],
                render: Callable[[list[dict[str, Any]], str], str]) -> int:
    """The command line of a benchmark that builds some of these models in variants and
    compares them (``python -m MODULE [--models SUBSTRING,...] [--repeats R] [--output
    PATH]``): ``compare(label, model, repeats)`` a row per model, ``render(rows, command)``
    the markdown written to the output."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--models", default=",".join(default_models),
                        help="comma-separated substrings of bench.vs_onnxruntime's model names")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--output", type=Path, default=output)
    args = parser.parse_args(argv)
    models = all_models()
    rows = []
    for wanted in args.models.split(","):
        label = next((name for name in models if wanted in name), None)
        if label is None:
            parser.error(f"no model matches {wanted!r}; models: {', '.join(models)}")
        print(f"{label} ...", flush=True)
        rows.append(compare(label, models[label](), args.repeats))
    command = f"python -m {module} " + " ".join(argv if argv is not None else [])
    text = render(rows, command.strip())
    args.output.write_text(text)
    print(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.vs_onnxruntime", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--only", help="only the models whose label contains this")
    parser.add_argument("--profile", action="store_true", help="profile AlexNet and ShuffleNet per kernel")
    parser.add_argument("--kernels", action="store_true", help="measure the convolution kernels per shape")
    parser.add_argument("--build-time", type=int, default=0, metavar="ROUNDS",
                        help="cold DenseNet-121 builds, new against previous (ROUNDS each)")
    parser.add_argument("--no-latency", action="store_true", help="skip the latency comparison")
    parser.add_argument("--output", default=str(OUTPUT))
    args = parser.parse_args(argv)

    notes = machine_notes()
    lines = ["# Inference latency against onnxruntime (issue 18)", "",
             "Written by `python -m bench.vs_onnxruntime` (module docstring: what is measured and how).", ""]
    lines += [f"- {key}: {value}" for key, value in notes.items()]
    lines += [f"- CPUs this process may use: {available_cpus()} (our default threads; onnxruntime's "
              f"default is every core)", ""]
    with tempfile.TemporaryDirectory(prefix="raypass-bench-cache-") as cache_dir:
        if not args.no_latency:
            rows = []
            for label, make in all_models().items():
                if args.only and args.only.lower() not in label.lower():
                    continue
                print(f"{label} ...", flush=True)
                rows.append(compare(label, make(), args.repeats, cache_dir))
            lines += ["## Latency, ours / onnxruntime", "",
                      f"{args.repeats} interleaved rounds after a warm-up round; in each round every "
                      f"variant runs as a block of back-to-back calls (about {BLOCK_SECONDS * 1e3:.0f} ms, "
                      f"{MIN_BLOCK_CALLS}-{MAX_BLOCK_CALLS} calls) after a {IDLE_GAP_SECONDS * 1e3:.0f} ms "
                      "idle gap, and the block's median call is the round's value (the gap lets the "
                      "previous runtime's spinning threads park). Median ms [min-max] over the rounds; "
                      "ratio of medians [pessimistic quartile range]; max rel. diff: the largest |ours - "
                      "onnxruntime| over the output's largest magnitude.", ""]
            lines += render_latency(rows)
        if args.profile:
            lines += ["## Profiles, one thread", ""]
            for label in ("AlexNet", "ShuffleNet v1"):
                print(f"profile {label} ...", flush=True)
                model = random_light_weights(onnx.load(os.path.join(LIGHT_DIR, LIGHT_MODELS[label])))
                lines += render_profile(label, model, cache_dir)
        if args.kernels:
            print("kernels ...", flush=True)
            lines += ["## Convolution kernels per shape, one thread", ""]
            lines += kernel_table(cache_dir, max(args.repeats, 10))
        if args.build_time:
            print("build time ...", flush=True)
            lines += ["## Build time", ""]
            lines += build_time(args.build_time)
    Path(args.output).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

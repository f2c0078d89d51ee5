"""Code generation: build time and inference latency of compiled libraries.

For each model (the zoo transformer, a zoo ResNet and, when the onnx package ships its
light models, ResNet-50 and DenseNet-121 with random weights):

* build time: cold (empty compile cache), warm (same cache again: no compiler runs) and,
  with ``--ray``, cold on the Ray backend with 2 workers;
* inference latency (median): the compiled library, the reference interpreter and
  onnxruntime (1 thread, and its default thread count); the compiled output is checked
  against onnxruntime (rtol 1e-4).

Targets reported: compiled >= 20x faster than the interpreter, within 2x of onnxruntime,
warm build >= 10x faster than cold. Results go to bench/results_codegen.md.

    python -m bench.codegen [--ray] [--no-densenet] [--output PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

import passinfra
from bench.common import cpu_times, steal_percent
from bench.flops import contraction_flops, sgemm_ceiling
from passinfra.codegen.object_cache import compile_stats, reset_compile_stats
from passinfra.frontend import from_onnx, zoo
from passinfra.runtime.interpreter import evaluate
from passinfra.transform import PassContext

ROOT = Path(__file__).resolve().parent.parent

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
DENSENET = os.path.join(LIGHT_DIR, "light_densenet121.onnx")
RESNET50 = os.path.join(LIGHT_DIR, "light_resnet50.onnx")
CORES = os.cpu_count() or 1
ZOO_MODELS = {
    "zoo transformer (4 layers, hidden 256, seq 64)": "zoo:transformer?layers=4&hidden=256&seq=64",
    "zoo resnet20 (CIFAR, 32x32)": "zoo:resnet?depth=20",
}


def random_light_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """The light models keep only weight shapes (ConstantOfShape fills): make each a
    seeded random initializer, small enough to keep deep nets in float range."""
    rng = np.random.default_rng(seed)
    shapes = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    # batch-norm variances (input 4) must be positive: they go under a square root; the
    # models name them differently, so they are found by their consumer
    variances = {node.input[4] for node in model.graph.node
                 if node.op_type == "BatchNormalization" and len(node.input) > 4}
    nodes, initializers = [], list(model.graph.initializer)
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in shapes:
            shape = tuple(int(d) for d in shapes[node.input[0]])
            weight = (rng.standard_normal(shape) * 0.05).astype(np.float32)
            if node.output[0] in variances:
                weight = np.abs(weight) + np.float32(0.5)
            initializers.append(numpy_helper.from_array(weight, node.output[0]))
        else:
            nodes.append(node)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    del out.graph.initializer[:]
    out.graph.initializer.extend(initializers)
    return out


def model_inputs(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    """Random feeds for the graph inputs that are not initializers."""
    rng = np.random.default_rng(seed)
    initializers = {init.name for init in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = [d.dim_value or 1 for d in tensor.shape.dim]
        if tensor.elem_type == onnx.TensorProto.INT64:
            feeds[value.name] = rng.integers(0, 100, shape).astype(np.int64)
        else:
            feeds[value.name] = rng.random(shape, np.float32)
    return feeds


def median_seconds(run: Callable[[], object], repeat: int, budget: float = 20.0) -> float:
    """Median wall time of ``run`` over ``repeat`` calls (fewer if they exceed ``budget``)."""
    run()  # warm-up: page in the library, start thread pools
    times: list[float] = []
    deadline = time.perf_counter() + budget
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
        if time.perf_counter() > deadline:
            break
    return statistics.median(times)


def timed_build(mod, cache_dir: str, scheduler=None) -> tuple[object, float, int]:
    """(runtime.Module, seconds, compiler runs in this process)."""
    reset_compile_stats()
    with PassContext(config={"codegen.cache_dir": cache_dir}):
        start = time.perf_counter()
        compiled = passinfra.build(mod, scheduler=scheduler)
        seconds = time.perf_counter() - start
    return compiled, seconds, compile_stats()["compiles"]


def bench_model(label: str, model: onnx.ModelProto, ray_scheduler, repeat: int) -> dict:
    import onnxruntime as ort

    mod = from_onnx(model)
    feeds = model_inputs(model)
    args = list(feeds.values())
    row: dict = {"model": label, "gflop": contraction_flops(mod) / 1e9}
    with tempfile.TemporaryDirectory(prefix="raypass-bench-cache-") as cache:
        compiled, row["cold_s"], row["cold_compiles"] = timed_build(mod, os.path.join(cache, "local"))
        _, row["warm_s"], row["warm_compiles"] = timed_build(mod, os.path.join(cache, "local"))
        if ray_scheduler is not None:
            _, row["ray_s"], _ = timed_build(mod, os.path.join(cache, "ray"), ray_scheduler)
        # the same library with OpenBLAS on every core, the counterpart of onnxruntime's
        # default threads (a count, not 0 = "leave it": the thread count is process-wide,
        # and the one-thread library sets it to 1 on every call)
        every_core = {"codegen.cache_dir": os.path.join(cache, "threaded"), "codegen.blas_threads": CORES}
        with PassContext(config=every_core):
            threaded = passinfra.build(mod)

    def session(threads: int):
        options = ort.SessionOptions()
        options.log_severity_level = 3  # the light models' leftover shape initializers warn
        if threads:
            options.intra_op_num_threads = threads
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])

    ort_one, ort_default = session(1), session(0)
    expected = ort_one.run(None, feeds)[0]
    got = compiled(*args)
    got = got[0] if isinstance(got, tuple) else got
    row["max_abs_err"] = float(np.max(np.abs(np.asarray(got) - expected)))
    row["matches_ort"] = bool(np.allclose(got, expected, rtol=1e-4, atol=1e-4))
    row["compiled_s"] = median_seconds(lambda: compiled(*args), repeat)
    threaded_out = threaded(*args)
    threaded_out = threaded_out[0] if isinstance(threaded_out, tuple) else threaded_out
    row["threaded_matches"] = bool(np.allclose(threaded_out, expected, rtol=1e-4, atol=1e-4))
    row["threaded_s"] = median_seconds(lambda: threaded(*args), repeat)
    row["ort1_s"] = median_seconds(lambda: ort_one.run(None, feeds), repeat)
    row["ort_s"] = median_seconds(lambda: ort_default.run(None, feeds), repeat)
    row["interp_s"] = median_seconds(lambda: evaluate(mod, *args), max(2, repeat // 10), budget=60.0)
    return row


def _ceiling_text(ceiling: float | None) -> str:
    if ceiling is None:
        return "not measured (scipy-openblas32 is not installed)"
    return f"{ceiling:.0f} GFLOP/s, the best 1024x1024x1024 sgemm of OpenBLAS on one thread"


def render(rows: list[dict], with_ray: bool, ceiling: float | None = None) -> str:
    ms = lambda s: f"{s * 1e3:.2f}"  # noqa: E731
    head = ["model", "cold build (s)", "warm build (s)", "warm/cold speedup", "compiler runs cold/warm"]
    if with_ray:
        head.append("ray N=2 cold build (s)")
    lines = ["## Build time", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"], f"{r['cold_s']:.2f}", f"{r['warm_s']:.2f}", f"{r['cold_s'] / r['warm_s']:.1f}x "
                 f"({'meets' if r['cold_s'] >= 10 * r['warm_s'] else 'misses'} 10x)",
                 f"{r['cold_compiles']}/{r['warm_compiles']}"]
        if with_ray:
            cells.append(f"{r['ray_s']:.2f}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Inference latency (median, ms)", "",
              "| model | compiled | interpreter | onnxruntime 1 thread | onnxruntime default threads "
              "| vs interpreter (target >= 20x) | vs onnxruntime 1 thread (target <= 2x) "
              "| matches ort (rtol 1e-4) | onnxruntime 1 thread vs interpreter |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        speedup = r["interp_s"] / r["compiled_s"]
        ratio = r["compiled_s"] / r["ort1_s"]
        lines.append(
            f"| {r['model']} | {ms(r['compiled_s'])} | {ms(r['interp_s'])} | {ms(r['ort1_s'])} "
            f"| {ms(r['ort_s'])} "
            f"| {speedup:.1f}x ({'meets' if speedup >= 20 else 'misses'}) "
            f"| {ratio:.2f}x ({'meets' if ratio <= 2 else 'misses'}) "
            f"| {r['matches_ort']} (max abs err {r['max_abs_err']:.1e}) "
            f"| {r['interp_s'] / r['ort1_s']:.1f}x |"
        )
    lines += ["", f"## Every core: OpenBLAS on {CORES} threads (codegen.blas_threads={CORES}) "
              "vs onnxruntime's default threads (median, ms)", "",
              "The compiled library runs its GEMMs on one thread by default (a compile farm's cores are "
              "shared, and OpenBLAS's spinning threads slow down badly on a busy core); "
              "`codegen.blas_threads` gives it more.", "",
              "| model | compiled, BLAS on every core | onnxruntime default threads | ratio (target <= 2x) "
              "| matches ort (rtol 1e-4) |",
              "|---|---|---|---|---|"]
    for r in rows:
        ratio = r["threaded_s"] / r["ort_s"]
        lines.append(f"| {r['model']} | {ms(r['threaded_s'])} | {ms(r['ort_s'])} "
                     f"| {ratio:.2f}x ({'meets' if ratio <= 2 else 'misses'}) | {r['threaded_matches']} |")
    lines += ["", "## What the 20x target asks of one core", "",
              "Contraction work (conv2d, dense, matmul; 2 flops per multiply-add) over latency. "
              f"One core's ceiling: {_ceiling_text(ceiling)}.", "",
              "| model | GFLOP per inference | compiled GFLOP/s | onnxruntime 1 thread GFLOP/s "
              "| 20x the interpreter needs (ms) | ... that is GFLOP/s | x the sgemm ceiling |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        needed_s = r["interp_s"] / 20
        needed_rate = r["gflop"] / needed_s
        times_ceiling = f"{needed_rate / ceiling:.2f}x" if ceiling else "-"
        rates = f"{r['gflop'] / r['compiled_s']:.1f} | {r['gflop'] / r['ort1_s']:.1f}"
        lines.append(f"| {r['model']} | {r['gflop']:.3f} | {rates} | {ms(needed_s)} | {needed_rate:.0f} "
                     f"| {times_ceiling} |")
    return "\n".join(lines)


def start_ray_scheduler():
    import ray

    from passinfra.frontend.zoo.ir_models import mlp
    from scheduler import Scheduler
    from scheduler.pool.ray_runtime import local_worker_env

    ray.init(address="local", num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             runtime_env=local_worker_env(), log_to_driver=False, logging_level="ERROR")
    scheduler = Scheduler(backend="ray", num_workers=2, cpus_per_worker=0.5)
    # start the workers (and import passinfra in them) outside the measured builds
    with tempfile.TemporaryDirectory() as cache:
        timed_build(mlp(), cache, scheduler)
    return scheduler


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.codegen", description=__doc__.splitlines()[0])
    parser.add_argument("--output", default=str(ROOT / "bench" / "results_codegen.md"))
    parser.add_argument("--ray", action="store_true", help="also build on Ray with 2 workers")
    parser.add_argument("--no-densenet", action="store_true", help="skip the two 224x224 light models")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    models = [(label, zoo.zoo_spec(spec)) for label, spec in ZOO_MODELS.items()]
    if os.path.exists(RESNET50) and not args.no_densenet:
        models.append(("ResNet-50 (light, random weights, 224x224)",
                       random_light_weights(onnx.load(RESNET50))))
    if os.path.exists(DENSENET) and not args.no_densenet:
        models.append(("DenseNet-121 (light, random weights, 224x224)",
                       random_light_weights(onnx.load(DENSENET))))
    scheduler = start_ray_scheduler() if args.ray else None
    cpu_at_start = cpu_times()
    rows = []
    for label, model in models:
        print(f"benchmarking {label} ...", flush=True)
        rows.append(bench_model(label, model, scheduler, args.repeat))
    if scheduler is not None:
        scheduler.shutdown()
    table = render(rows, args.ray, sgemm_ceiling())
    print(table)
    note = (f"Machine: {os.cpu_count()} CPUs (shared with other jobs while measured; CPU time taken by "
            f"the hypervisor during the run: {steal_percent(cpu_at_start)}); the compiled "
            "libraries call OpenBLAS (scipy-openblas32) with 1 thread for dense/matmul/conv2d. Warm build: "
            "the same module built again into the same cache directory, served by the whole-build cache "
            "(passinfra.codegen.build_cache); bench/cache_bench.py also measures it with that cache off.")
    Path(args.output).write_text("# Code generation: build time and inference latency\n\n"
                                 f"{note}\n\n{table}\n")


if __name__ == "__main__":
    main()

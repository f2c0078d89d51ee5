"""Items 3-4: anchors. Apache TVM (when importable) and onnxruntime.

Inference latency of our compiled library against onnxruntime's CPU session (and TVM's
Relax VM) on the same ONNX models and inputs, interleaved (each run is a burst of calls;
its mean per call is one sample). Compile time against TVM: cold builds (ONNX import +
build), ours and TVM's alternating round by round. TVM is an optional extra; without
``import tvm`` the section says it was skipped.
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any

import numpy as np

from bench.common import MIN_REPEATS, Sample, fresh_cache_dir, interleaved, markdown_table, ratio, verdict
from bench.tvm_anchor import tvm_build, tvm_runner, tvm_version

TARGET_INFERENCE = 2.0  # ours / onnxruntime
TARGET_COMPILE = 1.0  # our compile time / TVM's
CALLS_PER_SAMPLE = 20


def _models(quick: bool) -> list[tuple[str, Any]]:
    import onnx

    from bench.scaling import densenet_path
    from passinfra.frontend import zoo

    chosen = [
        ("zoo transformer (24 layers)", zoo.transformer(layers=24)),
        ("zoo resnet (depth 20)", zoo.resnet(depth=20)),
    ]
    path = densenet_path()
    if path is not None and not quick:
        chosen.append(("DenseNet-121 (ONNX light)", onnx.load(path)))
    return chosen


def _inputs(model: Any, rng: np.random.Generator) -> list[np.ndarray]:
    from onnx import helper

    initializers = {init.name for init in model.graph.initializer}
    arrays = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = [d.dim_value or 1 for d in tensor.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        if np.issubdtype(dtype, np.integer):
            arrays.append(rng.integers(0, 16, shape).astype(dtype))
        else:
            arrays.append(rng.standard_normal(shape).astype(dtype))
    return arrays


def _burst(call: Any) -> float:
    started = time.perf_counter()
    for _ in range(CALLS_PER_SAMPLE):
        call()
    return (time.perf_counter() - started) / CALLS_PER_SAMPLE


def tvm_status() -> str:
    version = tvm_version()
    if version is None:
        return (
            "skipped: `import tvm` failed. apache-tvm is an optional extra, not a dependency of raypass; "
            "install it (`pip install -e '.[tvm]'`) to compare compile time and latency."
        )
    return f"apache-tvm {version}"


def _our_cold_build(model: Any) -> tuple[Any, float]:
    """(runtime.Module, seconds for import + build) into an empty cache directory."""
    import passinfra
    from passinfra.frontend import from_onnx
    from passinfra.transform import PassContext

    with fresh_cache_dir() as cache, PassContext(config={"codegen.cache_dir": cache}):
        started = time.perf_counter()
        lib = passinfra.build(from_onnx(model), opt_level=3)
        return lib, time.perf_counter() - started


def _build_rounds(label: str) -> int:
    # DenseNet builds take ~15 s here and over two minutes in TVM: two rounds, said in the table
    return 2 if label.startswith("DenseNet") else MIN_REPEATS


def _compare_builds(model: Any, rounds: int, with_tvm: bool) -> tuple[dict[str, Sample], Any, Any]:
    """Interleaved cold builds, ours and TVM's; the last library/executable of each."""
    built: dict[str, Any] = {}
    samples = {"raypass": Sample("raypass")}
    if with_tvm:
        samples["tvm"] = Sample("tvm")
    for _ in range(rounds):
        built["raypass"], seconds = _our_cold_build(model)
        samples["raypass"].values.append(seconds)
        if with_tvm:
            built["tvm"], seconds = tvm_build(model)
            samples["tvm"].values.append(seconds)
    return samples, built["raypass"], built.get("tvm")


def _max_error(got: np.ndarray, expected: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(got).reshape(expected.shape) - expected)))


def _row(label: str, a: str, b: str, value: Any, target: float) -> list[str]:
    return [f"{label}: {a} / {b}", f"{value.median:.2f}x", f"{value.low:.2f}-{value.high:.2f}",
            f"<= {target:g}x", verdict(value.median, target, False)]


def run(quick: bool) -> tuple[str, list[list[str]]]:
    import onnxruntime as ort

    with_tvm = tvm_version() is not None
    rng = np.random.default_rng(0)
    rows, tvm_rows, headline = [], [], []
    for label, model in _models(quick):
        arrays = _inputs(model, rng)
        rounds = _build_rounds(label)
        builds, lib, executable = _compare_builds(model, rounds, with_tvm)
        session = ort.InferenceSession(model.SerializeToString(), ort.SessionOptions(),
                                       providers=["CPUExecutionProvider"])
        feed = {i.name: a for i, a in zip(session.get_inputs(), arrays)}
        theirs = session.run(None, feed)[0]
        max_error = _max_error(lib(*arrays), theirs)
        one_thread = ort.SessionOptions()
        one_thread.intra_op_num_threads = one_thread.inter_op_num_threads = 1
        session_1t = ort.InferenceSession(model.SerializeToString(), one_thread,
                                          providers=["CPUExecutionProvider"])
        variants = {
            "raypass": partial(_burst, partial(lib, *arrays)),
            "onnxruntime": partial(_burst, partial(session.run, None, feed)),
            # our library runs on one core (BLAS with one thread): the same-resources view
            "onnxruntime 1 thread": partial(_burst, partial(session_1t.run, None, feed)),
        }
        if executable is not None:
            tvm_call, tvm_output = tvm_runner(executable, arrays)
            variants["tvm"] = partial(_burst, tvm_call)
        samples = interleaved(variants, MIN_REPEATS)
        slowdown = ratio(samples["raypass"], samples["onnxruntime"])
        per_core = ratio(samples["raypass"], samples["onnxruntime 1 thread"])
        rows.append([label, builds["raypass"].spread(), f"{samples['raypass'].median * 1e3:.3f}",
                     f"{samples['onnxruntime'].median * 1e3:.3f}", slowdown.text(),
                     verdict(slowdown.median, TARGET_INFERENCE, False),
                     f"{samples['onnxruntime 1 thread'].median * 1e3:.3f}", per_core.text(),
                     f"{max_error:.1e}"])
        headline.append(_row(f"inference {label}", "raypass", "onnxruntime", slowdown, TARGET_INFERENCE))
        headline.append(_row(f"inference {label}, same cores", "raypass", "onnxruntime 1 thread", per_core,
                             TARGET_INFERENCE))
        if executable is not None:
            compile_ratio = ratio(builds["raypass"], builds["tvm"])
            latency_ratio = ratio(samples["raypass"], samples["tvm"])
            tvm_rows.append([label, str(rounds), builds["raypass"].spread(), builds["tvm"].spread(),
                             compile_ratio.text(), verdict(compile_ratio.median, TARGET_COMPILE, False),
                             f"{samples['tvm'].median * 1e3:.3f}", latency_ratio.text(),
                             f"{_max_error(tvm_output, theirs):.1e}"])
            headline.append(_row(f"compile time {label}", "raypass", "TVM", compile_ratio, TARGET_COMPILE))
    status = tvm_status()
    if not with_tvm:
        target = f"<= {TARGET_COMPILE:g}x TVM"
        headline.append(["compile time vs Apache TVM", "n/a", "n/a", target, "skipped"])
    threads = os.environ.get("OMP_NUM_THREADS", "default")
    body = (
        f"Inference latency, {MIN_REPEATS} interleaved samples of {CALLS_PER_SAMPLE} calls each (median of "
        f"the per-call means); onnxruntime CPUExecutionProvider with default threads (OMP_NUM_THREADS="
        f"{threads}), and onnxruntime on one thread, the resources our library uses (its BLAS calls "
        "run on one thread: `codegen.blas_threads`); our library built in-process at opt_level=3 from an "
        "empty cache (build = ONNX import "
        "+ build, median [IQR] of the cold builds).\n\n"
        + markdown_table(
            ["model", "our cold build s", "raypass ms", "onnxruntime ms", "raypass / onnxruntime",
             f"target <= {TARGET_INFERENCE:g}x", "onnxruntime 1 thread ms", "raypass / onnxruntime 1 thread",
             "max abs difference"],
            rows,
        )
        + f"\n\n### Apache TVM ({status})\n\n"
    )
    if with_tvm:
        body += (
            "TVM's Relax flow out of the box, no tuning: `relax.frontend.onnx.from_onnx` (weights as "
            "constants), FoldConstant, DecomposeOpsForInference, `relax.build(target=\"llvm\")`, Relax VM "
            "on the CPU (bench/tvm_anchor.py). Compile time = import + build, cold, interleaved with ours "
            "round by round; latency interleaved with the runs above; max abs difference against "
            "onnxruntime.\n\n"
            + markdown_table(
                ["model", "build rounds", "raypass build s", "TVM build s", "raypass / TVM compile time",
                 f"target <= {TARGET_COMPILE:g}x", "TVM ms", "raypass / TVM latency",
                 "TVM max abs difference"],
                tvm_rows,
            )
        )
    return body, headline

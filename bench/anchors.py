"""Items 3-4: anchors. Apache TVM (when importable) and onnxruntime.

Inference latency of our compiled library against onnxruntime's CPU session on the same
ONNX models and inputs, interleaved (each run is a burst of calls; its mean per call is
one sample). TVM: its compile time and latency would be compared here, but only when
``import tvm`` works in this environment; otherwise the section says why it was skipped.
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any

import numpy as np

from bench.common import MIN_REPEATS, interleaved, markdown_table, ratio, verdict

TARGET_INFERENCE = 2.0  # ours / onnxruntime
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
    try:
        import tvm  # noqa: F401
    except Exception as err:  # any import failure means: no TVM here
        return (
            f"skipped: `import tvm` failed ({type(err).__name__}). apache-tvm is an optional extra, "
            "not a dependency of raypass; install it to compare compile time and latency."
        )
    return "importable"


def run(quick: bool) -> tuple[str, list[list[str]]]:
    import onnxruntime as ort

    import passinfra
    from passinfra.frontend import from_onnx

    rng = np.random.default_rng(0)
    rows, headline = [], []
    for label, model in _models(quick):
        arrays = _inputs(model, rng)
        started = time.perf_counter()
        lib = passinfra.build(from_onnx(model), opt_level=3)
        build_seconds = time.perf_counter() - started
        options = ort.SessionOptions()
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        feed = {i.name: a for i, a in zip(session.get_inputs(), arrays)}
        ours = np.asarray(lib(*arrays))
        theirs = session.run(None, feed)[0]
        max_error = float(np.max(np.abs(ours.reshape(theirs.shape) - theirs)))
        samples = interleaved(
            {
                "raypass": partial(_burst, partial(lib, *arrays)),
                "onnxruntime": partial(_burst, partial(session.run, None, feed)),
            },
            MIN_REPEATS,
        )
        slowdown = ratio(samples["raypass"], samples["onnxruntime"])
        rows.append(
            [
                label,
                f"{build_seconds:.2f}",
                f"{samples['raypass'].median * 1e3:.3f}",
                f"{samples['onnxruntime'].median * 1e3:.3f}",
                slowdown.text(),
                verdict(slowdown.median, TARGET_INFERENCE, False),
                f"{max_error:.1e}",
            ]
        )
        headline.append(
            [
                f"inference {label}: raypass / onnxruntime",
                f"{slowdown.median:.2f}x",
                f"{slowdown.low:.2f}-{slowdown.high:.2f}",
                f"<= {TARGET_INFERENCE:g}x",
                verdict(slowdown.median, TARGET_INFERENCE, False),
            ]
        )
    status = tvm_status()
    headline.append(["compile time vs Apache TVM", "n/a", "n/a", "<= 1x TVM", status.split(":")[0]])
    threads = os.environ.get("OMP_NUM_THREADS", "default")
    body = (
        f"Inference latency, {MIN_REPEATS} interleaved samples of {CALLS_PER_SAMPLE} calls each (median of "
        f"the per-call means); onnxruntime CPUExecutionProvider with default threads (OMP_NUM_THREADS="
        f"{threads}); our library built in-process at opt_level=3 (build time includes a cold or warm "
        "cache, whatever this machine's default cache holds).\n\n"
        + markdown_table(
            [
                "model",
                "our build s",
                "raypass ms",
                "onnxruntime ms",
                "raypass / onnxruntime",
                f"target <= {TARGET_INFERENCE:g}x",
                "max abs difference",
            ],
            rows,
        )
        + f"\n\nApache TVM: {status}"
    )
    return body, headline

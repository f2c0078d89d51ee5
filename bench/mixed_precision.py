"""Weights stored in 16 bits (ToMixedPrecision, config ``codegen.weight_dtype``): what it
costs in accuracy and latency, and what it saves in the weights file.

Each model is built three times from one IRModule, with ``codegen.weight_dtype`` float32
(the reference), bfloat16 and float16, and each library is exported so the weights file
can be measured. The 16-bit libraries run on the same inputs as the float32 one; their
outputs are compared with its outputs:

* ``max err`` = max |out - ref| / max |ref| and ``mean err`` = mean |out - ref| / mean |ref|
  (errors relative to the output's scale: an element-wise relative error is meaningless
  where the reference crosses zero);
* ``top-1`` = the share of positions whose argmax over the last axis (the class or the
  next token) is unchanged.

Latency: the three libraries run interleaved (one call of each per round), on one thread
of the library's pool and of OpenBLAS (``codegen.num_threads=1``, the default BLAS
threads), so the comparison is the kernels' and not the scheduling of a shared machine;
median and interquartile range.

Models: the zoo transformer (``zoo:transformer?layers=2``, the issue's model, and a wider
one), the zoo resnet20, and the onnx package's light ResNet-50 with random weights at
224x224 (``bench/codegen.py``; ``--no-resnet50`` skips it).

Writes bench/results_mixed_precision.md.

    python -m bench.mixed_precision [--repeats N] [--no-resnet50] [--output PATH]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

import passinfra
from bench.codegen import RESNET50, model_inputs, random_light_weights
from bench.common import Sample, cpu_times, interleaved, machine_notes, markdown_table, steal_percent
from passinfra.codegen.transform.widen_gemm_operands import MIN_PANEL, PANEL_ELEMENTS
from passinfra.frontend import from_onnx
from passinfra.frontend.zoo import zoo_spec
from passinfra.runtime.module import WEIGHTS_SUFFIX
from passinfra.transform import PassContext
from passinfra.transform.builtin.to_mixed_precision import MIN_WEIGHT_ELEMENTS

ROOT = Path(__file__).resolve().parent.parent

DTYPES = ("float32", "bfloat16", "float16")
OUTPUT = ROOT / "bench" / "results_mixed_precision.md"


def models(with_resnet50: bool) -> list[tuple[str, onnx.ModelProto]]:
    chosen = [
        ("zoo:transformer?layers=2 (hidden 64, seq 16, vocab 128)", zoo_spec("zoo:transformer?layers=2")),
        ("zoo:transformer?layers=4&hidden=256&seq=64&vocab=2048",
         zoo_spec("zoo:transformer?layers=4&hidden=256&seq=64&vocab=2048")),
        ("zoo:resnet?depth=20 (32x32)", zoo_spec("zoo:resnet?depth=20")),
    ]
    if with_resnet50:
        resnet50 = random_light_weights(onnx.load(RESNET50))
        chosen.append(("ResNet-50 (light, random weights, 224x224)", resnet50))
    return chosen


def errors(out: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    diff = np.abs(out - ref)
    return {
        "max_err": float(diff.max() / np.abs(ref).max()),
        "mean_err": float(diff.mean() / np.abs(ref).mean()),
        "top1": float(np.mean(out.argmax(axis=-1) == ref.argmax(axis=-1))),
    }


def bench_model(label: str, model: onnx.ModelProto, repeats: int, workdir: str) -> dict[str, Any]:
    mod = from_onnx(model)
    args = list(model_inputs(model).values())
    libs, row = {}, {"model": label, "dtypes": {}}
    for dtype in DTYPES:
        config = {"codegen.weight_dtype": dtype, "codegen.num_threads": 1,
                  "codegen.cache_dir": os.path.join(workdir, "cache")}
        started = time.perf_counter()
        with PassContext(opt_level=3, config=config):
            libs[dtype] = passinfra.build(mod)
        path = os.path.join(workdir, f"{dtype}.so")
        libs[dtype].export_library(path)
        row["dtypes"][dtype] = {"build_s": time.perf_counter() - started,
                                "weights_bytes": os.path.getsize(path + WEIGHTS_SUFFIX),
                                "workspace_bytes": libs[dtype].metadata.get("workspace_bytes")}
    outputs = {dtype: np.asarray(lib(*args)) for dtype, lib in libs.items()}
    for dtype in DTYPES[1:]:
        row["dtypes"][dtype].update(errors(outputs[dtype], outputs["float32"]))
    def caller(lib: Any):
        return lambda: (lib(*args), None)[1]  # timed as a whole call

    samples = interleaved({dtype: caller(lib) for dtype, lib in libs.items()}, repeats)
    for dtype, sample in samples.items():
        row["dtypes"][dtype]["latency"] = sample
    return row


def _ms(sample: Sample) -> str:
    return f"{sample.median * 1e3:.2f} ms [{sample.q1 * 1e3:.2f}-{sample.q3 * 1e3:.2f}]"


def render(rows: list[dict[str, Any]], notes: dict[str, str], repeats: int) -> str:
    header = ["model", "weights", "weights file", "vs float32", "max err", "mean err", "top-1 same",
              "latency (1 thread)", "vs float32"]
    table = []
    for row in rows:
        base = row["dtypes"]["float32"]
        for dtype in DTYPES:
            item = row["dtypes"][dtype]
            size = item["weights_bytes"]
            is_base = dtype == "float32"
            table.append([
                row["model"] if is_base else "",
                dtype,
                f"{size / 2**20:.2f} MiB",
                "-" if is_base else f"{size / base['weights_bytes']:.3f}x",
                "-" if is_base else f"{item['max_err']:.2e}",
                "-" if is_base else f"{item['mean_err']:.2e}",
                "-" if is_base else f"{100 * item['top1']:.1f}%",
                _ms(item["latency"]),
                "-" if is_base else f"{item['latency'].median / base['latency'].median:.2f}x",
            ])
    workspace_same = all(row["dtypes"][d]["workspace_bytes"] == row["dtypes"]["float32"]["workspace_bytes"]
                         for row in rows for d in DTYPES)
    lines = [
        "# Weights in 16 bits: accuracy, weights file, latency (bench/mixed_precision.py)",
        "",
        "Generated by `python -m bench.mixed_precision`; every number below is measured in this run.",
        "",
        "`--config codegen.weight_dtype=bfloat16|float16` stores each dense/matmul/conv weight and",
        f"embedding table of at least {MIN_WEIGHT_ELEMENTS} elements in 16 bits (the ToMixedPrecision",
        "pass); the kernels widen it exactly and compute in float32, so the only error is the",
        "rounding of each weight. Errors are of the outputs against the float32 library's on the same",
        "inputs: max err = max|out - ref| / max|ref|, mean err = mean|out - ref| / mean|ref|;",
        "top-1 same = positions whose argmax over the last axis is unchanged.",
        f"Latency: median [interquartile range] of {repeats} interleaved calls, one thread.",
        "",
        markdown_table(header, table),
        "",
        f"The planned workspace is the same in all three builds of every model: {workspace_same} "
        "(no float32 copy of a large weight is made at run time: a GEMM widens its 16-bit weight "
        f"one panel of {PANEL_ELEMENTS * 4 // 1024} KiB (or {MIN_PANEL} rows or columns) at a time; "
        f"a weight of at most {PANEL_ELEMENTS * 4 // 1024} KiB in float32 is widened once per call "
        "into a kernel scratch buffer of its size).",
        "",
        "Why float16 runs slower than bfloat16: a bfloat16 weight widens with one 16-bit shift, "
        "which the C compiler vectorizes; a float16 weight goes through the scalar, branching "
        "conversion of the C preamble (`rp_f16_load`, which also handles subnormals, inf and NaN). "
        "Latency in 16 bits also pays for re-reading the other GEMM operand once per widened panel.",
        "",
        "Machine: " + "; ".join(f"{key}: {value}" for key, value in notes.items()),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.mixed_precision", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--no-resnet50", action="store_true", help="skip the 224x224 light ResNet-50")
    parser.add_argument("--output", default=str(OUTPUT))
    args = parser.parse_args(argv)
    since = cpu_times()
    rows = []
    with tempfile.TemporaryDirectory(prefix="raypass-bench-mixed-") as workdir:
        for label, model in models(not args.no_resnet50):
            print(f"[mixed_precision] {label}", flush=True)
            rows.append(bench_model(label, model, args.repeats, os.path.join(workdir, str(len(rows)))))
    notes = machine_notes()
    notes["steal during the run"] = steal_percent(since)
    text = render(rows, notes, args.repeats)
    Path(args.output).write_text(text)
    print(text)


if __name__ == "__main__":
    main()

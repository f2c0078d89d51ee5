"""Dynamic shapes (issue 31): one library for every size, against libraries compiled for
one exact size and against onnxruntime.

1. **Latency.** A GPT-style decoder with a KV cache (:func:`passinfra.frontend.zoo.
   dynamic_models.gpt_decoder`, bench size) at batch 1 and seq in {1, 16, 128, 512}
   with an empty past, and a decode step (seq 1 after a past of 127); the dynamic CNN at
   batch {1, 8}. Per size: the dynamic library (compiled once, every size), a static
   library compiled for exactly that size (``from_onnx(model, shapes=...)``) and
   onnxruntime (default session options and threads), one call of each per round,
   interleaved; medians. Outputs are checked against onnxruntime. Next to them, the
   specialized library: the dynamic one that also holds static kernels for the sizes of
   the table (``codegen.specialize``: batch 1 with seq 1, 16, 128, 512, the past left
   symbolic; the CNN's batch 1, 8), one library too.
2. **Build.** Whole ``raypass compile`` processes (start-up included), each with a fresh
   object cache, interleaved: the dynamic model once, and with the decoder's 4
   specializations on 2 workers (a private Ray pool, its start-up included, and the local
   backend), against one static size (seq 128) on the local backend.

Targets (the issue): dynamic/static <= 1.15 at every size and geometric mean <= 1.08;
dynamic/onnxruntime geometric mean <= 1.0 and the decode step <= 1.0; build <= 1.3x;
with 4 specializations on a 2-worker pool <= 2x.

    python -m bench.dynamic_shapes [--repeats N] [--build-rounds N] [--output PATH]
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bench.common import (
    HEADLINE_TABLE_HEADER,
    Sample,
    interleaved,
    machine_notes,
    markdown_table,
    ratio,
    verdict,
)
from bench.vs_onnxruntime import block, block_calls
from passinfra.build import build
from passinfra.codegen.passes.specialize_kernels import SPECIALIZE_CONFIG
from passinfra.frontend import from_onnx
from passinfra.frontend.zoo import dynamic_models as dm
from passinfra.transform import PassContext

ROOT = Path(__file__).resolve().parent.parent
# the decoder at bench size: 4 layers of width 256 (4 heads of 64), a vocabulary of 1000
GPT = {"layers": 4, "hidden": 256, "heads": 4, "vocab": 1000, "max_positions": 1024}
SEQS = (1, 16, 128, 512)
DECODE_PAST = 127
CNN_BATCHES = (1, 8)
# the specialized libraries' sizes: every size the table runs (the decode step is seq 1)
SPECIALIZE = {"decoder": tuple({"batch": 1, "seq": s} for s in SEQS),
              "cnn": tuple({"batch": b} for b in CNN_BATCHES)}


def _gpt_feed(seq: int, past: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    heads, head_dim = GPT["heads"], GPT["hidden"] // GPT["heads"]
    feed = {"input_ids": rng.integers(0, GPT["vocab"], (1, seq)).astype(np.int64),
            "attention_mask": np.ones((1, past + seq), np.int64)}
    for layer in range(GPT["layers"]):
        for kind in ("key", "value"):
            feed[f"past_key_values.{layer}.{kind}"] = rng.standard_normal((1, heads, past, head_dim)).astype(
                np.float32)
    return feed


def _cnn_feed(batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"input": rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)}


def _runner(lib: Any) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        result = lib(*(feed[name] for name in lib.input_names))
        return list(result) if isinstance(result, tuple) else [result]

    return run


def _ort(model: onnx.ModelProto) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return lambda feed: session.run(None, feed)


def _call(run: Callable[[dict[str, np.ndarray]], Any], feed: dict[str, np.ndarray]) -> Callable[[], None]:
    def call() -> None:  # timed as a whole call
        run(feed)

    return call


def _shapes(feed: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    return {name: array.shape for name, array in feed.items()}


def latency(repeats: int) -> list[dict[str, Any]]:
    """One row per size: medians of the dynamic, static and onnxruntime calls."""
    rng = np.random.default_rng(0)
    rows = []
    decoder_feeds = [(f"seq {s}", _gpt_feed(s, 0, rng)) for s in SEQS]
    decoder_feeds.append((f"decode (past {DECODE_PAST})", _gpt_feed(1, DECODE_PAST, rng)))
    cases: list[tuple[str, onnx.ModelProto, list[tuple[str, dict[str, np.ndarray]]]]] = [
        ("decoder", dm.gpt_decoder(**GPT), decoder_feeds),
        ("cnn", dm.cnn(), [(f"batch {b}", _cnn_feed(b, rng)) for b in CNN_BATCHES]),
    ]
    for model_name, model, feeds in cases:
        dynamic_lib = build(from_onnx(model))
        dynamic = _runner(dynamic_lib)
        with PassContext(config={SPECIALIZE_CONFIG: SPECIALIZE[model_name]}):
            specialized = _runner(build(from_onnx(model)))
        onnxruntime = _ort(model)
        for size_name, feed in feeds:
            static_lib = build(from_onnx(model, shapes=_shapes(feed)))
            static = _runner(static_lib)
            expected = onnxruntime(feed)
            for got in (dynamic(feed), static(feed), specialized(feed)):
                for g, e in zip(got, expected):
                    np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-3)
            runs = {"dynamic": dynamic, "specialized": specialized, "static": static,
                    "onnxruntime": onnxruntime}
            # blocks of back-to-back calls after an idle gap (bench.vs_onnxruntime: a single
            # call right after onnxruntime's lost a core to its spinning pool threads)
            calls = {name: _call(run, feed) for name, run in runs.items()}
            blocks = {name: block(call, block_calls(call)) for name, call in calls.items()}
            samples = interleaved(blocks, repeats)
            # the workspace planned once for every size, at these sizes, against the plan of a
            # library compiled for exactly them
            sizes = _sizes_of(dynamic_lib, feed)
            memory = dynamic_lib.workspace_bytes(sizes) / max(static_lib.workspace_bytes(), 1)
            rows.append({"model": model_name, "size": size_name, "memory": memory, **samples})
            print(f"{model_name} {size_name}: " + ", ".join(
                f"{name} {samples[name].median * 1e3:.3f} ms" for name in samples), flush=True)
    return rows


def _sizes_of(lib: Any, feed: dict[str, np.ndarray]) -> dict[str, int]:
    """The sizes of the library's symbolic dimensions in ``feed`` (each read from an input
    that has the dimension whole)."""
    sizes: dict[str, int] = {}
    for name, ty in zip(lib.input_names, lib._symbolic.input_types):
        for axis, dim in enumerate(ty.shape):
            if hasattr(dim, "name"):
                sizes.setdefault(dim.name, feed[name].shape[axis])
    return sizes


def _compile_seconds(model_path: Path, shapes: dict[str, tuple[int, ...]] | None,
                     options: tuple[str, ...] = ("--backend", "local")) -> float:
    """One whole ``raypass compile`` process with a fresh object cache (wall seconds)."""
    with tempfile.TemporaryDirectory(prefix="raypass-dyn-bench-") as tmp:
        command = [sys.executable, "-m", "raypass_cli.main", "compile", str(model_path), "-o",
                   os.path.join(tmp, "m.so"), *options]
        for name, shape in (shapes or {}).items():
            command += ["--shapes", f"{name}={','.join(map(str, shape))}"]
        env = {**os.environ, "XDG_CACHE_HOME": tmp}
        started = time.perf_counter()
        subprocess.run(command, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
        return time.perf_counter() - started


def build_time(rounds: int) -> dict[str, Sample]:
    with tempfile.TemporaryDirectory(prefix="raypass-dyn-model-") as tmp:
        path = Path(tmp) / "gpt.onnx"
        onnx.save(dm.gpt_decoder(**GPT), path)
        shapes = _shapes(_gpt_feed(128, 0, np.random.default_rng(0)))
        specialize = tuple(f"--specialize=batch=1,seq={s}" for s in SEQS)
        return interleaved({
            "dynamic": lambda: _compile_seconds(path, None),
            SPECIALIZED_RAY: lambda: _compile_seconds(path, None, ("--backend", "ray", "--workers", "2",
                                                                   *specialize)),
            SPECIALIZED_LOCAL: lambda: _compile_seconds(path, None, ("--backend", "local", *specialize)),
            "static (seq 128)": lambda: _compile_seconds(path, shapes),
            STATIC_RAY: lambda: _compile_seconds(path, shapes, ("--backend", "ray", "--workers", "2")),
        }, rounds)


SPECIALIZED_RAY = "dynamic + 4 specializations, 2-worker Ray pool"
SPECIALIZED_LOCAL = "dynamic + 4 specializations, local"
STATIC_RAY = "static (seq 128), 2-worker Ray pool"


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def report(rows: list[dict[str, Any]], builds: dict[str, Sample], repeats: int, rounds: int) -> str:
    table = []
    vs_static, vs_ort, special_static, special_ort = [], [], [], []
    for row in rows:
        dyn_static = ratio(row["dynamic"], row["static"])
        dyn_ort = ratio(row["dynamic"], row["onnxruntime"])
        spec_static = ratio(row["specialized"], row["static"])
        vs_static.append(dyn_static.median)
        vs_ort.append(dyn_ort.median)
        special_static.append(spec_static.median)
        special_ort.append(ratio(row["specialized"], row["onnxruntime"]).median)
        table.append([row["model"], row["size"], f"{row['dynamic'].median * 1e3:.3f}",
                      f"{row['specialized'].median * 1e3:.3f}",
                      f"{row['static'].median * 1e3:.3f}", f"{row['onnxruntime'].median * 1e3:.3f}",
                      f"{dyn_static.median:.3f} {verdict(dyn_static.median, 1.15, False)}",
                      f"{spec_static.median:.3f}", f"{dyn_ort.median:.3f}", f"{row['memory']:.2f}"])
    decode = [r for r in rows if r["size"].startswith("decode")][0]
    decode_ort = ratio(decode["dynamic"], decode["onnxruntime"])
    decode_special_ort = ratio(decode["specialized"], decode["onnxruntime"])
    build_ratio = ratio(builds["dynamic"], builds["static (seq 128)"])
    special_ray = ratio(builds[SPECIALIZED_RAY], builds[STATIC_RAY])
    special_local = ratio(builds[SPECIALIZED_LOCAL], builds["static (seq 128)"])
    notes = machine_notes()
    lines = [
        "# Dynamic shapes: one library for every size (issue 31)",
        "",
        f"Generated by `python -m bench.dynamic_shapes --repeats {repeats} --build-rounds {rounds}`; "
        + ", ".join(f"{k} {v}" for k, v in notes.items()) + ".",
        "",
        f"Decoder: `gpt_decoder({', '.join(f'{k}={v}' for k, v in GPT.items())})`, batch 1, past 0 unless "
        "said; CNN: `cnn()` at 3x32x32. Latency (ms): per round each variant runs a block of back-to-back "
        "calls after an idle gap (as `bench.vs_onnxruntime`), the block's median call; medians over the "
        "interleaved rounds. onnxruntime with its default options and threads; every output checked "
        "against onnxruntime's.",
        "",
        markdown_table(["model", "size", "dynamic", "specialized", "static", "onnxruntime",
                        "dynamic / static (<= 1.15)", "specialized / static", "dynamic / onnxruntime",
                        "workspace dynamic / static"], table),
        "",
        "Workspace: the intermediates' memory a call takes, the dynamic library's plan (made once, "
        "placed at call time) at these sizes over the static library's plan for exactly them.",
        "",
        markdown_table(HEADLINE_TABLE_HEADER, [
            ["geometric mean, dynamic / static library", f"{_geomean(vs_static):.3f}", "-", "<= 1.08",
             verdict(_geomean(vs_static), 1.08, False)],
            ["geometric mean, dynamic library / onnxruntime", f"{_geomean(vs_ort):.3f}", "-", "<= 1.0",
             verdict(_geomean(vs_ort), 1.0, False)],
            ["decode step (past 127), dynamic library / onnxruntime", f"{decode_ort.median:.3f}",
             f"{decode_ort.low:.3f}-{decode_ort.high:.3f}", "<= 1.0", verdict(decode_ort.median, 1.0, False)],
            ["geometric mean, specialized / static library", f"{_geomean(special_static):.3f}", "-", "-", ""],
            ["geometric mean, specialized library / onnxruntime", f"{_geomean(special_ort):.3f}", "-",
             "<= 1.0", verdict(_geomean(special_ort), 1.0, False)],
            ["decode step (past 127), specialized library / onnxruntime", f"{decode_special_ort.median:.3f}",
             f"{decode_special_ort.low:.3f}-{decode_special_ort.high:.3f}", "<= 1.0",
             verdict(decode_special_ort.median, 1.0, False)],
            [f"build, dynamic / one static compile ({builds['dynamic'].median:.2f} s vs "
             f"{builds['static (seq 128)'].median:.2f} s, whole processes)", f"{build_ratio.median:.3f}",
             f"{build_ratio.low:.3f}-{build_ratio.high:.3f}", "<= 1.3",
             verdict(build_ratio.median, 1.3, False)],
            [f"build, {SPECIALIZED_RAY} / one static compile on that pool "
             f"({builds[SPECIALIZED_RAY].median:.2f} s vs {builds[STATIC_RAY].median:.2f} s)",
             f"{special_ray.median:.3f}", f"{special_ray.low:.3f}-{special_ray.high:.3f}", "<= 2.0",
             verdict(special_ray.median, 2.0, False)],
            [f"build, {SPECIALIZED_LOCAL} / one static compile, local "
             f"({builds[SPECIALIZED_LOCAL].median:.2f} s)",
             f"{special_local.median:.3f}", f"{special_local.low:.3f}-{special_local.high:.3f}", "-", ""],
        ]),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--build-rounds", type=int, default=3)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results_dynamic_shapes.md"))
    args = parser.parse_args()
    rows = latency(args.repeats)
    builds = build_time(args.build_rounds)
    text = report(rows, builds, args.repeats, args.build_rounds)
    Path(args.output).write_text(text)
    print(text)


if __name__ == "__main__":
    main()

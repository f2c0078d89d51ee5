"""Kernel tuning (issue 32): how fast the search measures candidates with more workers, and
what the records buy.

1. **Throughput.** Whole ``raypass tune MODEL --trials T --workers N`` processes, each with
   a fresh database and a fresh object cache (start-up included), N = 1 and 2
   interleaved: candidates measured per minute of the process. Target: N=2 >= 1.8x N=1.
   The kernels' C runtime (the convolution microkernels, part of raypass and the same for
   every model, as OpenBLAS is) is compiled once before the runs into a cache of its own
   (``RAYPASS_RUNTIME_CACHE_DIR``), as on a machine that has compiled anything before: a
   fresh cache would add its 2.5 s compile to every process.
2. **Latency.** The model compiled without and with the database a 1-worker run wrote
   (its records are for this machine's CPUs and thread count, what a default library runs
   with), against onnxruntime (default options and threads): blocks of back-to-back calls
   after an idle gap (``bench.vs_onnxruntime``), medians over interleaved rounds.
3. **Tuned against onnxruntime** (``--vs-onnxruntime LABEL ...``: models of
   ``bench.vs_onnxruntime``, matched by substring): each tuned by one ``raypass tune
   --workers 1 --minutes M`` process (one worker: its records are for the thread count a
   default library runs with), then untuned, tuned and onnxruntime latency as in 2.

    python -m bench.tuning [--trials T] [--rounds N] [--repeats N] [--output PATH]
    python -m bench.tuning --vs-onnxruntime MobileNet ResNet-50 --minutes 8 [--output PATH]
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
from passinfra.codegen.conv_runtime import RUNTIME_CACHE_ENV
from passinfra.frontend import from_onnx
from passinfra.frontend.zoo import dynamic_models as dm
from passinfra.transform import PassContext

ROOT = Path(__file__).resolve().parent.parent
# a small CNN at batch 8 (convolutions, pooling, a dense layer) and an MLP of 256 wide layers
MODELS = {"cnn": (lambda: dm.cnn(width=16), {"input": (8, 3, 32, 32)}),
          "mlp": (lambda: dm.mlp(in_features=256, hidden=256, layers=3), {"input": (64, 256)})}


def _shape_options(shapes: dict[str, tuple[int, ...]]) -> list[str]:
    return [option for name, shape in shapes.items()
            for option in ("--shapes", f"{name}={','.join(map(str, shape))}")]


_RUNTIME_CACHE: list[Path] = []


def _runtime_cache() -> Path:
    """A directory holding the compiled C runtime (compiled on first use, kept for the
    benchmark's runs, removed at exit)."""
    if not _RUNTIME_CACHE:
        import atexit
        import shutil

        from passinfra.codegen.cc_driver import CompilerSettings
        from passinfra.codegen.conv_runtime import runtime_object

        directory = Path(tempfile.mkdtemp(prefix="raypass-tune-bench-runtime-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        with PassContext(config={"codegen.cache_dir": str(directory)}):
            runtime_object(CompilerSettings.from_context())
        _RUNTIME_CACHE.append(directory)
    return _RUNTIME_CACHE[0]


def _tune_run(model: Path, shapes: dict[str, tuple[int, ...]], trials: int, workers: int,
              keep: Path | None = None, cpus_per_worker: int | None = None) -> tuple[float, int]:
    """One whole ``raypass tune`` process: (wall seconds, candidates measured)."""
    with tempfile.TemporaryDirectory(prefix="raypass-tune-bench-") as tmp:
        db = Path(tmp) / "db.json"
        command = [sys.executable, "-m", "raypass_cli.main", "tune", str(model), *_shape_options(shapes),
                   "--trials", str(trials), "--workers", str(workers), "--db", str(db), "--quiet",
                   "--cache-dir", os.path.join(tmp, "cache")]
        if cpus_per_worker is not None:
            command += ["--cpus-per-worker", str(cpus_per_worker)]
        started = time.perf_counter()
        out = subprocess.run(command, check=True, cwd=ROOT, capture_output=True, text=True,
                             env={**os.environ, RUNTIME_CACHE_ENV: str(_runtime_cache())}).stdout
        seconds = time.perf_counter() - started
        measured = int(out.rsplit(" candidates measured", 1)[0].rsplit(" ", 1)[-1])
        if keep is not None:
            keep.write_text(db.read_text())
        return seconds, measured


def throughput(model: Path, shapes: dict[str, tuple[int, ...]], trials: int, rounds: int,
               db_out: Path) -> dict[str, Any]:
    per_minute: dict[int, Sample] = {1: Sample("1 worker"), 2: Sample("2 workers")}
    wall: dict[int, Sample] = {1: Sample("1 worker"), 2: Sample("2 workers")}
    for round_index in range(rounds):
        for workers in (1, 2):
            seconds, measured = _tune_run(model, shapes, trials, workers,
                                          db_out if workers == 1 and round_index == 0 else None)
            per_minute[workers].values.append(measured / seconds * 60)
            wall[workers].values.append(seconds)
            print(f"tune, {workers} worker(s): {measured} candidates in {seconds:.1f} s", flush=True)
    return {"per_minute": per_minute, "wall": wall}


def latency(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]], db: Path,
            repeats: int, feed: dict[str, np.ndarray] | None = None) -> dict[str, Sample]:
    """Untuned, tuned and onnxruntime latency on ``feed`` (default: standard normal float32
    inputs of ``shapes``; a model of token ids needs its own)."""
    import onnxruntime as ort

    mod = from_onnx(model, shapes=shapes)
    plain = build(mod)
    with PassContext(config={"codegen.tuning_db": str(db)}):
        tuned = build(from_onnx(model, shapes=shapes))
    if feed is None:
        rng = np.random.default_rng(0)
        feed = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, feed)[0]
    for lib in (plain, tuned):
        np.testing.assert_allclose(lib(*feed.values()), expected, rtol=1e-3, atol=1e-3)
    calls = {"untuned": lambda: plain(*feed.values()), "tuned": lambda: tuned(*feed.values()),
             "onnxruntime": lambda: session.run(None, feed)}
    return interleaved({name: block(call, block_calls(call)) for name, call in calls.items()}, repeats)


def tuned_vs_onnxruntime(labels: list[str], minutes: float, repeats: int) -> list[str]:
    """Section 3: each model tuned within ``minutes``, then latency untuned / tuned / onnxruntime."""
    from bench.vs_onnxruntime import all_models, model_inputs

    models = {label: make for label, make in all_models().items()
              if any(part.lower() in label.lower() for part in labels)}
    rows = []
    with tempfile.TemporaryDirectory(prefix="raypass-tune-vs-ort-") as tmp:
        for label, make in models.items():
            model = make()
            path, db = Path(tmp) / "model.onnx", Path(tmp) / f"{len(rows)}.db.json"
            onnx.save(model, path)
            feed = model_inputs(model)
            shapes = {name: tuple(array.shape) for name, array in feed.items()}
            command = [sys.executable, "-m", "raypass_cli.main", "tune", str(path), *_shape_options(shapes),
                       "--trials", "100000", "--minutes", f"{minutes:g}", "--workers", "1", "--db", str(db),
                       "--quiet", "--cache-dir", os.path.join(tmp, "cache")]
            started = time.perf_counter()
            out = subprocess.run(command, check=True, cwd=ROOT, capture_output=True, text=True).stdout
            seconds = time.perf_counter() - started
            measured = int(out.rsplit(" candidates measured", 1)[0].rsplit(" ", 1)[-1])
            times = latency(model, shapes, db, repeats, feed)
            records = json.loads(db.read_text())["records"]
            changed = sum(1 for r in records if r["seconds"] < r["default_seconds"])
            rows.append([label, f"{seconds:.0f}", str(measured), f"{len(records)} ({changed} changed)",
                         f"{times['untuned'].median * 1e3:.3f}", f"{times['tuned'].median * 1e3:.3f}",
                         f"{times['onnxruntime'].median * 1e3:.3f}",
                         f"{ratio(times['untuned'], times['onnxruntime']).median:.3f}",
                         f"{ratio(times['tuned'], times['onnxruntime']).median:.3f}"])
            print(rows[-1], flush=True)
    return ["## Tuned against onnxruntime", "",
            f"Each model tuned by one `raypass tune --workers 1 --minutes {minutes:g}` process (its seconds "
            "include start-up), then latency in ms (blocks of calls after an idle gap, medians of "
            f"{repeats} interleaved rounds), default threads on both sides.", "",
            markdown_table(["model", "tune s", "candidates", "kernels recorded", "untuned", "tuned",
                            "onnxruntime", "untuned / onnxruntime", "tuned / onnxruntime"], rows), ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--output", default=str(ROOT / "bench" / "results_tuning.md"))
    parser.add_argument("--vs-onnxruntime", nargs="+", default=None, metavar="LABEL",
                        help="tune these models of bench.vs_onnxruntime and compare with onnxruntime")
    parser.add_argument("--minutes", type=float, default=10.0, help="tuning budget per model (section 3)")
    args = parser.parse_args()
    if args.vs_onnxruntime:
        notes = machine_notes()
        text = "\n".join(["# Kernel tuning against onnxruntime (issue 32)", "",
                          "Generated by `python -m bench.tuning --vs-onnxruntime "
                          f"{' '.join(args.vs_onnxruntime)} "
                          f"--minutes {args.minutes:g} --repeats {args.repeats}`; "
                          + ", ".join(f"{k} {v}" for k, v in notes.items()) + ".", "",
                          *tuned_vs_onnxruntime(args.vs_onnxruntime, args.minutes, args.repeats)])
        Path(args.output).write_text(text)
        print(text)
        return
    rows, headline = [], []
    with tempfile.TemporaryDirectory(prefix="raypass-tune-models-") as tmp:
        for name, (make, shapes) in MODELS.items():
            path, db = Path(tmp) / f"{name}.onnx", Path(tmp) / f"{name}.db.json"
            onnx.save(make(), path)
            runs = throughput(path, shapes, args.trials, args.rounds, db)
            speed = ratio(runs["per_minute"][2], runs["per_minute"][1])
            times = latency(make(), shapes, db, args.repeats)
            records = json.loads(db.read_text())["records"]
            tuned_kernels = sum(1 for r in records if r["seconds"] < r["default_seconds"])
            rows.append([name, f"{runs['per_minute'][1].median:.1f}", f"{runs['per_minute'][2].median:.1f}",
                         f"{speed.median:.2f}", f"{len(records)} ({tuned_kernels} changed)",
                         f"{times['untuned'].median * 1e3:.3f}", f"{times['tuned'].median * 1e3:.3f}",
                         f"{times['onnxruntime'].median * 1e3:.3f}",
                         f"{ratio(times['tuned'], times['untuned']).median:.3f}",
                         f"{ratio(times['tuned'], times['onnxruntime']).median:.3f}"])
            headline.append([f"{name}: candidates per minute, 2 workers / 1", f"{speed.median:.2f}",
                             f"{speed.low:.2f}-{speed.high:.2f}", ">= 1.8", verdict(speed.median, 1.8, True)])
            print(rows[-1], flush=True)
    notes = machine_notes()
    text = "\n".join([
        "# Kernel tuning (issue 32)", "",
        f"Generated by `python -m bench.tuning --trials {args.trials} --rounds {args.rounds} --repeats "
        f"{args.repeats}`; " + ", ".join(f"{k} {v}" for k, v in notes.items()) + ".", "",
        "Throughput: whole `raypass tune` processes (fresh database and object cache, start-up included), "
        "candidates measured per minute, 1 and 2 worker processes interleaved, medians. Latency (ms): the "
        "model compiled without and with the database of the first 1-worker run, and onnxruntime; blocks of "
        "calls after an idle gap, medians of interleaved rounds. Models: "
        + "; ".join(f"{n} at {shapes}" for n, (_, shapes) in MODELS.items()) + ".", "",
        markdown_table(["model", "candidates/min, 1 worker", "2 workers", "2 / 1", "kernels recorded",
                        "untuned", "tuned", "onnxruntime", "tuned / untuned", "tuned / onnxruntime"], rows),
        "",
        markdown_table(HEADLINE_TABLE_HEADER, headline), ""])
    Path(args.output).write_text(text)
    print(text)


if __name__ == "__main__":
    main()

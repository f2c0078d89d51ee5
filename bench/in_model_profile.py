"""Each kernel inside the model against onnxruntime's node that does the same work.

A model's latency is not the sum of its kernels timed alone: alone, a kernel's weights
and inputs stay in cache from one repeat to the next; in the model it reads what the
calls before it wrote and weights nothing has touched since the last run. So this
compares the two where they run: our library's in-model profile
(:meth:`passinfra.runtime.module.Module.profile`, the host timing every kernel call) and
onnxruntime's own per-node profile, the same inputs, the same threads, blocks of runs
interleaved after an idle gap (onnxruntime's threads spin after a run and would slow
whoever runs next).

A call is paired with the onnxruntime node that writes as many output bytes and reads
the nearest amounts of activations and of parameters (its weights: a fused kernel's and
a fused node's are alike), in order among equals; calls and nodes without a partner are
listed apart (ours: layout changes onnxruntime does inside its nodes; theirs: the
reorders its NCHWc layout inserts). The table lists the pairs by how much longer ours
took, which is where a model loses.

    python -m bench.in_model_profile [--models SUBSTRING,...] [--threads N,...] [--rounds R]
                                     [--runs N] [--output PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from bench.codegen import model_inputs
from bench.common import machine_notes, markdown_table
from bench.vs_onnxruntime import all_models, build_library, kernel_ops
from passinfra.codegen.host import analyze_main

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "bench" / "results_in_model_profile.md"
DEFAULT_MODELS = ("RegNetX", "MobileNetV3")
IDLE_GAP_S = 0.1  # between blocks: longer than onnxruntime's threads spin after a run
SHOWN_PAIRS = 14


@dataclass
class Call:
    """One kernel call of ours, or one node of onnxruntime's, with what it moves."""

    name: str
    what: str  # our kernel's ops, or the node's op type
    output_bytes: int
    activation_bytes: int
    parameter_bytes: int
    times: list[float]  # seconds, one per run

    @property
    def median(self) -> float:
        return float(np.median(self.times)) if self.times else math.nan


def our_calls(compiled: Any, kernels: list[str]) -> list[Call]:
    """Our calls in main's order, with the bytes of their outputs, activations and weights."""
    program = analyze_main(compiled)
    ops_of = kernel_ops(compiled)
    calls = []
    for symbol, call in zip(kernels, program.calls):
        sizes = {"weight": 0, "activation": 0}
        for t in call.args:
            info = program.tensors[t]
            sizes["weight" if info.kind == "weight" else "activation"] += int(info.nbytes)
        output = sum(int(program.tensors[t].nbytes) for t in call.outputs)
        calls.append(Call(symbol, ops_of.get(symbol, "?"), output, sizes["activation"], sizes["weight"], []))
    return calls


def ort_calls(events: list[dict[str, Any]]) -> list[Call]:
    """onnxruntime's nodes in the order of their first run, each with every run's time."""
    nodes: dict[str, Call] = {}
    for event in events:
        if event.get("cat") != "Node" or not event["name"].endswith("_kernel_time"):
            continue
        name, args = event["name"][: -len("_kernel_time")], event["args"]
        if name not in nodes:
            nodes[name] = Call(name, args["op_name"], int(args.get("output_size", 0)),
                               int(args.get("activation_size", 0)), int(args.get("parameter_size", 0)), [])
        nodes[name].times.append(event["dur"] * 1e-6)
    return list(nodes.values())


def pair(ours: list[Call], theirs: list[Call]) -> tuple[list[tuple[Call, Call]], list[Call], list[Call]]:
    """(pairs, ours unpaired, theirs unpaired): each of our calls in order takes the unpaired
    node of the same output bytes whose activation and parameter bytes are nearest (log
    ratio), the earliest among equals."""
    left = list(theirs)
    pairs, alone = [], []

    def distance(a: int, b: int) -> float:
        return abs(math.log((a + 1) / (b + 1)))

    for call in ours:
        same = [node for node in left if node.output_bytes == call.output_bytes]
        if not same:
            alone.append(call)
            continue
        best = min(same, key=lambda node: distance(call.activation_bytes, node.activation_bytes)
                   + distance(call.parameter_bytes, node.parameter_bytes))
        left.remove(best)
        pairs.append((call, best))
    return pairs, alone, left


def measure(model: onnx.ModelProto, threads: int, rounds: int, runs: int, cache_dir: str
            ) -> tuple[list[Call], list[Call], list[float], list[float]]:
    """(our calls, onnxruntime's nodes, our run seconds, onnxruntime's run seconds):
    ``rounds`` interleaved blocks of ``runs`` runs of each."""
    import onnxruntime as ort

    lib, compiled = build_library(model, cache_dir)
    lib.set_num_threads(threads)
    feeds = model_inputs(model)
    args = list(feeds.values())
    ours = our_calls(compiled, list(lib.metadata["kernels"]))
    with tempfile.TemporaryDirectory(prefix="raypass-ort-profile-") as directory:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(directory, "ort")
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        session.run(None, feeds)  # warm-up (its node times are dropped below)
        our_runs: list[float] = []
        ort_runs: list[float] = []
        for _ in range(rounds):
            time.sleep(IDLE_GAP_S)
            profile = lib.profile(*args, runs=runs)
            for call, column in zip(ours, profile.call_ns.T):
                call.times += list(column * 1e-9)
            our_runs += profile.run_seconds
            time.sleep(IDLE_GAP_S)
            for _ in range(runs):
                started = time.perf_counter()
                session.run(None, feeds)
                ort_runs.append(time.perf_counter() - started)
        events = json.loads(Path(session.end_profiling()).read_text())
    theirs = ort_calls(events)
    for node in theirs:
        node.times = node.times[1:]  # the warm-up run
    return ours, theirs, our_runs, ort_runs


def measure_model(label: str, threads: int, rounds: int, runs: int, cache_dir: str
                  ) -> tuple[list[Call], list[Call], list[float], list[float]]:
    """:func:`measure` of the model of :mod:`bench.vs_onnxruntime` labelled ``label``."""
    return measure(all_models()[label](), threads, rounds, runs, cache_dir)


def render(label: str, threads: int, ours: list[Call], theirs: list[Call], our_runs: list[float],
           ort_runs: list[float]) -> list[str]:
    pairs, ours_alone, theirs_alone = pair(ours, theirs)
    ours_total, theirs_total = sum(c.median for c in ours), sum(n.median for n in theirs)
    lines = [f"## {label}, {threads} thread{'s' if threads > 1 else ''}", "",
             f"A run: ours {np.median(our_runs) * 1e3:.3f} ms (calls {ours_total * 1e3:.3f} ms), "
             f"onnxruntime {np.median(ort_runs) * 1e3:.3f} ms with its profiler on (nodes "
             f"{theirs_total * 1e3:.3f} ms); {len(pairs)} calls paired with a node.", ""]
    paired_ours = sum(c.median for c, _ in pairs)
    paired_theirs = sum(n.median for _, n in pairs)
    ratio = f"{paired_ours / paired_theirs:.2f}x" if paired_theirs else "-"
    lines += [f"Paired: ours {paired_ours * 1e3:.3f} ms, onnxruntime {paired_theirs * 1e3:.3f} ms "
              f"({ratio}).", ""]
    ranked = sorted(pairs, key=lambda p: p[1].median - p[0].median)
    rows = [[f"`{c.name}`", c.what, f"`{n.name}`", n.what, f"{c.median * 1e6:.1f}", f"{n.median * 1e6:.1f}",
             f"{c.median / n.median:.2f}" if n.median > 0 else "-", f"{(c.median - n.median) * 1e6:+.1f}"]
            for c, n in ranked[:SHOWN_PAIRS]]
    header = ["our call", "ops", "onnxruntime node", "op", "ours us", "onnxruntime us", "ratio",
              "ours - theirs us"]
    shown = min(SHOWN_PAIRS, len(ranked))
    lines += [f"Where ours took longest against its partner ({shown} of {len(ranked)}):", "",
              markdown_table(header, rows), ""]
    by_op: dict[str, list[float]] = {}
    for c, n in pairs:
        totals = by_op.setdefault(n.what, [0.0, 0.0, 0])
        totals[0] += c.median
        totals[1] += n.median
        totals[2] += 1
    rows = [[op, count, f"{a * 1e3:.3f}", f"{b * 1e3:.3f}", f"{a / b:.2f}" if b else "-"]
            for op, (a, b, count) in sorted(by_op.items(), key=lambda kv: -kv[1][0])]
    lines += ["By onnxruntime's op type:", "",
              markdown_table(["op", "pairs", "ours ms", "onnxruntime ms", "ratio"], rows), ""]
    if ours_alone or theirs_alone:
        rest = _unpaired(ours_alone, lambda c: f"`{c.name}`")
        others = _unpaired(theirs_alone, lambda n: f"`{n.name}` ({n.what})")
        lines += [f"Unpaired: ours {', '.join(rest) or 'none'}; "
                  f"onnxruntime {', '.join(others) or 'none'}.", ""]
    return lines


def _unpaired(calls: list[Call], label: Callable[[Call], str]) -> list[str]:
    """One entry per label, in first-call order: its time, or its count and total time when it
    repeats (a recurrent layer's step kernels run once per time step)."""
    groups: dict[str, list[float]] = {}
    for call in calls:
        groups.setdefault(label(call), []).append(call.median)
    return [f"{name} {times[0] * 1e6:.1f} us" if len(times) == 1
            else f"{name} x{len(times)} {sum(times) * 1e6:.1f} us" for name, times in groups.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help="substrings of bench.vs_onnxruntime's model labels, comma-separated")
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=5, help="runs of each side in a block")
    parser.add_argument("--output", default=str(OUTPUT))
    args = parser.parse_args(argv)
    wanted = [part.strip() for part in args.models.split(",") if part.strip()]
    chosen = [label for label in all_models() if any(w in label for w in wanted)]
    if not chosen:
        parser.error(f"no model of bench.vs_onnxruntime matches {args.models!r}")
    notes = ", ".join(f"{key} {value}" for key, value in machine_notes().items())
    command = " ".join(["python -m bench.in_model_profile", *(argv if argv is not None else [])]).strip()
    lines = ["# In-model kernel profiles against onnxruntime's per-node profile", "",
             f"Generated by `{command}`; {notes}.", "",
             f"{args.rounds} interleaved rounds of {args.runs} runs a side; medians over the runs "
             "(microseconds a run).", ""]
    with tempfile.TemporaryDirectory(prefix="raypass-bench-cache-") as cache_dir:
        for label in chosen:
            for threads in (int(part) for part in args.threads.split(",")):
                # a process of its own: a library's thread pool and onnxruntime's stay
                # loaded after a measurement, and their threads would run beside the next
                with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
                    measured = child.submit(measure_model, label, threads, args.rounds, args.runs,
                                            cache_dir).result()
                lines += render(label, threads, *measured)
    text = "\n".join(lines)
    Path(args.output).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

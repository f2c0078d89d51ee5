"""Issue 28's targets in one time-boxed run, made for the 16-core machine.

Whole compiles on a warm pool, on a private pool and under ``--backend auto`` against
local, the scaling curve, a multi-node cluster, and issue 32's tuning throughput.

Made for the one prepared run on a many-core machine (``../shared/tools/device``), so it
works within a time budget: its phases run in order of what the issue needs most, every
phase writes what it measured before the next starts, and a phase that would not fit is
reported as not measured. Phases:

1. ``pool``: a warm pool of ``--workers`` workers; rounds of local, the pool (its
   commands served by the pool's warm driver, and with that switched off), ``--backend
   auto`` with the pool up, and local served by the warm driver, on each model; the first
   round warms up and is not counted. The pool's DenseNet-121 runs write a Chrome trace.
2. ``nopool``: the pool stopped; rounds of local, ``--backend ray --workers W`` (the
   compile starts a private pool of its own) and ``--backend auto``.
3. ``curve``: DenseNet-121 on warm pools of 1, 2, 4, 8 workers (with ``--workers`` from
   phase 1, up to the CPUs); the simulator (``bench.simulator``) calibrated on the trace
   of one N=1 run predicts each N; speedups are over the median of every local DenseNet-121
   run of this invocation. Writes the table and a PNG.
4. ``multinode``: ``bench.multinode`` on a ``ray.cluster_utils.Cluster``.
5. ``tune`` (issue 32's throughput): whole ``raypass tune`` processes of ``bench.tuning``'s
   small CNN with ``--trials`` TUNE_TRIALS on 1 and on W worker processes, each pinned to
   one CPU (``--cpus-per-worker 1``: both measure the same target): candidates measured
   per minute, start-up included.

Every run is a whole ``raypass compile MODEL --no-cache`` process; every library is
compared byte for byte with local's. "outside the build" is the process's seconds minus
the build's own (the ``built in`` its last line reports).

    python -m bench.scale_out [--workers 15] [--models densenet121,resnet50,transformer]
        [--repeats 2] [--nopool-repeats 1] [--budget 480] [--out DIR]
        [--phases pool,nopool,curve,multinode,tune]

On the 16-core machine (pack first: ``bash ../shared/tools/device/pack.sh``), one ``run``
with ``carry: [".device"]`` and ``timeout_s`` 570 (about 420 s of phases there):
``source .device/on_device.sh && python3 -m bench.scale_out --out $OUT > $OUT/stdout.txt
2>&1; cat $OUT/results_scale_out.md``.

Writes DIR/results_scale_out.md, DIR/scale_out_curve.png, DIR/scale_out.log and the traces
of a DenseNet-121 run on the pool and of the N=1 run that calibrates the simulator.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.before_after import built_seconds, model_arg
from bench.common import machine_notes, markdown_table, python_path
from bench.scaling_curve import Runner
from bench.scaling_curve import report as curve_report
from bench.simulator import profile_from_trace

PHASES = ("pool", "nopool", "curve", "multinode", "tune")
# phase pool's variants: local is a machine without a pool; with the pool up, `raypass`
# commands are served by its warm driver (raypass_cli.forkserver) unless switched off
POOL_VARIANTS = ("local", "warm pool", "warm pool, no warm driver", "auto, warm pool", "local, warm driver")
ROOT = Path(__file__).resolve().parent.parent
CURVE_MODEL = "densenet121"
CURVE_COUNTS = (1, 2, 4, 8)
# about the small CNN's whole space (the candidates a run measures still differ a little:
# each kernel's share follows its measured time, and a worker's thread count changes it)
TUNE_TRIALS = 400


@dataclass
class Variant:
    model: str
    backend: str  # one of POOL_VARIANTS, "no pool", "auto, no pool"
    times: list[float] = field(default_factory=list)
    builds: list[float] = field(default_factory=list)
    identical: list[bool] = field(default_factory=list)
    how: str = ""  # what follows "built in" in the compile's summary: where it ran, what auto chose


class Run:
    """The invocation: its scratch space, its deadline, what it measured so far."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.space = Path(tempfile.mkdtemp(prefix="rp-scale-out-"))
        self.runner = Runner(self.space)
        self.deadline = time.monotonic() + args.budget
        self.variants: dict[tuple[str, str], Variant] = {}
        self.sections: list[str] = []
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = (self.out / "scale_out.log").open("a")

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def say(self, text: str) -> None:
        print(f"[scale_out {self.args.budget - self.left():5.0f} s] {text}", file=sys.stderr, flush=True)
        self.log.write(text + "\n")
        self.log.flush()

    def compile(self, model: str, backend: str, counted: bool, trace: Path | None = None) -> float:
        """One whole ``raypass compile`` process; its seconds."""
        lib = self.space / f"{model}-{backend.replace(', ', '-').replace(' ', '_')}.so"
        args = ["compile", model_arg(model, self.space), "--no-cache", "-o", str(lib)]
        pool = self.args.workers if "warm" in backend else None  # the warm pool's directory
        if backend.startswith("local"):
            args += ["--backend", "local"]
        else:
            args += ["--backend", "auto" if backend.startswith("auto") else "ray", "--workers",
                     str(self.args.workers)]
        if trace is not None:
            args += ["--trace", str(trace)]
        env = {"RAYPASS_FORKSERVER": "0"} if backend.endswith("no warm driver") else None
        seconds, done = self.runner.raypass(args, pool, env)
        built = [line for line in done.stdout.splitlines() if " built in " in line]
        how = built[-1].split(" built in ", 1)[-1] if built else "?"
        self.say(f"{model} {backend}: {seconds:.2f} s  built in {how[:200]}")
        variant = self.variants.setdefault((model, backend), Variant(model, backend))
        variant.how = how
        if counted:
            variant.times.append(seconds)
            variant.builds.append(built_seconds(done.stdout))
            if backend != "local":
                reference = self.space / f"{model}-local.so"
                variant.identical.append(all(
                    Path(f"{lib}{ext}").read_bytes() == Path(f"{reference}{ext}").read_bytes()
                    for ext in ("", ".weights.bin")))
        return seconds

    def rounds(self, backends: tuple[str, ...], repeats: int, warm_up: bool) -> None:
        """Interleaved rounds over the models, while the budget lasts (a round must fit
        by the slowest round so far)."""
        slowest = 0.0
        for index in range(repeats + int(warm_up)):
            if slowest and self.left() < slowest * 1.1:
                self.say(f"round {index} skipped: {self.left():.0f} s left, a round took {slowest:.0f} s")
                return
            started = time.monotonic()
            for model in self.args.models:
                for backend in backends:
                    self.compile(model, backend, counted=index >= int(warm_up),
                                 trace=self.trace_for(model, backend, index))
            slowest = max(slowest, time.monotonic() - started)

    def trace_for(self, model: str, backend: str, index: int) -> Path | None:
        if model == CURVE_MODEL and backend == "warm pool" and index > 0:
            return self.out / f"trace_{CURVE_MODEL}_pool{self.args.workers}.json"
        return None

    def write(self) -> None:
        rows = []
        for model in self.args.models:
            local = self.variants.get((model, "local"))
            if local is None or not local.times:
                continue
            base = statistics.median(local.times)
            for (name, _), variant in self.variants.items():
                if name != model or not variant.times:
                    continue
                median, build = statistics.median(variant.times), statistics.median(variant.builds)
                rows.append([
                    model, variant.backend, len(variant.times), f"{median:.2f}",
                    f"{min(variant.times):.2f}-{max(variant.times):.2f}", f"{median / base:.2f}",
                    f"{build:.2f}", f"{median - build:.2f}",
                    "-" if not variant.identical else ("yes" if all(variant.identical) else "NO"),
                    variant.how[-120:],
                ])
        notes = machine_notes()
        text = [
            "# Scale-out: whole compiles on many cores (issue 28)", "",
            f"`python -m bench.scale_out {' '.join(self.args.argv)}`; {notes.get('machine', '?')}. "
            f"Warm pool and private pool of {self.args.workers} workers. Whole `raypass compile "
            "--no-cache` processes, interleaved rounds, medians and min-max.", "",
            markdown_table(["model", "backend", "runs", "median s", "range s", "/ local", "build s",
                            "outside the build s", "library identical to local", "how it ran"], rows), "",
            *self.sections,
        ]
        (self.out / "results_scale_out.md").write_text("\n".join(text))

    def phase_pool(self) -> None:
        workers = self.args.workers
        seconds, _ = self.runner.raypass(["pool", "start", "--workers", str(workers)], workers)
        self.say(f"pool start --workers {workers}: {seconds:.2f} s")
        self.sections.append(f"`raypass pool start --workers {workers}`: {seconds:.2f} s.\n")
        try:
            self.rounds(POOL_VARIANTS, self.args.repeats, warm_up=True)
        finally:
            self.runner.raypass(["pool", "stop"], workers)

    def phase_nopool(self) -> None:
        self.rounds(("local", "no pool", "auto, no pool"), self.args.nopool_repeats, warm_up=False)

    def phase_curve(self) -> None:
        if not self.variants.get((CURVE_MODEL, "local"), Variant(CURVE_MODEL, "local")).times:
            # no earlier phase ran it (failed, or not asked for): the curve's baseline first
            for index in range(self.args.repeats + 1):
                self.compile(CURVE_MODEL, "local", counted=index > 0)
        local = self.variants[(CURVE_MODEL, "local")]
        cpus = os.cpu_count() or 1
        pooled: dict[int, list[float]] = {}
        pool_runs = self.variants.get((CURVE_MODEL, "warm pool"))
        if pool_runs is not None and pool_runs.times:  # N=W measured in phase pool
            pooled[self.args.workers] = list(pool_runs.times)
        counts = [n for n in (*CURVE_COUNTS, self.args.workers) if n <= cpus and n not in pooled]
        counts = sorted(set(counts))
        calibration: tuple[Path, float] | None = None
        model = model_arg(CURVE_MODEL, self.space)
        for workers in counts:
            if self.left() < 60:
                self.say(f"curve: N={workers} and beyond not measured ({self.left():.0f} s left)")
                break
            self.runner.raypass(["pool", "start", "--workers", str(workers)], workers)
            try:
                for _ in range(self.args.repeats):
                    trace = self.out / f"trace_{CURVE_MODEL}_pool{workers}.json"
                    seconds, done = self.runner.raypass(
                        ["compile", model, "--no-cache", "-o", f"curve{workers}.so", "--backend", "ray",
                         "--workers", str(workers), *(["--trace", str(trace)] if workers == 1 else [])],
                        workers)
                    if "warm pool" not in done.stdout:
                        raise RuntimeError(f"not run on the warm pool of {workers}: {done.stdout[-300:]}")
                    self.say(f"curve N={workers}: {seconds:.2f} s")
                    pooled.setdefault(workers, []).append(seconds)
                    if workers == 1:
                        calibration = (trace, seconds)
            finally:
                self.runner.raypass(["pool", "stop"], workers)
        if calibration is None:
            raise RuntimeError("no N=1 run to calibrate the simulator on")
        profile = profile_from_trace(json.loads(calibration[0].read_text()), calibration[1])
        measured = sorted(pooled)
        namespace = argparse.Namespace(model=CURVE_MODEL, workers=",".join(map(str, measured)),
                                       repeats=self.args.repeats, what_if_cpus=16,
                                       png=str(self.out / "scale_out_curve.png"))
        text, _ = curve_report(CURVE_MODEL, measured, list(local.times), pooled, profile, 1, namespace)
        self.sections.append(text.replace("# Scaling curve", "## Scaling curve", 1).replace(
            "python -m bench.scaling_curve", "python -m bench.scale_out (phase curve)", 1))
        self.sections.append(
            f"In this run the pools' runs are not interleaved with local ones, nor warmed up: local "
            f"is every local {CURVE_MODEL} run of this invocation"
            + (f"; N={self.args.workers} is phase pool's.\n" if pool_runs and pool_runs.times else ".\n"))

    def phase_multinode(self) -> None:
        if self.left() < 60:
            raise RuntimeError(f"not measured: {self.left():.0f} s left")
        cpus = os.cpu_count() or 1
        nodes, per_node = (4, 4) if cpus >= 16 else (1, max(1, cpus))
        options = ["--model", CURVE_MODEL, "--nodes", str(nodes), "--cpus", str(per_node)]
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "bench.multinode", *options], capture_output=True,
                              text=True, timeout=max(60.0, self.left()),
                              env=dict(os.environ, PYTHONPATH=python_path(ROOT)))
        seconds = time.perf_counter() - started
        lines = done.stdout.strip().splitlines()
        outcome = lines[-1] if lines else done.stderr[-1500:]
        self.say(f"multinode ({seconds:.0f} s, exit {done.returncode}): {outcome}")
        self.sections.append(
            f"## Multi-node: `python -m bench.multinode {' '.join(options)}` (two sets of {nodes} nodes x "
            f"{per_node} CPUs, one after the other; {seconds:.0f} s), exit {done.returncode}\n\n"
            f"```\n{outcome}\n```\n")

    def phase_tune(self) -> None:
        import onnx

        from bench.tuning import MODELS, _tune_run

        if self.left() < 60:
            raise RuntimeError(f"not measured: {self.left():.0f} s left")
        make, shapes = MODELS["cnn"]
        model = self.space / "cnn.onnx"
        onnx.save(make(), model)
        rows, per_minute = [], {}
        for workers in sorted({1, self.args.workers}):
            # every worker on one CPU of its own, at N=1 too: the same target (threads,
            # CPUs) measured, so the same candidates and schedules at equal trial counts
            seconds, measured = _tune_run(model, shapes, TUNE_TRIALS, workers, cpus_per_worker=1)
            per_minute[workers] = measured / seconds * 60
            self.say(f"tune, {workers} worker(s): {measured} candidates in {seconds:.1f} s")
            rows.append([workers, measured, f"{seconds:.1f}", f"{per_minute[workers]:.0f}",
                         f"{per_minute[workers] / per_minute[1]:.2f}"])
        self.sections.append("\n".join([
            f"## Tuning throughput: `raypass tune` of bench.tuning's small CNN, `--trials {TUNE_TRIALS} "
            "--cpus-per-worker 1`", "",
            "Whole processes (fresh database and object cache, start-up included), one run each; every "
            "worker pinned to one CPU of its own, so both measure the same target.", "",
            markdown_table(["worker processes", "candidates", "seconds", "per minute", "/ 1 worker"], rows),
            ""]))


def main(argv: list[str] | None = None) -> int:
    cpus = os.cpu_count() or 1
    parser = argparse.ArgumentParser(prog="python -m bench.scale_out", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=min(15, cpus))
    parser.add_argument("--models", default="densenet121,resnet50,transformer")
    parser.add_argument("--repeats", type=int, default=2, help="counted rounds of phases pool and curve")
    parser.add_argument("--nopool-repeats", type=int, default=1,
                        help="rounds of phase nopool (each no-pool compile starts a pool of W workers)")
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for all phases")
    parser.add_argument("--out", default=None,
                        help="where the results, the log, the PNG and two traces go (default $OUT or a new "
                        "temporary directory)")
    parser.add_argument("--phases", default=",".join(PHASES))
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.out = args.out or os.environ.get("OUT") or tempfile.mkdtemp(prefix="rp-scale-out-results-")
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    run = Run(args)
    run.say(f"{cpus} CPUs, {args.workers} workers, budget {args.budget:.0f} s")
    failed = 0
    try:
        for phase in (p.strip() for p in args.phases.split(",")):
            started = time.monotonic()
            try:
                getattr(run, f"phase_{phase}")()
            except (Exception, SystemExit) as error:  # noqa: BLE001 - one phase's failure ends only it
                failed += 1
                run.say(f"phase {phase} failed: {error}")
                run.sections.append(f"Phase {phase}: failed or not measured: {str(error)[-1500:]}\n")
            run.say(f"phase {phase}: {time.monotonic() - started:.0f} s")
            run.write()
    finally:
        shutil.rmtree(run.space, ignore_errors=True)
    print((run.out / "results_scale_out.md").read_text())
    print(f"results in {run.out}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

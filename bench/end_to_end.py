"""End-to-end compile latency (issue 16): what a user waits for.

Every measurement is one whole ``raypass compile MODEL --no-cache -o LIB`` process, timed
from its start to its exit (Python start-up, imports, Ray start or pool connection, the
build, writing the library). The variants of a model run interleaved (A, B, C, A, B, C,
...) after one warm-up round that is reported but not counted; each variant's median and
range (min-max) are reported, and comparisons are ratios of medians. Every run has a cold
kernel cache (``--no-cache``: no object cache and no whole-build cache).

Variants (``--backend ...`` of the compile):

* ``local``: in-process.
* ``ray N=2, warm pool``: ``--backend ray --workers 2`` while ``raypass pool start
  --workers 2`` runs.
* ``ray N=2, private Ray``: ``--backend ray --workers 2`` with no pool: the compile
  starts and stops its own Ray instance (what the pool saves).
* ``auto, pool running``: ``--backend auto`` while the pool runs.
* ``ray N=1, warm pool``: ``--backend ray --workers 1`` on the 2-worker pool, which serves
  it with one of its workers (``--n1 shared-pool``, the default), or on a pool of its own
  started with ``--workers 1`` (``--n1 own-pool``: a second phase, after the 2-worker
  pool is stopped, with its own interleaved local baseline).

Rows: each variant against local (ratio of medians; the range is that of the per-round
ratios), with the issue's target where it has one, and the fixed cost of a compile on the
warm pool: median whole-process time on the pool minus median local time, for zoo:mlp,
with 2 workers (the issue's wording; parallel kernel compilation hides part of it) and with
1 worker (nothing hides it). A warm-pool row whose runs report another backend than the
warm pool with the workers asked for (``built in ... on the ray backend (warm pool, N
workers)``) is marked invalid instead of judged.

Isolation: the harness makes one private temp directory and removes it at the end. The
pool keeps its state in ``RAYPASS_POOL_DIR`` (a directory per pool in there); variants
that must not use a pool get an empty ``RAYPASS_POOL_DIR``. Each Ray user (each pool, the
private-Ray compiles) gets its own ``RAY_TMPDIR`` in there, so they cannot find each
other's clusters. Every process also runs with ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` and
``RAY_AUTH_MODE=token``. Pools are stopped in a ``finally``; then any process still
carrying the harness's ``RAY_TMPDIR`` (left by a pool stop that did not finish, or by a
killed compile) is ended by its pid and reported. When ``raypass pool start`` fails, the
pool variants are reported as "not available: <reason>" and the rest still runs.
Compiles run with ``raypass --debug`` (only a failure's output changes: a traceback,
quoted in the results file).

Sources: every process imports a copy of the packages taken at the start (``--no-snapshot``
runs the checkout live). The checkout is shared with people editing it, and the pool turns
away a driver whose sources' fingerprint (sizes, mtimes) differs from its own; without the
copy an edit made during the run sends the remaining "warm pool" compiles to a private Ray.

The light ONNX models are the files the onnx package ships (``light_densenet121.onnx``,
``light_resnet50.onnx``: weights generated in the graph by ConstantOfShape, as
bench/onnx_models.py and bench/scaling.py use them); ``--weights random`` compiles them
with seeded random initializers instead (``bench.codegen.random_light_weights``).

Writes bench/results_end_to_end.md.

    python -m bench.end_to_end [--quick] [--repeats N] [--models densenet121,resnet50,mlp]
                               [--n1 shared-pool|own-pool] [--weights generated|random]
                               [--no-snapshot] [--output PATH]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import (
    BENCH_DIR,
    HEADLINE_TABLE_HEADER,
    cpu_times,
    machine_notes,
    markdown_table,
    steal_percent,
)

ROOT = Path(__file__).resolve().parent.parent

SOURCE_PACKAGES = ("passinfra", "scheduler", "workers", "raypass_cli")  # pyproject's packages
RAY_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "token"}
MODELS = ("densenet121", "resnet50", "mlp", "transformer")
QUICK_MODELS = ("resnet50", "mlp")
MODEL_LABELS = {
    "densenet121": "DenseNet-121 (ONNX light)",
    "resnet50": "ResNet-50 (ONNX light)",
    "mlp": "zoo:mlp",
    "transformer": "zoo:transformer?layers=24&hidden=512",
}
MLP_SPEC = "zoo:mlp"
# models of the zoo, by their spec (the others are the onnx package's light models)
ZOO_SPECS = {"mlp": MLP_SPEC, "transformer": "zoo:transformer?layers=24&hidden=512"}
MIN_REPEATS = 3
DEFAULT_REPEATS = 5
QUICK_REPEATS = 3
WARMUP_ROUNDS = 1
# the acceptance numbers: time ratios to local (<=) and seconds (<=)
POOL_TARGETS: dict[str, float | None] = {
    "densenet121": 0.65, "resnet50": 0.75, "mlp": 1.10, "transformer": None,  # none on 2 cores
}
# no pool (a private pool the compile starts itself), issue 28's target on 2 cores
NO_POOL_TARGETS = {"densenet121": 0.90}
AUTO_TARGET = 1.05
N1_TARGET = 1.05  # the issue states it for DenseNet-121; applied to every light model here
FIXED_COST_TARGET_S = 0.5
POOL_IDLE_TIMEOUT_MIN = 30  # a pool the harness could not stop (it was killed) ends by itself
COMPILE_TIMEOUT_S = 1800.0
POOL_TIMEOUT_S = 300.0
IDLE_WINDOW_S = 3.0
WEIGHTS_TEXT = {
    "generated": "the files the onnx package ships (weights generated in the graph by ConstantOfShape)",
    "random": "seeded random initializers (bench.codegen.random_light_weights), saved as .onnx first",
}
SOURCES_TEXT = {
    False: "every process imported a copy of the packages taken at the start (edits to the shared checkout "
    "during the run do not reach the runs or make the pool turn the compiles away)",
    True: "the checkout, live (`--no-snapshot`)",
}
BUILT_LINE = re.compile(r"built in ([0-9.]+)s on the (\w+) backend(?: \((.*)\))?[ \t]*$", re.MULTILINE)


# ----- pure helpers (tests/bench/test_bench_end_to_end.py) ------------------------------------
@dataclass(frozen=True)
class Variant:
    key: str  # unique within a group: "local", "pool2", "private2", "auto", "pool1"
    label: str
    backend_args: tuple[str, ...]
    env: str  # "nopool" or the name of the pool whose RAYPASS_POOL_DIR/RAY_TMPDIR it runs under
    needs_pool: str | None = None  # a pool that must be running, else the variant is not available


def interleave_order(keys: Sequence[str], repeats: int, warmup: int) -> list[tuple[int, str, bool]]:
    """(round, variant, is_warmup) in run order: every round runs every variant once, in
    the same order (A, B, C, A, B, C, ...); the first ``warmup`` rounds are not counted."""
    return [(r, key, r < warmup) for r in range(warmup + repeats) for key in keys]


def summary(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max)."""
    return statistics.median(values), min(values), max(values)


def round_ratios(numerator: Sequence[float], denominator: Sequence[float]) -> list[float]:
    """numerator/denominator per round: the two runs of a round ran next to each other."""
    return [a / b for a, b in zip(numerator, denominator)]


def round_differences(minuend: Sequence[float], subtrahend: Sequence[float]) -> list[float]:
    return [a - b for a, b in zip(minuend, subtrahend)]


def judge(value: float, target: float, unit: str = "") -> str:
    """``pass`` when value <= target, else ``fail`` with the excess."""
    if value <= target:
        return "pass"
    excess = value - target
    return f"fail (over by {excess:.2f}{unit}, {100.0 * excess / target:.0f}%)"


def parse_built_line(stdout: str) -> tuple[float | None, str | None]:
    """The build seconds and backend ``raypass compile`` reports on its last line, with what
    it says in brackets after the backend (a warm pool), its address left out."""
    found = BUILT_LINE.findall(stdout)
    if not found:
        return None, None
    seconds, backend, detail = found[-1]
    detail = re.sub(r" at [^\s,]+", "", detail).strip()
    return float(seconds), f"{backend} ({detail})" if detail else backend


def error_lines(output: str, keep: int = 12) -> list[str]:
    """The lines of a failed command's output that explain it: progress lines (``[raypass]``
    stage logs) left out, the last ``keep`` of the rest."""
    lines = [line.rstrip() for line in output.splitlines() if line.strip()]
    explaining = [line for line in lines if not line.lstrip().startswith("[raypass]")]
    return (explaining or lines)[-keep:]  # nothing but progress: where it stopped


def pool_misses(backends: Sequence[str], workers: int) -> int:
    """How many runs of a warm-pool variant report a backend that is not the warm pool, or
    the warm pool with another number of workers than asked for."""
    missed = 0
    for backend in backends:
        counts = re.findall(r"(\d+) workers?\b", backend)
        missed += "warm pool" not in backend or bool(counts and int(counts[0]) != workers)
    return missed


def asked_workers(variant: Variant) -> int:
    args = list(variant.backend_args)
    return int(args[args.index("--workers") + 1]) if "--workers" in args else 0


def parse_models(text: str, known: Sequence[str] = MODELS) -> list[str]:
    chosen = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in known]
    if unknown or not chosen:
        raise ValueError(
            f"unknown model(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(known)}"
        )
    return [name for name in known if name in chosen]  # the canonical order, no duplicates


def carries_marker(environ: bytes, cmdline: bytes, directory: str) -> bool:
    """Does a process belong to the harness: its environment has ``RAY_TMPDIR`` at or under
    ``directory``, or its command line names a path under it (Ray's session dir)?"""
    prefix = f"RAY_TMPDIR={directory}".encode()
    for entry in environ.split(b"\0"):
        if entry == prefix or entry.startswith(prefix + b"/"):
            return True
    return (directory.rstrip("/") + "/").encode() in cmdline


@dataclass
class Row:
    model: str
    variant: str
    median: str
    range: str
    ratio: str
    target: str
    verdict: str

    def cells(self) -> list[str]:
        return [self.model, self.variant, self.median, self.range, self.ratio, self.target, self.verdict]


TABLE_HEADER = ["model", "variant", "median s", "range s (min-max)", "ratio", "target", "verdict"]


def time_row(model: str, label: str, values: Sequence[float]) -> Row:
    median, low, high = summary(values)
    return Row(model, label, f"{median:.2f}", f"{low:.2f}-{high:.2f}", "", "", "")


def ratio_row(
    model: str, label: str, values: Sequence[float], baseline: Sequence[float], target: float | None
) -> Row:
    """A variant against its baseline: ratio of medians, the per-round ratios' range."""
    row = time_row(model, label, values)
    ratio = statistics.median(values) / statistics.median(baseline)
    per_round = round_ratios(values, baseline)
    row.ratio = f"{ratio:.2f} (rounds {min(per_round):.2f}-{max(per_round):.2f})"
    row.target = "-" if target is None else f"<= {target:.2f}"
    row.verdict = "(for comparison)" if target is None else judge(ratio, target)
    return row


def difference_row(
    model: str, label: str, values: Sequence[float], baseline: Sequence[float], target_s: float
) -> Row:
    """Seconds: median(values) - median(baseline); range of the per-round differences."""
    diff = statistics.median(values) - statistics.median(baseline)
    per_round = round_differences(values, baseline)
    return Row(
        model,
        label,
        f"{diff:+.2f}",
        f"{min(per_round):+.2f} to {max(per_round):+.2f} (rounds)",
        "-",
        f"<= {target_s:.2f} s",
        judge(diff, target_s, " s"),
    )


def unavailable_row(model: str, label: str, reason: str, target: str) -> Row:
    return Row(model, label, "n/a", "n/a", "n/a", target, f"not available: {reason}")


def render_table(rows: Iterable[Row]) -> str:
    return markdown_table(TABLE_HEADER, [row.cells() for row in rows])


def headline_table(rows: Iterable[Row]) -> str:
    """The rows with a target, shaped for results.md's headline (bench/common.py)."""
    lines = []
    for row in rows:
        if row.target in ("", "-"):
            continue
        comparison = f"{row.model}: {row.variant}"
        if row.ratio not in ("", "-", "n/a"):  # "0.59 (rounds 0.55-0.60)"
            value, _, spread = row.ratio.partition(" (")
            comparison, spread = f"{comparison} / local", spread.rstrip(")")
        else:  # a difference of seconds, or not available
            value, spread = row.median, row.range
        lines.append([comparison, value, spread, row.target, row.verdict])
    return markdown_table(HEADLINE_TABLE_HEADER, lines)


# ----- processes --------------------------------------------------------------------------
@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def reason(self, what: str) -> str:
        lines = error_lines(self.stderr) or error_lines(self.stdout)
        last = lines[-1].strip() if lines else "no output"
        return f"{what} exited {self.returncode}: {last[:160]}"


def run_process(command: Sequence[str], env: dict[str, str], cwd: Path, timeout: float) -> Done:
    """Run a command to its end, timed as a whole. It gets a session of its own so that on a
    timeout or an interruption its whole process group is ended (and only that)."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        list(command),
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        stdout, stderr = proc.communicate()
        return Done(-9, stdout, stderr + f"\ntimed out after {timeout:.0f} s", time.perf_counter() - started)
    except BaseException:  # interrupted: take the command down with us
        _kill_group(proc)
        proc.communicate()
        raise
    return Done(proc.returncode, stdout, stderr, time.perf_counter() - started)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def processes_under(directory: str) -> list[int]:
    """Pids (other than this one) of the processes :func:`carries_marker` assigns to ``directory``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if carries_marker(environ, cmdline, directory):
            pids.append(int(entry.name))
    return sorted(pids)


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds so far of these processes (the ones still alive)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / ticks


def process_names(pids: Iterable[int]) -> list[str]:
    names = []
    for pid in pids:
        try:
            names.append(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            names.append(f"pid {pid} (gone)")
    return names


def end_processes(pids: Sequence[int], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds, to exactly these pids."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.perf_counter() + grace
        while time.perf_counter() < deadline and any(Path(f"/proc/{pid}").exists() for pid in pids):
            time.sleep(0.1)


def raylet_count() -> int:
    """What ``ps aux | grep -c [r]aylet`` counts (every user's), for the before/after check."""
    done = subprocess.run(["ps", "aux"], capture_output=True, text=True)
    return sum("raylet" in line for line in done.stdout.splitlines())


def raypass_command(given: str | None = None) -> list[str]:
    if given:
        return [given]
    script = Path(sys.executable).parent / "raypass"
    if script.exists():
        return [str(script)]
    found = shutil.which("raypass")
    if found is None:
        raise SystemExit("end_to_end: the raypass console script is not installed (pip install -e .)")
    return [found]


# ----- the harness ------------------------------------------------------------------------
@dataclass
class Workspace:
    """The harness's private temp directory and what lives in it."""

    root: Path
    snapshot: Path | None = None  # a copy of the sources every process imports, if taken

    @classmethod
    def create(cls) -> Workspace:
        # short: Ray's unix sockets live under RAY_TMPDIR and their paths are limited to 107 bytes
        base = "/tmp" if os.path.isdir("/tmp") else None
        return cls(Path(tempfile.mkdtemp(prefix="rpe2e-", dir=base)))

    def path(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(exist_ok=True)
        return path

    def take_snapshot(self) -> None:
        """Copy the installed packages' sources (at this moment) for every process to import
        instead of the checkout's: edits made to a shared checkout during the run then neither
        mix versions between runs nor make the pool turn the driver away (it compares source
        fingerprints). The PYTHONPATH entry comes before the editable install's finder."""
        self.snapshot = self.path("src")
        for package in SOURCE_PACKAGES:
            shutil.copytree(
                ROOT / package, self.snapshot / package, ignore=shutil.ignore_patterns("__pycache__")
            )

    def env(self, name: str) -> dict[str, str]:
        """The environment of the processes under ``name`` ("nopool" or a pool's name)."""
        env = dict(os.environ)
        env.update(RAY_ENV)
        if self.snapshot is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.snapshot), env.get("PYTHONPATH")]))
        env["RAYPASS_POOL_DIR"] = str(self.path(f"{name}-state"))  # empty for "nopool": no pool there
        env["RAY_TMPDIR"] = str(self.path(f"{name}-ray"))
        return env

    def ray_dir(self, name: str) -> str:
        return str(self.root / f"{name}-ray")


@dataclass
class Pool:
    name: str
    workers: int
    space: Workspace
    command: list[str]
    started: bool = False
    unavailable: str | None = None
    facts: list[str] = field(default_factory=list)

    def _run(self, *args: str, timeout: float = POOL_TIMEOUT_S) -> Done:
        return run_process(
            [*self.command, "pool", *args], self.space.env(self.name), self.space.root, timeout
        )

    def start(self) -> bool:
        args = ["start", "--workers", str(self.workers), "--idle-timeout", str(POOL_IDLE_TIMEOUT_MIN)]
        done = self._run(*args)
        self.started = True  # even a failed start may have left something to stop
        if done.returncode != 0 and "--idle-timeout" in done.stderr and "unrecognized" in done.stderr:
            self.facts.append("`pool start` rejected --idle-timeout; started without it")
            done = self._run(*args[:3])
        if done.returncode != 0:
            self.unavailable = done.reason(f"`raypass pool start --workers {self.workers}`")
            return False
        self.facts.append(f"`raypass pool start --workers {self.workers}` took {done.seconds:.2f} s")
        status = self.status("after start")
        if status.returncode != 0:
            self.unavailable = status.reason("`raypass pool status` after start")
            return False
        pids = processes_under(self.space.ray_dir(self.name))
        before = cpu_seconds(pids)
        time.sleep(IDLE_WINDOW_S)
        idle = (cpu_seconds(pids) - before) / IDLE_WINDOW_S
        self.facts.append(
            f"idle pool: {len(pids)} processes, {100.0 * idle:.0f}% of one core over {IDLE_WINDOW_S:.0f} s "
            "(it stays up during the local and private-Ray runs of its phase)"
        )
        return True

    def status(self, when: str) -> Done:
        status = self._run("status", timeout=60)
        output = status.stdout.strip() or status.stderr.strip()
        text = " / ".join(line.strip() for line in output.splitlines() if line.strip())
        self.facts.append(
            f"`raypass pool status` {when} (exit {status.returncode}): {text[:400] or '(no output)'}"
        )
        return status

    def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        if self.unavailable is None:
            self.status("at the end of its phase")
        done = self._run("stop", timeout=120)
        if done.returncode == 0:
            self.facts.append(f"`raypass pool stop` took {done.seconds:.2f} s")
        elif self.unavailable is None:
            self.facts.append(done.reason("`raypass pool stop`"))
        deadline = time.perf_counter() + 10.0
        left = processes_under(self.space.ray_dir(self.name))
        while left and time.perf_counter() < deadline:  # let the processes it stopped exit
            time.sleep(0.5)
            left = processes_under(self.space.ray_dir(self.name))
        if left and self.unavailable is None:
            self.facts.append(
                f"10 s after `pool stop` returned, {len(left)} of its processes were still running "
                f"({', '.join(process_names(left))}): ended by pid"
            )
        end_processes(left)


@dataclass
class Group:
    """The variants of one model run interleaved with each other."""

    model: str  # key of MODELS
    phase: str
    model_arg: str
    variants: list[Variant]
    runs: dict[str, list[float]] = field(default_factory=dict)
    warmups: dict[str, list[float]] = field(default_factory=dict)
    builds: dict[str, list[float]] = field(default_factory=dict)
    backends: dict[str, list[str]] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)  # variant -> its error output

    def variant(self, key: str) -> Variant:
        return next(v for v in self.variants if v.key == key)


def light_model_path(model: str, weights: str, space: Workspace) -> str:
    from bench.codegen import DENSENET, RESNET50

    path = {"densenet121": DENSENET, "resnet50": RESNET50}[model]
    if not os.path.exists(path):
        raise SystemExit(f"end_to_end: {path} is missing (the onnx package ships the light models)")
    if weights == "generated":
        return path
    import onnx

    from bench.codegen import random_light_weights

    out = space.path("models") / f"{model}_random.onnx"
    onnx.save(random_light_weights(onnx.load(path)), str(out))
    return str(out)


LOCAL = Variant("local", "local", ("--backend", "local"), "nopool")


def phase_groups(models: Sequence[str], n1: str, model_args: dict[str, str]) -> dict[str, list[Group]]:
    """The groups of each phase: "pool2" runs while the 2-worker pool is up, "pool1" while the
    1-worker pool is (own-pool mode only)."""
    pool2 = Variant("pool2", "ray N=2, warm pool", ("--backend", "ray", "--workers", "2"), "pool2", "pool2")
    private2 = Variant(
        "private2", "ray N=2, private Ray (no pool)", ("--backend", "ray", "--workers", "2"), "nopool"
    )
    auto = Variant("auto", "auto, pool running", ("--backend", "auto"), "pool2", "pool2")
    if n1 == "shared-pool":
        pool1 = Variant(
            "pool1",
            "ray N=1, warm pool (1 of 2 workers)",
            ("--backend", "ray", "--workers", "1"),
            "pool2",
            "pool2",
        )
    else:
        pool1 = Variant(
            "pool1",
            "ray N=1, warm pool of 1 worker",
            ("--backend", "ray", "--workers", "1"),
            "pool1",
            "pool1",
        )
    phases: dict[str, list[Group]] = {"pool2": [], "pool1": []}
    for model in models:
        first = [LOCAL, pool2, auto] if model == "mlp" else [LOCAL, pool2, private2]
        if n1 == "shared-pool":
            phases["pool2"].append(Group(model, "pool2", model_args[model], [*first, pool1]))
        else:
            phases["pool2"].append(Group(model, "pool2", model_args[model], first))
            phases["pool1"].append(Group(model, "pool1", model_args[model], [LOCAL, pool1]))
    return phases


def run_group(
    group: Group, pools: dict[str, Pool], space: Workspace, command: list[str], repeats: int, warmup: int
) -> None:
    for variant in group.variants:
        pool = pools.get(variant.needs_pool) if variant.needs_pool else None
        if variant.needs_pool and (pool is None or pool.unavailable):
            group.unavailable[variant.key] = pool.unavailable if pool else f"no {variant.needs_pool} pool"
    runnable = [v.key for v in group.variants if v.key not in group.unavailable]
    out = space.path("out")
    order = interleave_order(runnable, repeats, warmup)
    for index, (round_index, key, is_warmup) in enumerate(order):
        if key in group.unavailable:  # failed in an earlier round
            continue
        variant = group.variant(key)
        argv = [
            *command,
            "--debug",  # a traceback if it fails; nothing else changes
            "compile",
            group.model_arg,
            *variant.backend_args,
            "--no-cache",
            "-o",
            str(out / f"{group.model}-{key}.so"),
        ]
        done = run_process(argv, space.env(variant.env), out, COMPILE_TIMEOUT_S)
        tag = "warm-up" if is_warmup else f"round {round_index - warmup + 1}/{repeats}"
        if done.returncode != 0:
            group.unavailable[key] = done.reason(f"the compile ({tag})")
            group.failures[key] = ["$ raypass " + " ".join(argv[len(command) :])] + (
                error_lines(done.stderr) or error_lines(done.stdout)
            )
            print(f"[end_to_end] {group.model} {key} {tag}: FAILED {group.unavailable[key]}", file=sys.stderr)
            continue
        build_s, backend = parse_built_line(done.stdout)
        (group.warmups if is_warmup else group.runs).setdefault(key, []).append(done.seconds)
        if not is_warmup:
            group.builds.setdefault(key, []).append(build_s if build_s is not None else float("nan"))
        if not is_warmup:
            group.backends.setdefault(key, []).append(backend or "?")
        print(
            f"[end_to_end] {group.model} [{group.phase}] {index + 1}/{len(order)} {key} {tag}: "
            f"{done.seconds:.2f} s (build {build_s if build_s is not None else float('nan'):.2f} s, "
            f"{backend} backend)",
            file=sys.stderr,
            flush=True,
        )
    for key in list(group.runs):  # a variant that failed part-way has no comparable median
        if key in group.unavailable:
            del group.runs[key]


def variant_label(group: Group, variant: Variant, n1: str) -> str:
    if variant.key == "local" and group.phase == "pool1" and n1 == "own-pool":
        return "local (baseline of the N=1 phase)"
    return variant.label


def group_rows(group: Group, n1: str) -> list[Row]:
    label = MODEL_LABELS[group.model]
    rows: list[Row] = []
    base = group.runs.get("local")
    if base is None:
        reason = group.unavailable.get("local", "no local runs")
        return [unavailable_row(label, variant_label(group, v, n1), reason, "-") for v in group.variants]
    rows.append(time_row(label, variant_label(group, LOCAL, n1), base))
    rows[-1].ratio, rows[-1].target, rows[-1].verdict = "1.00 (baseline)", "-", "-"
    for variant in group.variants:
        if variant.key == "local":
            continue
        target: float | None = {
            "pool2": POOL_TARGETS[group.model],
            "auto": AUTO_TARGET,
            "pool1": N1_TARGET,
            "private2": NO_POOL_TARGETS.get(group.model),
        }[variant.key]
        if variant.key == "pool1" and group.model == "mlp":
            target = None  # the N=1 target is the light models'; mlp's N=1 gives the fixed cost below
        values = group.runs.get(variant.key)
        if values is None:
            shown = "-" if target is None else f"<= {target:.2f}"
            rows.append(unavailable_row(label, variant.label, group.unavailable.get(variant.key, "?"), shown))
            continue
        rows.append(ratio_row(label, variant.label, values, base, target))
        if group.model == "mlp" and variant.key in ("pool2", "pool1"):
            what = "2 workers" if variant.key == "pool2" else "1 worker: no parallel work hides it"
            rows.append(
                difference_row(
                    label, f"fixed cost: warm pool ({what}) - local", values, base, FIXED_COST_TARGET_S
                )
            )
        backends = group.backends.get(variant.key, [])
        workers = asked_workers(variant)
        missed = pool_misses(backends, workers) if variant.key in ("pool2", "pool1") else 0
        if missed:  # then the row does not measure the warm pool
            seen = ", ".join(sorted({b for b in backends if pool_misses([b], workers)}))
            for row in rows[-2 if group.model == "mlp" else -1 :]:
                row.verdict = (
                    f"invalid: {missed} of {len(backends)} runs did not run on the warm pool with "
                    f"{workers} worker(s) ({seen})"
                )
    if group.model == "mlp":
        for key, what in (("pool2", "2 workers"), ("pool1", "1 worker: no parallel work hides it")):
            if any(v.key == key for v in group.variants) and key not in group.runs:
                rows.append(
                    unavailable_row(
                        label,
                        f"fixed cost: warm pool ({what}) - local",
                        group.unavailable.get(key, "?"),
                        f"<= {FIXED_COST_TARGET_S:.2f} s",
                    )
                )
    return rows


def details(group: Group) -> list[list[str]]:
    """Per variant: every counted run, the warm-up, the build time the compile reported (the
    rest is start-up, connecting, loading the model and writing the library), backends."""
    table = []
    for variant in group.variants:
        runs = group.runs.get(variant.key)
        if runs is None:
            table.append(
                [
                    MODEL_LABELS[group.model],
                    group.phase,
                    variant.label,
                    "no counted runs (see the verdict above)",
                    "",
                    "",
                    "",
                    "",
                ]
            )
            continue
        builds = [b for b in group.builds.get(variant.key, []) if b == b]
        build_median = statistics.median(builds) if builds else float("nan")
        backends = sorted(set(group.backends.get(variant.key, [])))
        table.append(
            [
                MODEL_LABELS[group.model],
                group.phase,
                variant.label,
                ", ".join(f"{v:.2f}" for v in runs),
                ", ".join(f"{v:.2f}" for v in group.warmups.get(variant.key, [])) or "-",
                f"{build_median:.2f}",
                f"{statistics.median(runs) - build_median:.2f}",
                ", ".join(backends),
            ]
        )
    return table


DETAIL_HEADER = [
    "model",
    "phase",
    "variant",
    "counted runs s (in order)",
    "warm-up s",
    "build s (reported, median)",
    "rest s (start-up, model, library)",
    "backend reported",
]


def render(
    rows: list[Row],
    groups: list[Group],
    pools: dict[str, Pool],
    args: argparse.Namespace,
    notes: dict[str, str],
    seconds: float,
    cleanup: list[str],
) -> str:
    mode = "--quick run" if args.quick else "full run"
    command = " ".join(["python -m bench.end_to_end", *args.argv])
    pool_facts = [
        f"- {pool.name} ({pool.workers} worker{'s' if pool.workers > 1 else ''}): "
        + ("; ".join(pool.facts) or ("start failed" if pool.unavailable else "not started"))
        + (f"; not available: {pool.unavailable}" if pool.unavailable else "")
        for pool in pools.values()
    ]
    n1_text = (
        "a pool of its own started with `raypass pool start --workers 1` in a second phase, after the "
        "2-worker pool is stopped; it has its own interleaved local baseline (`--n1 own-pool`)"
        if args.n1 == "own-pool"
        else "`--backend ray --workers 1` on the running 2-worker pool, which serves it with one of its "
        "workers (the compile reports `warm pool, 1 workers`; `--n1 own-pool` starts a 1-worker pool "
        "instead)"
    )
    lines = [
        "# End-to-end compile latency (issue 16)",
        "",
        f"Generated by `{command}` ({mode}) in {seconds:.0f} s. Every time is a whole `raypass compile MODEL "
        "--no-cache -o LIB` process, from its start to its exit (start-up included), with a cold kernel "
        f"cache. Variants of a model run interleaved, {args.repeats} counted rounds after {WARMUP_ROUNDS} "
        "warm-up round; median and range (min-max) per variant. Ratio: median / median of local, with the "
        "range of the per-round ratios (the two runs of a round ran next to each other). Verdicts compare "
        "the ratio of medians (or the difference of medians, for the fixed cost) with the issue's target.",
        "",
        f"- Light models: {WEIGHTS_TEXT[args.weights]}.",
        "- Warm pool: `raypass pool start --workers 2` before the phase's runs, `raypass pool stop` after; "
        "the private-Ray and local runs of that phase run while the idle pool is up (they cannot see it: "
        "their `RAYPASS_POOL_DIR` is empty).",
        f"- Ray N=1 on a warm pool: {n1_text}.",
        "- Fixed cost of one compile on a warm pool over in-process: median whole-process time on the pool "
        "minus median local time, zoo:mlp, cold cache; its range is that of the per-round differences. "
        "With 2 workers (the issue's wording) the pool's parallel kernel compilation hides part of the "
        "cost; the 1-worker row has no parallel work, so it is the plain overhead: start-up differences, "
        "connecting to the pool, shipping the IR and the results.",
        "- A warm-pool row is marked invalid, not judged, if any of its runs reports another backend than "
        "the warm pool with the workers asked for.",
        f"- Sources: {SOURCES_TEXT[args.no_snapshot]}.",
        "- The N=1 target (<= 1.05) is the issue's for DenseNet-121; it is applied to ResNet-50 too.",
        "",
        headline_table(rows),
        "",
        render_table(rows),
        "",
        "## Runs",
        "",
        "Build s: the time the compile reports for the build itself; rest: the median whole-process time "
        "minus it (interpreter start-up, imports, Ray start or pool connection, loading the model, writing "
        "the library).",
        "",
        markdown_table(DETAIL_HEADER, [line for group in groups for line in details(group)]),
        "",
        *failure_sections(groups),
        "## Pools and clean-up",
        "",
        *pool_facts,
        *[f"- {line}" for line in cleanup],
        "",
        "## Machine",
        "",
        markdown_table(["", ""], [[key, value] for key, value in notes.items()]),
        "",
    ]
    return "\n".join(lines)


def failure_sections(groups: list[Group]) -> list[str]:
    """The command and error output of each failed compile (the variant's first failure)."""
    lines: list[str] = []
    for group in groups:
        for key, output in group.failures.items():
            lines += [f"- {MODEL_LABELS[group.model]}, {group.phase}, {group.variant(key).label}:", "", "```"]
            lines += [*output, "```", ""]
    return ["## Failed compiles", "", *lines] if lines else []


def checkout_note() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return "unknown"
    changed = sorted({line[3:].split("/")[0] for line in dirty.stdout.splitlines() if line.strip()})
    return head.stdout.strip() + (f" with uncommitted changes in {', '.join(changed)}" if changed else "")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.end_to_end", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: {QUICK_REPEATS} rounds, models {','.join(QUICK_MODELS)}",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help=f"counted rounds (default {DEFAULT_REPEATS}, --quick {QUICK_REPEATS}; at least {MIN_REPEATS})",
    )
    parser.add_argument("--models", default=None, help=f"comma-separated, of {','.join(MODELS)}")
    parser.add_argument(
        "--n1",
        choices=("shared-pool", "own-pool"),
        default="shared-pool",
        help="N=1 on 1 of the 2-worker pool's workers (default) or on a pool started with --workers 1",
    )
    parser.add_argument(
        "--weights",
        choices=("generated", "random"),
        default="generated",
        help="light models as shipped (default) or with random initializers",
    )
    parser.add_argument("--output", default=str(BENCH_DIR / "results_end_to_end.md"))
    parser.add_argument(
        "--no-snapshot",
        action="store_true",
        help="import the checkout's sources live instead of a copy taken at the start",
    )
    parser.add_argument(
        "--raypass",
        default=None,
        metavar="PATH",
        help="the raypass executable to time (default: this venv's)",
    )
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.repeats is None:
        args.repeats = QUICK_REPEATS if args.quick else DEFAULT_REPEATS
    if args.repeats < MIN_REPEATS:
        parser.error(f"--repeats must be at least {MIN_REPEATS}")
    try:
        args.model_list = (
            parse_models(args.models) if args.models else list(QUICK_MODELS if args.quick else MODELS)
        )
    except ValueError as err:
        parser.error(str(err))
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # so that the finally blocks stop the pools


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.perf_counter()
    notes = machine_notes()
    cpu_at_start = cpu_times()
    raylets_before = raylet_count()
    command = raypass_command(args.raypass)
    space = Workspace.create()
    pools = {"pool2": Pool("pool2", 2, space, command)}
    if args.n1 == "own-pool":
        pools["pool1"] = Pool("pool1", 1, space, command)
    groups: list[Group] = []
    cleanup: list[str] = []
    try:
        if not args.no_snapshot:
            space.take_snapshot()
        model_args = {
            m: ZOO_SPECS[m] if m in ZOO_SPECS else light_model_path(m, args.weights, space)
            for m in args.model_list
        }
        for phase, phase_list in phase_groups(args.model_list, args.n1, model_args).items():
            if not phase_list:
                continue
            pool = pools[phase]
            print(f"[end_to_end] starting the {phase} pool ...", file=sys.stderr, flush=True)
            try:
                if not pool.start():
                    print(f"[end_to_end] pool not available: {pool.unavailable}", file=sys.stderr, flush=True)
                for group in phase_list:
                    if phase == "pool1" and pool.unavailable:  # a local baseline alone compares nothing
                        group.unavailable = {v.key: pool.unavailable for v in group.variants}
                    else:
                        run_group(group, pools, space, command, args.repeats, WARMUP_ROUNDS)
                    groups.append(group)
            finally:
                pool.stop()
    finally:
        for pool in pools.values():
            pool.stop()
        left = processes_under(str(space.root))
        if left:
            cleanup.append(
                f"{len(left)} process(es) still carried the harness's RAY_TMPDIR at the end: ended by pid"
            )
            end_processes(left)
        shutil.rmtree(space.root, ignore_errors=True)
        still = processes_under(str(space.root))
        cleanup.append(f"processes carrying the harness's temp dir after clean-up: {len(still)}")
        raylets_after = raylet_count()
        cleanup.append(
            f"raylet processes on the machine (anyone's): {raylets_before} before, {raylets_after} after; "
            f"temp dir {space.root} removed: {not space.root.exists()}"
        )
        print(f"[end_to_end] {cleanup[-1]}", file=sys.stderr, flush=True)
    rows = [row for group in groups for row in group_rows(group, args.n1)]
    order = {m: i for i, m in enumerate(MODELS)}
    rows.sort(key=lambda row: order[next(k for k, v in MODEL_LABELS.items() if v == row.model)])
    notes["CPU time taken by the hypervisor (steal) during the run"] = steal_percent(cpu_at_start)
    notes["load average at the end (1, 5, 15 min)"] = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    notes["raypass checkout"] = checkout_note()
    seconds = time.perf_counter() - started
    text = render(rows, groups, pools, args, notes, seconds, cleanup)
    Path(args.output).write_text(text)
    print(render_table(rows))
    print(f"\nwrote {args.output} in {seconds:.0f} s")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt as stop:
        print(f"[end_to_end] interrupted ({stop}); pools stopped, temp dir removed", file=sys.stderr)
        sys.exit(130)

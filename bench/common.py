"""Shared helpers of the benchmarks: interleaved A/B timing, robust summaries, the machine.

Every comparison in ``bench/`` is a ratio of medians measured side by side in one run:
the variants are run in rounds (A, B, C, A, B, C, ...) so that a slow minute on this
shared machine hurts every variant alike instead of one of them.
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
MIN_REPEATS = 5  # the issue asks for at least five runs of each variant


@dataclass
class Sample:
    """Repeated measurements of one variant (seconds)."""

    name: str
    values: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def q1(self) -> float:
        return _quantile(self.values, 0.25)

    @property
    def q3(self) -> float:
        return _quantile(self.values, 0.75)

    def spread(self) -> str:
        """``median [q1-q3]`` in seconds: the interquartile range is the noise we quote."""
        return f"{self.median:.3f} s [{self.q1:.3f}-{self.q3:.3f}]"


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class Ratio:
    """``numerator / denominator`` of medians, with the range from the quartiles."""

    median: float
    low: float
    high: float

    def text(self, digits: int = 2) -> str:
        return f"{self.median:.{digits}f}x [{self.low:.{digits}f}-{self.high:.{digits}f}]"


def ratio(numerator: Sample, denominator: Sample) -> Ratio:
    """Ratio of the medians; the spread pairs the quartiles the pessimistic way round."""
    return Ratio(
        numerator.median / denominator.median,
        numerator.q1 / denominator.q3,
        numerator.q3 / denominator.q1,
    )


def interleaved(
    variants: Mapping[str, Callable[[], float | None]], repeats: int, warmup: int = 1
) -> dict[str, Sample]:
    """Run each variant ``repeats`` times in rounds. A variant returns its own measured
    seconds, or None to be timed as a whole call. Warm-up rounds are not recorded (they
    pay for imports, process start and first-touch page faults)."""
    samples = {name: Sample(name) for name in variants}
    for round_index in range(warmup + repeats):
        for name, run in variants.items():
            started = time.perf_counter()
            measured = run()
            elapsed = time.perf_counter() - started if measured is None else measured
            if round_index >= warmup:
                samples[name].values.append(elapsed)
    return samples


def best_of_block(run: Callable[[], Any], calls: int) -> float:
    """The fastest of ``calls`` back-to-back calls of ``run`` (seconds): a round's value
    where the noise of a shared machine comes in bursts that only slow calls down."""
    best = float("inf")
    for _ in range(calls):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def time_call(run: Callable[[], Any], repeats: int) -> Sample:
    """The latency of ``run`` (one warm-up call, then ``repeats`` timed calls)."""
    run()
    sample = Sample(getattr(run, "__name__", "call"))
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        sample.values.append(time.perf_counter() - started)
    return sample


@contextmanager
def fresh_cache_dir() -> Iterator[str]:
    """A new, empty codegen.cache_dir (a cold compile cache), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="raypass-bench-cache-") as directory:
        yield directory


def verdict(value: float, target: float, at_least: bool) -> str:
    met = value >= target if at_least else value <= target
    if met:
        return "met"
    miss = (target - value) if at_least else (value - target)
    return f"MISSED by {miss:.2f} ({100.0 * miss / target:.0f}%)"


def markdown_table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


# the headline table every results file may carry; `python -m bench` copies its rows into
# results.md's headline (bench/__main__.py), so a separate script's targets show there too
HEADLINE_TABLE_HEADER = ["comparison", "value (median)", "range", "target", "verdict"]


def report(title: str, command: str, description: str, header: list[str], rows: list[list[Any]],
           output: Path | None) -> str:
    """A results page: the title, the command and this machine's notes, what the table
    holds, the table; printed, and written to ``output`` when given."""
    notes = ", ".join(f"{key} {value}" for key, value in machine_notes().items())
    text = "\n".join([f"# {title}", "", f"Generated by `{command}`; {notes}.", "", description, "",
                      markdown_table(header, rows), ""])
    print(text)
    if output:
        Path(output).write_text(text)
    return text


def publish(path: str | Path, text: str) -> None:
    """A benchmark's results: written to ``path`` (its results file) and shown."""
    Path(path).write_text(text)
    print(text)


def headline_rows(markdown: str) -> list[list[str]]:
    """The rows of every table in ``markdown`` shaped like :data:`HEADLINE_TABLE_HEADER`
    (five columns, ``comparison`` first, ``target`` and ``verdict`` last)."""
    rows: list[list[str]] = []
    in_headline = False
    for line in markdown.splitlines():
        if not line.startswith("|"):
            in_headline = False
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] == "comparison" and cells[3:] == ["target", "verdict"]:
            in_headline = True
        elif in_headline and set(line) - set("|-: "):
            rows.append(cells)
    return rows


def _version(module: str) -> str:
    try:
        imported = __import__(module)
    except Exception:  # not installed: say so rather than fail the benchmark
        return "not installed"
    return str(getattr(imported, "__version__", "?"))


def compiler_version() -> str:
    try:
        out = subprocess.run(["cc", "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "cc not found"
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


def python_path(tree: str | Path) -> str:
    """``PYTHONPATH`` for a subprocess that must import ``tree``'s raypass: the tree first,
    then the caller's own entries (packages carried to a machine that lacks them, as on
    the 16-core device, where dropping them would lose Ray)."""
    return os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))


def machine_notes() -> dict[str, str]:
    """Machine, versions and the load at this moment (the noise other processes add)."""
    load = os.getloadavg()
    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "machine": f"{platform.machine()} {cpu_model}, {os.cpu_count()} logical CPUs",
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "numpy": _version("numpy"),
        "ray": _version("ray"),
        "onnx": _version("onnx"),
        "onnxruntime": _version("onnxruntime"),
        "cc": compiler_version(),
        "load average (1, 5, 15 min)": ", ".join(f"{x:.2f}" for x in load),
    }


def cpu_times() -> tuple[int, int] | None:
    """(steal, total) jiffies of all CPUs so far (/proc/stat), None where unavailable."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    return (values[7], sum(values)) if len(values) == 8 else None


def steal_percent(since: tuple[int, int] | None) -> str:
    """The share of CPU time a hypervisor took from this machine since ``since`` (a
    :func:`cpu_times` reading): on a shared virtual machine it slows every measurement."""
    now = cpu_times()
    if since is None or now is None or now[1] <= since[1]:
        return "unknown"
    return f"{100.0 * (now[0] - since[0]) / (now[1] - since[1]):.0f}%"


def peak_rss_mib(pid: int) -> float | None:
    """The peak resident set size of a live process on this machine (Linux VmHWM)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def current_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


# ----- Ray: one instance for the whole benchmark process --------------------------------
# Each scheduler's actors take a fraction of a CPU so that the N=1 and N=2 pools can stay
# alive side by side on a 2-core machine (Ray's CPU count is bookkeeping, not a limit);
# keeping them alive is what lets the runs interleave without paying actor start-up.
CPUS_PER_WORKER = 0.5


def ensure_ray() -> Any:
    import ray

    from scheduler.pool.ray_runtime import local_worker_env

    if not ray.is_initialized():
        ray.init(
            address="local",  # a private instance, even when another one runs on this machine
            num_cpus=os.cpu_count() or 2,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            runtime_env=local_worker_env(),
            log_to_driver=False,
            logging_level="ERROR",
        )
    return ray


def ray_scheduler(num_workers: int, **options: Any) -> Any:
    """A started ``Scheduler(backend="ray")`` (its pool is created now, not in a timed run)."""
    from scheduler import Scheduler

    ray = ensure_ray()
    options.setdefault("cpus_per_worker", CPUS_PER_WORKER / max(1, num_workers // 2))
    # actors of a scheduler shut down just before are released asynchronously: wait for them
    needed = num_workers * options["cpus_per_worker"]
    deadline = time.perf_counter() + 60.0
    while ray.available_resources().get("CPU", 0.0) < needed - 1e-9 and time.perf_counter() < deadline:
        time.sleep(0.2)
    sched = Scheduler(backend="ray", num_workers=num_workers, **options)
    sched.start_workers()  # the actors start outside the timed region
    return sched


def noop_round_trip_seconds(sched: Any, repeats: int = 50) -> float:
    """Median latency of a no-op actor call (describe) on the scheduler's first worker."""
    import ray

    actor = sched.worker_pool.slots[0].actor
    ray.get(actor.describe.remote())
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        ray.get(actor.describe.remote())
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def submit_seconds_per_call(sched: Any, calls: int = 200) -> float:
    """Driver CPU to submit one actor call (the part of dispatch that grows with calls)."""
    import ray

    actor = sched.worker_pool.slots[0].actor
    started = time.perf_counter()
    refs = [actor.describe.remote() for _ in range(calls)]
    submitted = time.perf_counter() - started
    ray.get(refs)
    return submitted / calls


def transfer_bandwidth(megabytes: int = 16, repeats: int = 5) -> float:
    """Bytes per second moved driver -> worker process -> driver acknowledgement, with a
    NumPy buffer through the object store (how the wire format's buffers travel)."""
    import numpy as np

    ray = ensure_ray()

    @ray.remote(num_cpus=0)
    def _length(array: Any) -> int:
        return int(array.nbytes)

    payload = np.ones(megabytes * 1024 * 1024, dtype=np.uint8)
    ray.get(_length.remote(payload[:16]))
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        ray.get(_length.remote(payload))
        times.append(time.perf_counter() - started)
    return payload.nbytes / statistics.median(times)

"""Where a raypass process's start-up and a private pool's start-up go (issue 28).

On the 16-core machine a whole DenseNet-121 compile spent 2.4 s in "start-up
(interpreter, imports)" before loading the model (0.3-0.8 s on the 2-core one) and a
15-worker pool took 18 s to start. This script splits both, in one short run:

1. fresh processes importing one package each (median of ``--repeats``): the
   interpreter alone, numpy, networkx, onnx, ray, all of passinfra, and
   ``importlib.metadata.entry_points()`` (scans every installed distribution);
2. one local compile of ``--model`` under ``python -X importtime``: its slowest
   imports (cumulative) and its ``--timing`` line for the process around the build;
3. a pool of ``--workers`` in this process, as the pool daemon makes it: ``ray.init``,
   placing the actors, the first and the last worker up, each worker's own warm-up.

    python -m bench.startup_profile [--workers 15] [--model densenet121] [--out DIR]

Prints a compact markdown summary and writes it (and the import table) under ``--out``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.before_after import model_arg
from bench.common import ROOT, machine_notes, markdown_table

IMPORTS = {
    "interpreter alone": "pass",
    "numpy": "import numpy",
    "networkx": "import networkx",
    "onnx": "import onnx",
    "ray": "import ray",
    "passinfra.build (every pass, the codegen)": "import passinfra.build",
    "raypass_cli.compile": "import raypass_cli.compile",
    "importlib.metadata.entry_points()": "import importlib.metadata as m; m.entry_points()",
}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def process_seconds(code: str, repeats: int) -> float:
    """Median wall time of ``python -c code`` as a whole process."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=_env(), cwd=ROOT)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def slowest_imports(stderr: str, count: int) -> list[list[str]]:
    """The ``count`` imports with the largest cumulative time in ``-X importtime`` output."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        try:
            _, cumulative, name = line.split("|")
            rows.append((int(cumulative), name.rstrip()))
        except ValueError:  # the header line
            continue
    rows.sort(reverse=True)
    return [[name.strip(), f"{micros / 1000:.0f}", str((len(name) - len(name.lstrip()) - 1) // 2)]
            for micros, name in rows[:count]]


def profile_compile(model: str, space: Path, out: Path) -> tuple[list[list[str]], str]:
    lib = space / "model.so"
    command = [sys.executable, "-X", "importtime", "-m", "raypass_cli.main", "compile",
               model_arg(model, space), "--no-cache", "--backend", "local", "--timing", "-o", str(lib)]
    done = subprocess.run(command, capture_output=True, text=True, env=_env(), cwd=ROOT, check=True)
    (out / "importtime.txt").write_text(done.stderr)
    outside = [line for line in done.stdout.splitlines() if line.startswith("outside the build")]
    return slowest_imports(done.stderr, 25), outside[-1] if outside else "?"


def profile_pool(workers: int) -> list[list[str]]:
    """Start ``workers`` actors as the pool daemon does; the seconds of each step."""
    rows: list[list[str]] = []
    started = time.perf_counter()
    import ray

    from scheduler import pool as pool_api
    from scheduler.pool import ray_runtime
    from scheduler.pool.slots import WorkerPool

    rows.append(["import ray and the pool's modules", f"{time.perf_counter() - started:.2f}"])
    mark = time.perf_counter()
    handle = ray_runtime.connect(None, workers, namespace=pool_api.POOL_NAMESPACE)
    rows.append(["ray.init (a private instance)", f"{time.perf_counter() - mark:.2f}"])
    try:
        mark = time.perf_counter()
        pool = WorkerPool(workers, 1.0, wait=False)
        rows.append(["place the actors", f"{time.perf_counter() - mark:.2f}"])
        first = None
        while pool.starting:
            if pool.ready_slots(timeout=0.05) and first is None:
                first = time.perf_counter() - mark
        rows.append(["first worker up (after placing)", f"{first or 0.0:.2f}"])
        rows.append(["all workers up (after placing)", f"{time.perf_counter() - mark:.2f}"])
        warm = sorted(float(s.info.get("warm_up_seconds", 0.0)) for s in pool.slots)
        rows.append(["its warm_up call (imports done when the actor was made), median / max",
                     f"{statistics.median(warm):.2f} / {warm[-1]:.2f}"])
        rows.append(["total, import to all up", f"{time.perf_counter() - started:.2f}"])
        mark = time.perf_counter()
        pool.shutdown(wait=True)
        rows.append(["stop the actors", f"{time.perf_counter() - mark:.2f}"])
    finally:
        mark = time.perf_counter()
        ray_runtime.disconnect(handle)
        rows.append(["ray.shutdown", f"{time.perf_counter() - mark:.2f}"])
    del ray
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup_profile",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=min(15, os.cpu_count() or 1))
    parser.add_argument("--model", default="densenet121")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    out = Path(args.out or os.environ.get("OUT") or tempfile.mkdtemp(prefix="rp-startup-"))
    out.mkdir(parents=True, exist_ok=True)
    space = Path(tempfile.mkdtemp(prefix="rp-startup-space-"))
    text = ["# Process and pool start-up (issue 28)", "",
            f"`python -m bench.startup_profile {' '.join(sys.argv[1:] if argv is None else argv)}`; "
            f"{machine_notes().get('machine', '?')}.", ""]
    imports = [[name, f"{process_seconds(code, args.repeats):.2f}"] for name, code in IMPORTS.items()]
    text += ["Fresh processes, median of each:", "",
             markdown_table(["process imports", "seconds"], imports), ""]
    slow, outside = profile_compile(args.model, space, out)
    text += [f"A local `{args.model}` compile under `-X importtime`: {outside}", "",
             markdown_table(["import (cumulative)", "ms", "depth"], slow), ""]
    text += [f"A pool of {args.workers} workers, made in this process as the daemon makes it:", "",
             markdown_table(["step", "seconds"], profile_pool(args.workers)), ""]
    (out / "results_startup_profile.md").write_text("\n".join(text))
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())

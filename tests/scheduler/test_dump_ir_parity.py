"""Parallel equals sequential for everything a user can print (DESIGN principle 4): the
``--dump-ir`` files of a real ``raypass compile`` are byte-identical with ``--backend
local`` and ``--backend ray``, for every pass of the standard build. Facts about where
the work ran (which process compiled which kernel, cache hits) are reported in the run
statistics, the timing output and the trace, and never appear in the IR."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from passinfra.build import COMPILE_PIPELINE, LINK_PIPELINE, compile_pipeline
from passinfra.codegen.passes.compile_c import compile_records
from passinfra.frontend.zoo.ir_models import demo_cnn
from passinfra.tir import PrimFunc
from passinfra.transform import PassContext
from scheduler import Scheduler

RAYPASS = Path(sys.executable).with_name("raypass")
MODEL = "zoo:resnet?depth=8"
BACKENDS = ("local", "ray")
# an attr whose name speaks of a process or a cache, in printed IR (attrs follow "(" or ", ")
PER_PROCESS_ATTR = re.compile(r"[(,] ?(\w*(?:pid|cache|hostname)\w*)=")


def _compile(out: Path, backend: str) -> subprocess.CompletedProcess:
    """``raypass compile MODEL`` into ``out``, with a cache of its own (both builds start
    cold) and every report the CLI has."""
    out.mkdir()
    # the working directory holds a file named like a dependency: the private pool's
    # daemon and workers see the driver's directory only after site-packages
    (out / "ray.py").write_text("raise ImportError('the ray.py of the working directory was imported')\n")
    workers = ["--workers", "2"] if backend == "ray" else []
    command = [str(RAYPASS), "compile", MODEL, "-o", str(out / "model.so"), "--backend", backend, *workers,
               "--cache-dir", str(out / "cache"), "--dump-ir", str(out / "ir"), "--timing",
               "--trace", str(out / "trace.json")]
    # RAY_ADDRESS=local: a private Ray instance, never one another process left running
    env = dict(os.environ, COLUMNS="200", RAY_ADDRESS="local")
    result = subprocess.run(command, capture_output=True, text=True, cwd=out, env=env, timeout=900)
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    root = tmp_path_factory.mktemp("dump_ir_parity")
    return {backend: (root / backend, _compile(root / backend, backend).stdout) for backend in BACKENDS}


def _kernels(stdout: str) -> int:
    return int(re.search(r": (\d+) kernels, built in", stdout).group(1))


def test_every_pass_dumps_byte_identical_ir_on_both_backends(builds):
    local_dir, ray_dir = builds["local"][0] / "ir", builds["ray"][0] / "ir"
    names = sorted(path.name for path in local_dir.iterdir())
    assert names == sorted(path.name for path in ray_dir.iterdir())
    dumped_passes = {name[4:-4] for name in names}  # NNN_<pass>.txt
    assert set(COMPILE_PIPELINE) | set(LINK_PIPELINE) <= dumped_passes
    differing = [name for name in names if (local_dir / name).read_bytes() != (ray_dir / name).read_bytes()]
    assert not differing, f"IR dumps differ between the backends: {differing}"
    assert (builds["local"][0] / "model.so").read_bytes() == (builds["ray"][0] / "model.so").read_bytes()


def test_no_dump_carries_a_per_process_fact(builds):
    for backend, (out, _) in builds.items():
        for path in sorted((out / "ir").iterdir()):
            found = set(PER_PROCESS_ATTR.findall(path.read_text()))
            assert not found, f"{backend} {path.name} prints per-process attrs {found}"


def test_the_timing_output_says_who_compiled_each_kernel(builds):
    kernels = _kernels(builds["local"][1])
    assert kernels > 1 and _kernels(builds["ray"][1]) == kernels
    # in-process: every kernel compiled by the driver, none from the (cold) cache
    driver_line = rf"^kernels: driver \(pid \d+\) {kernels} compiled, 0 cache hits$"
    assert re.search(driver_line, builds["local"][1], re.M), builds["local"][1]

    ray_out = builds["ray"][1]
    lines = ray_out.splitlines()
    # the driver compiles kernels itself while the private pool's workers start, and the
    # workers the rest once they are up: the summary names each process and its share
    summary = next(line for line in lines if line.startswith("kernels: "))
    parts = re.findall(r"(worker \d+|driver) \(pid (\d+)\) (\d+) compiled, (\d+) cache hits", summary)
    assert summary == "kernels: " + "; ".join(f"{w} (pid {p}) {n} compiled, {h} cache hits"
                                              for w, p, n, h in parts)
    assert sum(int(n) for _, _, n, _ in parts) == kernels and all(h == "0" for *_, h in parts)
    assert [w for w, *_ in parts].count("driver") <= 1
    on_workers = {pid: int(n) for w, pid, n, _ in parts if w != "driver"}
    if on_workers:  # the worker table gives each worker's share too
        header = next(i for i, line in enumerate(lines) if line.strip().startswith("Workers (ray"))
        columns = [cell.strip() for cell in lines[header + 2].strip("┃").split("┃")]
        assert columns[-2:] == ["kernels", "cache hits"]
        rows = []
        for line in lines[header + 4:]:
            if not line.startswith("│"):
                break
            rows.append([cell.strip() for cell in line.strip("│").split("│")])
        assert {row[1]: int(row[-2]) for row in rows if int(row[-2])} == on_workers
        assert all(row[-1] == "0" for row in rows)


def test_the_trace_marks_each_compile_on_its_process(builds):
    events = json.loads((builds["ray"][0] / "trace.json").read_text())["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    compiles = [e for e in events if e["ph"] == "X" and e["cat"] == "function" and e["name"] == "CompileC"]
    # one slice per compiler call: a kernel alone, or a compile unit naming its kernels
    compiled = [name for e in compiles for name in e["args"].get("unit_kernels", [e["args"]["function"]])]
    assert len(compiled) == len(set(compiled)) == _kernels(builds["ray"][1])
    assert all(e["args"]["cache_hit"] is False for e in compiles)
    # on the lane of the process that compiled it: a worker, or the driver while they started
    assert all(lanes[e["tid"]] == "driver" or lanes[e["tid"]].startswith("worker ") for e in compiles)
    # no other pass reports a cache fact
    others = [e for e in events if e["ph"] == "X" and e["cat"] == "function" and e["name"] != "CompileC"]
    assert others and not any("cache_hit" in e["args"] for e in others)


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_compiled_modules_agree_attr_by_attr_and_facts_go_to_last_run(ray_scheduler, tmp_path, cache):
    """Every attr value (object code bytes included, which the printer abbreviates) is
    the same on both backends; last_run says which process compiled what."""
    mod = demo_cnn(batch=1, size=16, conv_channels=16)
    local_scheduler, ray = Scheduler(backend="local"), ray_scheduler(num_workers=2, cpus_per_worker=0.5)
    compiled = {}
    for backend, scheduler in (("local", local_scheduler), ("ray", ray)):
        # a cache of each backend's own: cold, or filled by an in-process build first
        with PassContext(opt_level=3, config={"codegen.cache_dir": str(tmp_path / backend)}):
            if cache == "warm":
                compile_pipeline()(mod)
            compiled[backend] = scheduler.run(compile_pipeline(), mod)
    local, remote = compiled["local"], compiled["ray"]
    assert remote.astext() == local.astext()
    kernels = [gv.name_hint for gv, func in local.items() if isinstance(func, PrimFunc)]
    assert len(kernels) > 1
    for name in kernels:
        assert dict(remote[name].attrs) == dict(local[name].attrs), name
        assert not any(re.search("pid|cache|hostname", key) for key in local[name].attrs), name

    hit = cache == "warm"
    local_records = compile_records(local_scheduler.last_run.facts)
    assert local_records == {name: (os.getpid(), hit) for name in kernels}
    remote_records = compile_records(ray.last_run.facts)
    assert sorted(remote_records) == sorted(kernels)
    assert {pid for pid, _ in remote_records.values()} <= set(ray.last_run.worker_pids.values())
    assert {cache_hit for _, cache_hit in remote_records.values()} == {hit}

"""The warm worker pool: the CLI as processes, drivers sharing it, a driver killed
mid-run, the idle timeout, and the pool found through a cluster's address.

Every test here starts its own pool (a daemon with a private Ray instance) in the
session's pool directory and stops it; counters, never wall-clock.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raypass_cli import forkserver
from scheduler import pool
from tests.process_tree import descendant_commands

ROOT = Path(__file__).resolve().parents[2]
RAYPASS = Path(sys.executable).with_name("raypass")
MODEL = "zoo:mlp"

# a plugin whose pass takes long enough per function that a driver can be killed mid-run
SLOW_PLUGIN = """
import time
from passinfra.transform import function_pass

@function_pass(opt_level=0, name="SlowDown", reads_module=False)
def slow_down(func, mod, ctx):
    time.sleep(0.5)
    return func
"""


def _raypass(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(RAYPASS), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _wait(condition, timeout: float = 120.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] == "Z"


@pytest.fixture
def warm_pool():
    """A pool of two workers for one test, stopped afterwards whatever happened."""
    status = pool.start(workers=2, idle_timeout_minutes=10)
    try:
        yield status
    finally:
        pool.stop()
        _wait(lambda: _gone(status.record.pid), what="the pool daemon to exit")


def test_pool_start_status_stop_from_the_cli(tmp_path):
    started = _raypass("pool", "start", "--workers", "2", "--idle-timeout", "10")
    try:
        assert started.returncode == 0, started.stderr
        assert "pool started" in started.stdout and "worker 1: pid" in started.stdout
        status = _raypass("pool", "status")
        assert status.returncode == 0 and "2 workers" in status.stdout, status.stdout
        again = _raypass("pool", "start")  # a second start finds the running pool
        assert again.returncode == 0 and "running already" in again.stdout
        record = pool.read_record()
        assert record is not None and record.workers == 2
        # its own Ray (loopback only) runs the workers and no named record actor: drivers
        # find this pool by its record; nor Ray's autoscaler or log monitor, nor its API
        # server (dashboard.py)
        commands = descendant_commands(record.pid)
        assert sum("ray::FunctionWorker" in c for c in commands) == 2, commands
        unwanted = ("_NamedRecord", "monitor.py", "dashboard.py")
        assert not [c for c in commands if any(name in c for name in unwanted)], commands
        # beside it a warm driver, which runs this compile (tests/cli/test_warm_driver.py
        # holds its parity with a fresh process) on the pool's workers
        driver = forkserver.read_record()
        assert driver is not None and f"warm driver: pid {driver['pid']}" in status.stdout
        built = _raypass("compile", MODEL, "--backend", "ray", "-o", str(tmp_path / "m.so"))
        assert built.returncode == 0 and "warm pool" in built.stdout, built.stderr
        assert forkserver.read_record()["served"] == 1
    finally:
        stopped = _raypass("pool", "stop")
    assert stopped.returncode == 0 and "pool stopped" in stopped.stdout
    _wait(lambda: _gone(record.pid), what="the pool daemon to exit")
    assert _gone(driver["pid"]) and forkserver.read_record() is None
    after = _raypass("pool", "status")
    assert after.returncode == 1 and "no pool is running" in after.stdout
    assert pool.read_record() is None


def test_bad_pool_options_are_one_line_errors():
    result = _raypass("pool", "start", "--workers", "0")
    assert result.returncode == 2
    assert result.stderr.strip() == "raypass: error: --workers must be at least 1, got 0"
    assert pool.read_record() is None


def _compile_ir(out: Path, backend: str) -> subprocess.Popen:
    command = [str(RAYPASS), "compile", MODEL, "--backend", backend, "--workers", "2", "--no-cache",
               "--emit", "ir", "-o", str(out)]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_drivers_share_the_pool_at_once_with_results_identical_to_local(warm_pool, tmp_path):
    local = _compile_ir(tmp_path / "local.txt", "local")
    assert local.wait(timeout=600) == 0, local.stderr.read()
    drivers = [_compile_ir(tmp_path / f"driver{i}.txt", "ray") for i in range(2)]
    outputs = [driver.communicate(timeout=600) for driver in drivers]
    for driver, (stdout, stderr) in zip(drivers, outputs):
        assert driver.returncode == 0, stderr
        assert "warm pool" in stdout  # the compile says where it ran
    expected = (tmp_path / "local.txt").read_bytes()
    assert (tmp_path / "driver0.txt").read_bytes() == expected
    assert (tmp_path / "driver1.txt").read_bytes() == expected
    status = pool.status()
    assert status.runs_served == 2 and status.active_runs == 0
    assert status.runs_on_workers == []  # each run's functions were evicted when it ended


def test_a_driver_killed_mid_run_leaves_the_pool_healthy(warm_pool, tmp_path):
    plugin = tmp_path / "slow.py"
    plugin.write_text(SLOW_PLUGIN)
    script = tmp_path / "driver.py"
    script.write_text(
        "import runpy\n"
        f"slow_down = runpy.run_path({str(plugin)!r})['slow_down']\n"
        "from passinfra.transform import Sequential\n"
        "from scheduler import Scheduler\n"
        "from tests.scheduler import passes_for_tests as P\n"
        "with Scheduler(backend='ray') as sched:\n"
        "    sched.run(Sequential([slow_down], opt_level=0), P.chain_module(40))\n"
    )
    victim = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        _wait(lambda: pool.status().active_runs == 1, what="the driver's run to begin")
        _wait(lambda: pool.status().runs_on_workers != [], what="the run's functions on the workers")
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=60)
    # the dead driver's connection closed: its run ended, its functions evicted
    _wait(lambda: pool.status().active_runs == 0, what="the dead driver's run to end")
    _wait(lambda: pool.status().runs_on_workers == [], what="the dead driver's functions to go")
    out = tmp_path / "after.txt"
    after = _compile_ir(out, "ray")
    stdout, stderr = after.communicate(timeout=600)
    assert after.returncode == 0 and "warm pool" in stdout, stderr
    local = _compile_ir(tmp_path / "local.txt", "local")
    assert local.wait(timeout=600) == 0
    assert out.read_bytes() == (tmp_path / "local.txt").read_bytes()
    assert pool.status().workers[0]["pid"] == warm_pool.workers[0]["pid"]  # the same, healthy workers


def test_the_pool_stops_by_itself_after_its_idle_timeout():
    status = pool.start(workers=1, idle_timeout_minutes=0.05)  # three seconds
    try:
        worker_pids = [worker["pid"] for worker in status.workers]
        _wait(lambda: _gone(status.record.pid), what="the idle pool to stop")
        assert pool.read_record() is None
        _wait(lambda: all(_gone(pid) for pid in worker_pids), what="the idle pool's workers to exit")
    finally:
        pool.stop()


def test_a_scheduler_uses_a_running_pool_and_says_so(warm_pool):
    from passinfra.transform import Sequential
    from scheduler import Scheduler
    from tests.scheduler import passes_for_tests as P

    mod = P.chain_module(8)
    pipeline = Sequential([P.add_to_multiply, P.tag_opt_level], opt_level=0)
    with Scheduler(backend="ray") as sched:
        out = sched.run(pipeline, mod)
        stats = sched.last_run
    assert out.astext() == pipeline(mod).astext()
    assert stats.workers.startswith("warm pool") and "warm pool" in stats.backend_reason
    assert stats.startup_seconds == 0.0 and stats.remote_calls > 0
    assert set(stats.worker_pids.values()) == {worker["pid"] for worker in warm_pool.workers}


def test_a_pool_is_found_through_the_address_of_a_two_node_cluster(ray_tmpdir):
    from tests.scheduler.test_cluster import LOOPBACK_ONLY

    env = dict(os.environ, PYTHONPATH=str(ROOT), RAY_TMPDIR=str(ray_tmpdir), **LOOPBACK_ONLY)
    proc = subprocess.run([sys.executable, "-m", "tests.scheduler.scenarios.pool_on_cluster"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["found"].startswith("warm pool") and result["identical"]
    assert len(result["worker_nodes"]) == 2  # the pool's workers spread over both nodes
    assert result["remote_calls"] > 0 and result["runs_served"] == 1
    assert not any(os.path.exists(directory) for directory in result["temp_dirs"])  # nothing left behind


def test_a_pool_running_other_sources_is_not_used_and_the_reason_is_given(monkeypatch):
    record = pool.PoolRecord(pid=os.getpid(), host="127.0.0.1", port=1, authkey="00", workers=2, address=None,
                             ray_address="127.0.0.1:2", started=0.0, code_version=pool.code_version(),
                             idle_timeout_minutes=1.0)
    assert pool.check(record).usable
    monkeypatch.setattr(pool, "code_version", lambda: "changed-since")
    found = pool.check(record)
    assert not found.usable
    assert "other raypass sources" in found.reason and "raypass pool stop" in found.reason


def test_the_pool_record_of_a_dead_daemon_is_ignored_and_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    record = pool.PoolRecord(pid=dead.pid, host="127.0.0.1", port=1, authkey="00", workers=1,
                             address=None, ray_address="127.0.0.1:2", started=0.0, code_version="x",
                             idle_timeout_minutes=1.0)
    path = tmp_path / "pool.json"
    pool.write_record(record, path)
    assert path.stat().st_mode & 0o777 == 0o600  # it holds the gateway's key
    assert pool.read_record(path) is None and not path.exists()


def _session_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()[3])
    except (OSError, IndexError):
        return None


def _live_in_session(sid: int) -> list[int]:
    return [int(entry) for entry in os.listdir("/proc")
            if entry.isdigit() and _session_of(int(entry)) == sid and not _gone(int(entry))]


def test_a_pool_killed_mid_run_the_build_finishes_here_and_nothing_of_it_stays(tmp_path):
    """SIGKILL of the pool's daemon mid-stage: the driver runs the stage (and the rest)
    itself, with the in-process result and one note; the next raypass command finds
    the dead pool's record and ends what its Ray left running (the agents)."""
    plugin = tmp_path / "slow.py"
    plugin.write_text(SLOW_PLUGIN)
    out = tmp_path / "out.txt"
    script = tmp_path / "driver.py"
    script.write_text(
        "import runpy, sys\n"
        f"slow_down = runpy.run_path({str(plugin)!r})['slow_down']\n"
        "from passinfra.transform import Sequential\n"
        "from scheduler import Scheduler\n"
        "from tests.scheduler import passes_for_tests as P\n"
        "with Scheduler(backend='ray') as sched:\n"
        "    pipeline = Sequential([slow_down, P.add_to_multiply], opt_level=0)\n"
        "    result = sched.run(pipeline, P.chain_module(24))\n"
        f"open({str(out)!r}, 'w').write(result.astext())\n"
        "print(sched.last_run.workers)\n"
        "print('\\n'.join(sched.last_run.notes), file=sys.stderr)\n"
    )
    status = pool.start(workers=2, idle_timeout_minutes=10)
    daemon = status.record.pid
    driver = subprocess.Popen([sys.executable, str(script)], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        _wait(lambda: pool.status().runs_on_workers != [], what="the run's functions on the workers")
        os.kill(daemon, signal.SIGKILL)
        stdout, stderr = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            driver.kill()
        if not _gone(daemon):
            pool.stop()
    assert driver.returncode == 0, stderr[-3000:]
    from passinfra.transform import Sequential
    from tests.scheduler import passes_for_tests as P

    expected = Sequential([P.identity, P.add_to_multiply], opt_level=0)(P.chain_module(24)).astext()
    assert out.read_text() == expected
    assert stdout.startswith("warm pool")
    notes = [line for line in stderr.splitlines() if "finishing the build in this process" in line]
    assert len(notes) == 1 and "went away" in notes[0], stderr[-3000:]
    assert _live_in_session(daemon)  # Ray's agents outlived the daemon...
    after = _raypass("pool", "status")  # ...until the next command finds the dead pool
    assert after.returncode == 1 and "no pool is running" in after.stdout
    assert _live_in_session(daemon) == []
    assert pool.read_record() is None

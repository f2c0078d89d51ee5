"""Ctrl-C during ``raypass compile --backend ray``: exit status 130, and nothing left of
the Ray the command started.

Every process the command starts (the driver, Ray's GCS, raylet and agents, the worker
actors, the C compilers they run) inherits its environment, so a marker variable there
finds them all, also those that outlive their parent. A terminal's Ctrl-C signals the
whole foreground process group; ``kill -INT`` signals the driver alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli.conftest import RAYPASS
from tests.fake_compilers import compiler_stopped_by, foreground_sigint

MARKER = "RAYPASS_TEST_RUN"
# big enough that its codegen stage (C compilation on the workers) runs for seconds
MODEL = "zoo:transformer?layers=6&hidden=64&seq=16"
STAGE_TIMEOUT = 240  # seconds for Ray to start and the build to reach the codegen stage
EXIT_TIMEOUT = 60  # seconds the interrupted command may take to exit (today: 2)
GRACE = 10  # seconds for killed processes to disappear from /proc


def _read(pid: int, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:  # gone, or not ours to read
        return b""


def _pids() -> Iterator[int]:
    return (int(entry) for entry in os.listdir("/proc") if entry.isdigit())


def marked_processes(marker: str) -> dict[int, str]:
    """pid -> command line of the live processes whose environment carries ``marker``
    (a zombie has no environment left: it is dead, only not yet reaped)."""
    tag = f"{MARKER}={marker}".encode()
    found = {}
    for pid in _pids():
        if tag in _read(pid, "environ").split(b"\0"):
            found[pid] = _read(pid, "cmdline").replace(b"\0", b" ").decode(errors="replace")[:120]
    return found


def _parent(pid: int) -> int:
    stat = _read(pid, "stat").decode(errors="replace")
    return int(stat.rpartition(")")[2].split()[1]) if stat else 0


def compiler_under_a_worker(processes: dict[int, str]) -> bool:
    """Whether a worker actor is running a child: the C compiler of the codegen stage."""
    workers = {pid for pid, command in processes.items() if command.startswith("ray::FunctionWorker")}
    return any(_parent(pid) in workers for pid in processes)


def wait_for(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.parametrize("target", ["process group", "driver"])
def test_ctrl_c_during_a_ray_compile_exits_130_and_leaves_no_ray_process(target, tmp_path, ray_tmpdir):
    marker = uuid.uuid4().hex
    env = dict(os.environ, COLUMNS="200", RAY_TMPDIR=str(ray_tmpdir), **{MARKER: marker})
    env.pop("RAY_ADDRESS", None)
    # the driver waits for the workers (no head start), so the codegen stage runs on them
    command = [str(RAYPASS), "compile", MODEL, "--backend", "ray", "--workers", "2", "--no-cache",
               "--config", "scheduler.head_start=false", "-o", "model.so"]
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        # a process group of its own, as a shell gives a foreground job, with a foreground
        # job's SIGINT: a shell starts background jobs with it ignored (so would a CI runner
        # launched with &), and the child would inherit that
        proc = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=out, stderr=err, start_new_session=True,
            preexec_fn=foreground_sigint,
        )
    started: dict[int, str] = {}  # every process of the command seen so far

    def codegen_running() -> bool:
        if proc.poll() is not None:
            return True  # it ended before: the assertion below says how
        now = marked_processes(marker)
        started.update(now)
        return compiler_under_a_worker(now)

    try:
        running = wait_for(codegen_running, STAGE_TIMEOUT)
        stderr = (tmp_path / "err").read_text()[-3000:]
        assert running and proc.poll() is None, f"the codegen stage never ran on the workers:\n{stderr}"
        if target == "process group":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        assert_interrupted_leaving_nothing(proc, tmp_path, marker)
        assert len(started) >= 5  # driver, GCS, raylet, two workers at least: the scan saw them
        # the private Ray it started registered nowhere
        assert not (ray_tmpdir / "ray" / "ray_current_cluster").exists()
    finally:
        _kill_what_is_left(proc, marker)


def assert_interrupted_leaving_nothing(proc: subprocess.Popen, tmp_path: Path, marker: str) -> None:
    """The command exits 130 saying so, writes no library, and every process it started
    (those seen running, and any other) is gone."""
    assert proc.wait(timeout=EXIT_TIMEOUT) == 130, (tmp_path / "err").read_text()[-3000:]
    assert "raypass: interrupted" in (tmp_path / "err").read_text()
    assert not (tmp_path / "model.so").exists()
    wait_for(lambda: not marked_processes(marker), GRACE)
    left = marked_processes(marker)
    assert not left, f"left running after the interrupted compile: {left}"


def _kill_what_is_left(proc: subprocess.Popen, marker: str) -> None:
    """After a failure: stop the command and any process it started, by pid."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=EXIT_TIMEOUT)
    for pid in marked_processes(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_ctrl_c_while_the_driver_compiles_and_the_pool_still_starts_leaves_nothing(tmp_path, ray_tmpdir):
    """The head start: the driver compiles kernels itself while its private pool is
    still starting; Ctrl-C then ends the command, and the pool in the middle of its
    start-up with it (its daemon, its Ray, its workers)."""
    import onnx

    model = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_densenet121.onnx"
    marker = uuid.uuid4().hex
    temp = tmp_path / "tmp"  # the command's temporary files (the C compiler's directories)
    temp.mkdir()
    env = dict(os.environ, COLUMNS="200", RAY_TMPDIR=str(ray_tmpdir), TMPDIR=str(temp), **{MARKER: marker})
    env.pop("RAY_ADDRESS", None)
    command = [str(RAYPASS), "compile", str(model), "--backend", "ray", "--workers", "2", "--no-cache",
               "-o", "model.so"]
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        proc = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=out, stderr=err, start_new_session=True,
            preexec_fn=foreground_sigint,
        )

    def driver_compiles_before_workers() -> bool:
        if proc.poll() is not None:
            return True  # it ended before: the assertion below says how
        now = marked_processes(marker)
        starting = any("scheduler.pool.daemon" in command for command in now.values())
        workers = any(command.startswith("ray::FunctionWorker") for command in now.values())
        # a child of the driver other than the pool's daemon: the C compiler it runs
        return starting and not workers and any(_parent(pid) == proc.pid and "pool_daemon" not in command
                                                for pid, command in now.items())

    try:
        caught = wait_for(driver_compiles_before_workers, STAGE_TIMEOUT)
        stderr = (tmp_path / "err").read_text()[-3000:]
        assert caught and proc.poll() is None, f"the driver never compiled while the pool started:\n{stderr}"
        os.killpg(proc.pid, signal.SIGINT)
        assert_interrupted_leaving_nothing(proc, tmp_path, marker)
        # the compile it interrupted left no directory behind (nor did the pool's start)
        assert not [path.name for path in temp.iterdir() if path.name.startswith("raypass-")]
    finally:
        _kill_what_is_left(proc, marker)


def test_a_compiler_that_ctrl_c_stopped_first_ends_the_command_as_interrupted(raypass, tmp_path):
    """The Ctrl-C a terminal sends the group may stop a C compiler before the command
    takes it: ``raypass compile`` then ends as interrupted (exit 130, its one line), not
    with the compiler's error (exit 1). (A process of its own: an interrupted command
    stops every compile of its process for good.)"""
    fake = compiler_stopped_by(signal.SIGINT, tmp_path)
    result = raypass("compile", "zoo:mlp", "-o", "lib.so", "--config", f"codegen.cc={fake}",
                     "--config", "codegen.no_cache=true")
    last = result.stderr.strip().splitlines()[-1]
    assert (result.returncode, last) == (130, "raypass: interrupted"), result.stderr
    assert not (tmp_path / "lib.so").exists()

"""The warm driver (raypass_cli.forkserver): `raypass compile` served by a forked child is
the fresh process it replaces, in its outputs, files, statuses, errors and interruptions.

Each test starts a warm driver of its own in a pool directory of its own, beside a stand-in
for the pool's daemon (a sleeping process: no Ray is needed to serve commands).
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
from tests.fake_compilers import foreground_sigint

RAYPASS = Path(sys.executable).with_name("raypass")
MODEL = "zoo:mlp"


def _wait(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.fixture
def warm_driver(tmp_path, monkeypatch):
    """(pool directory, the warm driver's Popen, the stand-in daemon's Popen)."""
    directory = tmp_path / "pool"
    directory.mkdir()
    monkeypatch.setenv("RAYPASS_POOL_DIR", str(directory))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv(forkserver.SWITCH_ENV, raising=False)
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    driver = forkserver.spawn(directory, daemon.pid)
    try:
        log = directory / "warm_driver.log"
        assert forkserver.wait_ready(driver, directory) is not None, log.read_text()
        yield directory, driver, daemon
    finally:
        forkserver.stop(directory)
        daemon.kill()
        daemon.wait()
        driver.wait(timeout=30)


def _served(directory: Path) -> int:
    return json.loads((directory / forkserver.RECORD_FILE).read_text())["served"]


def _running(directory: Path) -> int:
    return json.loads((directory / forkserver.RECORD_FILE).read_text())["running"]


def _raypass(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(RAYPASS), *args], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, **(env or {})), timeout=240)


def test_a_served_compile_equals_a_fresh_process(warm_driver, tmp_path):
    directory, _, _ = warm_driver
    served = _raypass("compile", MODEL, "--no-cache", "-o", "served.so", cwd=tmp_path)  # relative paths
    assert served.returncode == 0, served.stderr
    assert _served(directory) == 1
    fresh = _raypass("compile", MODEL, "--no-cache", "-o", "fresh.so", cwd=tmp_path,
                     env={forkserver.SWITCH_ENV: "0"})
    assert fresh.returncode == 0, fresh.stderr
    assert _served(directory) == 1  # switched off: this one ran in its own process
    for suffix in ("", ".weights.bin"):
        assert (tmp_path / f"served.so{suffix}").read_bytes() == (tmp_path / f"fresh.so{suffix}").read_bytes()

    def words(text: str) -> list[str]:  # the output, less timings and the output's own name
        return [w for w in text.replace("served.so", "X").replace("fresh.so", "X").split()
                if not any(c.isdigit() for c in w)]

    assert words(served.stdout) == words(fresh.stdout) and words(served.stderr) == words(fresh.stderr)
    assert served.stderr.startswith("[raypass] 1/")  # the progress lines, to the caller's stderr


def test_errors_and_statuses_are_the_fresh_process_ones(warm_driver, tmp_path):
    directory, _, _ = warm_driver
    for args in (["compile", "no-such-model.onnx", "-o", "x.so"],  # raypass's own error
                 ["compile", MODEL, "--no-such-option"]):  # argparse's
        served = _raypass(*args, cwd=tmp_path)
        fresh = _raypass(*args, cwd=tmp_path, env={forkserver.SWITCH_ENV: "0"})
        assert served.returncode == fresh.returncode == 2
        assert served.stderr == fresh.stderr and served.stdout == fresh.stdout
    assert _served(directory) == 2
    assert served.stderr.strip().splitlines()[-1].startswith("raypass: error:")


def test_only_a_process_that_would_be_the_same_is_served(warm_driver, tmp_path):
    directory, _, _ = warm_driver
    # a setting a process fixes at start-up, a different interpreter flag, another command
    for env, prefix in (({"OPENBLAS_NUM_THREADS": "1"}, []), ({}, ["-X", "importtime"])):
        command = [sys.executable, *prefix, "-m", "raypass_cli.main", "compile", MODEL, "-o", "a.so"]
        done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path,
                              env=dict(os.environ, **env), timeout=240)
        assert done.returncode == 0, done.stderr
    assert _raypass("ops", cwd=tmp_path).returncode == 0
    assert _served(directory) == 0
    assert subprocess.run([sys.executable, "-m", "raypass_cli.main", "compile", MODEL, "-o", "b.so"],
                          cwd=tmp_path, capture_output=True, timeout=240).returncode == 0
    assert _served(directory) == 1  # `python -m raypass_cli.main` with the same environment is


def test_ctrl_c_and_a_killed_caller_stop_the_served_command(warm_driver, tmp_path):
    directory, _, _ = warm_driver
    model = "zoo:transformer?layers=8&hidden=256"  # seconds of compiling: time to interrupt it
    for how in (signal.SIGINT, signal.SIGKILL):
        caller = subprocess.Popen([str(RAYPASS), "compile", model, "--no-cache", "-o", "t.so"], cwd=tmp_path,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  preexec_fn=foreground_sigint)
        _wait(lambda: _running(directory) == 1, "the command to start")
        time.sleep(0.5)
        caller.send_signal(how)
        _, stderr = caller.communicate(timeout=60)
        if how == signal.SIGINT:
            last = stderr.strip().splitlines()[-1:]
            assert caller.returncode == 130 and last == ["raypass: interrupted"], stderr
        _wait(lambda: _running(directory) == 0, "the served command to end", timeout=30)
    assert _served(directory) == 2
    assert not (tmp_path / "t.so").exists()


def test_it_stops_with_its_pool_and_leaves_nothing(warm_driver):
    directory, driver, daemon = warm_driver
    record = forkserver.read_record(directory)
    assert record is not None and record["pid"] == driver.pid
    daemon.kill()
    daemon.wait()
    driver.wait(timeout=30)  # it noticed its pool was gone
    assert forkserver.read_record(directory) is None
    assert not Path(record["socket"]).exists() and not Path(record["socket"]).parent.exists()
    assert driver.returncode == 0


def test_a_warm_driver_killed_mid_compile_loses_nothing(warm_driver, tmp_path):
    """The served command tells its caller its status itself: SIGKILL of the warm driver
    under it leaves the compile running, its library written, its status the caller's."""
    directory, driver, _ = warm_driver
    args = ["compile", "zoo:transformer?layers=8&hidden=256", "--no-cache"]
    caller = subprocess.Popen([str(RAYPASS), *args, "-o", "t.so"], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    _wait(lambda: _running(directory) == 1, "the command to start")
    os.kill(driver.pid, signal.SIGKILL)
    stdout, stderr = caller.communicate(timeout=240)
    assert caller.returncode == 0, stderr
    assert "wrote t.so" in stdout
    socket_path = Path(json.loads((directory / forkserver.RECORD_FILE).read_text())["socket"])
    assert forkserver.read_record(directory) is None  # the dead one's record and socket go
    assert not (directory / forkserver.RECORD_FILE).exists() and not socket_path.parent.exists()
    fresh = _raypass(*args, "-o", "fresh.so", cwd=tmp_path, env={forkserver.SWITCH_ENV: "0"})
    assert fresh.returncode == 0
    assert (tmp_path / "t.so").read_bytes() == (tmp_path / "fresh.so").read_bytes()


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of the processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except (OSError, NotADirectoryError):
            continue
        if entry.name.isdigit() and int(fields[1]) == pid:
            found.append((int(entry.name), fields[0]))
    return found


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (SigCgt of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def test_ctrl_z_stops_the_served_command_and_fg_resumes_it(warm_driver, tmp_path):
    directory, driver, _ = warm_driver
    # a process group of its own in this session, as a shell's job: Ctrl-Z stops it (the
    # kernel discards it for an orphaned group, which a test run started in the
    # background may be)
    caller = subprocess.Popen([str(RAYPASS), "compile", "zoo:transformer?layers=8&hidden=256", "--no-cache",
                               "-o", "t.so"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, process_group=0)
    # the caller forwards Ctrl-Z once it knows its command: its handler is then installed
    _wait(lambda: _running(directory) == 1 and _children(driver.pid) and _catches(caller.pid, signal.SIGTSTP),
          "the command to start")
    caller.send_signal(signal.SIGTSTP)
    _wait(lambda: (kids := _children(driver.pid)) and all(state == "T" for _, state in kids),
          "the command to stop")
    _wait(lambda: _state(caller.pid) == "T", "the caller to stop with it")
    caller.send_signal(signal.SIGCONT)
    _wait(lambda: all(state != "T" for _, state in _children(driver.pid)), "the command to resume")
    _, stderr = caller.communicate(timeout=240)
    assert caller.returncode == 0, stderr
    assert (tmp_path / "t.so").exists()

"""``raypass replay`` of the reproducer of a user's own pass (loaded with ``--plugin``):
the reproducer records the plugin, the replay loads it, and "reproduced" means the same
exception type from the same pass on the same function. Real processes throughout: a
plugin's registrations must not leak into the test process."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.cli.conftest import RAYPASS

MODEL = "zoo:mlp?batch=2"

PLUGIN = '''
"""A user's plugin: a pass over the fused functions, run right before lowering."""
from passinfra.transform import Sequential, function_pass, get_pass, register_pass


class BoomError(Exception):
    """The plugin's own exception type."""


@function_pass(opt_level=0, name="BoomOnFused", reads_module=False)
def boom_on_fused(func, mod, ctx):
    if func.attrs.get("Primitive"):
        {action}
    return func


register_pass("BoomOnFused", override=True)(lambda: boom_on_fused)
_lower = get_pass("LowerToPrimFunc")
register_pass("LowerToPrimFunc", override=True)(
    lambda: Sequential([boom_on_fused, _lower], opt_level=0, name="BoomThenLower"))
'''
FAILING = 'raise BoomError("fused functions are not welcome")'
FIXED = "pass  # fixed: fused functions are fine now"
FAILING_DIFFERENTLY = 'raise ValueError("another problem")'


def _plugin(path: Path, action: str) -> Path:
    path.write_text(PLUGIN.format(action=action))
    return path


def _raypass(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    # RAY_ADDRESS=local: a private Ray instance; XDG_CACHE_HOME: no compile cache outside tmp
    env = dict(os.environ, COLUMNS="200", RAY_ADDRESS="local", XDG_CACHE_HOME=str(cwd / "xdg-cache"))
    return subprocess.run([str(RAYPASS), *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=timeout)


@pytest.fixture(scope="module")
def original(tmp_path_factory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """One parallel compile whose plugin pass raises: (plugin file, reproducer, the run)."""
    workdir = tmp_path_factory.mktemp("original")
    plugin = _plugin(workdir / "boom_plugin.py", FAILING)
    result = _raypass("compile", MODEL, "-o", "lib.so", "--backend", "ray", "--workers", "2",
                      "--plugin", "boom_plugin.py", "--cache-dir", "cache",
                      "--config", "scheduler.reproducer_dir=repro", cwd=workdir)
    reproducers = list((workdir / "repro").glob("repro-*.txt"))
    assert len(reproducers) == 1, result.stderr
    return plugin, reproducers[0], result


def _header(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^# (\w+): (.*)$", path.read_text(), flags=re.MULTILINE))


def _copy(repro: Path, tmp_path: Path, **fields: str) -> Path:
    """A copy of ``repro`` with header ``fields`` replaced (e.g. its recorded plugin moved
    to a file of this test)."""
    text = repro.read_text()
    for key, value in fields.items():
        line = f"# {key}: {value}"
        text, replaced = re.subn(rf"^# {key}: .*$", lambda _, line=line: line, text, flags=re.MULTILINE)
        assert replaced == 1, key
    copy = tmp_path / repro.name
    copy.write_text(text)
    return copy


def test_a_parallel_run_records_the_failure_and_the_plugin(original):
    plugin, repro, result = original
    assert result.returncode == 1
    assert "BoomError: fused functions are not welcome" in result.stderr
    assert "on worker" in result.stderr
    assert f"replay it with `raypass replay {repro.relative_to(plugin.parent)}`" in result.stderr
    header = _header(repro)
    assert header["pass"] == "BoomOnFused" and header["function"].startswith("fused_")
    assert header["error_type"] == "raypass_plugin.BoomError"
    assert json.loads(header["plugins"]) == [str(plugin.resolve())]
    assert json.loads(header["pipeline"])[0] == "BoomOnFused"


def test_replay_loads_the_recorded_plugin_and_reproduces(original, tmp_path):
    _, repro, _ = original
    function = _header(repro)["function"]
    result = _raypass("replay", str(repro), cwd=tmp_path)  # elsewhere: the path is absolute
    assert result.returncode == 1, result.stderr
    assert (f"the failure reproduced: BoomError in pass 'BoomOnFused' on function '{function}': "
            "fused functions are not welcome") in result.stdout
    assert result.stderr == ""


def test_replay_when_the_plugin_is_gone_names_the_pass(original, tmp_path):
    _, repro, _ = original
    gone = tmp_path / "moved_away.py"
    copy = _copy(repro, tmp_path, plugins=json.dumps([str(gone)]))
    result = _raypass("replay", str(copy), cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("raypass: error: "), result.stderr
    assert "pass 'BoomOnFused', which is not registered" in lines[0]
    assert f"plugin file '{gone}' (it no longer exists)" in lines[0] and "--plugin FILE.py" in lines[0]
    assert "reproduced" not in result.stdout

    # the user points at where the plugin is now
    moved = _plugin(tmp_path / "boom_plugin_here.py", FAILING)
    result = _raypass("replay", str(copy), "--plugin", str(moved), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "the failure reproduced: BoomError in pass 'BoomOnFused'" in result.stdout


def test_replay_after_the_pass_was_fixed_does_not_reproduce(original, tmp_path):
    _, repro, _ = original
    fixed = _plugin(tmp_path / "boom_plugin.py", FIXED)
    copy = _copy(repro, tmp_path, plugins=json.dumps([str(fixed)]))
    result = _raypass("replay", str(copy), "--print-ir", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "the replay finished without an error" in result.stdout
    assert "the failure did not reproduce" in result.stdout and "reproduced:" not in result.stdout
    assert "object_code" in result.stdout  # the rest of the pipeline ran, down to CompileC


@pytest.mark.parametrize(
    ("action", "fields", "happened"),
    [
        # another exception type from the same pass on the same function
        (FAILING_DIFFERENTLY, {},
         "ValueError in pass 'BoomOnFused' on function '{function}': another problem"),
        # the same exception type, but the original run saw it on another function
        (FAILING, {"function": "fused_somewhere_else"},
         "BoomError in pass 'BoomOnFused' on function '{function}': fused functions are not welcome"),
    ],
)
def test_a_different_failure_is_not_reported_as_reproduced(original, tmp_path, action, fields, happened):
    _, repro, _ = original
    function = _header(repro)["function"]
    plugin = _plugin(tmp_path / "boom_plugin.py", action)
    copy = _copy(repro, tmp_path, plugins=json.dumps([str(plugin)]), **fields)
    result = _raypass("replay", str(copy), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "the failure reproduced" not in result.stdout
    assert ("the failure did not reproduce; the replay failed differently: "
            + happened.format(function=function)) in result.stdout
    assert "(the original run: BoomError: fused functions are not welcome" in result.stdout

"""Several processes compiling the same model into one cache directory at once (parallel
CI jobs do this): every one produces a correct library, and the cache stays valid."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import passinfra
from passinfra import ir
from passinfra.codegen.object_cache import ObjectCache, compile_stats, reset_compile_stats
from passinfra.ir import op
from passinfra.runtime import load_module
from passinfra.transform import PassContext
from raypass_cli.common import load_model
from tests.cli.conftest import RAYPASS

ROOT = Path(__file__).resolve().parents[2]
MODEL = "zoo:mlp?batch=2"
INPUT_SHAPE = (2, 32)
PROCESSES = 4
UMASK = 0o022  # given to every child, so the modes its files must get are known
ORDINARY_MODE = 0o666 & ~UMASK  # what a plain open() gives: readable by every job


def _run_together(commands: list[list[str]], cwd: Path,
                  timeout: float = 300) -> list[subprocess.CompletedProcess]:
    """Start every command before waiting for any, so they really overlap; a command
    still running at the timeout is killed (only the processes started here)."""
    env = dict(os.environ, RAY_ADDRESS="local", COLUMNS="200")
    procs = [subprocess.Popen(command, cwd=cwd, env=env, umask=UMASK, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for command in commands]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def _entries(cache: Path) -> list[Path]:
    return [path for path in cache.rglob("*") if path.is_file()]


def _assert_cache_is_valid(cache: Path) -> None:
    """Every file is a whole, verified entry with ordinary permissions; no temp files."""
    entries = _entries(cache)
    assert entries, "nothing was cached"
    assert not [p for p in entries if p.name.startswith(".") or p.suffix == ".tmp"], entries
    for path in entries:
        assert ObjectCache(cache, suffix=path.suffix).get(path.stem) is not None, f"{path} does not verify"
        assert stat.S_IMODE(path.stat().st_mode) == ORDINARY_MODE, f"{path}: {oct(path.stat().st_mode)}"


def _reference_output() -> tuple[np.ndarray, np.ndarray]:
    x = np.linspace(-1.0, 1.0, num=int(np.prod(INPUT_SHAPE)), dtype=np.float32).reshape(INPUT_SHAPE)
    return x, passinfra.evaluate(load_model(MODEL), x)


def test_concurrent_cli_compiles_into_one_cache_all_give_correct_libraries(tmp_path):
    cache = tmp_path / "cache"
    commands = [[str(RAYPASS), "compile", MODEL, "-o", f"lib{i}.so", "--backend", "local",
                 "--cache-dir", str(cache)] for i in range(PROCESSES)]
    for result in _run_together(commands, tmp_path):
        assert result.returncode == 0, result.stderr
        assert "wrote lib" in result.stdout

    x, expected = _reference_output()
    libraries = [tmp_path / f"lib{i}.so" for i in range(PROCESSES)]
    outputs = [load_module(lib)(x) for lib in libraries]
    for out in outputs:
        np.testing.assert_array_equal(out, outputs[0])  # every job built the same library
    np.testing.assert_allclose(outputs[0], expected, rtol=1e-5, atol=1e-6)
    for suffix in ("", ".raypass.json", ".weights.bin"):
        contents = {Path(f"{lib}{suffix}").read_bytes() for lib in libraries}
        assert len(contents) == 1, f"the {suffix or 'library'} files differ between the jobs"
        for lib in libraries:
            assert stat.S_IMODE(Path(f"{lib}{suffix}").stat().st_mode) == ORDINARY_MODE
    _assert_cache_is_valid(cache)

    # what the jobs stored serves a later build whole: every kernel is a hit, none compiles
    reset_compile_stats()
    config = {"codegen.cache_dir": str(cache), "codegen.build_cache": False}
    with PassContext(config=config):
        rebuilt = passinfra.build(load_model(MODEL))
    stats = compile_stats()
    assert stats["compiles"] == 0 and stats["corrupted"] == 0 and stats["hits"] > 0, stats
    np.testing.assert_array_equal(rebuilt(x), outputs[0])


_BUILD_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import passinfra
    from passinfra.codegen.object_cache import compile_stats
    from passinfra.transform import PassContext
    from raypass_cli.common import load_model

    cache, out = sys.argv[1], sys.argv[2]
    x = np.linspace(-1.0, 1.0, num=64, dtype=np.float32).reshape(2, 32)
    with PassContext(config={"codegen.cache_dir": cache}):
        lib = passinfra.build(load_model(sys.argv[3]))
    np.save(out, lib(x))
    stats = compile_stats()
    print(stats["build_hits"] + stats["build_misses"], stats["build_corrupted"])
""")


def test_concurrent_builds_share_the_whole_build_cache(tmp_path):
    cache = tmp_path / "cache"
    commands = [[sys.executable, "-c", _BUILD_SCRIPT, str(cache), str(tmp_path / f"out{i}.npy"), MODEL]
                for i in range(3)]
    for result in _run_together(commands, ROOT):
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["1", "0"]  # one whole-build lookup, nothing corrupted
    x, expected = _reference_output()
    outputs = [np.load(tmp_path / f"out{i}.npy") for i in range(3)]
    for out in outputs:
        np.testing.assert_array_equal(out, outputs[0])
    np.testing.assert_allclose(outputs[0], expected, rtol=1e-5, atol=1e-6)
    assert len([p for p in _entries(cache) if p.suffix == ".build"]) == 1
    _assert_cache_is_valid(cache)


# --------------------------------------------------------------------------- interleavings


def test_a_corrupted_entry_replaced_meanwhile_is_not_removed(tmp_path, monkeypatch):
    """Process A reads a corrupted entry; before A removes it, process B publishes a good
    one: A must leave B's entry in place (it used to delete it)."""
    import passinfra.codegen.object_cache as cache_module

    cache, key, good = ObjectCache(tmp_path), "ab" * 32, b"\x7fELF a good object"
    cache.put(key, good)
    path = cache.path_of(key)
    path.write_bytes(path.read_bytes()[:-3])  # torn: fails verification
    verify = cache_module._verified_payload

    def verify_while_another_process_writes(blob: bytes):
        ObjectCache(tmp_path).put(key, good)  # B, between A's read and A's removal
        return verify(blob)

    monkeypatch.setattr(cache_module, "_verified_payload", verify_while_another_process_writes)
    assert cache.lookup(key) == (None, True)  # A saw the corrupted one
    monkeypatch.setattr(cache_module, "_verified_payload", verify)
    assert cache.get(key) == good  # B's entry survived


def test_a_failed_write_leaves_neither_entry_nor_temp_file(tmp_path, monkeypatch):
    x = ir.var("x", (2,))
    with PassContext(config={"codegen.cache_dir": str(tmp_path / "objects")}):
        lib = passinfra.build(ir.IRModule.from_expr(ir.Function([x], op.exp(x))))
    out_dir = tmp_path / "out"
    out_dir.mkdir()

    def replace_fails(src: str, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", replace_fails)  # the disk fills up while publishing
    with pytest.raises(OSError, match="No space left"):
        ObjectCache(tmp_path / "cache").put("cd" * 32, b"data")
    with pytest.raises(OSError, match="No space left"):
        lib.export_library(out_dir / "lib.so")
    left = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] + list(out_dir.iterdir())
    assert left == []

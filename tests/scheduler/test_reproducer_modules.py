"""A reproducer records where its pass modules were imported from, so ``raypass replay``
(a console script, with no script directory on ``sys.path``) can import them again."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from scheduler.reproducer import MAGIC, load_pass_sources, module_roots, read_header


@pytest.fixture
def isolated_imports():
    """Leave sys.path and sys.modules as they were."""
    path, modules = list(sys.path), set(sys.modules)
    yield
    sys.path[:] = path
    for name in set(sys.modules) - modules:
        del sys.modules[name]


def test_module_roots_are_the_directories_modules_were_found_under(tmp_path, isolated_imports):
    package = tmp_path / "rp_roots_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "passes.py").write_text("VALUE = 1\n")
    (tmp_path / "rp_roots_single.py").write_text("VALUE = 2\n")
    sys.path.insert(0, str(tmp_path))
    for name in ("rp_roots_pkg", "rp_roots_pkg.passes", "rp_roots_single"):
        importlib.import_module(name)
    root = str(tmp_path.resolve())
    assert module_roots(["rp_roots_pkg.passes", "rp_roots_pkg", "rp_roots_single"]) == [root]
    assert module_roots(["not_imported_anywhere"]) == []


def _reproducer(path, modules, module_paths):
    header = [
        MAGIC,
        "# pass: DeadCodeElimination",
        "# function: main",
        "# error: RuntimeError: boom",
        "# context: {}",
        '# pipeline: ["DeadCodeElimination"]',
        "# plugins: []",
        f"# modules: {json.dumps(modules)}",
        f"# module_paths: {json.dumps(module_paths)}",
    ]
    path.write_text("\n".join(header) + "\ndef @main() { 0f }\n")
    return path


def test_replay_imports_a_recorded_module_from_where_the_original_run_found_it(
    tmp_path, isolated_imports, monkeypatch
):
    where = tmp_path / "project"
    where.mkdir()
    (where / "rp_replay_passes.py").write_text("LOADED = True\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # replayed from another directory: only the record finds it
    repro = read_header(_reproducer(tmp_path / "r.txt", ["rp_replay_passes"], [str(where)]))
    assert repro.module_paths == [str(where)]
    load_pass_sources(repro)
    assert sys.modules["rp_replay_passes"].LOADED


def test_replay_also_tries_the_working_directory(tmp_path, isolated_imports, monkeypatch):
    (tmp_path / "rp_replay_cwd_passes.py").write_text("LOADED = True\n")
    monkeypatch.chdir(tmp_path)
    # an older reproducer without module_paths: the working directory, as `python script.py`
    repro = read_header(_reproducer(tmp_path / "r.txt", ["rp_replay_cwd_passes"], []))
    load_pass_sources(repro)
    assert sys.modules["rp_replay_cwd_passes"].LOADED


def test_a_plugin_given_for_the_replay_replaces_the_search(tmp_path, isolated_imports, monkeypatch):
    # the user points at the file that registers the passes: the module is not also
    # imported from the recorded place (it would register the same passes twice)
    (tmp_path / "rp_replay_twice.py").write_text("LOADED = True\n")
    plugin = tmp_path / "plugin.py"
    plugin.write_text("")
    monkeypatch.chdir(tmp_path)
    repro = read_header(_reproducer(tmp_path / "r.txt", ["rp_replay_twice"], [str(tmp_path)]))
    load_pass_sources(repro, [str(plugin)])
    assert "rp_replay_twice" not in sys.modules

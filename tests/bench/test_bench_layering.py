"""bench/ is a package that stands on the shipped code alone: no module of it imports the
test suite (what both need is in passinfra.testing) or edits sys.path, and it imports
from outside the checkout, as ``raypass bench`` imports it."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH_MODULES = sorted((ROOT / "bench").glob("*.py"))


def _offences(path: Path) -> list[str]:
    """What in ``path`` imports ``tests`` or touches ``sys.path``, as 'line: what'."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names if alias.name.split(".")[0] == "tests"]
            found += [f"{node.lineno}: import {name}" for name in names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "tests":
                found.append(f"{node.lineno}: from {node.module} import ...")
            if node.module == "sys" and any(alias.name == "path" for alias in node.names):
                found.append(f"{node.lineno}: from sys import path")
        elif isinstance(node, ast.Attribute) and node.attr == "path":
            if isinstance(node.value, ast.Name) and node.value.id == "sys":
                found.append(f"{node.lineno}: sys.path")
    return found


def test_no_bench_module_imports_tests_or_edits_sys_path() -> None:
    assert len(BENCH_MODULES) > 10  # the scan sees the benchmarks, not an empty directory
    offending = {path.name: found for path in BENCH_MODULES if (found := _offences(path))}
    assert offending == {}


def test_the_bench_package_imports_from_outside_the_checkout(tmp_path: Path) -> None:
    # a fresh interpreter in another directory: the package must come from the install
    # (the editable one maps it to bench/), and importing it pulls in neither the test
    # suite nor Ray, nor does the module both share with the tests
    code = (
        "import json, sys\n"
        "import bench, bench.__main__, passinfra.testing\n"
        "print(json.dumps({'file': bench.__file__, 'main': callable(bench.__main__.main),\n"
        "                  'loaded': sorted(n for n in ('ray', 'tests') if n in sys.modules)}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(result["file"]).resolve() == ROOT / "bench" / "__init__.py"
    assert result["main"] is True
    assert result["loaded"] == []

"""Where the scheduler's parts live: ``workers`` is what runs inside a worker actor and
imports nothing of the driver's side; starting workers and reaching them is
``scheduler.pool``'s, in one place."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_workers_import_nothing_of_the_scheduler():
    offending = {
        path.name: sorted(name for name in _imported_modules(path) if name.split(".")[0] == "scheduler")
        for path in sorted((ROOT / "workers").glob("*.py"))
    }
    assert {name: found for name, found in offending.items() if found} == {}


def test_worker_start_up_and_pool_handling_live_in_scheduler_pool():
    pool_modules = {path.stem for path in (ROOT / "scheduler" / "pool").glob("*.py")} - {"__init__"}
    assert {"startup", "daemon", "ray_runtime", "slots", "transport", "gateway"} <= pool_modules
    elsewhere = [path.relative_to(ROOT).as_posix() for package in ("scheduler", "workers")
                 for path in (ROOT / package).glob("*.py")
                 if path.stem in pool_modules | {"pool", "pool_daemon"}]
    assert elsewhere == []

"""The API reference pages (docs/api/*.md) are what docs/api/generate.py makes from the
current docstrings and signatures: a change to either must come with the regenerated
pages (``python docs/api/generate.py``)."""

from __future__ import annotations

import difflib
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "docs" / "api" / "generate.py"


def _generator():
    spec = importlib.util.spec_from_file_location("raypass_api_reference", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_reference_is_current():
    problems = []
    for path, text in _generator().expected_pages().items():
        current = path.read_text() if path.exists() else ""
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(), text.splitlines(), f"docs/api/{path.name}", "generated", lineterm=""
            )
            problems.append("\n".join(list(diff)[:40]))
    assert not problems, (
        "the API reference is out of date; run `python docs/api/generate.py`\n\n" + "\n\n".join(problems)
    )


def test_every_page_is_in_the_index():
    pages = sorted(path.name for path in (ROOT / "docs" / "api").glob("*.md"))
    index = (ROOT / "docs" / "api" / "index.md").read_text()
    assert pages and all(name in index for name in pages if name != "index.md")

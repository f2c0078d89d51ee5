"""The API reference pages (docs/api/*.md) are what docs/api/generate.py makes from the
current docstrings and signatures: a change to either must come with the regenerated
pages (``python docs/api/generate.py``)."""

from __future__ import annotations

import difflib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "docs" / "api" / "generate.py"


def _expected_pages() -> dict[str, str]:
    """The pages the generator makes, from a fresh interpreter: in this process other tests
    register node kinds and passes of their own (test_node_schema adds visit_* methods to
    the functors), which would show up in the reference."""
    code = (
        "import json, runpy, sys; pages = runpy.run_path(sys.argv[1])['expected_pages']();"
        "print(json.dumps({path.name: text for path, text in pages.items()}))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(GENERATOR)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_api_reference_is_current():
    problems = []
    for name, text in _expected_pages().items():
        path = ROOT / "docs" / "api" / name
        current = path.read_text() if path.exists() else ""
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(), text.splitlines(), f"docs/api/{name}", "generated", lineterm=""
            )
            problems.append("\n".join(list(diff)[:40]))
    assert not problems, (
        "the API reference is out of date; run `python docs/api/generate.py`\n\n" + "\n\n".join(problems)
    )


def test_every_page_is_in_the_index():
    pages = sorted(path.name for path in (ROOT / "docs" / "api").glob("*.md"))
    index = (ROOT / "docs" / "api" / "index.md").read_text()
    assert pages and all(name in index for name in pages if name != "index.md")

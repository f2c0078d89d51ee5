"""The README and the pages of ``docs/`` hold together: every relative link reaches a file
(and a heading, where it names one), the README's Python example is one the guide test
runs, and the README's two commands are the Makefile's. Reads files only: fast."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]

# [text](target) outside code; an image's ![alt](target) too
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*```")


def _prose(text: str) -> str:
    """``text`` without its fenced blocks and inline code spans (links there are not links)."""
    lines, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
            lines.append("")
            continue
        lines.append("" if inside else line)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", "\n".join(lines), flags=re.S)


def heading_anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of a markdown text: lower case, punctuation
    but ``-`` and ``_`` dropped, spaces turned into ``-``, a repeat numbered ``-1``, ``-2``."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    inside = False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
            continue
        match = None if inside else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match is None:
            continue
        slug = re.sub(r"[^\w\- ]", "", match[1].strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def relative_links(text: str) -> list[str]:
    targets = [match[1] for match in LINK.finditer(_prose(text))]
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]


def test_link_helpers():
    text = (
        "# The `raypass` command line\n## Caches\n## Caches\n### 4. What a run reports: `last_run`\n"
        "see [a](b.md#caches), ![p](img.png \"t\"), [x](https://e.org/y), `[no](c.md)`\n"
        "```text\n[no](d.md)\n# not a heading\n```\n"
    )
    assert heading_anchors(text) == {
        "the-raypass-command-line", "caches", "caches-1", "4-what-a-run-reports-last_run"
    }
    assert relative_links(text) == ["b.md#caches", "img.png"]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_relative_links_resolve(page: Path):
    text = page.read_text()
    broken = []
    for target in relative_links(text):
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(f"{target}: no file {destination}")
        elif anchor and destination.suffix == ".md" and anchor not in heading_anchors(
            destination.read_text()
        ):
            broken.append(f"{target}: no heading #{anchor} in {destination.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)} links to what is not there:\n" + "\n".join(broken)


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)


def test_readme_example_is_run_by_the_python_api_guide():
    """The README's Python example is run (and its output checked) by the guide test as a
    block of docs/python_api.md: the two must stay word for word the same."""
    examples = _python_blocks(README.read_text())
    assert examples, "the README shows no Python example"
    guide_blocks = _python_blocks((ROOT / "docs" / "python_api.md").read_text())
    for example in examples:
        assert example in guide_blocks, (
            "a Python block of the README is not a block of docs/python_api.md, so nothing runs "
            "it; change both together:\n" + example
        )


def test_readme_commands_are_the_makefiles():
    """A newcomer's two commands: the README shows `make demo` and `make test`, and the
    Makefile has both targets."""
    readme = README.read_text()
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo", "test"):
        assert re.search(rf"^make {target}\b", readme, re.M), f"the README lost `make {target}`"
        assert re.search(rf"^{target}:", makefile, re.M), f"the Makefile has no `{target}` target"
    assert re.search(r"^## Layout$", readme, re.M), "the README lost its `## Layout` section"

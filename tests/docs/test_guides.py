"""Every code block of the guides (``docs/*.md``) runs, and every output they show is
the output the code produces; the reference pages among them show no code that does not.

The convention the guides are written in:

* ```` ```python ```` a block of Python; the blocks of a guide run in order in one fresh
  interpreter, in the namespace of a fresh ``__main__`` (as the lines of one script);
* ```` ```sh ```` shell commands (``raypass ...``, ``python ...``), run with bash in the
  guide's working directory, with this environment's ``raypass`` and ``python`` first on
  ``PATH``; a command that fails fails the guide (a guide shows an expected failure
  with ``... || echo "exit status $?"``);
* ```` ```python file=NAME ```` (any language) a file the reader saves: written to NAME in
  the working directory, not run;
* ```` ```output ```` right after a python or sh block: what that block prints (stdout
  and stderr as they interleave). A runnable block with no output block must print
  nothing. Any other fence is an error, so no block goes unchecked.

The reference pages (``REFERENCE_PAGES``: the command line, the architecture, ...) are
the pages of ``docs/`` that are not guides: they run nothing, and their only code blocks
are ```` ```text ```` ones, things shown as they are (a recorded run's output, a map of
the files); a block of Python or shell there would be code nobody runs, so it is an error
(such a block belongs in a guide).

The blocks run in a subprocess (``tests/docs/guide_runner.py``): a fresh interpreter
per guide, so what one guide registers (passes, config keys) never reaches another
guide, nor this test process. Every guide gets a new, empty working directory (removed
afterwards), its own kernel cache (``XDG_CACHE_HOME``), its own warm-pool directory
(``RAYPASS_POOL_DIR``) and an 80-column terminal (``COLUMNS``); Ray state goes to the
session's private ``RAY_TMPDIR`` (tests/conftest.py). Whatever a guide starts is stopped
even when it fails: a warm pool left in its pool directory, and every process in the
runner's process group.

How outputs are compared (the normalization rules):

1. trailing whitespace of every line, and blank lines at the start and end, are ignored;
2. in a shown output, ``...`` inside a line matches any text within that line (times,
   pids, paths, addresses), and a line that is only ``...`` matches any number of
   whole lines (zero or more), as doctest's ELLIPSIS does;
3. nothing else: every other character must match.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RUNNER = Path(__file__).with_name("guide_runner.py")
BIN = Path(sys.executable).parent
# the pages of docs/ that are reference, not guides: only ```text blocks, nothing to run
REFERENCE_PAGES = ("architecture.md", "benchmarks.md", "cli.md", "codegen.md", "onnx_conformance.md")
GUIDES = sorted(page for page in DOCS.glob("*.md") if page.name not in REFERENCE_PAGES)
GUIDE_TIMEOUT = 400.0  # seconds for all blocks of one guide (a stuck block must not hang CI)

RUNNABLE = ("python", "sh")
FENCE = re.compile(r"^```(?P<info>.*)$")


class GuideFormatError(Exception):
    """A guide's code blocks break the convention described in the module docstring."""


@dataclass
class Block:
    kind: str  # "python", "sh" or "file"
    code: str
    line: int  # of the opening fence, 1-based
    guide: str
    path: str | None = None  # for a file block
    expected: str | None = None  # the output block that follows, if any
    expected_line: int = 0

    @property
    def where(self) -> str:
        return f"{self.guide}:{self.line}"


def parse_blocks(text: str, guide: str) -> list[Block]:
    """The fenced blocks of a guide, each output block attached to its runnable block."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    previous_was_output = False
    while index < len(lines):
        match = FENCE.match(lines[index])
        if match is None:
            if lines[index].lstrip().startswith("```"):
                raise GuideFormatError(f"{guide}:{index + 1}: fences start at column 0 in the guides")
            index += 1
            continue
        start = index
        index += 1
        body: list[str] = []
        while index < len(lines) and lines[index] != "```":
            body.append(lines[index])
            index += 1
        if index == len(lines):
            raise GuideFormatError(f"{guide}:{start + 1}: the code block is never closed")
        index += 1
        code = "\n".join(body) + "\n"
        info = match["info"].split()
        language = info[0] if info else ""
        options = dict(item.partition("=")[::2] for item in info[1:])
        if language == "output":
            previous = blocks[-1] if blocks else None
            if previous is None or previous.kind not in RUNNABLE or previous_was_output:
                raise GuideFormatError(
                    f"{guide}:{start + 1}: an output block must follow a python or sh block"
                )
            previous.expected, previous.expected_line = code, start + 1
            previous_was_output = True
            continue
        previous_was_output = False
        if "file" in options:
            blocks.append(Block("file", code, start + 1, guide, path=options["file"]))
        elif language in RUNNABLE and not options:
            blocks.append(Block(language, code, start + 1, guide))
        else:
            raise GuideFormatError(
                f"{guide}:{start + 1}: unknown code block {match['info']!r}; use python, sh, output "
                "or LANGUAGE file=NAME"
            )
    return blocks


# ----- comparing outputs ---------------------------------------------------------------------
def _normalized_lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def output_pattern(expected: str) -> re.Pattern[str]:
    """The regular expression a shown output stands for (rules 1-3 of the docstring)."""
    parts = []
    for line in _normalized_lines(expected):
        if line == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(piece) for piece in line.split("...")) + r"\n")
    return re.compile("".join(parts))


def output_matches(expected: str, actual: str) -> bool:
    text = "".join(line + "\n" for line in _normalized_lines(actual))
    return output_pattern(expected).fullmatch(text) is not None


def test_output_rules():
    """The normalization rules themselves, so a guide cannot pass by a loose matcher."""
    assert output_matches("a: ...us\n", "a: 12us   \n\n")
    assert not output_matches("a: ...us\n", "a: 12us\nb\n")  # `...` in a line stays in it
    assert output_matches("first\n...\nlast\n", "first\nx\ny\nlast\n")
    assert output_matches("first\n...\nlast\n", "first\nlast\n")
    assert not output_matches("first\nlast\n", "first\nx\nlast\n")
    assert not output_matches("value 1\n", "value 2\n")
    assert not output_matches("", "something\n")
    assert output_matches("(1.5)\n", "(1.5)\n")  # regex characters are literal


def test_block_format():
    text = "```python\nprint(1)\n```\n\n```output\n1\n```\n```sh\nls\n```\n```python file=a.py\nx = 1\n```\n"
    blocks = parse_blocks(text, "g.md")
    assert [(b.kind, b.code, b.expected, b.path) for b in blocks] == [
        ("python", "print(1)\n", "1\n", None), ("sh", "ls\n", None, None), ("file", "x = 1\n", None, "a.py")
    ]
    with pytest.raises(GuideFormatError, match="unknown code block"):
        parse_blocks("```yaml\na: 1\n```\n", "g.md")
    with pytest.raises(GuideFormatError, match="must follow"):
        parse_blocks("```python file=a.py\nx\n```\n```output\nx\n```\n", "g.md")


# ----- running a guide ---------------------------------------------------------------------------
def _guide_env(workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["XDG_CACHE_HOME"] = str(workdir / ".cache")
    env["RAYPASS_POOL_DIR"] = str(workdir / ".pool")
    env["COLUMNS"] = "80"  # a standard terminal: what pytest and rich lay out to
    env.pop("PYTHONPATH", None)  # the reader's environment: raypass is installed, nothing else
    return env


def _stop_leftovers(runner: subprocess.Popen, env: dict[str, str]) -> None:
    """Stop what a guide may have left: its warm pool, then its whole process group."""
    if (Path(env["RAYPASS_POOL_DIR"]) / "pool.json").exists():
        subprocess.run([str(BIN / "raypass"), "pool", "stop"], env=env, capture_output=True, timeout=120)
    try:
        os.killpg(runner.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(runner.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(runner.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_guide(blocks: list[Block]) -> tuple[list[dict], str]:
    """Run ``blocks`` in a fresh interpreter in a new directory: (results per block, the
    runner's own stderr)."""
    workdir = Path(tempfile.mkdtemp(prefix="rp-guide-"))
    env = _guide_env(workdir)
    control = Path(tempfile.mkdtemp(prefix="rp-guide-control-"))
    blocks_path, results_path = control / "blocks.json", control / "results.json"
    blocks_path.write_text(json.dumps(
        [{"kind": b.kind, "code": b.code, "path": b.path, "where": b.where} for b in blocks]
    ))
    runner = subprocess.Popen(
        [sys.executable, str(RUNNER), str(blocks_path), str(results_path)],
        cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # its own process group: everything it starts can be stopped
    )
    try:
        try:
            log, _ = runner.communicate(timeout=GUIDE_TIMEOUT)
        except subprocess.TimeoutExpired:
            _stop_leftovers(runner, env)
            log, _ = runner.communicate()
            log += f"\n(the guide did not finish within {GUIDE_TIMEOUT:.0f}s)"
        results = json.loads(results_path.read_text()) if results_path.exists() else []
    finally:
        _stop_leftovers(runner, env)
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(control, ignore_errors=True)
    return results, log


@pytest.mark.parametrize("guide", GUIDES, ids=[guide.name for guide in GUIDES])
def test_guide_runs_and_shows_its_real_output(guide: Path):
    blocks = parse_blocks(guide.read_text(), guide.name)
    assert any(block.kind in RUNNABLE for block in blocks), f"{guide.name} has no runnable block"
    results, log = run_guide(blocks)
    problems: list[str] = []
    for block, result in zip(blocks, results):
        if result["error"] is not None:
            problems.append(
                f"{block.where}: the block failed\n--- code ---\n{block.code}--- output ---\n"
                f"{result['output']}--- error ---\n{result['error']}"
            )
            break
        if block.kind == "file":
            continue
        expected = block.expected if block.expected is not None else ""
        if not output_matches(expected, result["output"]):
            shown = f"the output block at {guide.name}:{block.expected_line}" if block.expected else "nothing"
            problems.append(
                f"{block.where}: the output differs from {shown}\n--- shown ---\n{expected}"
                f"--- printed ---\n{result['output']}"
            )
    if not problems and len(results) < len(blocks):
        problems.append(f"the run stopped after {len(results)} of {len(blocks)} blocks:\n{log[-4000:]}")
    if problems:
        slowest = sorted(results, key=lambda result: -result.get("seconds", 0.0))[:3]
        problems.append("slowest blocks: " + ", ".join(f"{r['where']} {r['seconds']}s" for r in slowest))
    assert not problems, "\n\n".join(problems)


def test_the_guides_exist():
    """The guides the README links (an empty docs/ would otherwise pass by running nothing)."""
    names = {guide.name for guide in GUIDES}
    assert {"writing_a_pass.md", "instrumenting_passes.md", "running_on_workers.md", "python_api.md"} <= names


def shown_blocks(text: str, page: str) -> list[int]:
    """The lines of a reference page's code blocks (each a ```` ```text ```` block); any
    other fence is a GuideFormatError."""
    lines = text.splitlines()
    starts: list[int] = []
    inside = False
    for number, line in enumerate(lines, 1):
        if not line.lstrip().startswith("```"):
            continue
        if inside:
            if line != "```":
                raise GuideFormatError(f"{page}:{number}: a block ends with a bare ``` at column 0")
            inside = False
        elif line != "```text":
            raise GuideFormatError(
                f"{page}:{number}: a reference page shows code only in ```text blocks, and runs "
                f"none ({line.strip()!r}); code to run belongs in a guide"
            )
        else:
            starts.append(number)
            inside = True
    if inside:
        raise GuideFormatError(f"{page}:{starts[-1]}: the code block is never closed")
    return starts


def test_shown_blocks_format():
    assert shown_blocks("a\n```text\nx = 1\n```\nb\n", "r.md") == [2]
    for bad in ("```python\nx\n```\n", "```sh\nls\n```\n", "```\nx\n```\n", "```text\nx\n"):
        with pytest.raises(GuideFormatError):
            shown_blocks(bad, "r.md")


@pytest.mark.parametrize("name", REFERENCE_PAGES)
def test_reference_page_runs_nothing_unchecked(name: str):
    page = DOCS / name
    assert page.exists(), f"docs/{name} is listed as a reference page but does not exist"
    shown_blocks(page.read_text(), name)

"""Runs the code blocks of one guide, in order, as a reader would: the subprocess side of
``tests/docs/test_guides.py``.

    python guide_runner.py BLOCKS.json RESULTS.json      (working directory: the guide's own)

BLOCKS.json is the list of blocks the test extracted (``kind``: ``python``, ``sh`` or
``file``; ``code``; ``path`` for a file; ``where``: ``guide.md:LINE``). Each block runs
in this one fresh interpreter:

* ``python``: executed in the namespace of a fresh ``__main__`` module, as the lines of
  a script would be (so classes and functions defined in a guide pickle by value to Ray
  workers, exactly as in a reader's script), with the working directory first on
  ``sys.path`` (so ``import my_passes`` finds a file an earlier block wrote);
* ``sh``: ``bash -e -o pipefail -c CODE`` in the working directory;
* ``file``: written to ``path`` under the working directory.

What a block prints (stdout and stderr, interleaved as written) is recorded, with the
seconds it took (the test names the slowest blocks when a guide runs long). The first
block that raises (or a command that exits non-zero) stops the run: later blocks build
on it. RESULTS.json is rewritten after every block, so a run killed by the test's
timeout still says how far it got.
"""

from __future__ import annotations

import contextlib
import io
import json
import linecache
import os
import subprocess
import sys
import time
import traceback
import types
from pathlib import Path

SHELL_TIMEOUT = 240.0


def _run_python(code: str, where: str, module: types.ModuleType) -> tuple[str, str | None]:
    lines = code.splitlines(keepends=True)
    # tracebacks then show the guide's own lines
    linecache.cache[where] = (len(code), None, lines, where)
    captured = io.StringIO()
    error = None
    try:
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            exec(compile(code, where, "exec"), module.__dict__)
    except BaseException:  # noqa: BLE001  (reported to the test, which fails)
        error = traceback.format_exc()
    return captured.getvalue(), error


def _run_shell(code: str) -> tuple[str, str | None]:
    try:
        done = subprocess.run(
            ["bash", "-e", "-o", "pipefail", "-c", code],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            timeout=SHELL_TIMEOUT,
        )
    except subprocess.TimeoutExpired as expired:
        output = expired.stdout or ""
        output = output.decode() if isinstance(output, bytes) else output
        return output, f"the commands did not finish within {SHELL_TIMEOUT:.0f}s"
    error = None if done.returncode == 0 else f"the commands exited with status {done.returncode}"
    return done.stdout, error


def main(blocks_path: str, results_path: str) -> int:
    blocks = json.loads(Path(blocks_path).read_text())
    # a fresh __main__, as in `python script.py`: what the guide defines lives there
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = module
    sys.path[0] = os.getcwd()
    results: list[dict[str, object]] = []
    for block in blocks:
        kind = block["kind"]
        started = time.perf_counter()
        if kind == "file":
            target = Path(block["path"])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block["code"])
            output, error = "", None
        elif kind == "python":
            output, error = _run_python(block["code"], block["where"], module)
        else:
            output, error = _run_shell(block["code"])
        seconds = round(time.perf_counter() - started, 2)
        results.append({"where": block["where"], "output": output, "error": error, "seconds": seconds})
        Path(results_path).write_text(json.dumps(results))
        if error is not None:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))

"""Running the ``raypass`` console script in a subprocess, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RAYPASS = Path(sys.executable).with_name("raypass")


@pytest.fixture
def raypass(tmp_path):
    """``raypass(*args, cwd=None)`` -> CompletedProcess with text stdout/stderr."""

    def run(*args: str, cwd: str | Path | None = None, timeout: float = 240,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        # RAY_ADDRESS=local: a private Ray instance, never one another process left running
        # (ray.init without an address attaches to any Ray found on the machine)
        env = dict(os.environ, COLUMNS="200", RAY_ADDRESS="local", **(env or {}))
        return subprocess.run(
            [str(RAYPASS), *map(str, args)],
            capture_output=True,
            text=True,
            cwd=cwd or tmp_path,
            env=env,
            timeout=timeout,
        )

    return run


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def table_rows(text: str, title: str) -> dict[str, list[str]]:
    """The body rows of the rich table titled ``title``: first cell -> the other cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(title))
    rows: dict[str, list[str]] = {}
    for line in lines[start + 1 :]:
        if line.startswith("└"):
            break
        if line.startswith("│"):
            cells = [cell.strip() for cell in line.strip("│").split("│")]
            rows[cells[0]] = cells[1:]
    return rows


@pytest.fixture
def raypass_inprocess(capsys, tmp_path, monkeypatch):
    """``raypass_inprocess(*args)`` -> (exit status, stdout, stderr), run through
    ``raypass_cli.main.main`` in this process (cheap: no interpreter start-up, no imports)."""
    from raypass_cli import main as cli

    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        status = cli.main([str(arg) for arg in args])
        out, err = capsys.readouterr()
        return status, out, err

    return run

"""Text parser (owned by the printer/parser helper; stub)."""

from __future__ import annotations

from typing import Any


def parse(text: str) -> Any:
    raise NotImplementedError("parser not written yet")

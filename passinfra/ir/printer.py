"""Text printer (owned by the printer/parser helper; stub)."""

from __future__ import annotations

from typing import Any


def astext(node: Any, show_meta_data: bool = True) -> str:
    raise NotImplementedError("printer not written yet")


def type_to_text(ty: Any) -> str:
    raise NotImplementedError("printer not written yet")

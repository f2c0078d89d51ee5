"""Type inference over expressions, functions and modules (owned by a helper; stub)."""

from __future__ import annotations

from typing import Any


def infer_type(node: Any, mod: Any = None) -> Any:
    raise NotImplementedError

"""Flat wire format for pickling IR (owned by a helper; stub)."""

from __future__ import annotations

from typing import Any


def reduce_node(node: Any, protocol: int) -> Any:
    raise NotImplementedError("serialization not written yet")

"""Structural equality and hashing (owned by a helper; stub)."""

from __future__ import annotations

from typing import Any


def structural_equal(a: Any, b: Any, map_free_vars: bool = False) -> bool:
    raise NotImplementedError


def structural_hash(node: Any, map_free_vars: bool = False) -> int:
    raise NotImplementedError


def assert_structural_equal(a: Any, b: Any, map_free_vars: bool = False) -> None:
    raise NotImplementedError

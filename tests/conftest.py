"""Fixtures shared across the test suite.

``tests`` is a package (tests/__init__.py), so pytest puts the project root on sys.path
and test modules import shared helpers as ``from tests.strategies import ...``.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

PYTHON_DEFAULT_RECURSION_LIMIT = 1000


@pytest.fixture(scope="module")
def default_recursion_limit() -> Iterator[int]:
    """Run a test module under Python's default recursion limit, whatever raised it
    before (deep-IR code must not depend on a raised limit)."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(PYTHON_DEFAULT_RECURSION_LIMIT)
    try:
        yield PYTHON_DEFAULT_RECURSION_LIMIT
    finally:
        sys.setrecursionlimit(previous)

"""``pushed(stack, item)``: an item on a per-thread stack for the length of a ``with`` block.

Collectors that code deeper in the call stack reports into (the facts of a run, the
products of a link step) live on thread-local stacks; nested blocks push their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")


@contextmanager
def pushed(stack: list[T], item: T) -> Iterator[T]:
    """Push ``item`` on ``stack`` while the block runs, then remove that very object
    (by identity: collectors that are still empty compare equal to each other)."""
    stack.append(item)
    try:
        yield item
    finally:
        del stack[next(i for i, entry in enumerate(stack) if entry is item)]


__all__ = ["pushed"]

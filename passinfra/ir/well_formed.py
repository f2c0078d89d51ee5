"""Well-formedness verifier (owned by a helper; stub)."""

from __future__ import annotations

from typing import Any


def verify_well_formed(node: Any) -> None:
    raise NotImplementedError

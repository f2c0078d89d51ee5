"""Tensor-level op builders (owned by the ops helper; stub)."""

__all__: list[str] = []

"""Immutable attribute mappings for calls and functions."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from passinfra.errors import IRError
from passinfra.ir.dims import SymDim


def freeze_value(value: Any) -> Any:
    """Turn an attribute value into an immutable, hashable, picklable one.

    Lists become tuples, NumPy scalars become Python scalars; strings, bytes (e.g. object
    code a compile pass attaches to a kernel), numbers, bools, None, types and symbolic
    dimensions (:mod:`passinfra.ir.dims`: a slice end or range stop that is a run-time
    size) pass through. Anything else is rejected, because an attribute that
    could change would break the IR's immutability.
    """
    from passinfra.ir.types import Type

    if value is None or isinstance(value, (bool, int, float, str, bytes, Type, SymDim)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return tuple(freeze_value(v) for v in value)
    if isinstance(value, np.ndarray) and value.ndim <= 1 and value.size <= 64:
        return tuple(v.item() for v in value.reshape(-1)) if value.ndim else value.item()
    raise IRError(f"attribute value {value!r} of type {type(value).__name__} is not allowed")


class Attrs(Mapping):
    """A read-only, hashable mapping from attribute names to frozen values.

    Keys keep their insertion order, which the printer shows; equality and hashing
    ignore order. :attr:`has_dims` says whether a value holds a symbolic dimension
    (computed once: the interpreter asks at every call).
    """

    # each item's hash and whether it holds a dimension are kept per key, so that
    # with_item (a pass adding one attribute to a kernel that carries its C source, its
    # numbers and its object code) costs the new value, not every value again
    __slots__ = ("_items", "_hash", "_item_hashes", "_dims_keys")

    def __init__(self, items: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        merged: dict[str, Any] = {}
        for source in (items or {}), kwargs:
            for key, value in source.items():
                if not isinstance(key, str):
                    raise IRError(f"attribute names must be strings, got {key!r}")
                merged[key] = freeze_value(value)
        hashes = {key: hash(_hashable(value)) for key, value in merged.items()}
        self._set(merged, hashes, frozenset(key for key, value in merged.items() if holds_dims(value)))

    def _set(self, items: dict[str, Any], hashes: dict[str, int], dims_keys: frozenset[str]) -> None:
        object.__setattr__(self, "_items", items)
        object.__setattr__(self, "_item_hashes", hashes)
        object.__setattr__(self, "_hash", hash(frozenset(hashes.items())))
        object.__setattr__(self, "_dims_keys", dims_keys)

    @property
    def has_dims(self) -> bool:
        """Whether a value (or an item of a tuple value) is a symbolic dimension."""
        return bool(self._dims_keys)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError("Attrs is immutable")

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Attrs):
            return self._hash == other._hash and _eq_items(self._items, other._items)
        if isinstance(other, Mapping):
            return _eq_items(self._items, dict(other))
        return NotImplemented

    def with_item(self, key: str, value: Any) -> Attrs:
        """A new Attrs with ``key`` set to ``value`` (only that value frozen and hashed)."""
        if not isinstance(key, str):
            raise IRError(f"attribute names must be strings, got {key!r}")
        frozen = freeze_value(value)
        result = object.__new__(Attrs)
        dims_keys = self._dims_keys | {key} if holds_dims(frozen) else self._dims_keys - {key}
        hashes = {**self._item_hashes, key: hash(_hashable(frozen))}
        result._set({**self._items, key: frozen}, hashes, dims_keys)
        return result

    def __repr__(self) -> str:
        return f"Attrs({self._items!r})"

    def __reduce__(self):
        return (Attrs, (self._items,))


def holds_dims(value: Any) -> bool:
    """Whether a frozen attribute value is, or (in tuples) holds, a symbolic dimension."""
    if isinstance(value, SymDim):
        return True
    return isinstance(value, tuple) and any(holds_dims(v) for v in value)


def map_dims(value: Any, fn: Callable[[SymDim], Any]) -> Any:
    """A frozen attribute value with each symbolic dimension in it (in tuples too)
    replaced by ``fn(dimension)``."""
    if isinstance(value, SymDim):
        return fn(value)
    if isinstance(value, tuple):
        return tuple(map_dims(item, fn) for item in value)
    return value


def _hashable(value: Any) -> Any:
    # float NaN would make an attribute unequal to itself; attributes never hold NaN
    return value


def _eq_items(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    # 1 == 1.0 == True in Python; attribute values of different kinds are different
    return all(type(a[k]) is type(b[k]) and a[k] == b[k] for k in a)


EMPTY_ATTRS = Attrs()


def as_attrs(value: Mapping[str, Any] | None) -> Attrs:
    if value is None:
        return EMPTY_ATTRS
    if isinstance(value, Attrs):
        return value
    if isinstance(value, Mapping):
        return Attrs(value)
    raise IRError(f"attrs must be a mapping, got {type(value).__name__}")

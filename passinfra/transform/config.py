"""Typed PassContext configuration: keys are registered with a type before use.

The scheduler, the code generator and the built-in passes register their own keys
(``register_config("tir.UnrollLoop", dict)``, ...), so a typo in a key is caught when the
PassContext is built rather than silently ignored by the pass that would have read it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from passinfra.transform.errors import PassConfigError, PassConfigTypeError

_CONFIG_TYPES: dict[str, type] = {}
_CONFIG_CHOICES: dict[str, tuple[Any, ...]] = {}  # keys that accept only some values
_LOCK = threading.Lock()


def register_config(key: str, value_type: type, choices: Iterable[Any] | None = None) -> None:
    """Declare the config ``key`` with values of ``value_type``; ``choices``, when given,
    are the only values it accepts (a value is legalized to the type, then checked).

    Registering a key again with the same type is a no-op (modules may be re-imported;
    choices registered before are kept); with a different type it raises PassConfigError.
    """
    if not isinstance(key, str) or not key:
        raise PassConfigError(f"config keys are non-empty strings, got {key!r}")
    if not isinstance(value_type, type):
        raise PassConfigError(f"config {key!r} needs a type, got {value_type!r}")
    with _LOCK:
        known = _CONFIG_TYPES.get(key)
        if known is not None and known is not value_type:
            raise PassConfigError(
                f"config {key!r} is already registered with type {known.__name__}, "
                f"cannot re-register it with type {value_type.__name__}"
            )
        _CONFIG_TYPES[key] = value_type
        if choices is not None:
            _CONFIG_CHOICES[key] = tuple(choices)


def list_configs() -> dict[str, dict[str, str]]:
    """Every registered key and its type name: ``{key: {"type": name}}``."""
    return {key: {"type": _CONFIG_TYPES[key].__name__} for key in sorted(_CONFIG_TYPES)}


def legalize_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check every key is registered and convert each value to the key's type."""
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise PassConfigTypeError(f"PassContext config must be a mapping, got {type(config).__name__}")
    return {key: legalize_value(key, value) for key, value in config.items()}


def config_type(key: str) -> type:
    """The registered type of ``key``; ValueError naming it and the known keys if unknown."""
    try:
        return _CONFIG_TYPES[key]
    except (KeyError, TypeError):
        known = ", ".join(sorted(_CONFIG_TYPES)) or "none registered"
        raise PassConfigError(f"unknown PassContext config key {key!r}; known keys: {known}") from None


def legalize_value(key: str, value: Any) -> Any:
    """``value`` converted to the registered type of ``key``, or PassConfigTypeError."""
    expected = config_type(key)
    converted = _convert(expected, value)
    if converted is _REJECTED:
        raise PassConfigTypeError(
            f"config {key!r} expects a value of type {expected.__name__}, "
            f"got {value!r} of type {type(value).__name__}"
        )
    choices = _CONFIG_CHOICES.get(key)
    if choices is not None and converted not in choices:
        raise PassConfigError(
            f"config {key!r} must be one of {', '.join(repr(c) for c in choices)}; got {value!r}"
        )
    return converted


_REJECTED = object()


def _convert(expected: type, value: Any) -> Any:
    # bool is an int in Python, and ints are floats by promotion: decide each case on
    # purpose so that e.g. True never silently becomes opt_level 1.
    if expected is bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if isinstance(value, (int, np.integer)) and value in (0, 1):
            return bool(value)
        return _REJECTED
    if expected is int:
        if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            return int(value)
        return _REJECTED
    if expected is float:
        is_number = isinstance(value, (int, float, np.integer, np.floating))
        if is_number and not isinstance(value, (bool, np.bool_)):
            return float(value)
        return _REJECTED
    if expected in (list, tuple) and isinstance(value, (list, tuple)):
        return tuple(value) if expected is tuple else list(value)
    return value if isinstance(value, expected) else _REJECTED

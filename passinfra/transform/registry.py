"""The pass registry: pass names -> zero-argument factories that build the pass.

``required`` names in PassInfo are resolved here, and the CLI lists the registry.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import TypeVar

from passinfra.transform.errors import PassNotFoundError, PassRegistrationError, PassReturnTypeError
from passinfra.transform.passes import Pass

PassFactory = Callable[[], Pass]
F = TypeVar("F", bound=Callable[[], Pass])

_FACTORIES: dict[str, PassFactory] = {}
_LOCK = threading.Lock()


def register_pass(name: str, override: bool = False) -> Callable[[F], F]:
    """Decorator registering a zero-argument pass factory under ``name``.

    A name registered twice raises unless ``override=True``. The factory is returned
    unchanged, so ``InferType()`` keeps working as a plain call.
    """
    if not isinstance(name, str) or not name:
        raise PassRegistrationError(f"a pass is registered under a non-empty name, got {name!r}")

    def decorate(factory: F) -> F:
        if not callable(factory):
            raise PassRegistrationError(f"pass {name!r}: register_pass decorates a factory, got {factory!r}")
        if not _callable_without_arguments(factory):
            raise PassRegistrationError(
                f"pass {name!r}: the factory {getattr(factory, '__name__', factory)!r} must be callable "
                "with no arguments"
            )
        with _LOCK:
            if name in _FACTORIES and not override:
                raise PassRegistrationError(
                    f"pass {name!r} is already registered (pass override=True to replace it)"
                )
            _FACTORIES[name] = factory
        return factory

    return decorate


def unregister_pass(name: str) -> None:
    """Remove ``name`` from the registry (tests and plugins that undo a registration)."""
    with _LOCK:
        if _FACTORIES.pop(name, None) is None:
            raise PassNotFoundError(_unknown_message(name))


def get_pass(name: str) -> Pass:
    """A new instance of the pass registered as ``name``."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise PassNotFoundError(_unknown_message(name))
    result = factory()
    if not isinstance(result, Pass):
        raise PassReturnTypeError(
            f"the factory of pass {name!r} returned {type(result).__name__}, not a Pass"
        )
    return result


def registered_factory(name: str) -> PassFactory:
    """The factory registered as ``name`` (PassNotFoundError when there is none)."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise PassNotFoundError(_unknown_message(name))
    return factory


def is_registered(name: str) -> bool:
    return name in _FACTORIES


def list_passes() -> list[str]:
    """The registered pass names, sorted."""
    return sorted(_FACTORIES)


def _unknown_message(name: str) -> str:
    known = ", ".join(sorted(_FACTORIES)) or "none"
    return f"unknown pass {name!r}; registered passes: {known}"


def _callable_without_arguments(factory: Callable) -> bool:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # some builtins have no signature; trust them
        return True
    try:
        signature.bind()
    except TypeError:
        return False
    return True

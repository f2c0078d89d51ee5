"""Errors raised by the pass infrastructure itself (not by the passes it runs).

An exception raised *inside* a pass keeps its own type and only gains a note naming the
pass; the classes here are for mistakes the infrastructure detects: a bad registration,
an unresolvable dependency, a pass returning the wrong thing, a misused context.
"""

from __future__ import annotations

# the base and the unknown-name error live in passinfra.errors (instruments raise the
# latter too); they are this module's names as well
from passinfra.errors import PassError, PassNotFoundError  # noqa: F401  (re-exported)


class PassRegistrationError(PassError, ValueError):
    """A pass name registered twice, or a factory that cannot be registered."""


class PassDependencyError(PassError):
    """The ``required`` passes of a pass cannot be resolved (unknown name or cycle)."""


class PassCycleError(PassDependencyError):
    """The ``required`` relation has a cycle; ``cycle`` lists the passes on it in order."""

    def __init__(self, message: str, cycle: list[str]) -> None:
        super().__init__(message)
        self.cycle = cycle


class PassArgumentError(PassError, TypeError):
    """A pass was given something other than an IRModule, or built from bad arguments."""


class PassReturnTypeError(PassError, TypeError):
    """A pass function returned the wrong kind of object."""


class FunctionSetChangedError(PassError):
    """A function pass tried to add or remove functions of the module."""


class PassContextError(PassError):
    """A PassContext was misused (e.g. contexts exited out of order)."""


class PassConfigError(PassError, ValueError):
    """An unknown config key, or a key registered twice with different types."""


class PassConfigTypeError(PassConfigError, TypeError):
    """A config value that cannot be legalized to its key's registered type."""


def add_note(error: BaseException, note: str) -> None:
    """Attach a PEP 678 note to ``error`` (works on Python 3.10 too)."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:  # pragma: no cover - Python 3.10 has no add_note; the traceback module reads __notes__
        error.__notes__ = [*getattr(error, "__notes__", []), note]  # type: ignore[attr-defined]

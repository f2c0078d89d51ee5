"""The project's exception hierarchy.

Every error raised on purpose by raypass derives from :class:`RaypassError`, so a caller
can catch the project's errors without catching Python's own. Where a built-in category
fits (a type error is a ``TypeError``, a bad value a ``ValueError``), the class derives
from that too, so generic handlers keep working.
"""

from __future__ import annotations


class RaypassError(Exception):
    """Base class of every error raypass raises on purpose."""


class IRError(RaypassError):
    """Malformed IR: a node built from the wrong pieces."""


class IRTypeError(IRError, TypeError):
    """A type check failed (op type relation, annotation mismatch, bad call)."""


class DimError(IRError, ValueError):
    """Symbolic dimension arithmetic that has no answer (a division that is not provably
    exact, a truth value that depends on the binding, a variable with no value)."""


class SymbolicSizeError(IRError):
    """A function with symbolic dimensions uses an op (or kernel plan) that cannot be
    compiled for sizes known only at run time yet; static sizes compile it."""


class WellFormedError(IRError):
    """The well-formedness verifier rejected a program (message shows the IR)."""


class ParseError(RaypassError, ValueError):
    """Text IR could not be parsed; carries the line and column."""

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        self.line = line
        self.column = column
        where = f"line {line}, column {column}: " if line else ""
        super().__init__(where + message)


class OpNotFoundError(RaypassError, KeyError):
    """An op name that is not in the registry."""

    def __str__(self) -> str:  # KeyError quotes its message; we want plain text
        return str(self.args[0]) if self.args else ""


class PassError(RaypassError):
    """Base class of every error the pass infrastructure raises on purpose (the rest of
    them are in :mod:`passinfra.transform.errors`)."""


class PassNotFoundError(PassError, KeyError):
    """A pass name that is not in the registry. Here, below both the pass infrastructure
    and the instruments that name passes, so neither imports the other for it."""

    def __str__(self) -> str:  # KeyError quotes its message; we want plain text
        return str(self.args[0]) if self.args else ""


class EvaluationError(RaypassError, RuntimeError):
    """The reference interpreter could not run a program."""

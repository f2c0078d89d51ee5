"""PassInfo: the name, optimization level and dependencies of a pass, and what it
declares about itself to whoever runs it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from passinfra.transform.errors import PassArgumentError


class PassInfo:
    """Immutable description of a pass.

    ``opt_level`` is the minimum ``PassContext.opt_level`` at which a Sequential runs the
    pass; ``required`` names (registry names) of passes that must run right before it.

    ``infers_types`` (keyword only) declares a module pass whose work is type inference:
    it caches the checked type of every function of the module (``infer_module``), and a
    pass that requires it reads those cached types. A parallel scheduler relies on the
    declaration, never on a pass's name: the function stage right before such a pass has
    its workers type what they return (types are caches on immutable nodes, so work done
    ahead is work the pass then finds done), and a stage whose passes require such a pass
    but would be handed an untyped function runs in the driver, which sees the callees.
    """

    __slots__ = ("opt_level", "name", "required", "infers_types")

    def __init__(
        self, opt_level: int, name: str, required: Iterable[str] = (), *, infers_types: bool = False
    ) -> None:
        if isinstance(opt_level, bool) or not isinstance(opt_level, int):
            raise PassArgumentError(f"PassInfo opt_level must be an int, got {opt_level!r}")
        if not isinstance(name, str) or not name:
            raise PassArgumentError(f"PassInfo name must be a non-empty string, got {name!r}")
        if not isinstance(infers_types, bool):
            raise PassArgumentError(f"PassInfo infers_types must be a bool, got {infers_types!r}")
        required = normalize_names(required, f"required passes of {name!r}")
        object.__setattr__(self, "opt_level", opt_level)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "required", required)
        object.__setattr__(self, "infers_types", infers_types)

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError("PassInfo is immutable")

    def _key(self) -> tuple[int, str, tuple[str, ...], bool]:
        return (self.opt_level, self.name, self.required, self.infers_types)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PassInfo):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> tuple[Any, ...]:
        if not self.infers_types:  # the plain positional form, as PassInfo was always pickled
            return (PassInfo, (self.opt_level, self.name, self.required))
        return (_declared_pass_info, self._key())

    def __repr__(self) -> str:
        # the declaration shows only where it is made, so every other pass prints as before
        declared = ", infers_types=True" if self.infers_types else ""
        return (
            f"PassInfo(opt_level={self.opt_level}, name={self.name!r}, "
            f"required={list(self.required)!r}{declared})"
        )

    __str__ = __repr__


def _declared_pass_info(opt_level: int, name: str, required: tuple[str, ...], infers_types: bool) -> PassInfo:
    """Unpickling a PassInfo with a keyword-only declaration (pickle passes positions only)."""
    return PassInfo(opt_level, name, required, infers_types=infers_types)


def normalize_names(names: Iterable[str] | None, what: str) -> tuple[str, ...]:
    """A tuple of pass names from a list/tuple/set (None -> empty); TypeError otherwise.

    A lone string is rejected because iterating it would yield single letters.
    """
    if names is None:
        return ()
    if isinstance(names, str) or not isinstance(names, (list, tuple, set, frozenset)):
        raise PassArgumentError(f"{what} must be a list, tuple or set of pass names, got {names!r}")
    result = tuple(sorted(names)) if isinstance(names, (set, frozenset)) else tuple(names)
    for name in result:
        if not isinstance(name, str) or not name:
            raise PassArgumentError(f"{what} must hold non-empty strings, got {name!r}")
    return result

"""PassInfo: the name, optimization level and dependencies of a pass."""

from __future__ import annotations

from collections.abc import Iterable

from passinfra.transform.errors import PassArgumentError


class PassInfo:
    """Immutable description of a pass.

    ``opt_level`` is the minimum ``PassContext.opt_level`` at which a Sequential runs the
    pass; ``required`` names (registry names) of passes that must run right before it.
    """

    __slots__ = ("opt_level", "name", "required")

    def __init__(self, opt_level: int, name: str, required: Iterable[str] = ()) -> None:
        if isinstance(opt_level, bool) or not isinstance(opt_level, int):
            raise PassArgumentError(f"PassInfo opt_level must be an int, got {opt_level!r}")
        if not isinstance(name, str) or not name:
            raise PassArgumentError(f"PassInfo name must be a non-empty string, got {name!r}")
        required = normalize_names(required, f"required passes of {name!r}")
        object.__setattr__(self, "opt_level", opt_level)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "required", required)

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError("PassInfo is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PassInfo):
            return NotImplemented
        return (self.opt_level, self.name, self.required) == (other.opt_level, other.name, other.required)

    def __hash__(self) -> int:
        return hash((self.opt_level, self.name, self.required))

    def __reduce__(self):
        return (PassInfo, (self.opt_level, self.name, self.required))

    def __repr__(self) -> str:
        return f"PassInfo(opt_level={self.opt_level}, name={self.name!r}, required={list(self.required)!r})"

    __str__ = __repr__


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

"""PassContext: the options every pass runs under, on a per-thread stack.

``with PassContext(...):`` pushes a context on the current thread's stack;
``PassContext.current()`` is the innermost one, or the thread's own default context
(opt_level 2) outside any ``with``. Threads never see each other's contexts.

For the scheduler: a context without its instruments travels to workers as a plain
dict, ``ctx.to_spec()``, rebuilt there with ``PassContext.from_spec(spec)``; pickling a
context does the same (instruments stay in the driver, where their hooks run).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from passinfra.instrument.base import PassInstrument
from passinfra.transform import config as config_registry
from passinfra.transform.errors import PassArgumentError, PassContextError
from passinfra.transform.pass_info import PassInfo, normalize_names


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.stack: list[PassContext] = []
        self.default: PassContext | None = None


_STATE = _ThreadState()


class PassContext:
    """Options for running passes: opt_level, required/disabled pass names, instruments
    and typed config (see :mod:`passinfra.transform.config`)."""

    def __init__(
        self,
        opt_level: int = 2,
        required_pass: Iterable[str] | None = None,
        disabled_pass: Iterable[str] | None = None,
        instruments: Iterable[PassInstrument] | None = None,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(opt_level, bool) or not isinstance(opt_level, int):
            raise PassArgumentError(f"PassContext opt_level must be an int, got {opt_level!r}")
        self.opt_level = opt_level
        self.required_pass: tuple[str, ...] = normalize_names(required_pass, "PassContext required_pass")
        self.disabled_pass: tuple[str, ...] = normalize_names(disabled_pass, "PassContext disabled_pass")
        self._required_set = frozenset(self.required_pass)
        self._disabled_set = frozenset(self.disabled_pass)
        self.instruments: tuple[PassInstrument, ...] = _check_instruments(instruments)
        self._config = config_registry.legalize_config(config)
        # how many `with` blocks have this context open; the thread default counts as open
        self._open_count = 0

    # ----- config -------------------------------------------------------------------
    @property
    def config(self) -> Mapping[str, Any]:
        """The legalized config, read-only."""
        return MappingProxyType(self._config)

    def get_config(self, key: str, default: Any = None) -> Any:
        """The value of a registered config key, or ``default`` when it is not set.

        An unregistered key raises (ValueError naming it), so a pass cannot read a key
        that nobody declared.
        """
        config_registry.config_type(key)
        return self._config.get(key, default)

    @staticmethod
    def list_configs() -> dict[str, dict[str, str]]:
        """Every registered config key: ``{key: {"type": type_name}}``."""
        return config_registry.list_configs()

    # ----- enabling -----------------------------------------------------------------
    def pass_enabled(self, info: PassInfo) -> bool:
        """Whether a Sequential runs a pass with ``info``: disabled by name -> no; else
        required by name -> yes; else ``opt_level >= info.opt_level``."""
        if info.name in self._disabled_set:
            return False
        if info.name in self._required_set:
            return True
        return self.opt_level >= info.opt_level

    def is_required(self, name: str) -> bool:
        """Whether ``name`` is in ``required_pass`` (instruments' should_run is then skipped)."""
        return name in self._required_set

    # ----- the per-thread stack ---------------------------------------------------------
    @staticmethod
    def current() -> PassContext:
        """The innermost context entered on this thread, or this thread's default."""
        if _STATE.stack:
            return _STATE.stack[-1]
        if _STATE.default is None:
            default = PassContext()
            default._open_count = 1  # never entered with `with`, but always in force
            _STATE.default = default
        return _STATE.default

    def __enter__(self) -> PassContext:
        # instruments first: if one fails to enter, the context is not pushed
        self._enter_instruments()
        self._open_count += 1
        _STATE.stack.append(self)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        stack = _STATE.stack
        if not stack or stack[-1] is not self:
            innermost = repr(stack[-1]) if stack else "none (no context is entered on this thread)"
            raise PassContextError(
                f"PassContext exited out of order: exiting {self!r}, but the innermost context is {innermost}"
            )
        stack.pop()
        self._open_count -= 1
        self._exit_instruments()

    def override_instruments(self, instruments: Iterable[PassInstrument] | None) -> None:
        """Replace the instruments. If the context is in force (entered, or the thread
        default), the old ones are exited and the new ones entered, as on leaving and
        entering the context; an error in either clears the list and propagates."""
        new = _check_instruments(instruments)
        if self._open_count > 0:
            self._exit_instruments()
            self.instruments = new
            self._enter_instruments()
        else:
            self.instruments = new

    def _enter_instruments(self) -> None:
        entered: list[PassInstrument] = []
        try:
            for instrument in self.instruments:
                instrument.enter_pass_ctx()
                entered.append(instrument)
        except BaseException:
            # undo what was entered and disable instrumentation, then report the failure
            self.instruments = ()
            for instrument in entered:
                instrument.exit_pass_ctx()
            raise

    def _exit_instruments(self) -> None:
        try:
            for instrument in self.instruments:
                instrument.exit_pass_ctx()
        except BaseException:
            self.instruments = ()
            raise

    # ----- shipping to workers -----------------------------------------------------------
    def to_spec(self) -> dict[str, Any]:
        """Everything but the instruments, as plain picklable data."""
        return {
            "opt_level": self.opt_level,
            "required_pass": list(self.required_pass),
            "disabled_pass": list(self.disabled_pass),
            "config": dict(self._config),
        }

    @staticmethod
    def from_spec(spec: Mapping[str, Any]) -> PassContext:
        """A context equivalent to the one ``to_spec`` described (no instruments)."""
        return PassContext(
            opt_level=spec["opt_level"],
            required_pass=spec.get("required_pass"),
            disabled_pass=spec.get("disabled_pass"),
            config=spec.get("config"),
        )

    def __reduce__(self):
        return (PassContext.from_spec, (self.to_spec(),))

    def __repr__(self) -> str:
        parts = [f"opt_level={self.opt_level}"]
        if self.required_pass:
            parts.append(f"required_pass={list(self.required_pass)}")
        if self.disabled_pass:
            parts.append(f"disabled_pass={list(self.disabled_pass)}")
        if self.instruments:
            parts.append(f"instruments={[i.name for i in self.instruments]}")
        if self._config:
            parts.append(f"config={self._config}")
        return f"PassContext({', '.join(parts)})"


def _check_instruments(instruments: Iterable[PassInstrument] | None) -> tuple[PassInstrument, ...]:
    if instruments is None:
        return ()
    if isinstance(instruments, PassInstrument) or not isinstance(instruments, (list, tuple)):
        raise PassArgumentError(f"instruments must be a list or tuple of PassInstrument, got {instruments!r}")
    for instrument in instruments:
        if not isinstance(instrument, PassInstrument):
            raise PassArgumentError(
                f"instruments must be PassInstrument objects (use @pass_instrument), got {instrument!r}"
            )
    return tuple(instruments)

"""PassInstrument: hooks the pass infrastructure calls around every pass it runs.

Call order (see ``Pass._run_instrumented`` and ``PassContext.__enter__/__exit__``):

- entering a PassContext calls ``enter_pass_ctx`` on each instrument in list order;
  leaving it calls ``exit_pass_ctx`` on each in list order;
- for each pass run: ``should_run`` on every instrument (all of them, no short circuit;
  not asked at all for a pass named in ``required_pass``); if any said False, nothing
  else happens and the module is returned unchanged; otherwise ``run_before_pass`` on
  each, the pass, then ``run_after_pass`` on each.

``on_pass_error`` is this project's addition: when the pass (or a later hook) raised,
it is called on each instrument whose ``run_before_pass`` ran but whose
``run_after_pass`` did not, so an instrument that keeps per-pass state (a timer stack)
can close it. It must not raise; by default it does nothing.

``on_remote_timings`` is the other: when a parallel scheduler ran a function pass on
workers, it hands every instrument, in the driver and right before that pass's
``run_after_pass``, what each worker measured (``PassTimingInstrument`` merges it into
its tree). By default it does nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from passinfra.ir.module import IRModule
    from passinfra.transform.pass_info import PassInfo


class PassInstrument:
    """Base class of instruments; every hook is a no-op (``should_run`` says True)."""

    @property
    def name(self) -> str:
        """The class name unless set otherwise (a settable property, so a decorated class
        may assign ``self.name`` in its ``__init__``)."""
        return self.__dict__.get("_instrument_name", type(self).__name__)

    @name.setter
    def name(self, value: str) -> None:
        self.__dict__["_instrument_name"] = value

    def enter_pass_ctx(self) -> None:
        """Called when a PassContext holding this instrument is entered."""

    def exit_pass_ctx(self) -> None:
        """Called when a PassContext holding this instrument is exited."""

    def should_run(self, mod: IRModule, info: PassInfo) -> bool:
        """Return False to skip the pass (the module then passes through unchanged)."""
        return True

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        """Called with the input module right before the pass runs."""

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        """Called with the output module right after the pass ran."""

    def on_pass_error(self, mod: IRModule, info: PassInfo, error: BaseException) -> None:
        """Called when a pass whose ``run_before_pass`` ran failed before ``run_after_pass``."""

    def on_remote_timings(self, info: PassInfo, per_worker: Mapping[Any, tuple[float, int]]) -> None:
        """Called in the driver when function pass ``info`` ran on workers: per worker id,
        the seconds its runs of the pass took and how many functions it ran."""

    def __repr__(self) -> str:
        return f"<{self.name} instrument>"


_HOOKS = ("enter_pass_ctx", "exit_pass_ctx", "should_run", "run_before_pass", "run_after_pass")


def pass_instrument(pi_cls: type) -> type:
    """Class decorator: make a plain class (defining any of the hooks) a PassInstrument.

    The result is a subclass of both the class and :class:`PassInstrument` with the same
    name, so hooks the class does not define fall back to the no-op defaults and
    ``isinstance(obj, PassInstrument)`` holds.
    """
    if not isinstance(pi_cls, type):
        raise TypeError(f"@pass_instrument decorates a class, got {type(pi_cls).__name__}")
    if issubclass(pi_cls, PassInstrument):
        return pi_cls
    if not any(callable(getattr(pi_cls, hook, None)) for hook in _HOOKS):
        raise TypeError(
            f"@pass_instrument class {pi_cls.__name__} defines none of the hooks {', '.join(_HOOKS)}"
        )
    namespace: dict[str, Any] = {
        "__module__": pi_cls.__module__,
        "__qualname__": pi_cls.__qualname__,
        "__doc__": pi_cls.__doc__,
    }
    return type(pi_cls.__name__, (pi_cls, PassInstrument), namespace)

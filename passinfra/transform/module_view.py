"""The read-only module a function pass is handed, built in one place for every executor.

A function pass runs as ``pass_func(func, mod, ctx)``: in-process (``FunctionPass``), in
the scheduler's driver when a stage is too small to ship, and on a Ray worker that holds
only a shard of the module. What ``mod`` lets the pass see must not depend on where it
runs, or a pass would work in one place and fail (or compute something else) in another.
So all three call :func:`function_view`:

* a pass that reads the module (``reads_module`` True, the default) gets
  :class:`ModuleView`: the whole module as it was before the pass (the scheduler gives
  such a pass a stage of its own and ships it the whole module), read-only;
* a pass that promised ``reads_module=False`` gets :class:`FunctionOnlyView`: a module
  holding just the function being transformed, under its own name. Naming any other
  function (``mod[name]``, ``name in mod``, ``mod.functions.get(gv)``...) or the module's
  attrs raises :class:`ModuleReadError`, naming the pass, the promise and what it read,
  in-process exactly as on a worker.

Iterating the restricted view yields the one function: that is what lets a pass find
its own function's name (LowerToPrimFunc called on an anonymous function) with the
promise kept. One read of other functions is legitimate: inferring the types of an
untyped function needs its callees' types (``function_types.ensure_typed``, for a pass
called directly on a module InferType never ran on). It goes through
:func:`typing_scope`, which is the whole module where the caller has one (in-process,
the scheduler's driver); a worker has none, so the scheduler runs such a stage in the
driver instead (``scheduler.ray_runner``). Neither view copies the module: a view is a
few slots per call.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping
from typing import Any

from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import BaseFunc, GlobalVar
from passinfra.ir.module import IRModule
from passinfra.transform.errors import FunctionSetChangedError, PassError


class ModuleReadError(PassError):
    """A function pass that promised ``reads_module=False`` read more of the module than
    the function it was given. ``read`` is the name of the function it asked for, or
    None when it read the module's attrs."""

    def __init__(self, pass_name: str, function: str, read: str | None) -> None:
        # the fields are the args, so the error pickles (a worker sends it back) as it is
        super().__init__(pass_name, function, read)
        self.pass_name = pass_name
        self.function = function
        self.read = read

    def __str__(self) -> str:
        what = "the module's attrs" if self.read is None else f"function {self.read!r}"
        return (
            f"function pass {self.pass_name!r} promised reads_module=False (to read nothing of the "
            f"module but the function it is given) but read {what} while transforming "
            f"{self.function!r}; declare it with reads_module=True to read the module"
        )


def _name_of(key: Any) -> str:
    return key.name_hint if isinstance(key, GlobalVar) else str(key)


class _ReadOnly(IRModule):
    """Refuses every change to the function set, naming the pass."""

    __slots__ = ("_pass_name",)
    _pass_name: str

    def _refuse(self, action: str, names: list[str]) -> FunctionSetChangedError:
        return FunctionSetChangedError(
            f"function pass {self._pass_name!r} cannot {action} functions of the module "
            f"(tried {action} {names}); a function pass may only rewrite the function it is given"
        )

    def __setitem__(self, key: Any, func: BaseFunc) -> None:
        raise self._refuse("add or replace", [_name_of(key)])

    def __delitem__(self, key: Any) -> None:
        raise self._refuse("remove", [_name_of(key)])

    def update(self, other: Any) -> None:
        raise self._refuse("add or replace", [_name_of(key) for key in dict(other.items())])

    def update_func(self, gv: Any, func: BaseFunc) -> None:
        self[gv] = func


class ModuleView(_ReadOnly):
    """The whole module, read-only. It shares the module's function table instead of
    copying it: the executors never change a module while a pass reads it."""

    __slots__ = ()

    def __init__(self, base: IRModule, pass_name: str) -> None:
        # no IRModule.__init__: it would build a new table
        self._functions = base._functions
        self.attrs = base.attrs
        self._pass_name = pass_name


class _OwnFunctionOnly(Mapping):
    """``view.functions`` of a FunctionOnlyView: the one function; looking up any other
    raises ModuleReadError (not KeyError, which ``Mapping.get`` would turn into None)."""

    __slots__ = ("_view",)

    def __init__(self, view: FunctionOnlyView) -> None:
        self._view = view

    def __getitem__(self, key: Any) -> BaseFunc:
        return self._view[key]

    def __iter__(self) -> Iterator[GlobalVar]:
        return iter(self._view._functions)

    def __len__(self) -> int:
        return 1


class FunctionOnlyView(_ReadOnly):
    """What a pass that promised ``reads_module=False`` sees: its own function only."""

    __slots__ = ("_function_name", "_func", "_scope", "_table")

    def __init__(self, pass_name: str, name: str, func: BaseFunc, scope: IRModule | None = None) -> None:
        self._pass_name = pass_name
        self._function_name = name
        self._func = func
        self._scope = scope  # the whole module, for typing_scope only
        self._table: dict[GlobalVar, BaseFunc] | None = None

    @property  # type: ignore[override]  # shadows IRModule's slot
    def _functions(self) -> dict[GlobalVar, BaseFunc]:
        # built on first use: most passes never look at the module, and a view is made per call
        if self._table is None:
            self._table = {GlobalVar(self._function_name): self._func}
        return self._table

    def _broken_promise(self, read: str | None) -> ModuleReadError:
        return ModuleReadError(self._pass_name, self._function_name, read)

    def _check_own(self, key: Any) -> None:
        name = key if isinstance(key, str) else self._key(key).name_hint
        if name != self._function_name:
            raise self._broken_promise(name)

    @property  # type: ignore[override]  # shadows IRModule's attrs slot: reading it breaks the promise
    def attrs(self) -> Attrs:
        raise self._broken_promise(None)

    def __getitem__(self, key: str | GlobalVar) -> BaseFunc:
        self._check_own(key)
        return self._func

    def __contains__(self, key: object) -> bool:
        if isinstance(key, (str, GlobalVar)):
            self._check_own(key)
            return True
        return False

    def get_global_var(self, name: str) -> GlobalVar:
        self._check_own(name)
        return next(iter(self._functions))

    def items(self) -> ItemsView[GlobalVar, BaseFunc]:
        return self._functions.items()

    @property
    def functions(self) -> Mapping[GlobalVar, BaseFunc]:
        return _OwnFunctionOnly(self)

    def copy(self) -> IRModule:
        """A plain module holding the one function (and no attrs: they are not visible)."""
        return IRModule(dict(self._functions))

    def with_attr(self, key: str, value: Any) -> IRModule:
        raise self._broken_promise(None)

    def astext(self, show_meta_data: bool = True) -> str:
        return self.copy().astext(show_meta_data=show_meta_data)

    def __reduce_ex__(self, protocol: int):
        return self.copy().__reduce_ex__(protocol)


def function_view(pass_: Any, base: IRModule | None, name: str, func: BaseFunc) -> IRModule:
    """The module ``pass_`` (a FunctionPass) may read while it transforms ``func``, the
    function called ``name``: all of ``base`` (the module before the pass) if the pass
    reads the module, else ``func`` alone. ``base`` may be None for a pass that promised
    reads_module=False (a worker holds no whole module for it)."""
    pass_name = pass_.info.name
    if not getattr(pass_, "reads_module", True):
        return FunctionOnlyView(pass_name, name, func, base)
    if base is None:
        raise PassError(
            f"function pass {pass_name!r} reads the module, but it was run on {name!r} without one"
        )
    return ModuleView(base, pass_name)


def typing_scope(mod: IRModule) -> IRModule:
    """The module to infer an untyped function of ``mod`` against: for a function pass's
    restricted view, the whole module (read-only) when the caller has it, else the view
    itself (a callee's type is then a read that breaks the promise); any other module
    is its own scope."""
    if isinstance(mod, FunctionOnlyView) and mod._scope is not None:
        return ModuleView(mod._scope, mod._pass_name)
    return mod


__all__ = ["FunctionOnlyView", "ModuleReadError", "ModuleView", "function_view", "typing_scope"]

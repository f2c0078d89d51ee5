"""IRModule: the unit every pass takes and returns, a map GlobalVar -> function."""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from passinfra.errors import IRError
from passinfra.ir.attrs import Attrs, as_attrs
from passinfra.ir.expr import BaseFunc, Expr, Function, GlobalVar


class IRModule:
    """An ordered map from GlobalVar to function (insertion order, which is what the
    printer and the scheduler's merges follow).

    The map itself may be updated (``mod[name] = func``) like TVM's; the functions in it
    are immutable, and passes never update the module they were given.
    """

    __slots__ = ("_functions", "attrs", "__weakref__")

    def __init__(
        self, functions: Mapping[Any, BaseFunc] | None = None, attrs: Mapping[str, Any] | None = None
    ) -> None:
        self._functions: dict[GlobalVar, BaseFunc] = {}
        self.attrs: Attrs = as_attrs(attrs)
        for key, func in (functions or {}).items():
            self[key] = func

    @staticmethod
    def from_expr(expr: Expr, functions: Mapping[Any, BaseFunc] | None = None) -> IRModule:
        """A module whose ``main`` is ``expr`` (a Function, or an expression whose free
        variables become the parameters, in order of first use)."""
        mod = IRModule(functions)
        if not isinstance(expr, Function):
            from passinfra.ir.analysis import free_vars

            expr = Function(free_vars(expr), expr)
        mod["main"] = expr
        return mod

    @staticmethod
    def _key(key: Any) -> GlobalVar:
        if isinstance(key, GlobalVar):
            return key
        if isinstance(key, str):
            return GlobalVar(key)
        raise IRError(f"IRModule keys are names or GlobalVars, got {type(key).__name__}")

    def __getitem__(self, key: str | GlobalVar) -> BaseFunc:
        gv = self._key(key)
        try:
            return self._functions[gv]
        except KeyError:
            raise KeyError(self._missing_message(gv.name_hint)) from None

    def __setitem__(self, key: str | GlobalVar, func: BaseFunc) -> None:
        if not isinstance(func, BaseFunc):
            raise IRError(f"IRModule maps names to functions, got {type(func).__name__} for {key!r}")
        self._functions[self._key(key)] = func

    def __delitem__(self, key: str | GlobalVar) -> None:
        del self._functions[self._key(key)]

    def __contains__(self, key: object) -> bool:
        if isinstance(key, (str, GlobalVar)):
            return self._key(key) in self._functions
        return False

    def __len__(self) -> int:
        return len(self._functions)

    def __iter__(self) -> Iterator[GlobalVar]:
        return iter(self._functions)

    def items(self) -> ItemsView[GlobalVar, BaseFunc]:
        return self._functions.items()

    @property
    def functions(self) -> Mapping[GlobalVar, BaseFunc]:
        """A read-only view GlobalVar -> function, in module order."""
        return MappingProxyType(self._functions)

    def get_global_var(self, name: str) -> GlobalVar:
        gv = GlobalVar(name)
        if gv not in self._functions:
            raise KeyError(self._missing_message(name))
        return gv

    def get_global_vars(self) -> list[GlobalVar]:
        return list(self._functions)

    def update(self, other: IRModule | Mapping[Any, BaseFunc]) -> None:
        """Add or replace every function of ``other``."""
        items = other.items() if isinstance(other, (IRModule, Mapping)) else None
        if items is None:
            raise IRError(f"IRModule.update needs a module or mapping, got {type(other).__name__}")
        for key, func in items:
            self[key] = func

    def update_func(self, gv: str | GlobalVar, func: BaseFunc) -> None:
        self[gv] = func

    def copy(self) -> IRModule:
        """A new module holding the same (immutable) functions."""
        mod = IRModule(attrs=self.attrs)
        mod._functions = dict(self._functions)
        return mod

    __copy__ = copy

    def with_attr(self, key: str, value: Any) -> IRModule:
        mod = self.copy()
        mod.attrs = self.attrs.with_item(key, value)
        return mod

    def _missing_message(self, name: str) -> str:
        known = ", ".join(gv.name_hint for gv in self._functions) or "none"
        return f"no function named {name!r} in the module (functions: {known})"

    def astext(self, show_meta_data: bool = True) -> str:
        from passinfra.ir.printer import astext

        return astext(self, show_meta_data=show_meta_data)

    def __str__(self) -> str:
        # with the metadata section: str(mod) parses back to the module (ir.parse)
        return self.astext()

    def __repr__(self) -> str:
        names = ", ".join(gv.name_hint for gv in self._functions)
        return f"IRModule({names})"

    def __reduce_ex__(self, protocol: int):
        from passinfra.ir.serialize import reduce_node

        return reduce_node(self, protocol)

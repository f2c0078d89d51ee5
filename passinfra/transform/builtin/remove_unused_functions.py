"""RemoveUnusedFunctions: drop global functions the entry points cannot reach.

A function is reachable when an entry function, or a reachable function, mentions its
GlobalVar anywhere in its body (as a callee or as a value). Entry names missing from the
module are ignored (a library module may have no ``main``). Module order is kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from passinfra.ir.expr import Function, GlobalVar
from passinfra.ir.functor import iter_post_order
from passinfra.ir.module import IRModule
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass

__all__ = ["RemoveUnusedFunctions", "reachable_functions", "referenced_globals"]


def referenced_globals(func: object) -> list[GlobalVar]:
    """The GlobalVars mentioned in ``func`` (a Function; other kinds mention none)."""
    if not isinstance(func, Function):
        return []
    return [node for node in iter_post_order(func) if type(node) is GlobalVar]


def reachable_functions(mod: IRModule, entry_functions: Iterable[str]) -> set[GlobalVar]:
    """The GlobalVars of ``mod`` reachable from the named entry functions."""
    reached: set[GlobalVar] = set()
    stack = [GlobalVar(name) for name in entry_functions if name in mod]
    while stack:
        gv = stack.pop()
        if gv in reached or gv not in mod:
            continue
        reached.add(gv)
        stack.extend(referenced_globals(mod[gv]))
    return reached


@register_pass("RemoveUnusedFunctions")
@dataclass(frozen=True)
class RemoveUnusedFunctions(ModulePass):
    """A module pass (opt_level 1) keeping only functions reachable from ``entry_functions``."""

    entry_functions: Iterable[str] = ("main",)  # kept as a tuple
    info: ClassVar[PassInfo] = PassInfo(1, "RemoveUnusedFunctions")

    def __post_init__(self) -> None:
        # one name or any iterable of names, kept as a tuple: equal configurations then
        # compare (and hash) equal however they were given
        entries = self.entry_functions
        entries = (entries,) if isinstance(entries, str) else tuple(entries)
        object.__setattr__(self, "entry_functions", entries)

    def pass_func(self, mod: IRModule, ctx: PassContext) -> IRModule:
        keep = reachable_functions(mod, self.entry_functions)
        for gv in [gv for gv in mod.functions if gv not in keep]:
            del mod[gv]
        return mod

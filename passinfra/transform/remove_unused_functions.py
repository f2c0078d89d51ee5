"""RemoveUnusedFunctions: drop global functions the entry points cannot reach.

A function is reachable when an entry function, or a reachable function, mentions its
GlobalVar anywhere in its body (as a callee or as a value). Entry names missing from the
module are ignored (a library module may have no ``main``). Module order is kept.
"""

from __future__ import annotations

from collections.abc import Iterable

from passinfra.ir.expr import Function, GlobalVar
from passinfra.ir.functor import iter_post_order
from passinfra.ir.module import IRModule
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import module_pass
from passinfra.transform.passes import Pass
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
def RemoveUnusedFunctions(entry_functions: Iterable[str] = ("main",)) -> Pass:
    """A module pass (opt_level 1) keeping only functions reachable from ``entry_functions``."""
    if isinstance(entry_functions, str):
        entry_functions = (entry_functions,)
    entries = tuple(entry_functions)

    def transform(mod: IRModule, ctx: PassContext) -> IRModule:
        keep = reachable_functions(mod, entries)
        for gv in [gv for gv in mod.functions if gv not in keep]:
            del mod[gv]
        return mod

    return module_pass(transform, opt_level=1, name="RemoveUnusedFunctions")

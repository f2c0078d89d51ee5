"""Function passes over PrimFuncs: ``create_prim_func_pass`` and ``@prim_func_pass``.

A :class:`PrimFuncPass` is a :class:`~passinfra.transform.FunctionPass` that accepts only
PrimFuncs (graph-level Functions in the same module are left alone), so the scheduler
fans loop passes out over kernels exactly as it does graph passes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from passinfra.ir.expr import BaseFunc
from passinfra.ir.module import IRModule
from passinfra.tir import PrimFunc
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import function_pass
from passinfra.transform.errors import PassReturnTypeError
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import FunctionPass

PrimFuncPassFunc = Callable[[PrimFunc, IRModule, PassContext], PrimFunc]


class PrimFuncPass(FunctionPass):
    """``pass_func(prim_func, mod, ctx) -> PrimFunc`` on every PrimFunc of the module
    (except those with a truthy ``SkipOptimization`` attr)."""

    def accepts(self, func: BaseFunc) -> bool:
        return isinstance(func, PrimFunc) and not func.attrs.get("SkipOptimization", False)

    def transform_function(
        self, func: BaseFunc, mod: IRModule, ctx: PassContext, name: str = "<anonymous>"
    ) -> BaseFunc:
        result = super().transform_function(func, mod, ctx, name)
        if not isinstance(result, PrimFunc):
            raise PassReturnTypeError(
                f"prim func pass {self.info.name!r} returned {type(result).__name__} for function "
                f"{name!r}, expected a PrimFunc"
            )
        return result


def create_prim_func_pass(
    pass_func: PrimFuncPassFunc, opt_level: int, name: str, required: Iterable[str] | None = None,
    reads_module: bool = True,
) -> PrimFuncPass:
    """A PrimFuncPass named ``name`` running ``pass_func`` at ``opt_level``.

    ``reads_module=False`` promises ``pass_func`` looks at nothing in ``mod`` (only its
    function and the context), so the scheduler may batch it with its neighbours."""
    return PrimFuncPass(pass_func, PassInfo(opt_level, name, tuple(required or ())), reads_module)


def prim_func_pass(
    pass_func: Callable | type | None = None,
    opt_level: int | None = None,
    name: str | None = None,
    required: Iterable[str] | None = None,
) -> Any:
    """Like :func:`passinfra.transform.function_pass` (on a function or a class with
    ``transform_function``), but the pass transforms PrimFuncs only."""
    # function_pass builds FunctionPass instances (or classes); build ours the same way
    # by swapping the class, which keeps the decorator's argument checks in one place.
    def build(target: Callable | type) -> Any:
        made = function_pass(target, opt_level=opt_level, name=name, required=required)
        if isinstance(made, type):
            return type(made.__name__, (made, PrimFuncPass), {"__module__": made.__module__,
                                                              "__doc__": made.__doc__})
        return PrimFuncPass(made.pass_func, made.info)

    if opt_level is None:
        function_pass(None, opt_level=None)  # raises the standard "provide opt_level" error
    return build(pass_func) if pass_func is not None else build


__all__ = ["PrimFuncPass", "create_prim_func_pass", "prim_func_pass"]

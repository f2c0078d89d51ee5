"""LowerToPrimFunc: the function pass that lowers each ``Primitive`` function (a fused
group from FuseOps) to a loop-level :class:`~passinfra.tir.PrimFunc`.

The lowering itself, and the PrimFunc conventions every later codegen pass relies on, are
:mod:`passinfra.codegen.lower`; this module only decides which functions it applies to
and what C symbol each gets (its GlobalVar name).
"""

from __future__ import annotations

from passinfra.codegen.lower import SPECIALIZATIONS_ATTR, lower_primitive_function
from passinfra.errors import IRError
from passinfra.ir.expr import BaseFunc, Function
from passinfra.ir.module import IRModule
from passinfra.tir import PrimFunc
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import FunctionPass, Pass
from passinfra.transform.registry import register_pass
from passinfra.transform.schedule import SCHEDULE_ATTR


def _name_in(mod: IRModule, func: BaseFunc) -> str:
    for gv, candidate in mod.items():
        if candidate is func:
            return gv.name_hint
    raise IRError("LowerToPrimFunc: cannot name a function that is not in the module "
                  "(its C symbol is its GlobalVar name)")


def _blas(ctx: PassContext) -> bool:
    return bool(ctx.get_config("codegen.blas", True))


def _lower(func: Function, mod: IRModule, ctx: PassContext) -> PrimFunc:
    prim = lower_primitive_function(func, _name_in(mod, func), _blas(ctx))
    # kept on the kernel: the specialized copies SpecializeKernels made (the host picks
    # among them at run time), and the schedule the loop passes after this one apply
    for key in (SPECIALIZATIONS_ATTR, SCHEDULE_ATTR):
        if key in func.attrs:
            prim = prim.with_attr(key, func.attrs[key])
    return prim


class LowerToPrimFuncPass(FunctionPass):
    """Function pass over the functions with a truthy ``Primitive`` attr; every other
    function is left as it is."""

    # the GlobalVar name is the C symbol: the pass reads it from the module view, which
    # for a pass promising reads_module=False holds the function under its own name
    # (every executor builds that view, see transform.module_view); nothing else is read
    reads_module = False

    def __init__(self) -> None:
        super().__init__(_lower, PassInfo(0, "LowerToPrimFunc"))

    def accepts(self, func: BaseFunc) -> bool:
        return (isinstance(func, Function) and bool(func.attrs.get("Primitive", 0))
                and not func.attrs.get("SkipOptimization", False))


@register_pass("LowerToPrimFunc")
def LowerToPrimFunc() -> Pass:  # noqa: N802  (TVM's factory naming)
    """Lower every Primitive function of the module to a PrimFunc (opt_level 0)."""
    return LowerToPrimFuncPass()


__all__ = ["LowerToPrimFunc", "LowerToPrimFuncPass"]

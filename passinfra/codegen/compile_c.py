"""CompileC: a function pass compiling each PrimFunc's ``c_source`` to ``object_code``.

This is the expensive step of a build and the one the scheduler fans out to workers:
each call runs the system C compiler (or hits the content-addressed cache) for one
kernel, reading only the function and the ``codegen.*`` config.
"""

from __future__ import annotations

from passinfra.codegen.c_renderer import sanitize_identifier
from passinfra.codegen.compiler import CompilerSettings, compile_c
from passinfra.codegen.prim_func_pass import PrimFuncPass, create_prim_func_pass
from passinfra.codegen.tir import PrimFunc
from passinfra.errors import IRError
from passinfra.ir.module import IRModule
from passinfra.transform.context import PassContext
from passinfra.transform.registry import register_pass


def _compile_c(func: PrimFunc, mod: IRModule, ctx: PassContext) -> PrimFunc:
    source = func.attrs.get("c_source")
    symbol = str(func.attrs.get("global_symbol", "kernel"))
    if not isinstance(source, str):
        raise IRError(f"PrimFunc {symbol!r} has no 'c_source' attr; run CodegenC before CompileC")
    data = compile_c(source, CompilerSettings.from_context(ctx), name=sanitize_identifier(symbol))
    return func.with_attr("object_code", data)


@register_pass("CompileC")
def CompileC() -> PrimFuncPass:  # noqa: N802 - pass factories are named like classes
    """Compile every PrimFunc's C source; the object code goes to its ``object_code`` attr."""
    return create_prim_func_pass(_compile_c, opt_level=0, name="CompileC")


__all__ = ["CompileC"]

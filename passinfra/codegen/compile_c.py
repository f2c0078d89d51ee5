"""CompileC: a function pass compiling each PrimFunc's ``c_source`` to ``object_code``.

This is the expensive step of a build and the one the scheduler fans out to workers:
each call runs the system C compiler (or hits the content-addressed cache) for one
kernel, reading only the function and the ``codegen.*`` config.
"""

from __future__ import annotations

import os

from passinfra.codegen.c_renderer import sanitize_identifier
from passinfra.codegen.compiler import CompilerSettings, compile_c_result
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
    result = compile_c_result(source, CompilerSettings.from_context(ctx), name=sanitize_identifier(symbol))
    # where and how the object was made: evidence that compiles ran on the workers. Only
    # attrs; the link reads nothing but object_code, so the library bytes stay the same.
    func = func.with_attr("compile_pid", os.getpid())
    func = func.with_attr("compile_cache_hit", result.cache_hit)
    return func.with_attr("object_code", result.object_code)


def compile_records(mod: IRModule) -> dict[str, tuple[int, bool]]:
    """``{kernel name: (pid of the process that ran CompileC, whether it was a cache hit)}``
    for every compiled PrimFunc of ``mod``."""
    return {
        gv.name_hint: (int(func.attrs["compile_pid"]), bool(func.attrs["compile_cache_hit"]))
        for gv, func in mod.items()
        if isinstance(func, PrimFunc) and "compile_pid" in func.attrs
    }


@register_pass("CompileC")
def CompileC() -> PrimFuncPass:  # noqa: N802 - pass factories are named like classes
    """Compile every PrimFunc's C source; the object code goes to its ``object_code`` attr,
    the compiling process's pid to ``compile_pid`` and ``compile_cache_hit`` says whether
    the object came from the cache (see :func:`compile_records`)."""
    return create_prim_func_pass(_compile_c, opt_level=0, name="CompileC", reads_module=False)


__all__ = ["CompileC", "compile_records"]

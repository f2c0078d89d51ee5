"""CompileC: a function pass compiling each PrimFunc's C source to its object code (the
kernel products of :mod:`passinfra.codegen.artifacts`).

This is the expensive step of a build and the one the scheduler fans out to workers:
each call runs the system C compiler (or hits the content-addressed cache) for one
kernel, reading only the function and the ``codegen.*`` config.

Where a kernel was compiled and whether the object came from the cache are facts about
the run, not about the program: the IR carries only the object code (identical wherever
it was made), and the facts go to the run statistics (:mod:`passinfra.transform.run_facts`;
:func:`compile_records` reads them back).
"""

from __future__ import annotations

from collections.abc import Iterable

from passinfra.codegen.artifacts import kernel_c_source, with_kernel_object_code
from passinfra.codegen.c_intrinsics import uses_library
from passinfra.codegen.c_renderer import sanitize_identifier
from passinfra.codegen.cc_driver import CompilerSettings, compile_c_result
from passinfra.codegen.conv_runtime import RUNTIME_LIBRARIES, prefetch_runtime_compile
from passinfra.codegen.prim_func_pass import PrimFuncPass, create_prim_func_pass
from passinfra.errors import IRError
from passinfra.ir.module import IRModule
from passinfra.tir import PrimFunc
from passinfra.transform.context import PassContext
from passinfra.transform.registry import register_pass
from passinfra.transform.run_facts import RunFact, report_fact

PASS_NAME = "CompileC"
CACHE_HIT_FACT = "cache_hit"  # the fact CompileC reports per kernel: the object came from the cache


def _compile_c(func: PrimFunc, mod: IRModule, ctx: PassContext) -> PrimFunc:
    source = kernel_c_source(func)
    symbol = str(func.attrs.get("global_symbol", "kernel"))
    if source is None:
        raise IRError(f"PrimFunc {symbol!r} has no 'c_source' attr; run CodegenC before CompileC")
    settings = CompilerSettings.from_context(ctx)
    if any(uses_library(func, library.name) for library in RUNTIME_LIBRARIES):
        prefetch_runtime_compile(settings)  # overlaps the kernels' compiles; LinkLibrary waits for it
    result = compile_c_result(source, settings, name=sanitize_identifier(symbol))
    # the process that ran this is recorded with the fact; neither goes into the IR
    report_fact(CACHE_HIT_FACT, result.cache_hit)
    return with_kernel_object_code(func, result.object_code)


def compile_records(facts: Iterable[RunFact]) -> dict[str, tuple[int, bool]]:
    """``{kernel name: (pid of the process that ran CompileC on it, whether the object
    was a cache hit)}`` from the facts of a run (``Scheduler.last_run.facts``, or a
    :func:`~passinfra.transform.run_facts.collect_facts` list); the last run of a kernel wins."""
    return {
        fact.function: (fact.pid, bool(fact.value))
        for fact in facts
        if fact.pass_name == PASS_NAME and fact.name == CACHE_HIT_FACT
    }


def compile_counts(facts: Iterable[RunFact]) -> dict[int, tuple[int, int]]:
    """``{pid: (kernels CompileC ran on in that process, how many were cache hits)}``."""
    counts: dict[int, tuple[int, int]] = {}
    for pid, hit in compile_records(facts).values():
        kernels, hits = counts.get(pid, (0, 0))
        counts[pid] = (kernels + 1, hits + int(hit))
    return counts


@register_pass(PASS_NAME)
def CompileC() -> PrimFuncPass:  # noqa: N802 - pass factories are named like classes
    """Compile every PrimFunc's C source into its ``object_code`` attr; each compile
    reports whether the object came from the cache (see :func:`compile_records`)."""
    return create_prim_func_pass(_compile_c, opt_level=0, name=PASS_NAME, reads_module=False)


__all__ = ["CACHE_HIT_FACT", "CompileC", "compile_counts", "compile_records"]

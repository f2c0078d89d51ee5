"""CodegenC: a function pass rendering each PrimFunc to C (its kernel C source, see
:mod:`passinfra.codegen.artifacts`).

It only reads the PrimFunc and the ``codegen.cflags`` config (OpenMP pragmas are emitted
only when the flags enable OpenMP), ``codegen.blas_threads`` and ``codegen.multiversion``
(AVX2 clones, :mod:`passinfra.codegen.multiversion`), so it runs on any worker
and gives the same text everywhere.
"""

from __future__ import annotations

from passinfra.codegen.artifacts import with_kernel_c_source
from passinfra.codegen.c_renderer import CRenderer, RenderOptions
from passinfra.codegen.cc_driver import CompilerSettings
from passinfra.codegen.gemm import DEFAULT_BLAS_THREADS
from passinfra.codegen.multiversion import DEFAULT_MULTIVERSION, MIN_CLONE_WORK
from passinfra.codegen.prim_func_pass import PrimFuncPass, create_prim_func_pass
from passinfra.codegen.shared_kernels import DEFAULT_SHARE, SHARE_CONFIG, with_render_decisions
from passinfra.ir.module import IRModule
from passinfra.tir import PrimFunc
from passinfra.transform.context import PassContext
from passinfra.transform.registry import register_pass


def render_options(ctx: PassContext) -> RenderOptions:
    """The switches CodegenC renders with under ``ctx`` (a function's own schedule's, inside
    its ``function_context``)."""
    return RenderOptions.from_cflags(CompilerSettings.from_context(ctx).cflags,
                                     ctx.get_config("codegen.blas_threads", DEFAULT_BLAS_THREADS),
                                     ctx.get_config("codegen.multiversion", DEFAULT_MULTIVERSION),
                                     ctx.get_config("codegen.multiversion_min_work", MIN_CLONE_WORK))


def _codegen_c(func: PrimFunc, mod: IRModule, ctx: PassContext) -> PrimFunc:
    renderer = CRenderer(render_options(ctx))
    rendered = with_kernel_c_source(func, renderer.render(func))
    if ctx.get_config(SHARE_CONFIG, DEFAULT_SHARE) and not func.dims:
        rendered = with_render_decisions(rendered, renderer)  # its class, for GroupKernels
    return rendered


@register_pass("CodegenC")
def CodegenC() -> PrimFuncPass:  # noqa: N802 - pass factories are named like classes
    """Render every PrimFunc to C source, stored in its ``c_source`` attr."""
    return create_prim_func_pass(_codegen_c, opt_level=0, name="CodegenC", reads_module=False)


__all__ = ["CodegenC", "render_options"]

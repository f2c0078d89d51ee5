"""LinkLibrary: the module pass that links every kernel object and the host object into
one shared library (the link step's ``library``; see :mod:`passinfra.codegen.artifacts`).

Objects are linked in module order, then the host object, then the thread pool that runs
the kernels' parallel loops (:mod:`passinfra.codegen.thread_pool`; every library has it,
so ``lib.set_num_threads`` works on any), then the convolution microkernels
(:mod:`passinfra.codegen.conv_runtime`) when a kernel calls them, under fixed file
names, so the same module links to the same bytes wherever the kernels were compiled.
"""

from __future__ import annotations

from passinfra.codegen.artifacts import current_link_products, kernel_compiled_in, kernel_object_code
from passinfra.codegen.c_intrinsics import uses_library
from passinfra.codegen.c_renderer import sanitize_identifier
from passinfra.codegen.cc_driver import CompilerSettings, compile_c_result, link_shared
from passinfra.codegen.conv_runtime import RUNTIME_LIBRARIES, RUNTIME_SYMBOL, runtime_object
from passinfra.codegen.gemm import BLAS_LIBRARY, blas_library
from passinfra.codegen.host import HOST_SYMBOL
from passinfra.codegen.object_cache import count
from passinfra.codegen.thread_pool import (
    DEFAULT_NUM_THREADS,
    MAX_THREADS,
    POOL_SYMBOL,
    min_parallel_work,
    pool_source,
)
from passinfra.errors import IRError
from passinfra.ir.module import IRModule
from passinfra.tir import PrimFunc
from passinfra.transform.context import PassContext
from passinfra.transform.errors import PassConfigError
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass


def collect_objects(mod: IRModule, host_object: bytes | None) -> list[tuple[str, bytes]]:
    """``(name, object bytes)`` of every PrimFunc in module order (a compile unit's object
    once, under its first kernel's name), then the host object (HostCodegen's, None when
    it has not run in this link step)."""
    objects = []
    for gv, func in mod.items():
        if not isinstance(func, PrimFunc):
            continue
        leader = kernel_compiled_in(func)
        if leader is not None:  # its code is in the object of its compile unit (GroupKernels)
            if leader not in mod or not isinstance(mod[leader], PrimFunc):
                raise IRError(f"PrimFunc @{gv.name_hint} is compiled in @{leader}, which is not a "
                              "kernel of this module")
            continue
        data = kernel_object_code(func)
        if data is None:
            raise IRError(f"PrimFunc @{gv.name_hint} has no 'object_code' attr; "
                          "run CompileC before LinkLibrary")
        objects.append((sanitize_identifier(gv.name_hint), data))
    if host_object is None:
        raise IRError("no host object to link: run HostCodegen before LinkLibrary, in one link step "
                      "(passinfra.build.run_link)")
    objects.append((HOST_SYMBOL, host_object))
    return objects


def default_num_threads(ctx: PassContext) -> int:
    """Config ``codegen.num_threads``, checked: the library's default thread count, 0 for
    every CPU the process may use."""
    threads = ctx.get_config("codegen.num_threads", DEFAULT_NUM_THREADS)
    if not 0 <= threads <= MAX_THREADS:
        raise PassConfigError(f"config 'codegen.num_threads' must be between 0 (every CPU the process "
                              f"may use) and {MAX_THREADS}, got {threads}")
    return threads


def thread_pool_object(ctx: PassContext) -> bytes:
    """The thread pool's object code for this build's settings (from the object cache).
    It counts as host code in the compile statistics, as the host entry does."""
    settings = CompilerSettings.from_context(ctx)
    source = pool_source(default_num_threads(ctx), min_work=min_parallel_work(ctx))
    compiled = compile_c_result(source, settings, name=POOL_SYMBOL)
    if not compiled.cache_hit:
        count("host_compiles")
    return compiled.object_code


def conv_runtime_object(ctx: PassContext) -> bytes:
    """The convolution microkernels' object code for this build's settings (compiled in
    the background since CompileC met the first kernel calling them, or from the object
    cache; counted as host code, as the thread pool is)."""
    compiled = runtime_object(CompilerSettings.from_context(ctx))
    if not compiled.cache_hit:
        count("host_compiles")
    return compiled.object_code


def uses_conv_runtime(mod: IRModule) -> bool:
    """Whether a kernel calls into the runtime object (its convolutions or quantized matmul)."""
    return any(uses_library(f, library.name) for _, f in mod.items() for library in RUNTIME_LIBRARIES)


def link_flags(mod: IRModule) -> tuple[str, ...]:
    """The libraries after the objects: the threads library, libm, and BLAS (with an
    rpath to its directory) when a kernel calls it."""
    flags: tuple[str, ...] = ("-Wl,-Bsymbolic", "-pthread")
    if any(uses_library(f, BLAS_LIBRARY.name) for _, f in mod.items()):
        library = blas_library()
        if library is None:
            raise IRError("a kernel calls BLAS but the scipy-openblas32 package is not installed "
                          "(install it, or build with config codegen.blas=False)")
        flags += library.link_flags()
    return (*flags, "-lm")


def _link_pass(mod: IRModule, ctx: PassContext) -> IRModule:
    products = current_link_products()
    host = products.host if products is not None else None
    objects = collect_objects(mod, None if host is None else host.object_code)
    objects.append((POOL_SYMBOL, thread_pool_object(ctx)))
    if uses_conv_runtime(mod):
        objects.append((RUNTIME_SYMBOL, conv_runtime_object(ctx)))
    library = link_shared(objects, CompilerSettings.from_context(ctx), link_flags(mod))
    if products is not None:  # it is: without a link step there is no host object to link
        products.library = library
    return mod


@register_pass("LinkLibrary")
def LinkLibrary() -> ModulePass:  # noqa: N802 - pass factories are named like classes
    """Link the kernels and the host entry into one shared library (the link step's
    ``library``)."""
    return ModulePass(_link_pass, PassInfo(0, "LinkLibrary"))


__all__ = ["LinkLibrary", "collect_objects", "conv_runtime_object", "default_num_threads", "link_flags",
           "thread_pool_object", "uses_conv_runtime"]

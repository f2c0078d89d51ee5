"""GroupKernels: the module pass that puts kernels into compile units, so CompileC runs
the C compiler once per unit rather than once per kernel
(:mod:`passinfra.codegen.compile_units` says why, and how units are chosen).

It runs after CodegenC, in the driver: a unit needs the C of several kernels, which the
workers that rendered them hold one each. Each unit of two or more kernels is led by its
first kernel, which carries the unit's C source and its kernels' names
(:func:`~passinfra.codegen.artifacts.kernel_unit`); the others name the leader
(:func:`~passinfra.codegen.artifacts.kernel_compiled_in`), and CompileC skips them:
their code is in the leader's object. Every kernel keeps its own ``c_source``.

Only kernels compiled with the same compiler settings (a kernel's own schedule may set
its flags) share a unit. With ``codegen.share_kernel_code``, kernels alike but for their
numbers first share one generic kernel (:mod:`passinfra.codegen.shared_kernels`): their
sources change before the units are planned. The units depend on the module and the config alone, so the
objects and the library are the same whichever backend, and however many workers, run
CompileC.
"""

from __future__ import annotations

from passinfra.codegen.artifacts import (
    kernel_c_source,
    kernel_compiled_in,
    kernel_object_code,
    kernel_unit,
    with_kernel_compiled_in,
    with_kernel_unit,
)
from passinfra.codegen.cc_driver import CompilerSettings
from passinfra.codegen.compile_units import (
    DEFAULT_UNIT_BYTES,
    MIN_UNITS,
    MIN_UNITS_CONFIG,
    UNIT_BYTES_CONFIG,
    plan_units,
    split_source,
)
from passinfra.codegen.compile_units import unit_source as make_unit_source
from passinfra.codegen.passes.codegen_c import render_options
from passinfra.codegen.shared_kernels import DEFAULT_SHARE, SHARE_CONFIG, share_kernel_code
from passinfra.ir.module import IRModule
from passinfra.tir import PrimFunc
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.errors import PassConfigError
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass
from passinfra.transform.schedule import function_context

PASS_NAME = "GroupKernels"
register_config(UNIT_BYTES_CONFIG, int)
register_config(MIN_UNITS_CONFIG, int)


def unit_bytes(ctx: PassContext) -> int:
    """Config ``codegen.compile_unit_bytes``, checked: the target size of a unit's kernel
    code (0: every kernel compiles alone)."""
    value = ctx.get_config(UNIT_BYTES_CONFIG, DEFAULT_UNIT_BYTES)
    if value < 0:
        raise PassConfigError(f"config {UNIT_BYTES_CONFIG!r} must be 0 (every kernel compiles alone) "
                              f"or a size in bytes, got {value}")
    return value


def min_units(ctx: PassContext) -> int:
    """Config ``codegen.min_compile_units``, checked: the units a module's kernels make at
    least, where they are enough."""
    value = ctx.get_config(MIN_UNITS_CONFIG, MIN_UNITS)
    if value < 1:
        raise PassConfigError(f"config {MIN_UNITS_CONFIG!r} must be at least 1, got {value}")
    return value


def _groupable(func: object) -> bool:
    """A kernel CompileC will compile that no unit holds yet."""
    return (isinstance(func, PrimFunc) and not func.attrs.get("SkipOptimization", False)
            and kernel_c_source(func) is not None and kernel_object_code(func) is None
            and kernel_unit(func) is None and kernel_compiled_in(func) is None)


def _by_settings(mod: IRModule, ctx: PassContext) -> dict[CompilerSettings, list[tuple[str, PrimFunc]]]:
    """The kernels a unit may hold, by their compiler settings, each group in module order."""
    groups: dict[CompilerSettings, list[tuple[str, PrimFunc]]] = {}
    for gv, func in mod.items():
        if _groupable(func):
            with function_context(ctx, func) as scheduled:
                settings = CompilerSettings.from_context(scheduled)
            groups.setdefault(settings, []).append((gv.name_hint, func))  # type: ignore[arg-type]
    return groups


def _share_code(mod: IRModule, ctx: PassContext) -> IRModule:
    """``mod`` with the kernels alike but for their numbers sharing generic kernels."""
    result = mod
    for index, kernels in enumerate(_by_settings(mod, ctx).values()):
        rendered = []
        for name, func in kernels:
            with function_context(ctx, func) as scheduled:
                rendered.append((name, func, render_options(scheduled)))
        changed = share_kernel_code(rendered, salt=str(index))
        if changed:
            result = result.copy() if result is mod else result
            for name, func in changed.items():
                result[name] = func
    return result


def _group_kernels(mod: IRModule, ctx: PassContext) -> IRModule:
    if ctx.get_config(SHARE_CONFIG, DEFAULT_SHARE):
        mod = _share_code(mod, ctx)
    target, fewest = unit_bytes(ctx), min_units(ctx)
    if target == 0:
        return mod
    by_settings = {settings: [(name, kernel_c_source(func)) for name, func in kernels]
                   for settings, kernels in _by_settings(mod, ctx).items()}
    result = mod
    for kernels in by_settings.values():
        sources = dict(kernels)
        for names in plan_units(kernels, target, fewest):
            if len(names) < 2:
                continue
            parts = [split_source(sources[name]) for name in names]
            source = make_unit_source(names, parts)  # type: ignore[arg-type]  # plan_units grouped only split ones
            if result is mod:
                result = mod.copy()
            result[names[0]] = with_kernel_unit(result[names[0]], source, tuple(names))
            for name in names[1:]:
                result[name] = with_kernel_compiled_in(result[name], names[0])
    return result


@register_pass(PASS_NAME)
def GroupKernels() -> ModulePass:  # noqa: N802 - pass factories are named like classes
    """Put the kernels into compile units, each compiled by one call of the C compiler."""
    return ModulePass(_group_kernels, PassInfo(0, PASS_NAME))


__all__ = ["GroupKernels", "PASS_NAME", "min_units", "unit_bytes"]

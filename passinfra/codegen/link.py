"""LinkLibrary: the module pass that links every kernel object and the host object into
one shared library (attr ``library``, bytes).

Objects are linked in module order, then the host object, under fixed file names, so the
same module links to the same bytes wherever the kernels were compiled.
"""

from __future__ import annotations

from passinfra.codegen.c_renderer import sanitize_identifier
from passinfra.codegen.compiler import CompilerSettings, link_shared
from passinfra.codegen.host import HOST_SYMBOL
from passinfra.codegen.tir import PrimFunc
from passinfra.errors import IRError
from passinfra.ir.module import IRModule
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass


def collect_objects(mod: IRModule) -> list[tuple[str, bytes]]:
    """``(name, object bytes)`` of every PrimFunc in module order, then the host object."""
    objects = []
    for gv, func in mod.items():
        if not isinstance(func, PrimFunc):
            continue
        data = func.attrs.get("object_code")
        if not isinstance(data, bytes):
            raise IRError(f"PrimFunc @{gv.name_hint} has no 'object_code' attr; "
                          "run CompileC before LinkLibrary")
        objects.append((sanitize_identifier(gv.name_hint), data))
    host = mod.attrs.get("host_object_code")
    if not isinstance(host, bytes):
        raise IRError("the module has no 'host_object_code' attr; run HostCodegen before LinkLibrary")
    objects.append((HOST_SYMBOL, host))
    return objects


def _link_pass(mod: IRModule, ctx: PassContext) -> IRModule:
    library = link_shared(collect_objects(mod), CompilerSettings.from_context(ctx))
    mod.attrs = mod.attrs.with_item("library", library)
    return mod


@register_pass("LinkLibrary")
def LinkLibrary() -> ModulePass:  # noqa: N802 - pass factories are named like classes
    """Link the kernels and the host entry into one shared library (attr ``library``)."""
    return ModulePass(_link_pass, PassInfo(0, "LinkLibrary"))


__all__ = ["LinkLibrary", "collect_objects"]

"""How intrinsic calls become C: one table, which the kernel modules register into.

An :class:`~passinfra.tir.Intrinsic` names what it computes (``exp``, ``bitwise_and``,
the GEMM call ``rp_sgemm``, the convolution microkernels' ``rp_conv2d``); the C
renderer looks the name up here and asks the registered :class:`IntrinsicRenderer` for
the C expression. The math functions, bitwise operators and reinterpret are registered by
:mod:`passinfra.codegen.c_renderer`; the GEMM call by :mod:`passinfra.codegen.gemm`; the
convolution calls by :mod:`passinfra.codegen.conv_runtime` (``passinfra.codegen``
imports them all). A new kernel plugs in the same way, with no edit to the renderer.

A call that needs something outside the kernel names a :class:`KernelLibrary`: the C
declarations the kernel needs before its body, and what the shared library must link.
Which libraries a function needs is derived from the function itself
(:func:`kernel_libraries` of its body: its kernel-call statements), never from what a
renderer happened to see while it rendered: the renderer declares what the body needs
before it renders a line, and lowering records the same as ``uses_<name>`` attrs, which
the compile step and LinkLibrary read (:func:`uses_library`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from passinfra import tir
from passinfra.errors import IRError
from passinfra.tir.functor import iter_stmts

if TYPE_CHECKING:  # the renderer imports this module: only for the type names
    from passinfra.codegen.c_renderer import CRenderer, RenderOptions


@dataclass(frozen=True)
class KernelLibrary:
    """Code outside the kernel that some of its calls need: ``declaration(options)`` is
    the C declared before the kernel; ``name`` is what LinkLibrary links (the PrimFunc
    attr ``uses_<name>`` says a function needs it)."""

    name: str
    declaration: Callable[[RenderOptions], str]

    @property
    def attr(self) -> str:
        return f"uses_{self.name}"


@dataclass(frozen=True)
class IntrinsicRenderer:
    """``render(renderer, node, args)``: the C expression of a call whose arguments
    rendered to ``args``; ``library``: what the call needs besides the kernel, if
    anything (a call that needs one is a statement of its own: ``Evaluate``)."""

    render: Callable[[CRenderer, tir.Intrinsic, list[str]], str]
    library: KernelLibrary | None = None


_RENDERERS: dict[str, IntrinsicRenderer] = {}


def register_intrinsic_renderer(name: str, renderer: IntrinsicRenderer) -> None:
    """Make ``renderer`` how calls of the intrinsic ``name`` become C."""
    if name in _RENDERERS and _RENDERERS[name] != renderer:
        raise ValueError(f"intrinsic {name!r} already has a C renderer")
    _RENDERERS[name] = renderer


def intrinsic_renderer(name: str) -> IntrinsicRenderer:
    """The registered renderer of ``name``; IRError naming the known ones if none."""
    renderer = _RENDERERS.get(name)
    if renderer is None:
        raise IRError(f"unknown intrinsic {name!r}; the C backend knows: {', '.join(sorted(_RENDERERS))}")
    return renderer


def known_intrinsics() -> list[str]:
    return sorted(_RENDERERS)


def kernel_libraries(body: tir.Stmt) -> list[KernelLibrary]:
    """The libraries the kernel-call statements of ``body`` need, each once, by name (so
    a function's declarations and attrs come out in one order wherever it is built)."""
    found: dict[str, KernelLibrary] = {}
    for stmt in iter_stmts(body):
        if isinstance(stmt, tir.Evaluate) and isinstance(stmt.value, tir.Intrinsic):
            renderer = _RENDERERS.get(stmt.value.name)
            if renderer is not None and renderer.library is not None:
                found[renderer.library.name] = renderer.library
    return [found[name] for name in sorted(found)]


def uses_library(func: Any, name: str) -> bool:
    """Whether lowering recorded that ``func`` (a PrimFunc) calls into library ``name``."""
    return isinstance(func, tir.PrimFunc) and bool(func.attrs.get(f"uses_{name}", False))


__all__ = ["IntrinsicRenderer", "KernelLibrary", "intrinsic_renderer", "kernel_libraries", "known_intrinsics",
           "register_intrinsic_renderer", "uses_library"]

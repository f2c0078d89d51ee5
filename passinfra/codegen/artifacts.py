"""Typed build artifacts: what code generation produces besides IR.

Two kinds, kept apart on purpose:

- **Per-kernel products** (C source, object code) are made by function passes
  (CodegenC, CompileC) that may run on Ray workers, so they must travel back with their
  PrimFunc. They stay PrimFunc attrs (``c_source``: str, ``object_code``: bytes), read and
  written only through the typed accessors below. Attrs are the one channel that the flat
  wire format, structural equality/hash, the printer (which abbreviates them) and
  reproducers already carry, and both values depend only on the function and the
  ``codegen.*`` config, never on where the pass ran, so parallel equals sequential.
- **Module-level products** (memory plan, host code, weights, runtime metadata, the
  linked library) are made by the link passes (PlanMemory, HostCodegen, LinkLibrary), in
  the driver. They are not IR: the passes return the module unchanged and fill a
  :class:`LinkProducts` opened by whoever runs the link step
  (:func:`collect_link_products`, used by ``passinfra.build.run_link``), the way run
  facts reach a collector (:mod:`passinfra.transform.run_facts`). The printed IR after a
  link pass therefore shows no megabytes of library or weights, and nothing is
  round-tripped through JSON strings.

:class:`BuildArtifact` is what a whole build yields: the three parts a
``runtime.Module`` is made of; the whole-build cache stores and loads it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from passinfra.errors import RaypassError
from passinfra.ir.types import Type
from passinfra.runtime.weights import PackedWeights, WrittenWeights, blob_view
from passinfra.scoped import pushed
from passinfra.tir import PrimFunc

C_SOURCE_ATTR = "c_source"
OBJECT_CODE_ATTR = "object_code"
# GroupKernels: a unit's first kernel carries the unit's C source and its kernels' names;
# CompileC puts the unit's object on it, and the other kernels name it as theirs
UNIT_SOURCE_ATTR = "unit_c_source"
UNIT_KERNELS_ATTR = "unit_kernels"
COMPILED_IN_ATTR = "compiled_in"


class ArtifactError(RaypassError):
    """A build product asked for was never made (a link pass disabled or run out of order)."""


# ----- per-kernel products: typed accessors over the PrimFunc attrs ---------------------------
def kernel_c_source(func: PrimFunc) -> str | None:
    """The C source CodegenC rendered for ``func``, or None before CodegenC."""
    value = func.attrs.get(C_SOURCE_ATTR)
    return value if isinstance(value, str) else None


def with_kernel_c_source(func: PrimFunc, source: str) -> PrimFunc:
    return func.with_attr(C_SOURCE_ATTR, source)


def kernel_object_code(func: PrimFunc) -> bytes | None:
    """The object code CompileC made for ``func``, or None before CompileC."""
    value = func.attrs.get(OBJECT_CODE_ATTR)
    return value if isinstance(value, bytes) else None


def with_kernel_object_code(func: PrimFunc, object_code: bytes) -> PrimFunc:
    return func.with_attr(OBJECT_CODE_ATTR, object_code)


def kernel_unit(func: PrimFunc) -> tuple[str, tuple[str, ...]] | None:
    """``(C source, kernel names)`` of the compile unit ``func`` leads (GroupKernels), or
    None when it leads none (it compiles alone, or in another kernel's unit)."""
    source, names = func.attrs.get(UNIT_SOURCE_ATTR), func.attrs.get(UNIT_KERNELS_ATTR)
    return (source, tuple(names)) if isinstance(source, str) and isinstance(names, tuple) else None


def with_kernel_unit(func: PrimFunc, source: str, names: tuple[str, ...]) -> PrimFunc:
    return func.with_attr(UNIT_SOURCE_ATTR, source).with_attr(UNIT_KERNELS_ATTR, tuple(names))


def kernel_compiled_in(func: PrimFunc) -> str | None:
    """The kernel whose compile unit (and object) holds ``func``'s code, or None."""
    value = func.attrs.get(COMPILED_IN_ATTR)
    return value if isinstance(value, str) else None


def with_kernel_compiled_in(func: PrimFunc, leader: str) -> PrimFunc:
    return func.with_attr(COMPILED_IN_ATTR, leader)


# ----- module-level products ---------------------------------------------------------------
@dataclass(frozen=True)
class MemoryPlan:
    """Where main's intermediates live in the one shared workspace (PlanMemory).

    A plan for intermediates of symbolic sizes (``binding`` set) fixes the layout, not the
    offsets: ``offsets`` are those at the representative ``binding``, and the host
    computes the real ones at each call from ``order``, ``conflicts`` and ``sizes``
    (:func:`passinfra.codegen.host.symbolic_layout`); ``workspace_bytes`` is then None and
    ``naive_bytes`` a symbolic dimension."""

    offsets: dict[int, int]  # intermediate tensor id -> byte offset in the workspace
    workspace_bytes: int | None  # planned peak (None: it depends on the sizes of a call)
    naive_bytes: Any  # sum of every intermediate's size (an int, or a symbolic dimension)
    # symbolic plans only: the tensors in layout order, the earlier ones each must lie
    # above, each one's size in bytes (a dimension), and the representative binding
    order: tuple[int, ...] = ()
    conflicts: dict[int, tuple[int, ...]] = field(default_factory=dict)
    sizes: dict[int, Any] = field(default_factory=dict)
    binding: dict[str, int] | None = None

    @property
    def is_symbolic(self) -> bool:
        return self.binding is not None


@dataclass(frozen=True)
class HostArtifact:
    """The host entry ``raypass_main`` (HostCodegen): its C source and object code."""

    c_source: str
    object_code: bytes


@dataclass(frozen=True, eq=False)  # __eq__ below compares the weights' bytes
class BuildArtifact:
    """What a build produces, before it is loaded: ``runtime.Module``'s three parts."""

    library: bytes
    metadata: dict[str, Any]
    # the link step's layout of the weights (not copied into a blob), or a view of a
    # whole-build cache entry
    weights: bytes | memoryview | np.ndarray | PackedWeights | WrittenWeights

    def chunks(self) -> list[bytes | memoryview]:
        """The stored form, in pieces written one after another (the weights are not
        copied into one joined buffer: they are most of the bytes)."""
        header = json.dumps({"metadata": self.metadata, "library_bytes": len(self.library)},
                            sort_keys=True).encode("utf-8")
        packed = isinstance(self.weights, (PackedWeights, WrittenWeights))
        weights = list(self.weights.chunks()) if packed else [blob_view(self.weights)]
        return [len(header).to_bytes(8, "little"), header, self.library, *weights]

    def to_bytes(self) -> bytes:
        return b"".join(self.chunks())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BuildArtifact):
            return NotImplemented
        return (
            self.library == other.library
            and self.metadata == other.metadata
            and blob_view(self.weights) == blob_view(other.weights)
        )

    @staticmethod
    def from_bytes(data: bytes | memoryview) -> BuildArtifact:
        """The artifact stored in ``data``; from a memoryview, the weights stay a view
        into it (no copy: the loaded module copies them once, into aligned memory)."""
        view = memoryview(data)
        header_len = int.from_bytes(view[:8], "little")
        header = json.loads(bytes(view[8:8 + header_len]))
        start = 8 + header_len
        end = start + header["library_bytes"]
        weights = view[end:] if isinstance(data, memoryview) else bytes(view[end:])
        return BuildArtifact(bytes(view[start:end]), header["metadata"], weights)


@dataclass
class LinkProducts:
    """What one link step produced, filled in pass by pass (each field None until the
    pass that makes it has run).

    ``ret_type`` is the one input: main's graph-level return type, taken before lowering
    (lowered kernels write flattened buffers, and lowered main carries no types), so the
    runtime metadata gives every output main's own shape.
    """

    ret_type: Type | None = None
    memory_plan: MemoryPlan | None = None  # PlanMemory
    host: HostArtifact | None = None  # HostCodegen
    # HostCodegen: the weights blob's layout (being written already, in a build)
    weights: PackedWeights | WrittenWeights | None = None
    metadata: dict[str, Any] | None = None  # HostCodegen: what the runtime needs to call the library
    library: bytes | None = None  # LinkLibrary

    def build_artifact(self) -> BuildArtifact:
        """The loadable result; an error naming the pass whose product is missing."""
        if self.metadata is None or self.weights is None:
            raise ArtifactError("the link step made no runtime metadata and weights: HostCodegen did not run")
        if self.library is None:
            raise ArtifactError("the link step made no library: LinkLibrary did not run")
        return BuildArtifact(self.library, self.metadata, self.weights)


class _Collectors(threading.local):
    def __init__(self) -> None:
        self.stack: list[LinkProducts] = []


_collectors = _Collectors()


@contextmanager
def collect_link_products(ret_type: Type | None = None) -> Iterator[LinkProducts]:
    """A :class:`LinkProducts` the link passes run in this thread fill while the block runs
    (the innermost one, when link steps nest)."""
    with pushed(_collectors.stack, LinkProducts(ret_type=ret_type)) as products:
        yield products


def current_link_products() -> LinkProducts | None:
    """The products of the link step running in this thread; None outside one (a link pass
    called on its own still runs its checks, and its products are dropped)."""
    return _collectors.stack[-1] if _collectors.stack else None


__all__ = [
    "ArtifactError", "BuildArtifact", "C_SOURCE_ATTR", "COMPILED_IN_ATTR", "HostArtifact", "LinkProducts",
    "MemoryPlan", "OBJECT_CODE_ATTR", "UNIT_KERNELS_ATTR", "UNIT_SOURCE_ATTR", "collect_link_products",
    "current_link_products", "kernel_c_source", "kernel_compiled_in", "kernel_object_code", "kernel_unit",
    "with_kernel_c_source", "with_kernel_compiled_in", "with_kernel_object_code", "with_kernel_unit",
]

"""SpecializeKernels: also compile static kernels for chosen sizes, picked at run time.

One library built for symbolic sizes serves every size, but a kernel whose sizes are known
when it is compiled needs no remainder loops, splits its parallel work exactly and picks
its GEMM plan for the shape. A model run mostly at a few sizes (``seq = 1`` for decode,
common prompt lengths) gets those kernels too: config ``codegen.specialize``, a tuple of
specializations, each a mapping ``{dimension name: size}`` over ``main``'s dimensions
(CLI ``raypass compile --specialize seq=1 --specialize batch=1,seq=128``).

For each primitive function that uses a dimension a specialization binds and computes a
reduction, a contraction or an opaque op (:func:`pays`), this pass adds a copy with those
dimensions bound (:func:`~passinfra.transform.builtin.bind_dims.
bind_function_dims`) under its own name, ``<function>__<name><size>...``: a graph-level
function like any other, so the loop passes and the C compiles after it run over the
copies in parallel on the workers. Two specializations that bind a function alike share
one copy. The function they were made from keeps its name and gets the attr
``Specializations``: ``((copy name, ((dimension, size), ...)), ...)``, which LowerToPrimFunc
carries to its PrimFunc and from which the host code calls a copy when every size it binds
matches at the call, and the symbolic kernel otherwise (:mod:`passinfra.codegen.host`).
The copies read the same weights, in the same layout: PanelWeights ran before. A function
of element-wise and data-movement ops alone gets no copy: its symbolic loops are what a
static kernel's are (vectorized, with a remainder), and a copy would only cost compile time.

Without the config the pipeline does not hold this pass at all (``compile_pipeline``);
run by hand without it, the pass changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from passinfra.codegen.c_renderer import sanitize_identifier
from passinfra.codegen.lower import SPECIALIZATIONS_ATTR
from passinfra.ir.dims import DimVar, bounds_text
from passinfra.ir.expr import Call, Function
from passinfra.ir.functor import iter_post_order
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op, OpPattern
from passinfra.ir.type_infer import infer_type
from passinfra.transform.builtin.bind_dims import bind_function_dims, function_dim_vars
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.errors import PassConfigError
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass

SPECIALIZE_CONFIG = "codegen.specialize"
register_config(SPECIALIZE_CONFIG, tuple)

Binding = tuple[tuple[str, int], ...]


def main_dim_vars(mod: IRModule) -> dict[str, DimVar]:
    """``main``'s dimension variables by name (those of its parameters' types)."""
    main = mod["main"] if "main" in mod else None
    if not isinstance(main, Function):
        return {}
    found: dict[str, DimVar] = {}
    for param in main.params:
        ty = param.type_annotation or param._checked_type
        for var in getattr(ty, "dim_vars", ()):
            found.setdefault(var.name, var)
    return found


def specializations(ctx: PassContext, dims: Mapping[str, DimVar]) -> list[Binding]:
    """The config's specializations, each as sorted (name, size) pairs, checked against
    ``main``'s dimensions ``dims``: PassConfigError naming the one that is wrong."""
    value = ctx.get_config(SPECIALIZE_CONFIG, ())
    found: list[Binding] = []
    for index, spec in enumerate(value or ()):
        where = f"config {SPECIALIZE_CONFIG!r} entry {index}"
        if not isinstance(spec, Mapping) or not spec:
            raise PassConfigError(f"{where}: expected a non-empty mapping of dimension names to sizes "
                                  f"(e.g. {{'seq': 1}}), got {spec!r}")
        pairs: list[tuple[str, int]] = []
        for name, size in spec.items():
            if name not in dims:
                known = ", ".join(sorted(dims)) or "none: main's shapes are static"
                raise PassConfigError(f"{where}: {name!r} is not a dimension of main "
                                      f"(its dimensions: {known})")
            if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
                raise PassConfigError(f"{where}: the size of {name!r} must be an int, got {size!r}")
            var = dims[name]
            if size < var.lo or (var.hi is not None and size > var.hi):
                raise PassConfigError(f"{where}: {name} = {int(size)} is outside its bounds "
                                      f"{bounds_text(var)}")
            pairs.append((name, int(size)))
        binding = tuple(sorted(pairs))
        if binding not in found:
            found.append(binding)
    return found


# the op kinds whose kernels a static size changes: reductions, contractions and
# convolutions (their GEMM plans, tiles and thread splits), opaque ops (softmax, norms)
_PAYING_PATTERNS = frozenset({OpPattern.COMM_REDUCE, OpPattern.OUT_EWISE_FUSABLE, OpPattern.OPAQUE})


def pays(func: Function) -> bool:
    """Whether a static copy of primitive ``func`` may run faster than its symbolic
    kernel: it calls an op of a kind whose kernel a static size changes."""
    return any(isinstance(node, Call) and isinstance(node.op, Op) and node.op.pattern in _PAYING_PATTERNS
               for node in iter_post_order(func.body))


def specialized_name(name: str, binding: Binding, taken: Any) -> str:
    """``<name>__seq1`` (``__batch1_seq128`` for two sizes): a C identifier not in ``taken``."""
    base = sanitize_identifier(f"{name}__{'_'.join(f'{dim}{size}' for dim, size in binding)}")
    candidate, suffix = base, 1
    while candidate in taken:
        candidate, suffix = f"{base}_{suffix}", suffix + 1
    return candidate


def specialize_kernels(mod: IRModule, bindings: list[Binding]) -> IRModule:
    """``mod`` with the specialized copies of its primitive functions (module docstring)."""
    if not bindings:
        return mod
    out = mod.copy()
    taken = {gv.name_hint for gv in mod.get_global_vars()}
    for gv, func in list(mod.items()):
        if not (isinstance(func, Function) and func.attrs.get("Primitive", 0) and pays(func)):
            continue
        used = function_dim_vars(func)
        variants: list[tuple[str, Binding]] = []
        for binding in bindings:
            restricted = tuple((dim, size) for dim, size in binding if dim in used)
            if not restricted or any(restricted == known for _, known in variants):
                continue
            name = specialized_name(gv.name_hint, restricted, taken)
            taken.add(name)
            copy = bind_function_dims(func, dict(restricted))
            infer_type(copy)
            out[name] = copy
            variants.append((name, restricted))
        if variants:
            out.update_func(gv, func.with_attr(SPECIALIZATIONS_ATTR, tuple(variants)))
    return out


def _specialize_kernels(mod: IRModule, ctx: PassContext) -> IRModule:
    return specialize_kernels(mod, specializations(ctx, main_dim_vars(mod)))


@register_pass("SpecializeKernels")
def SpecializeKernels() -> ModulePass:  # noqa: N802 - pass factories are named like classes
    """Add a copy of each primitive function bound at the sizes config
    ``codegen.specialize`` chooses (opt_level 0); the host picks one at run time."""
    return ModulePass(_specialize_kernels, PassInfo(0, "SpecializeKernels"))


__all__ = ["SPECIALIZE_CONFIG", "SpecializeKernels", "main_dim_vars",
           "pays", "specialize_kernels", "specializations", "specialized_name"]

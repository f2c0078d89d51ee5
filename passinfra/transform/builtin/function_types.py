"""Types for the function passes that read them, without reading the module.

SimplifyInference, FoldScaleAxis and AlterOpLayout need the checked type of every node
of the function they rewrite. Each of them ``requires`` InferType, which runs right
before it as a module pass and caches a type on every node, the function included, so
the cached types are all they need: a function whose own type is cached was inferred as
a whole (the inferencer types every node below a node before the node itself), and the
pass then looks at nothing but that function. This is what lets these passes promise
``reads_module=False`` (see ``FunctionPass``): on a parallel scheduler, every pass that
needs types starts a stage right after InferType, so it always finds them cached.

Only a function that was never typed (a pass called directly on an uninferred module)
is inferred here, against ``mod``, which is then the caller's whole module.
"""

from __future__ import annotations

from passinfra.ir.expr import Function
from passinfra.ir.module import IRModule
from passinfra.ir.type_infer import infer_type
from passinfra.transform.module_view import typing_scope

__all__ = ["ensure_typed"]


def ensure_typed(func: Function, mod: IRModule) -> None:
    """Make sure every node of ``func`` has its type cached (see the module docstring)."""
    if func._checked_type is None:
        infer_type(func, typing_scope(mod))  # mod is the pass's view; callees' types are in the scope

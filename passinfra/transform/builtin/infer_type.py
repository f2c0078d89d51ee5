"""InferType: run type inference over every function of the module.

Types are caches on the (immutable) nodes, so the pass returns a new module object
holding the very same functions; ``mod[name].checked_type`` and ``node.checked_type``
are readable afterwards. Type errors propagate as IRTypeError, whose message already
names the function and op and shows the offending IR.

Only functions without a cached type are inferred. A function's own type is cached last,
once its whole body is typed, so a typed function has nothing left to infer, and
inference would skip it anyway; a module whose functions are all typed (the scheduler's
workers type what they return when a pass declaring ``infers_types``, such as this one,
comes next, and passes that change nothing keep the types) is returned at once, without
the call-graph walk. The counters of :func:`infer_type_counts` say how many functions the
pass found typed and how many it had to infer.
"""

from __future__ import annotations

import threading

from passinfra.ir.expr import BaseFunc
from passinfra.ir.module import IRModule
from passinfra.ir.type_infer import infer_module
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import module_pass
from passinfra.transform.passes import Pass
from passinfra.transform.registry import register_pass

_COUNTS = {"runs": 0, "functions_inferred": 0, "functions_skipped": 0}
_COUNTS_LOCK = threading.Lock()


def infer_type_counts() -> dict[str, int]:
    """This process's InferType counters: ``runs``, ``functions_inferred`` (functions
    whose type was not cached when the pass began) and ``functions_skipped`` (functions
    already typed, not looked at)."""
    with _COUNTS_LOCK:
        return dict(_COUNTS)


def _typed(func: BaseFunc) -> bool:
    return func._checked_type is not None


def _infer_module_types(mod: IRModule, ctx: PassContext) -> IRModule:
    # ModulePass hands us a copy of the caller's module, so returning it gives the caller
    # a new module object with the same functions.
    untyped = sum(1 for func in mod.functions.values() if not _typed(func))
    with _COUNTS_LOCK:
        _COUNTS["runs"] += 1
        _COUNTS["functions_inferred"] += untyped
        _COUNTS["functions_skipped"] += len(mod) - untyped
    if not untyped:
        # what infer_module would do: every root is known, so it infers nothing
        return mod
    return infer_module(mod)


@register_pass("InferType")
def InferType() -> Pass:
    """A module pass (opt_level 0) that infers and caches the type of every node.

    It declares ``infers_types``: a parallel scheduler then has the workers of the stage
    before it type what they return, which this pass finds done (see :class:`PassInfo`)."""
    # the declaration, not the name, is what the scheduler reads
    return module_pass(_infer_module_types, opt_level=0, name="InferType", infers_types=True)


__all__ = ["InferType", "infer_type_counts"]

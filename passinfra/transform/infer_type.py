"""InferType: run type inference over every function of the module.

Types are caches on the (immutable) nodes, so the pass returns a new module object
holding the very same functions; ``mod[name].checked_type`` and ``node.checked_type``
are readable afterwards. Type errors propagate as IRTypeError, whose message already
names the function and op and shows the offending IR.
"""

from __future__ import annotations

from passinfra.ir.module import IRModule
from passinfra.ir.type_infer import infer_module
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import module_pass
from passinfra.transform.passes import Pass
from passinfra.transform.registry import register_pass


def _infer_module_types(mod: IRModule, ctx: PassContext) -> IRModule:
    # ModulePass hands us a copy of the caller's module, so returning it gives the caller
    # a new module object with the same functions.
    return infer_module(mod)


@register_pass("InferType")
def InferType() -> Pass:
    """A module pass (opt_level 0) that infers and caches the type of every node."""
    return module_pass(_infer_module_types, opt_level=0, name="InferType")

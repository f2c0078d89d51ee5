"""PlanMemory: the module pass that plans the workspace of ``main``'s intermediate
tensors (the link step's ``memory_plan``).

The analysis of ``main`` and the planner (liveness, greedy by size, first fit) are
:mod:`passinfra.codegen.host`, shared with HostCodegen, which plans for itself when this
pass has not run in its link step. The IR is never changed. Intermediates of symbolic
sizes get a layout whose offsets the host computes at each call (``MemoryPlan.order`` and
``conflicts``; see :func:`passinfra.codegen.host.plan_memory`).
"""

from __future__ import annotations

from passinfra.codegen.artifacts import current_link_products
from passinfra.codegen.host import host_program, plan_memory
from passinfra.ir.module import IRModule
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass


def _plan_memory_pass(mod: IRModule, ctx: PassContext) -> IRModule:
    plan = plan_memory(host_program(mod))
    products = current_link_products()
    if products is not None:
        products.memory_plan = plan
    return mod


@register_pass("PlanMemory")
def PlanMemory() -> ModulePass:  # noqa: N802 - pass factories are named like classes
    """Plan the workspace of main's intermediates (the link step's ``memory_plan``)."""
    return ModulePass(_plan_memory_pass, PassInfo(0, "PlanMemory"))


__all__ = ["PlanMemory"]

"""HostCodegen: the module pass that generates and compiles the host entry
``raypass_main`` and packs the weights (the link step's ``host``, ``weights`` and
``metadata``).

What the host code is and how it is rendered is :mod:`passinfra.codegen.host`; this
module runs it for a link step: it takes the link step's memory plan (PlanMemory's, or
plans one itself), and the weights file StreamWeights started writing when there is one
(:mod:`passinfra.codegen.weights_stream`). The IR is never changed.
"""

from __future__ import annotations

from passinfra.codegen.artifacts import HostArtifact, current_link_products
from passinfra.codegen.cc_driver import CompilerSettings, compile_c_result
from passinfra.codegen.host import (
    HOST_SYMBOL,
    host_program,
    pack_weights,
    plan_memory,
    render_host,
    runtime_metadata,
)
from passinfra.codegen.object_cache import count
from passinfra.codegen.weights_stream import current_stream
from passinfra.ir.module import IRModule
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass


def _host_codegen_pass(mod: IRModule, ctx: PassContext) -> IRModule:
    products = current_link_products()
    program = host_program(mod)
    planned = products.memory_plan if products is not None else None
    plan = planned if planned is not None else plan_memory(program)
    weights, weight_offsets = pack_weights(program.weights)
    stream = current_stream()
    written = stream.claim(program.weights) if stream is not None else None  # already being written
    source = render_host(program, plan, weight_offsets)
    compiled = compile_c_result(source, CompilerSettings.from_context(ctx), name=HOST_SYMBOL)
    if not compiled.cache_hit:
        count("host_compiles")  # so "kernels compiled" = compiles - host_compiles
    if products is not None:
        products.host = HostArtifact(source, compiled.object_code)
        products.weights = written if written is not None else weights
        products.metadata = runtime_metadata(program, plan, weights.nbytes, products.ret_type)
    return mod


@register_pass("HostCodegen")
def HostCodegen() -> ModulePass:  # noqa: N802 - pass factories are named like classes
    """Generate and compile the host entry ``raypass_main``; pack the weights (the link
    step's ``host``, ``weights`` and ``metadata``)."""
    return ModulePass(_host_codegen_pass, PassInfo(0, "HostCodegen"))


__all__ = ["HostCodegen"]

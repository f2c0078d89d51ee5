"""StreamWeights: start writing the weights file while the kernels compile.

Placed right after the last graph pass, when ``main``'s constants are final: in a
``build`` it starts the background writer of :mod:`passinfra.codegen.weights_stream`
with them, laid out as the host code will lay them out; HostCodegen later claims the
file. When the module convolves or multiplies matrices, it also starts compiling the
convolution runtime the link will need (:func:`~passinfra.codegen.conv_runtime.
prefetch_runtime_compile`): this pass runs in the process that links, while the kernels
may compile on workers, which never start that compile. Outside a build (no stream open)
it does nothing. It never changes the IR. Symbolic shapes change nothing here: it reads
only ``main``'s constants, whose shapes are always static, and no type.
"""

from __future__ import annotations

from passinfra.codegen.cc_driver import CompilerSettings
from passinfra.codegen.conv_runtime import prefetch_runtime_compile
from passinfra.codegen.host import main_weights
from passinfra.codegen.weights_stream import current_stream
from passinfra.ir.expr import Call, Function
from passinfra.ir.functor import iter_post_order
from passinfra.ir.module import IRModule
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass

# ops whose kernels may call the convolution runtime (passinfra.codegen.compute.conv_plan,
# passinfra.codegen.gemm's matmul)
_MICROKERNEL_OPS = frozenset({"nn.conv2d", "matmul"})


def _may_call_microkernels(mod: IRModule) -> bool:
    return any(isinstance(func, Function) and any(
        isinstance(node, Call) and getattr(node.op, "name", None) in _MICROKERNEL_OPS
        for node in iter_post_order(func.body)) for _, func in mod.items())


def _stream_weights(mod: IRModule, ctx: PassContext) -> IRModule:
    stream = current_stream()
    if stream is not None and "main" in mod and isinstance(mod["main"], Function):
        stream.start(main_weights(mod["main"]))
        if _may_call_microkernels(mod):
            prefetch_runtime_compile(CompilerSettings.from_context(ctx))
    return mod


@register_pass("StreamWeights")
def StreamWeights() -> ModulePass:  # noqa: N802 - pass factories are named like classes
    """Start writing ``main``'s weights to the library's weights file in the background
    (inside ``build``; a no-op elsewhere)."""
    return ModulePass(_stream_weights, PassInfo(0, "StreamWeights"))


__all__ = ["StreamWeights"]

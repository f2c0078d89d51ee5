"""StreamWeights: start writing the weights file while the kernels compile.

Placed right after the last graph pass, when ``main``'s constants are final: in a
``build`` it starts the background writer of :mod:`passinfra.codegen.weights_stream`
with them, laid out as the host code will lay them out; HostCodegen later claims the
file. Outside a build (no stream open) it does nothing. It never changes the IR.
"""

from __future__ import annotations

from passinfra.codegen.host import main_weights
from passinfra.codegen.weights_stream import current_stream
from passinfra.ir.expr import Function
from passinfra.ir.module import IRModule
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass


def _stream_weights(mod: IRModule, ctx: PassContext) -> IRModule:
    stream = current_stream()
    if stream is not None and "main" in mod and isinstance(mod["main"], Function):
        stream.start(main_weights(mod["main"]))
    return mod


@register_pass("StreamWeights")
def StreamWeights() -> ModulePass:  # noqa: N802 - pass factories are named like classes
    """Start writing ``main``'s weights to the library's weights file in the background
    (inside ``build``; a no-op elsewhere)."""
    return ModulePass(_stream_weights, PassInfo(0, "StreamWeights"))


__all__ = ["StreamWeights"]

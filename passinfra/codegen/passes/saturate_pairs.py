"""SaturatePairs: onnxruntime's integer arithmetic on CPUs without VNNI, where asked.

onnxruntime multiplies uint8 data by int8 weights (its U8S8 kernels, the format
``quantize_static`` and ``quantize_dynamic`` write by default) with VPMADDUBSW on x86-64
CPUs without VNNI (AVX2, and AVX-512 before Cascade Lake): each pair of consecutive
products is added in int16 with saturation, so where a pair exceeds int16 (only possible
for weights of more than 7 bits) its results are not the exact ones. raypass computes the
exact sums by default; for full-range weights, on such a CPU, that takes twice VPMADDUBSW's
instructions (the weight widened to 16 bits).

With config ``relay.SaturatePairs.enabled`` (default False) this pass marks every
``qnn.matmul`` and ``qnn.conv2d`` of uint8 data and an int8 weight that runs on the
integer GEMM with ``saturate_pairs=True``: its arithmetic is then onnxruntime's without
VNNI (:mod:`passinfra.ir.op.quantize` defines it), the same bits on every CPU raypass runs
on, which are onnxruntime's bits on a CPU without VNNI. The interpreter, the folded
constants and the compiled code all compute it; on AVX2 the integer GEMM runs such a
weight by VPMADDUBSW, as fast as a 7-bit one. A weight whose pairs all fit int16 (a 7-bit
weight) gives the exact result either way. Depthwise convolutions and convolutions of
narrow groups are not marked (onnxruntime computes them exactly too, outside its GEMM).

What it marks runs on the integer GEMM: a matmul of a right operand without batch axes and
static ``k`` and ``n``; a convolution of static sizes, one data zero point (a scalar) and
a weight zero point per tensor or per output channel, one group or groups of at least
``MIN_GEMM_GROUP_CHANNELS`` channels (AlterOpLayout lays it out NHWC for the GEMM).

Where: right after FuseQDQ (before ExactFloatConvolutions, which leaves a marked
convolution whose weight's pairs do not fit on the integer GEMM); the build runs it only
where the config is set (``passinfra.build.compile_pass_names``).
"""

from __future__ import annotations

import math

from passinfra.codegen.compute.quantize import integer_gemm_steps
from passinfra.codegen.compute.quantized_conv import MIN_GEMM_GROUP_CHANNELS
from passinfra.ir.expr import Call, Expr, Function
from passinfra.ir.functor import ExprMutator
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op
from passinfra.ir.types import TensorType
from passinfra.transform.builtin.function_types import ensure_typed
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import function_pass
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

ENABLED_CONFIG = "relay.SaturatePairs.enabled"
register_config(ENABLED_CONFIG, bool)

_MATMUL, _CONV2D = Op.get("qnn.matmul"), Op.get("qnn.conv2d")


def _types(call: Call) -> list[TensorType] | None:
    types = [arg._checked_type for arg in call.args] + [call._checked_type]
    return types if all(isinstance(t, TensorType) for t in types) else None  # type: ignore[return-value]


def _on_integer_gemm(call: Call, types: list[TensorType]) -> bool:
    """Whether the marked call runs on the integer GEMM (module docstring)."""
    data, weight, data_zero, weight_zero, out = types
    if call.op is _MATMUL:
        shapes = (tuple(t.shape) for t in (data, weight, data_zero, weight_zero))
        return integer_gemm_steps(*shapes) is not None
    if not all(t.is_static for t in types) or data_zero.ndim != 0 or weight_zero.ndim not in (0, 4):
        return False
    attrs = call.attrs
    if (attrs["data_layout"], attrs["kernel_layout"]) != ("NCHW", "OIHW"):
        return False
    out_channels, group_channels = int(weight.shape[0]), int(weight.shape[1])
    if math.prod(int(d) for d in weight_zero.shape) not in (1, out_channels):
        return False
    return attrs["groups"] == 1 or group_channels >= MIN_GEMM_GROUP_CHANNELS


class _Mark(ExprMutator):
    def visit_call(self, call: Call) -> Expr:
        new = super().visit_call(call)
        if call.op not in (_MATMUL, _CONV2D) or not isinstance(new, Call) or new.attrs.get("saturate_pairs"):
            return new
        types = _types(call)
        if types is None or (types[0].dtype, types[1].dtype) != ("uint8", "int8"):
            return new
        if not _on_integer_gemm(call, types):
            return new
        return Call(new.op, new.args, new.attrs.with_item("saturate_pairs", True))


def saturate_pairs_function(func: Function, mod: IRModule, ctx: PassContext) -> Function:
    """The per-function body of :func:`SaturatePairs`."""
    if not ctx.get_config(ENABLED_CONFIG, False) or func.attrs.get("Primitive", 0):
        return func
    ensure_typed(func, mod)
    return _Mark().visit(func)  # type: ignore[return-value]


@register_pass("SaturatePairs")
def SaturatePairs() -> FunctionPass:  # noqa: N802 - pass factories are named like classes
    """Mark the u8 x s8 integer contractions to compute as onnxruntime does without VNNI
    (config ``relay.SaturatePairs.enabled``, off by default; module docstring)."""
    return function_pass(saturate_pairs_function, opt_level=0, name="SaturatePairs",
                         required=["InferType"], reads_module=False)


__all__ = ["ENABLED_CONFIG", "SaturatePairs", "saturate_pairs_function"]

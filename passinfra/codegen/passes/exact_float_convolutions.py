"""ExactFloatConvolutions: an integer convolution of short sums runs on the float32
convolution kernels, with the same integer result.

A depthwise ``qnn.conv2d`` of one output a channel stays integer: the runtime has a body of
its own for it (:mod:`passinfra.codegen.compute.quantized_conv`), which reads the 8-bit
image as it is, so the layers around it need no float32 copy of their outputs
(MobileNetV3-like: its expand layers wrote 4 bytes an output for the float kernels). One of
several outputs a channel has nothing for the integer GEMM to multiply: each output sums
``KH * KW`` products of one channel; a sum of fewer than 32
products (a first layer's: 3 channels, 3x3: 27) is mostly the GEMM's fixed costs, its copy
of the data into its layout and its requantizing finish, and on AVX2 without VNNI, a
full-range weight's widening to 16 bits. The float32 convolution kernels
(the runtime's depthwise and microkernels, AVX-512/AVX2) compute such sums fastest, and
for these operands they are exact: ``x - zx`` and ``w - zw`` are integers of at most 255 in
magnitude, so every product and every partial sum is an integer, and while the sum of the
magnitudes ``max |x - zx| * sum |w - zw|`` (per output channel, over its taps) stays below
2^24 every one of them is a float32 exactly, in any order of summation, fused
multiply-add or not. Then ``int32(conv2d(float(x) - zx, float(w - zw)))`` is the integer
convolution bit for bit; its epilogue (the int32 bias, the requantization, a
hard-swish) runs in the float kernel's.

The rewrite, per call: ``qnn.conv2d(x, W, zx, zw)`` with a constant weight ``W``, one
input channel per group (and more outputs than groups) or fewer than :data:`SHORT_SUM`
products per output (fewer than :data:`SHORT_FITTING_SUM` for a weight whose pairs fit
``VPMADDUBSW``), a per-tensor data zero point and static sizes becomes
``cast(nn.conv2d(subtract(cast(x, "float32"), zx), W'), "int32")`` with ``W' = float32(W -
zw)`` a constant, when the bound above holds (a 7x7 filter of extreme values: 49 * 255 *
255 < 2^24 always). Padding: the float convolution pads with 0, which is ``x - zx`` at a
padded cell, as the integer one has it. Longer sums stay integer (the integer GEMM
multiplies them four to sixteen times faster than float32 FMAs), and so do sums of 16 to
31 products of a weight whose pairs fit (``qgemm_panels.pairs_fit``: a 7-bit weight,
onnxruntime's ``reduce_range``, which AVX2 multiplies by ``VPMADDUBSW`` without widening):
an RGB first layer of such a weight is integer (RegNetX-like and MobileNetV3-like 7-bit on
a Zen 3's AVX2: 5-10% faster so than on the float kernels; of full-range weights, 7%
slower).

On an AVX-512 target the integer GEMM takes every sum of :data:`SHORT_SUM_AVX512` products
or more: its VNNI bodies multiply four k a step, its finish step requantizes 16 outputs at
once and looks a table up by VBMI, and a pointwise convolution's data is already its
matrix, where the float path converts the 8-bit image to float32 and requantizes in a loop
of its own. In-process A/B on a Zen 4: MobileNetV3-like QDQ's 1x1 16->72 at 56x56 210 ->
110 us, those 1x1 of 16 and 24 channels integer 0.92-0.93 of the model's time, its RGB
first layer (27 products, a hard-swish table) integer 0.87 at one thread and 0.94 at two
more; RegNetX-like's first layer 0.91. The AVX2 target keeps the rule above (the 1x1
integer: the model 0.97-0.99, single layers of 8-24 channels 1.14-1.27x slower), and so do
shorter sums (a 1x1 of 8 channels into 64 at 56x56 1.09x slower integer on the Zen 4).

A convolution that SaturatePairs marked (``saturate_pairs``) and whose weight's pairs do
not all fit stays integer: its pairs saturate, which only the integer GEMM computes.

Where: after FoldConstant has made the weights and zero points constants and before
AlterOpLayout, which lays the new convolution out like every other.
"""

from __future__ import annotations

import numpy as np

from passinfra.codegen.compute.conv_plan import target_isa
from passinfra.codegen.compute.quantized_conv import depthwise
from passinfra.ir import op
from passinfra.ir.expr import Call, Constant, Expr, Function
from passinfra.ir.functor import ExprMutator
from passinfra.ir.module import IRModule
from passinfra.ir.op import qgemm_panels
from passinfra.ir.op.nn import conv2d
from passinfra.ir.op.registry import Op
from passinfra.ir.types import TensorType
from passinfra.transform.builtin.function_types import ensure_typed
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

_QNN_CONV2D = Op.get("qnn.conv2d")
# a float32 holds every integer of magnitude up to 2^24 exactly
EXACT_LIMIT = 2 ** 24
# sums shorter than this run on the float kernels (module docstring) ...
SHORT_SUM = 32
# ... and a weight whose pairs fit VPMADDUBSW is integer from this many products on
SHORT_FITTING_SUM = 16
# ... and on an AVX-512 target a sum of this many products stays integer
SHORT_SUM_AVX512 = 16


def _data_range(dtype: str, zero_point: int) -> int:
    """The largest ``|x - zx|`` of a ``dtype`` value ``x``."""
    info = np.iinfo(dtype)
    return max(zero_point - int(info.min), int(info.max) - zero_point)


def _gemm_matrix(codes: np.ndarray) -> np.ndarray:
    """An OIHW weight as the integer GEMM's matrix: k over (ky, kx, channel), the HWIO rows."""
    return codes.transpose(2, 3, 1, 0).reshape(-1, codes.shape[0])


def _short(codes: np.ndarray) -> bool:
    """Whether the sums of an OIHW weight ``codes`` are short (module docstring)."""
    products = int(np.prod(codes.shape[1:]))
    if target_isa() == "avx512":
        return products < SHORT_SUM_AVX512
    if products < SHORT_FITTING_SUM or products >= SHORT_SUM:
        return products < SHORT_FITTING_SUM
    return not qgemm_panels.pairs_fit(_gemm_matrix(codes))


def exact_in_float(call: Call) -> np.ndarray | None:
    """The float32 weight ``W - zw`` when ``call`` (a typed qnn.conv2d) is depthwise or of
    short sums, with a constant weight, one data zero point and static sizes, and its sums
    are exact in float32 (module docstring); else None."""
    data, weight, data_zero, weight_zero = call.args
    attrs = call.attrs
    if (attrs["data_layout"], attrs["kernel_layout"]) != ("NCHW", "OIHW"):
        return None
    data_type, out_type = data._checked_type, call._checked_type
    if not (isinstance(data_type, TensorType) and data_type.is_static and isinstance(out_type, TensorType)
            and out_type.is_static):
        return None
    if not all(isinstance(arg, Constant) for arg in (weight, data_zero, weight_zero)):
        return None
    codes = weight.data
    if data_zero.data.size != 1 or (codes.shape[1] != 1 and not _short(codes)):
        return None
    zero = weight_zero.data
    if depthwise(attrs["groups"], codes.shape[1], codes.shape[0]) and zero.ndim in (0, 4) and zero.size in (
            1, codes.shape[0]):
        return None  # the integer runtime's depthwise body (quantized_conv)
    if attrs.get("saturate_pairs") and not qgemm_panels.pairs_fit(_gemm_matrix(codes)):
        return None  # its pairs saturate (SaturatePairs): the integer GEMM computes that
    centered = codes.astype(np.int64) - weight_zero.data.astype(np.int64)  # broadcasts to the weight
    magnitudes = np.abs(centered).reshape(codes.shape[0], -1).sum(axis=1)
    bound = int(magnitudes.max(initial=0)) * _data_range(data_type.dtype, int(data_zero.data.reshape(())))
    if bound >= EXACT_LIMIT:
        return None
    return np.ascontiguousarray(np.broadcast_to(centered, codes.shape).astype(np.float32))


class _ExactFloatConvolutions(ExprMutator):
    def visit_call(self, call: Call) -> Expr:
        new = super().visit_call(call)
        if call.op is not _QNN_CONV2D:
            return new
        weight = exact_in_float(call)
        if weight is None:
            return new
        zero = Constant.owning(np.array(float(call.args[2].data.reshape(())), np.float32))
        centered = op.subtract(op.cast(new.args[0], "float32"), zero)
        attrs = call.attrs
        result = conv2d(centered, Constant.owning(weight), strides=attrs["strides"], padding=attrs["padding"],
                        dilation=attrs["dilation"], groups=attrs["groups"])
        return op.cast(result, "int32")


def exact_float_convolutions(func: Function, mod: IRModule) -> Function:
    """``func`` (of ``mod``) with its integer convolutions of short sums on the float
    kernels where that is exact (module docstring)."""
    if func.attrs.get("Primitive", 0):
        return func
    ensure_typed(func, mod)
    return _ExactFloatConvolutions().visit(func)  # type: ignore[return-value]


class ExactFloatConvolutionsPass(FunctionPass):
    reads_module = False

    def __init__(self) -> None:
        super().__init__(lambda func, mod, ctx: exact_float_convolutions(func, mod),
                         PassInfo(0, "ExactFloatConvolutions"))

    def accepts(self, func: object) -> bool:
        return isinstance(func, Function) and not func.attrs.get("Primitive", 0)


@register_pass("ExactFloatConvolutions")
def ExactFloatConvolutions() -> FunctionPass:  # noqa: N802 - pass factories are named like classes
    """Run integer convolutions of short sums (depthwise, a first layer's) on the float32
    kernels where every sum is exact in float32 (opt_level 0)."""
    return ExactFloatConvolutionsPass()


__all__ = ["EXACT_LIMIT", "SHORT_FITTING_SUM", "SHORT_SUM", "SHORT_SUM_AVX512",
           "ExactFloatConvolutions", "exact_float_convolutions", "exact_in_float"]

"""IntegerWeights: a float32 weight whose values are all small integers is stored as
int8, uint8 or int16 and widened back to float32 in the kernel, exactly.

Where such weights come from: ExactFloatConvolutions runs an integer convolution of short
sums (a quantized model's depthwise layers, a first layer of three channels) on the
float32 kernels with the weight ``float32(W - zw)``: the int8 codes of the model,
centered, as floats. Stored as they are, a QDQ MobileNetV3's depthwise filters take four
bytes a code in the library's weights file (the file was 1.17x the model's int8
initializers). Every integer of magnitude below 2^24 is a float32 exactly, so storing
the integer and casting it back to float32 gives the kernel the same value bit for bit,
whatever the weight's origin.

Which constants: a float32 weight operand (the table of ToMixedPrecision,
:data:`~passinfra.transform.builtin.to_mixed_precision.WEIGHT_OPERANDS`) of a primitive
function, used only as weights, of at least :data:`MIN_ELEMENTS` elements, whose values
are all integers (finite, no negative zero, which an integer cannot hold) that fit one of
:data:`STORAGE_DTYPES`, the first that fits; the constant is stored in that type and the
parameter is read through ``cast(p, "float32")`` (the machinery of
:mod:`passinfra.transform.builtin.weight_parameters`; the kernels widen such a weight as
they widen a 16-bit one: once per call into a scratch buffer, or as they load it).

Where: after PanelWeights (a weight the microkernels read in panels stays in them, as
float32: the panels are worth more to those kernels than the bytes) and before
StreamWeights, which writes the weights file. Config ``codegen.integer_weights`` (bool,
default True) turns it off.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from passinfra.ir.expr import Constant, Expr, Function, Var
from passinfra.ir.module import IRModule
from passinfra.transform.builtin.to_mixed_precision import weight_parameters
from passinfra.transform.builtin.weight_parameters import rewrite_weight_parameters, widened_parameter
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass

INTEGER_WEIGHTS_CONFIG = "codegen.integer_weights"
register_config(INTEGER_WEIGHTS_CONFIG, bool)

# the storage types tried, narrowest first
STORAGE_DTYPES: tuple[str, ...] = ("int8", "uint8", "int16")
# a smaller weight saves less than a cache line of the weights file
MIN_ELEMENTS = 64


def storage_dtype(data: np.ndarray) -> str | None:
    """The first of :data:`STORAGE_DTYPES` that holds every value of float32 ``data``
    exactly, or None (a fraction, a non-finite value, a negative zero, too large)."""
    if data.dtype != np.float32 or data.size == 0:
        return None
    # a trained weight has a fraction within its first values: a model's weights (gigabytes
    # of them, mapped from its file) are not read whole to find that out
    head = data.reshape(-1)[:64]
    if not np.array_equal(head, np.trunc(head)):
        return None
    if not np.isfinite(data).all() or not np.array_equal(data, np.trunc(data)):
        return None
    if np.signbit(data[data == 0]).any():
        return None
    low, high = float(data.min()), float(data.max())
    for dtype in STORAGE_DTYPES:
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return dtype
    return None


@dataclass(frozen=True)
class _Rule:
    """The weight rule (:class:`~passinfra.transform.builtin.weight_parameters.WeightRule`)
    of one storage type: the float32 weights whose first fitting type it is."""

    dtype: str

    @property
    def suffix(self) -> str:
        return f"i{self.dtype}"

    def parameters(self, func: Function) -> tuple[int, ...]:
        return weight_parameters(func, MIN_ELEMENTS)

    def accepts(self, constant: Constant) -> bool:
        return storage_dtype(constant.data) == self.dtype

    def parameter(self, old: Var) -> tuple[Var, Expr]:
        return widened_parameter(old, self.dtype)

    def constant(self, constant: Constant) -> Constant:
        return Constant.owning(constant.data.astype(self.dtype))


def integer_weights(mod: IRModule) -> IRModule:
    """``mod`` (after FuseOps) with its integer-valued float32 weights stored as integers
    (module docstring)."""
    for dtype in STORAGE_DTYPES:
        mod = rewrite_weight_parameters(mod, _Rule(dtype))
    return mod


def _integer_weights(mod: IRModule, ctx: PassContext) -> IRModule:
    return integer_weights(mod) if ctx.get_config(INTEGER_WEIGHTS_CONFIG, True) else mod


@register_pass("IntegerWeights")
def IntegerWeights() -> ModulePass:  # noqa: N802 - pass factories are named like classes
    """Store float32 weights whose values are small integers as int8/uint8/int16, widened
    back in the kernel (opt_level 0; config ``codegen.integer_weights``)."""
    return ModulePass(_integer_weights, PassInfo(0, "IntegerWeights"))


__all__ = ["INTEGER_WEIGHTS_CONFIG", "IntegerWeights", "MIN_ELEMENTS", "STORAGE_DTYPES", "integer_weights",
           "storage_dtype"]

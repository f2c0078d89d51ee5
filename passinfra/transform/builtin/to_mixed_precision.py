"""ToMixedPrecision: store a float32 model's large weights in 16 bits, compute in float32.

TVM's ``ToMixedPrecision`` rewrites a float32 graph so that ops run in float16, with a
per-op table saying which ops may convert. Here the arithmetic stays float32 and only
the *storage* of the weights changes ("weight-only" mixed precision, as CPU runtimes do
it): with config ``codegen.weight_dtype`` set to ``"bfloat16"`` or ``"float16"``
(default ``"float32"``: the pass does nothing) the weights file of the library halves,
and every kernel loads the 16-bit weight, widens it exactly to float32, and multiplies
and accumulates in float32. The only error is the one rounding of each weight to the
16-bit type (to nearest-even).

Which constants. A table (:data:`WEIGHT_OPERANDS`) names, per op, the operands that hold
weights: the right operand of ``nn.dense`` and ``matmul``, the filter of the
convolutions (``nn.conv2d``, ``nn.conv3d`` and their transposes) and the table of
``take`` (embeddings). A constant is stored in 16 bits when

* every use of it in the module is such an operand (a constant also read elsewhere, a
  bias or a scale added in an epilogue, stays float32: converting it would store it twice);
* it is float32 with at least ``min_elements`` elements (default
  :data:`MIN_WEIGHT_ELEMENTS`, 1024 = 4 KiB): smaller ones are a rounding error of the
  file, and tend to be the input layers (resnet20's first 3x3x3x16 filter) that are
  most sensitive to precision;
* for float16, its largest magnitude is within float16's range (65504): a weight that
  would overflow to inf stays float32. bfloat16 has float32's range.

Where it runs: right after ``FuseOps``, on the fused module. A weight reaches a kernel as
an argument of a primitive function (FuseOps passes every non-scalar constant so), so the
pass changes that parameter's type to the 16-bit dtype, puts ``cast(p, "float32")``
inside the primitive function, in front of its uses, and passes the rounded constant at
the call sites. Hence, by construction,

* the cast is fused into the consuming kernel (it is part of the primitive function), and
  the lowering reads the 16-bit parameter through it. A weight larger than one panel of
  the loop pass ``WidenGemmOperands`` (128Ki elements, 512 KiB in float32) is read in
  place: a BLAS contraction widens it one panel at a time, any other kernel as it loads
  each element; a smaller one is widened once per call into a kernel scratch buffer of
  at most that size (its many loads then cost nothing extra). So no float32 copy of a
  large weight ever exists at run time, in the workspace or in a kernel;
* FoldConstant cannot fold the cast back: inside the primitive function it applies to a
  parameter, not a constant, and the caller calls a function, not an op. The pass also
  runs after the pipeline's last FoldConstant, so the weights it rounds are the final
  ones (batch norms and scales already folded into them, AlterOpLayout's transposes done).

A primitive function shared by several call sites (FuseOps creates one per structure) is
rewritten in place when every site passes convertible constants in the same parameters;
otherwise the sites that do call a converted copy named ``<name>_bf16`` / ``<name>_f16``
(added after the module's functions) and the others keep the original. Functions with
``SkipOptimization`` are neither rewritten nor have their calls rewritten. A constant
passed to several sites is rounded once and shared. (That machinery is
:mod:`passinfra.transform.builtin.weight_parameters`, shared with PanelWeights.)
"""

from __future__ import annotations

import weakref
from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

import ml_dtypes  # noqa: F401  (registers "bfloat16" with NumPy)
import numpy as np

from passinfra.errors import OpNotFoundError
from passinfra.ir.expr import Call, Constant, Expr, Function, Var
from passinfra.ir.functor import expr_children, iter_post_order
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op
from passinfra.ir.types import TensorType
from passinfra.transform.builtin.weight_parameters import rewrite_weight_parameters, widened_parameter
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.errors import PassArgumentError
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass

WEIGHT_DTYPE_CONFIG = "codegen.weight_dtype"
# float32 leaves every weight as it is (the pass is off)
WEIGHT_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
register_config(WEIGHT_DTYPE_CONFIG, str, choices=WEIGHT_DTYPES)

MIN_WEIGHT_ELEMENTS = 1024
FLOAT16_MAX = float(np.finfo(np.float16).max)
# the suffix of a converted copy of a shared primitive function
_SHORT_NAMES = {"bfloat16": "bf16", "float16": "f16"}

# op name -> the positions of its operands that hold weights
WEIGHT_OPERAND_NAMES: dict[str, tuple[int, ...]] = {
    "nn.dense": (1,),
    "matmul": (1,),
    "nn.conv2d": (1,),
    "nn.conv3d": (1,),
    "nn.conv2d_transpose": (1,),
    "nn.conv3d_transpose": (1,),
    "take": (0,),
}


def _registered_ops(names: dict[str, tuple[int, ...]]) -> dict[Op, frozenset[int]]:
    table = {}
    for name, positions in names.items():
        try:
            table[Op.get(name)] = frozenset(positions)
        except OpNotFoundError:  # an op another module may not register: nothing to convert
            continue
    return table


WEIGHT_OPERANDS: dict[Op, frozenset[int]] = _registered_ops(WEIGHT_OPERAND_NAMES)

_FLOAT32 = "float32"


def check_weight_dtype(weight_dtype: str, what: str = "weight_dtype") -> str:
    """``weight_dtype`` if it is one of :data:`WEIGHT_DTYPES`, else PassArgumentError."""
    if weight_dtype not in WEIGHT_DTYPES:
        raise PassArgumentError(
            f"ToMixedPrecision: {what} must be one of {', '.join(map(repr, WEIGHT_DTYPES))}; "
            f"got {weight_dtype!r}"
        )
    return weight_dtype


# --------------------------------------------------------------------------- analysis


# weight_parameters' answers per function (IR nodes are immutable): the weight passes after
# FuseOps ask it of every kernel, IntegerWeights once per storage type, and most kernels
# come out of each unchanged (DenseNet-121's IntegerWeights: 591 walks of 197 kernels, 197 now)
_WEIGHT_PARAMETERS: weakref.WeakKeyDictionary[Function, dict[int, tuple[int, ...]]] = (
    weakref.WeakKeyDictionary())


def weight_parameters(func: Function, min_elements: int = MIN_WEIGHT_ELEMENTS) -> tuple[int, ...]:
    """Positions of the parameters of primitive ``func`` that may be stored in 16 bits:
    float32 tensors of at least ``min_elements`` elements used only as weight operands."""
    known = _WEIGHT_PARAMETERS.get(func)
    if known is None:
        known = _WEIGHT_PARAMETERS[func] = {}
    if min_elements not in known:
        known[min_elements] = _weight_parameters(func, min_elements)
    return known[min_elements]


def _weight_parameters(func: Function, min_elements: int) -> tuple[int, ...]:
    candidates = {
        param: index for index, param in enumerate(func.params)
        if isinstance(param.type_annotation, TensorType)
        and param.type_annotation.dtype == _FLOAT32
        and param.type_annotation.is_static  # a weight has a static shape
        and param.type_annotation.size >= min_elements
    }
    if not candidates:
        return ()
    uses: Counter[Var] = Counter()
    weight_uses: Counter[Var] = Counter()
    if func.body in candidates:
        uses[func.body] += 1  # returned as it is: not a weight operand
    for node in iter_post_order(func.body):
        if isinstance(node, Function):
            return ()  # not a dataflow graph of op calls: left alone
        positions = WEIGHT_OPERANDS.get(node.op) if isinstance(node, Call) else None
        children = node.args if isinstance(node, Call) else expr_children(node)
        for position, child in enumerate(children):
            if child in candidates:
                uses[child] += 1
                if positions is not None and position in positions:
                    weight_uses[child] += 1
    return tuple(index for param, index in candidates.items()
                 if uses[param] and uses[param] == weight_uses[param])


def _representable(data: np.ndarray, weight_dtype: str) -> bool:
    """Whether rounding ``data`` to ``weight_dtype`` keeps every finite value finite."""
    if weight_dtype != "float16" or data.size == 0:
        return True
    finite = np.abs(data[np.isfinite(data)])
    return finite.size == 0 or float(finite.max()) <= FLOAT16_MAX


@dataclass(frozen=True)
class _Rule:
    """The weight rule (:class:`~passinfra.transform.builtin.weight_parameters.WeightRule`) of
    16-bit storage: a parameter of ``weight_dtype`` read through one cast to float32."""

    weight_dtype: str
    min_elements: int

    @property
    def suffix(self) -> str:
        return _SHORT_NAMES[self.weight_dtype]

    def parameters(self, func: Function) -> tuple[int, ...]:
        return weight_parameters(func, self.min_elements)

    def accepts(self, constant: Constant) -> bool:
        return constant.dtype == _FLOAT32 and _representable(constant.data, self.weight_dtype)

    def parameter(self, old: Var) -> tuple[Var, Expr]:
        return widened_parameter(old, self.weight_dtype)

    def constant(self, constant: Constant) -> Constant:
        # NumPy's and ml_dtypes' casts round to nearest-even, as the kernels' own casts do
        return Constant.owning(constant.data.astype(self.weight_dtype))


def to_mixed_precision(mod: IRModule, weight_dtype: str,
                       min_elements: int = MIN_WEIGHT_ELEMENTS) -> IRModule:
    """``mod`` (after FuseOps) with its large weights stored as ``weight_dtype`` (see the
    module docstring); the same module when ``weight_dtype`` is float32 or nothing converts."""
    check_weight_dtype(weight_dtype)
    if weight_dtype == _FLOAT32:
        return mod
    return rewrite_weight_parameters(mod, _Rule(weight_dtype, min_elements))


@register_pass("ToMixedPrecision")
@dataclass(frozen=True)
class ToMixedPrecision(ModulePass):
    """The ToMixedPrecision module pass (opt_level 0; a no-op unless configured): store the
    large weights of a fused float32 module in 16 bits, the kernels computing in float32.

    ``weight_dtype``: ``"bfloat16"``, ``"float16"`` or ``"float32"`` (off); None (the
    default) reads config ``codegen.weight_dtype`` (default ``"float32"``).
    ``min_elements``: smaller weights stay float32.
    """

    weight_dtype: str | None = None
    min_elements: int = MIN_WEIGHT_ELEMENTS
    info: ClassVar[PassInfo] = PassInfo(0, "ToMixedPrecision")

    def __post_init__(self) -> None:
        if self.weight_dtype is not None:
            check_weight_dtype(self.weight_dtype)
        count = self.min_elements
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise PassArgumentError(
                f"ToMixedPrecision: min_elements must be a positive int, got {self.min_elements!r}"
            )

    def pass_func(self, mod: IRModule, ctx: PassContext) -> IRModule:
        weight_dtype = self.weight_dtype
        if weight_dtype is None:
            configured = ctx.get_config(WEIGHT_DTYPE_CONFIG, _FLOAT32)
            weight_dtype = check_weight_dtype(configured, WEIGHT_DTYPE_CONFIG)
        return to_mixed_precision(mod, weight_dtype, self.min_elements)


__all__ = [
    "ToMixedPrecision", "to_mixed_precision", "weight_parameters", "check_weight_dtype",
    "WEIGHT_DTYPE_CONFIG", "WEIGHT_DTYPES", "WEIGHT_OPERANDS", "WEIGHT_OPERAND_NAMES", "MIN_WEIGHT_ELEMENTS",
]

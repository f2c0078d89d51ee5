"""RequantizeInKernels: the integer GEMM requantizes its own sums.

``qnn.requantize(qnn.conv2d(...) [+ bias], multiplier, zero_point)`` (a QLinearConv, or a
group FuseQDQ made) stores every int32 sum and reads it back in a second loop over the
output to requantize it: for the small layers of a quantized CNN, that loop and its
buffer cost as much as the GEMM. Where the contraction runs on the integer GEMM
(``qnn.conv2d`` in NHWC on it, :func:`~passinfra.codegen.compute.quantized_conv.
runs_on_integer_gemm`; ``qnn.matmul`` with a weight,
:func:`~passinfra.codegen.compute.quantize.integer_gemm_steps`), its requantize has a
constant bias, multiplier and output zero point (one value, or one per output channel /
column), and the int32 values are used nowhere else, the three become one
``qnn.requantized_conv2d`` / ``qnn.requantized_matmul``
(:mod:`passinfra.ir.op.requantized`), which the GEMM computes with its requantizing
epilogue (``c/qgemm.c``): each block of sums is requantized while in the cache and the
output is 8-bit. The arithmetic is the same, so are the bits.

A residual block's ``qnn.add`` (QLinearAdd) of such a requantized output (used only
there) and a tensor of the same type, its scales and zero points constant scalars, joins
the op too (its six more inputs): the GEMM's finish adds the residual to each block of
outputs as it stores them, where a loop over the whole output read it back and wrote it
again (ResNet-50's first stage: a third of its 1x1 convolution's time).

A ``take`` of a constant table of 256 values of the output's type (QuantizedLookupTables:
an element-wise function of the 8-bit output, a hard-swish) indexed by such an output
(used only there; an int8 one as QuantizedLookupTables indexes it, plus 128) joins the op
as its last input: the kernel looks each value up as it stores it, where a loop over the
output read it back and wrote it again (MobileNetV3-like: its hard-swishes were 17% of a
one-thread run).

Where: after AlterOpLayout and FoldConstant (layouts final, the parameters constants)
and before FuseOps, on every graph function.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from passinfra.codegen.compute.quantize import integer_gemm_steps
from passinfra.codegen.compute.quantized_conv import runs_on_integer_gemm
from passinfra.ir.analysis import use_counts
from passinfra.ir.expr import Call, Constant, Expr, Function
from passinfra.ir.functor import ExprMutator
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op
from passinfra.ir.op.requantized import CONTRACTIONS, TABLE_SIZE
from passinfra.ir.op_census import calls_any
from passinfra.ir.types import TensorType
from passinfra.transform.builtin.function_types import ensure_typed
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

_REQUANTIZE, _ADD, _QNN_ADD = Op.get("qnn.requantize"), Op.get("add"), Op.get("qnn.add")
_TAKE, _CAST = Op.get("take"), Op.get("cast")
_KERNELS = {Op.get(name): Op.get(fused) for name, fused in CONTRACTIONS.items()}


def _along_last_axis(expr: Expr, out: TensorType, dtype: str) -> bool:
    """A constant of ``dtype`` with one value, or one per entry of ``out``'s last axis."""
    if not isinstance(expr, Constant) or expr.dtype != dtype or expr.data.ndim > len(out.shape):
        return False
    shape = expr.data.shape
    return not shape or (all(d == 1 for d in shape[:-1]) and shape[-1] in (1, out.shape[-1]))


def _on_integer_gemm(call: Call) -> bool:
    types = [arg._checked_type for arg in call.args]
    if not all(isinstance(t, TensorType) for t in types):
        return False
    shapes = [tuple(t.shape) for t in types]
    if call.op.name == "qnn.matmul":
        return integer_gemm_steps(*shapes) is not None and all(t.is_static for t in types[1:])
    return runs_on_integer_gemm(call.attrs, shapes)


class _RequantizeInKernels(ExprMutator):
    def __init__(self, uses: Counter) -> None:
        self.uses = uses

    def visit_call(self, call: Call) -> Expr:
        fused = (self._fused(call) if call.op is _REQUANTIZE
                 else self._residual_add(call) if call.op is _QNN_ADD
                 else self._looked_up(call) if call.op is _TAKE else None)
        return fused if fused is not None else super().visit_call(call)

    def _looked_up(self, take: Call) -> Expr | None:
        """``take(table, q)`` of a constant table of 256 values of ``q``'s type and ``q`` the
        output of a requantize (or residual add) this pass fuses, used there only (an int8
        ``q`` as ``cast(q, "int32") + 128``): the fused op with the table last."""
        table, index = take.args
        constant_table = isinstance(table, Constant) and table.data.shape == (TABLE_SIZE,)
        if take.attrs.get("axis", 0) != 0 or not constant_table:
            return None
        source = index
        if isinstance(index, Call) and index.op is _ADD and self.uses[index] == 1:  # an int8 q
            cast, offset = index.args
            if not (isinstance(offset, Constant) and offset.data.ndim == 0 and int(offset.data) == 128
                    and isinstance(cast, Call) and cast.op is _CAST and self.uses[cast] == 1):
                return None
            source = cast.args[0]
            if not isinstance(source._checked_type, TensorType) or source._checked_type.dtype != "int8":
                return None
        elif not isinstance(index._checked_type, TensorType) or index._checked_type.dtype != "uint8":
            return None
        if not (isinstance(source, Call) and source.op in (_REQUANTIZE, _QNN_ADD) and self.uses[source] == 1):
            return None
        if table.dtype != source._checked_type.dtype:
            return None
        kernel = self._fused(source) if source.op is _REQUANTIZE else self._residual_add(source)
        if kernel is None:
            return None
        return Call(kernel.op, [*kernel.args, table], kernel.attrs)

    def _residual_add(self, add: Call) -> Expr | None:
        """``qnn.add`` of a requantize this pass fuses (used there only) and a residual of
        the same type, every scale and zero point a constant scalar: the fused op with the
        add (module docstring)."""
        out = add._checked_type
        params = (1, 2, 4, 5, 6, 7)
        if not isinstance(out, TensorType) or not all(
                isinstance(add.args[i], Constant) and add.args[i].data.ndim == 0 for i in params):
            return None
        for position in (0, 3):  # the requantized output as qnn.add's first operand, else its second
            source, residual = add.args[position], add.args[3 - position]
            if not (isinstance(source, Call) and source.op is _REQUANTIZE and self.uses[source] == 1):
                continue
            if source._checked_type != out or residual._checked_type != out:
                continue
            kernel = self._fused(source)
            if kernel is None or int(add.args[position + 2].data) != int(kernel.args[6].data):
                continue  # (the add reads it with the zero point it was requantized to)
            other = 3 - position
            extra = [add.args[position + 1], self.visit(residual), add.args[other + 1], add.args[other + 2],
                     add.args[6], add.args[7]]
            attrs = kernel.attrs.with_item("residual_first", True) if position == 3 else kernel.attrs
            return Call(kernel.op, [*kernel.args, *extra], attrs)
        return None

    def _fused(self, requantize: Call) -> Expr | None:
        source, multiplier, zero_point = requantize.args
        out = requantize._checked_type
        scalar_zero = isinstance(zero_point, Constant) and zero_point.data.ndim == 0
        if not isinstance(out, TensorType) or not scalar_zero:
            return None
        bias: Expr = Constant.owning(np.zeros((), np.int32))
        if isinstance(source, Call) and source.op is _ADD and self.uses[source] == 1:
            for position in (1, 0):
                if _along_last_axis(source.args[position], out, "int32"):
                    bias, source = source.args[position], source.args[1 - position]
                    break
        if not (isinstance(source, Call) and source.op in _KERNELS and self.uses[source] == 1):
            return None
        if not _along_last_axis(multiplier, out, "float32") or not _on_integer_gemm(source):
            return None
        args = [self.visit(arg) for arg in source.args]
        return Call(_KERNELS[source.op], [*args, bias, multiplier, zero_point], source.attrs)


def requantize_in_kernels(func: Function, mod: IRModule) -> Function:
    """``func`` (of ``mod``) with the requantizes the integer GEMM can apply fused into
    its contractions (module docstring)."""
    if func.attrs.get("Primitive", 0) or not calls_any(func, (_REQUANTIZE,)):
        return func
    ensure_typed(func, mod)
    return _RequantizeInKernels(use_counts(func)).visit(func)  # type: ignore[return-value]


class RequantizeInKernelsPass(FunctionPass):
    reads_module = False

    def __init__(self) -> None:
        super().__init__(lambda func, mod, ctx: requantize_in_kernels(func, mod),
                         PassInfo(0, "RequantizeInKernels"))

    def accepts(self, func: object) -> bool:
        return isinstance(func, Function) and not func.attrs.get("Primitive", 0)


@register_pass("RequantizeInKernels")
def RequantizeInKernels() -> FunctionPass:  # noqa: N802 - pass factories are named like classes
    """Fuse a requantize into the integer GEMM that computes its int32 operand (opt_level 0)."""
    return RequantizeInKernelsPass()


__all__ = ["RequantizeInKernels", "requantize_in_kernels"]

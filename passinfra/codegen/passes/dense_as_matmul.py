"""DenseAsMatmul: a linear layer with a constant weight runs as a matrix product on the
microkernels.

``nn.dense(x, W)`` (``x @ W.T``: ONNX's Gemm with transB=1, what torch exports for
``nn.Linear``) reads its weight ``[units, in_features]`` row by row, which only BLAS
does well; a ``matmul`` with a ``[in_features, units]`` weight runs on the microkernels,
which read the weight in panels (PanelWeights) and split rows between threads. Measured
on a 2-core AVX-512 machine, 64 rows through 256 -> 256 with bias and ReLU, two threads:
dense on BLAS 78 us, the same layer as a matmul on the microkernels 43 us (``raypass
tune``'s per-kernel timing). So where the lowering would run that matmul on the
microkernels (its plan reads panels: static in_features and units, at least 16 units,
at least 8 rows or rows known at run time, BLAS and the matmul microkernels enabled,
float32 weights), this pass replaces the dense by a matmul with the weight transposed
once, here; elsewhere (one static row of a classifier head, 16-bit weights) the dense
stays as it is.

Where: after DeduplicateFilters (which reads dense weights) and before FuseOps, on every
graph function; the function's meaning is unchanged (the same sums, in another order).
"""

from __future__ import annotations

import numpy as np

from passinfra.codegen.compute.conv_microkernel import PANEL_WIDTH
from passinfra.codegen.lower import complete_attrs, plan_kernel, uses_blas
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call, Constant, Expr, Function
from passinfra.ir.functor import ExprMutator
from passinfra.ir.module import IRModule
from passinfra.ir.op import matmul
from passinfra.ir.op.registry import Op
from passinfra.ir.op_census import calls_any, op_calls
from passinfra.ir.types import TensorType
from passinfra.transform.builtin.function_types import ensure_typed
from passinfra.transform.builtin.to_mixed_precision import WEIGHT_DTYPE_CONFIG
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

_DENSE = Op.get("nn.dense")
_MATMUL = Op.get("matmul")
_FLOAT32 = "float32"


def runs_on_microkernels(x_shape: tuple, k: int, n: int, use_blas: bool) -> bool:
    """Whether ``matmul`` of an ``x_shape`` operand (static or symbolic rows) and a
    constant float32 ``[k, n]`` weight runs on the microkernels reading the weight in
    panels (the lowering's own plan)."""
    if len(x_shape) < 2:
        return False
    out_shape = (*x_shape[:-1], n)
    plan = plan_kernel("matmul", complete_attrs(_MATMUL, Attrs()), [tuple(x_shape), (k, n)], _FLOAT32,
                       out_shape, use_blas)
    return plan is not None and getattr(plan, "panels", 0) == PANEL_WIDTH


def applies(ctx: PassContext) -> bool:
    """Whether weights stay float32 (config ``codegen.weight_dtype``): 16-bit weights are
    read by BLAS through a widened copy, a dense's as well as a matmul's."""
    return ctx.get_config(WEIGHT_DTYPE_CONFIG, "float32") == "float32"


def _rewritable(call: Call, use_blas: bool) -> bool:
    """Whether the dense ``call`` (typed) runs as a matmul on the microkernels."""
    data, weight = call.args
    if not isinstance(weight, Constant):
        return False
    data_type, weight_type = data._checked_type, weight._checked_type
    if not (isinstance(data_type, TensorType) and isinstance(weight_type, TensorType)
            and data_type.dtype == weight_type.dtype == _FLOAT32 and weight_type.ndim == 2):
        return False
    n, k = (int(d) for d in weight_type.shape)
    return runs_on_microkernels(tuple(data_type.shape), k, n, use_blas)


class _DenseAsMatmul(ExprMutator):
    def __init__(self, use_blas: bool) -> None:
        self.use_blas = use_blas

    def visit_call(self, call: Call) -> Expr:
        new = super().visit_call(call)
        if call.op is not _DENSE or not _rewritable(call, self.use_blas):
            return new
        transposed = Constant.owning(np.ascontiguousarray(call.args[1].data.T))
        return matmul(new.args[0], transposed)


def dense_as_matmul(func: Function, mod: IRModule, use_blas: bool) -> Function:
    """``func`` (of ``mod``) with its microkernel-sized dense layers as matmuls (module
    docstring)."""
    if func.attrs.get("Primitive", 0) or not calls_any(func, (_DENSE,)):
        return func
    ensure_typed(func, mod)
    # a classifier head of one row stays a dense: no walk rebuilds the function for it
    if not any(_rewritable(call, use_blas) for call in op_calls(func)[_DENSE]):
        return func
    return _DenseAsMatmul(use_blas).visit(func)  # type: ignore[return-value]


class DenseAsMatmulPass(FunctionPass):
    reads_module = False

    def __init__(self) -> None:
        super().__init__(lambda func, mod, ctx: dense_as_matmul(func, mod, uses_blas(ctx)) if applies(ctx)
                         else func, PassInfo(0, "DenseAsMatmul"))

    def accepts(self, func: object) -> bool:
        return isinstance(func, Function) and not func.attrs.get("Primitive", 0)


@register_pass("DenseAsMatmul")
def DenseAsMatmul() -> FunctionPass:  # noqa: N802 - pass factories are named like classes
    """Run microkernel-sized linear layers with a constant weight as matmuls (opt_level 0)."""
    return DenseAsMatmulPass()


__all__ = ["DenseAsMatmul", "dense_as_matmul", "runs_on_microkernels"]

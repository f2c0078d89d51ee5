"""SimplifyInference: rewrite training-style normalization ops into inference arithmetic.

* ``TupleGetItem(nn.batch_norm(data, gamma, beta, mean, var), 0)`` becomes
  ``data * scale + shift`` with ``scale = gamma / sqrt(var + eps)`` and
  ``shift = beta - mean * scale``, both expanded with ``expand_dims`` so they broadcast
  along the batch norm's axis. The per-channel vectors are left as IR over the original
  operands, so a following FoldConstant turns them into two constants (this is what lets
  FoldScaleAxis fold the scale into a preceding conv2d).
* Fields 1 and 2 of that tuple (the moving statistics, returned unchanged at inference)
  become the ``moving_mean`` / ``moving_var`` operands themselves.
* ``nn.dropout(x)`` becomes ``x`` (dropout is the identity at inference).
* ``nn.layer_norm`` stays one op (the interpreter and codegen handle it directly) unless
  the config ``relay.SimplifyInference.split_layer_norm`` is true; then it becomes
  ``(x - mean) / sqrt(variance + eps) * gamma + beta`` with mean and variance computed
  by ``mean`` over the axis with ``keepdims``.

A batch_norm whose tuple is used other than through TupleGetItem is left alone. Calls
with nothing to simplify, and functions without any, are returned as the same objects.
"""

from __future__ import annotations

from passinfra import ir
from passinfra.errors import IRTypeError
from passinfra.ir import op
from passinfra.ir.expr import Call, Expr, Function, TupleGetItem
from passinfra.ir.op.registry import Op
from passinfra.ir.types import TensorType
from passinfra.transform.builtin.function_types import ensure_typed
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import function_pass
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

SPLIT_LAYER_NORM = "relay.SimplifyInference.split_layer_norm"
register_config(SPLIT_LAYER_NORM, bool)

_BATCH_NORM = Op.get("nn.batch_norm")
_DROPOUT = Op.get("nn.dropout")
_LAYER_NORM = Op.get("nn.layer_norm")


def _tensor_type(node: Expr, what: str) -> TensorType:
    ty = node.checked_type
    if not isinstance(ty, TensorType):
        raise IRTypeError(f"SimplifyInference expected {what} to be a tensor, got {ty}")
    return ty


def _along_axis(vector: Expr, ndim: int, axis: int) -> Expr:
    """``vector`` (one value per entry of ``axis``) shaped to broadcast against an
    ``ndim``-rank tensor: trailing size-1 axes after ``axis``."""
    trailing = ndim - 1 - axis
    return op.expand_dims(vector, 1, trailing) if trailing > 0 else vector


def _normalized_axis(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def batch_norm_to_scale_shift(bn: Call, new_args: list[Expr]) -> Expr:
    """``data * scale + shift`` for the batch_norm call ``bn`` (typed) on ``new_args``."""
    data_type = _tensor_type(bn.args[0], "the batch_norm data")
    data, gamma, beta, mean, var = new_args
    ndim = data_type.ndim
    axis = _normalized_axis(bn.attrs["axis"], ndim)
    eps = ir.const(bn.attrs["epsilon"], data_type.dtype)
    scale = op.divide(gamma, op.sqrt(op.add(var, eps)))
    shift = op.subtract(beta, op.multiply(mean, scale))
    return op.add(op.multiply(data, _along_axis(scale, ndim, axis)), _along_axis(shift, ndim, axis))


def layer_norm_to_arithmetic(ln: Call, new_args: list[Expr]) -> Expr:
    """The mean/variance arithmetic equal to the layer_norm call ``ln`` (typed)."""
    data_type = _tensor_type(ln.args[0], "the layer_norm data")
    data, gamma, beta = new_args
    ndim = data_type.ndim
    axis = _normalized_axis(ln.attrs["axis"], ndim)
    eps = ir.const(ln.attrs["epsilon"], data_type.dtype)
    centered = op.subtract(data, op.mean(data, axis, keepdims=True))
    variance = op.mean(op.multiply(centered, centered), axis, keepdims=True)
    normalized = op.divide(centered, op.sqrt(op.add(variance, eps)))
    return op.add(op.multiply(normalized, _along_axis(gamma, ndim, axis)), _along_axis(beta, ndim, axis))


class _InferenceSimplifier(ir.ExprMutator):
    def __init__(self, split_layer_norm: bool) -> None:
        self.split_layer_norm = split_layer_norm
        # one rewrite per batch_norm call, shared by every TupleGetItem(., 0) of it
        self._bn_outputs: dict[Call, Expr] = {}

    def visit_call(self, call: Call) -> Expr:
        if call.op is _DROPOUT:
            return self.visit(call.args[0])
        if call.op is _LAYER_NORM and self.split_layer_norm:
            return layer_norm_to_arithmetic(call, [self.visit(a) for a in call.args])
        return super().visit_call(call)

    def visit_tuple_getitem(self, tgi: TupleGetItem) -> Expr:
        bn = tgi.tuple_value
        if not (isinstance(bn, Call) and bn.op is _BATCH_NORM):
            return super().visit_tuple_getitem(tgi)
        if tgi.index == 0:
            out = self._bn_outputs.get(bn)
            if out is None:
                out = batch_norm_to_scale_shift(bn, [self.visit(a) for a in bn.args])
                self._bn_outputs[bn] = out
            return out
        # fields 1 and 2 are the moving mean and variance, returned unchanged
        return self.visit(bn.args[2 + tgi.index])


def simplify_inference_function(func: Function, mod: ir.IRModule, ctx: PassContext) -> Function:
    """The per-function body of :func:`SimplifyInference`."""
    ensure_typed(func, mod)  # cached by the required InferType: the module is not read
    split = bool(ctx.get_config(SPLIT_LAYER_NORM, False))
    return _InferenceSimplifier(split).visit(func)


@register_pass("SimplifyInference")
def SimplifyInference() -> FunctionPass:
    """Batch norm to scale and shift, dropout to identity, optionally layer norm split."""
    return function_pass(simplify_inference_function, opt_level=0, name="SimplifyInference",
                         required=["InferType"], reads_module=False)

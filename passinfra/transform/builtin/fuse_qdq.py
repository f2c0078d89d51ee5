"""FuseQDQ: a QDQ model's DequantizeLinear -> op -> QuantizeLinear groups as integer ops.

A model in onnxruntime's QDQ format computes in float32 between a DequantizeLinear of
each quantized input and a QuantizeLinear of the result. Where the float op between them
has an integer equivalent, the group becomes that integer op on the quantized values, as
onnxruntime's QDQ transformers turn it into QLinearConv, QLinearMatMul or QLinearAdd
(and as TVM's FakeQuantizationToInteger does):

* ``Q(conv2d(DQ(x), DQ(w)) [+ DQ(bias)] [relu])`` becomes ``requantize(qnn.conv2d(x, w)
  + bias, (sx * sw) / sy, zy)``: QLinearConv's arithmetic (the weight's per-channel scale
  and zero point along the output channels, the bias int32 as stored); a ReLU in the group
  becomes ``maximum(result, zy)`` (quantization is monotonic, so ``Q(relu(v)) =
  max(Q(v), Q(0)) = max(Q(v), zy)``), left out where ``zy`` is the type's lowest value;
* ``Q(matmul(DQ(x), DQ(w)) [+ DQ(bias)])`` and the same with ``nn.dense`` (a Gemm with
  ``transB``) become ``requantize(qnn.matmul(x, w) + bias, (sx * sw) / sy, zy)``, the
  weight's scale and zero point per tensor or per column;
* ``Q(add(DQ(a), DQ(b)) [relu])`` becomes ``qnn.add`` (QLinearAdd's arithmetic; a ReLU as
  in a convolution's group: a residual block's);
* ``Q(global_avg_pool2d(DQ(x)))`` becomes ``requantize(sum(int32(x)) - zx * HW, sx / (sy *
  HW), zy)``: QLinearGlobalAveragePool's arithmetic, which onnxruntime's QDQ transformer
  turns the group into (the int32 sum of the codes, its multiplier in float32 as MLAS
  computes it, rounded half to even and saturated);
* ``Q(DQ(x))`` with the same scale, zero point and type is ``x`` exactly, and so is
  ``Q(m(DQ(x)))`` for the data movement ops ``m`` (reshape, transpose, max pooling), which
  commute with a monotonic elementwise map.

Conditions: ``x`` and the result per-tensor (scalar scale and zero point), the weight an
8-bit constant (the importer keeps a DequantizeLinear of an initializer that only
contractions read as ``qnn.dequantize`` of the integer constant for this pass), a bias an
int32 constant with zero point 0 whose scale is ``sx * sw`` (to float32 rounding: the
quantizer computes it so; onnxruntime adds the int32 bias as stored), and the float values
inside the group used only there. A group that does not qualify is left as it is and
computes in float32 (a weight's DequantizeLinear folds in FoldConstant).

Results: exactly onnxruntime's on the fused ops (its QLinear kernels' arithmetic,
:mod:`passinfra.ir.op.quantize`); against the unfused float32 evaluation of the same QDQ
graph, within one quantization step (the float path rounds the convolution's sum and the
bias to float32 before quantizing; the integer path sums exactly).

Where: first in the build (after InferType), before FoldConstant would fold the weights'
DequantizeLinear into float32 constants. Config ``relay.FuseQDQ.enabled`` (bool, default
True) turns it off, which keeps a QDQ model on the float path.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from passinfra import ir
from passinfra.ir import op
from passinfra.ir.analysis import use_counts
from passinfra.ir.expr import Call, Constant, Expr, Function
from passinfra.ir.op import quantize as qnn
from passinfra.ir.op.registry import Op
from passinfra.ir.op_census import calls_any
from passinfra.ir.types import TensorType
from passinfra.transform.builtin.function_types import ensure_typed
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import function_pass
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

ENABLED_CONFIG = "relay.FuseQDQ.enabled"
register_config(ENABLED_CONFIG, bool)

_QUANTIZE, _DEQUANTIZE = Op.get("qnn.quantize"), Op.get("qnn.dequantize")
_CONV2D, _BIAS_ADD, _RELU = Op.get("nn.conv2d"), Op.get("nn.bias_add"), Op.get("nn.relu")
_MATMUL, _DENSE, _ADD = Op.get("matmul"), Op.get("nn.dense"), Op.get("add")
_GLOBAL_AVG_POOL = Op.get("nn.global_avg_pool2d")
# ops that move or select values without computing new ones
_MOVEMENT = frozenset(Op.get(name) for name in ("reshape", "transpose", "nn.max_pool2d"))
_EIGHT_BITS = qnn.INTEGER_KERNEL_DTYPES
_F32 = np.float32
# a bias's scale may differ from sx * sw by the rounding of the quantizer's product
_BIAS_SCALE_RTOL = 1e-5


@dataclass(frozen=True)
class _Dequantized:
    """A ``qnn.dequantize(data, scale, zero_point)`` to float32 of known parameters."""

    data: Expr
    scale: np.ndarray
    zero_point: np.ndarray

    @property
    def dtype(self) -> str:
        ty = self.data.checked_type
        return ty.dtype if isinstance(ty, TensorType) else ""

    @property
    def per_tensor(self) -> bool:
        return self.scale.size == 1 and self.zero_point.size == 1

    def constant(self) -> np.ndarray | None:
        return self.data.data if isinstance(self.data, Constant) else None


@dataclass(frozen=True)
class _Bias:
    """An int32 bias added to a contraction: its dequantize, and the add (nn.bias_add or
    add) that applies it."""

    value: _Dequantized
    adder: Call


def _known(expr: Expr) -> np.ndarray | None:
    return expr.data if isinstance(expr, Constant) else None


def _call_of(expr: Expr, operator: Op) -> Call | None:
    return expr if isinstance(expr, Call) and expr.op is operator else None


def _dequantized(expr: Expr) -> _Dequantized | None:
    call = _call_of(expr, _DEQUANTIZE)
    if call is None or call.attrs["out_dtype"] not in (None, "float32"):
        return None
    scale, zero_point = _known(call.args[1]), _known(call.args[2])
    if scale is None or zero_point is None or scale.dtype != _F32:
        return None
    return _Dequantized(call.args[0], scale, zero_point)


def _scalar(value: np.ndarray) -> np.ndarray:
    return value.reshape(())


def _const(value: np.ndarray) -> Constant:
    return Constant.owning(np.array(value, order="C"))  # a copy of its own (0-d stays 0-d)


class _Fuser(ir.ExprMutator):
    def __init__(self, uses: Counter) -> None:
        self.uses = uses

    def _single_use(self, *exprs: Expr) -> bool:
        return all(self.uses[e] == 1 for e in exprs)

    def visit_call(self, call: Call) -> Expr:
        if call.op is _QUANTIZE:
            fused = self._quantize(call)
            if fused is not None:
                return fused
        return super().visit_call(call)

    def _quantize(self, q: Call) -> Expr | None:
        scale, zero_point = _known(q.args[1]), _known(q.args[2])
        if scale is None or zero_point is None or scale.size != 1 or zero_point.size != 1:
            return None
        if scale.dtype != _F32:
            return None
        source = q.args[0]
        for rule in (self._same_grid, self._movement, self._add, self._global_pool, self._contraction):
            fused = rule(source, _scalar(scale), _scalar(zero_point))
            if fused is not None:
                return fused
        return None

    # ----- rules: each returns the integer form of Q(source), or None -------------------
    def _same_grid(self, source: Expr, scale: np.ndarray, zero_point: np.ndarray) -> Expr | None:
        """Q(DQ(x)) on one grid is x."""
        dq = _dequantized(source)
        if dq is None or not dq.per_tensor or dq.dtype != str(zero_point.dtype):
            return None
        if _scalar(dq.scale) != scale or _scalar(dq.zero_point) != zero_point:
            return None
        return self.visit(dq.data)

    def _movement(self, source: Expr, scale: np.ndarray, zero_point: np.ndarray) -> Expr | None:
        if not (isinstance(source, Call) and source.op in _MOVEMENT and self._single_use(source)):
            return None
        inner = self._same_grid(source.args[0], scale, zero_point)
        if inner is None:
            return None
        return Call(source.op, [inner, *(self.visit(a) for a in source.args[1:])], source.attrs)

    def _add(self, source: Expr, scale: np.ndarray, zero_point: np.ndarray) -> Expr | None:
        relu = _call_of(source, _RELU)  # a residual block's add, then its ReLU
        if relu is not None:
            if not self._single_use(relu):
                return None
            source = relu.args[0]
        call = _call_of(source, _ADD)
        if call is None or not self._single_use(call):
            return None
        lhs, rhs = (_dequantized(a) for a in call.args)
        if lhs is None or rhs is None or not (lhs.per_tensor and rhs.per_tensor):
            return None
        if not lhs.dtype == rhs.dtype == str(zero_point.dtype) or lhs.dtype not in _EIGHT_BITS:
            return None
        result = qnn.add(self.visit(lhs.data), _const(_scalar(lhs.scale)), _const(_scalar(lhs.zero_point)),
                         self.visit(rhs.data), _const(_scalar(rhs.scale)), _const(_scalar(rhs.zero_point)),
                         _const(scale), _const(zero_point))
        return _after_relu(result, zero_point) if relu is not None else result

    def _global_pool(self, source: Expr, scale: np.ndarray, zero_point: np.ndarray) -> Expr | None:
        call = _call_of(source, _GLOBAL_AVG_POOL)
        if call is None or not self._single_use(call) or call.attrs["layout"] not in ("NCHW", "NHWC"):
            return None
        data = _dequantized(call.args[0])
        if data is None or not data.per_tensor or data.dtype not in _EIGHT_BITS:
            return None
        if data.dtype != str(zero_point.dtype):  # QLinearGlobalAveragePool: one type in and out
            return None
        ty = data.data._checked_type
        if not (isinstance(ty, TensorType) and ty.is_static and len(ty.shape) == 4):
            return None
        axes = (2, 3) if call.attrs["layout"] == "NCHW" else (1, 2)
        pixels = int(ty.shape[axes[0]]) * int(ty.shape[axes[1]])
        total = op.sum(op.cast(self.visit(data.data), "int32"), axis=axes, keepdims=True)
        centered = op.subtract(total, _const(np.array(int(_scalar(data.zero_point)) * pixels, np.int32)))
        # MLAS's multiplier: x_scale / (y_scale * pixels), each step in float32
        multiplier = _F32(_scalar(data.scale)) / (_F32(scale) * _F32(pixels))
        return qnn.requantize(centered, _const(np.asarray(multiplier, _F32)), _const(zero_point))

    def _contraction(self, source: Expr, scale: np.ndarray, zero_point: np.ndarray) -> Expr | None:
        relu = _call_of(source, _RELU)
        if relu is not None:
            if not self._single_use(relu):
                return None
            source = relu.args[0]
        bias: _Bias | None = None
        if isinstance(source, Call) and source.op in (_BIAS_ADD, _ADD) and self._single_use(source):
            for position in (1, 0) if source.op is _ADD else (1,):
                candidate = _dequantized(source.args[position])
                if candidate is not None and candidate.dtype == "int32":
                    bias = _Bias(candidate, source)
                    source = source.args[1 - position]
                    break
        contraction = isinstance(source, Call) and source.op in (_CONV2D, _MATMUL, _DENSE)
        if not (contraction and self._single_use(source)):
            return None
        data, weight = (_dequantized(a) for a in source.args)
        if data is None or weight is None or not data.per_tensor or data.dtype not in _EIGHT_BITS:
            return None
        codes = weight.constant()
        if codes is None or weight.dtype not in _EIGHT_BITS:
            return None
        build = self._conv2d if source.op is _CONV2D else self._matmul
        return build(source, data, weight, codes, bias, scale, zero_point, relu is not None)

    def _finish(self, acc: Expr, bias: np.ndarray | None, multiplier: np.ndarray, zero_point: np.ndarray,
                relu: bool) -> Expr:
        if bias is not None:
            acc = op.add(acc, _const(bias))
        result = qnn.requantize(acc, _const(multiplier.astype(_F32)), _const(zero_point))
        return _after_relu(result, zero_point) if relu else result

    def _conv2d(self, conv: Call, data: _Dequantized, weight: _Dequantized, codes: np.ndarray,
                bias: _Bias | None, scale: np.ndarray, zero_point: np.ndarray, relu: bool) -> Expr | None:
        attrs = conv.attrs
        if attrs["data_layout"] != "NCHW" or attrs["kernel_layout"] != "OIHW" or codes.ndim != 4:
            return None
        channels = codes.shape[0]
        w_scale = _per_channel(weight.scale, channels, codes.ndim, 0)
        w_zero = _per_channel(weight.zero_point, channels, codes.ndim, 0)
        if w_scale is None or w_zero is None:
            return None
        product = (_scalar(data.scale) * w_scale).astype(_F32)  # (O,): QLinearConv's x_scale * w_scale
        bias_codes = _bias(bias, product, channels, 1, 4)
        if bias_codes is False:
            return None
        acc = qnn.conv2d(self.visit(data.data), _const(codes), _const(_scalar(data.zero_point)),
                         _const(w_zero.reshape(-1, 1, 1, 1) if w_zero.size > 1 else w_zero.reshape(())),
                         strides=attrs["strides"], padding=attrs["padding"], dilation=attrs["dilation"],
                         groups=attrs["groups"])
        shaped = None if bias_codes is None else bias_codes.reshape(channels, 1, 1)
        multiplier = (product / scale).astype(_F32)
        return self._finish(acc, shaped, multiplier.reshape(channels, 1, 1) if multiplier.size > 1
                            else multiplier.reshape(()), zero_point, relu)

    def _matmul(self, call: Call, data: _Dequantized, weight: _Dequantized, codes: np.ndarray,
                bias: _Bias | None, scale: np.ndarray, zero_point: np.ndarray, relu: bool) -> Expr | None:
        if codes.ndim != 2 or len(call.args[0].checked_type.shape) < 2:
            return None
        dense = call.op is _DENSE
        axis = 0 if dense else 1  # the output columns: rows of a dense weight [N, K]
        columns = codes.shape[axis]
        w_scale = _per_channel(weight.scale, columns, 2, axis)
        w_zero = _per_channel(weight.zero_point, columns, 2, axis)
        if w_scale is None or w_zero is None:
            return None
        product = (_scalar(data.scale) * w_scale).astype(_F32)
        out_ndim = len(call.checked_type.shape)
        bias_codes = _bias(bias, product, columns, out_ndim - 1, out_ndim)
        if bias_codes is False:
            return None
        matrix = np.ascontiguousarray(codes.T) if dense else codes
        acc = qnn.matmul(self.visit(data.data), _const(matrix), _const(_scalar(data.zero_point)),
                         _const(w_zero.reshape(1, -1) if w_zero.size > 1 else w_zero.reshape(())))
        multiplier = (product / scale).astype(_F32)
        return self._finish(acc, bias_codes, multiplier if multiplier.size > 1 else multiplier.reshape(()),
                            zero_point, relu)


def _after_relu(result: Expr, zero_point: np.ndarray) -> Expr:
    """Q(relu(v)) as max(Q(v), zy) (quantizing is monotonic and Q(0) is zy); nothing where
    zy is the type's lowest value (onnxruntime drops such a ReLU too)."""
    if zero_point == np.iinfo(zero_point.dtype).min:
        return result
    return op.maximum(result, _const(zero_point))


def _per_channel(value: np.ndarray, channels: int, ndim: int, axis: int) -> np.ndarray | None:
    """A weight's scale or zero point as a vector of ``channels`` (one value: size 1), if it
    is per tensor or per ``axis`` of a rank-``ndim`` weight; None for any other."""
    if value.size == 1 or not np.any(value != value.reshape(-1)[0]):
        return value.reshape(-1)[:1]  # one value for all (symmetric weights: zero points all 0)
    shape = tuple(channels if i == axis else 1 for i in range(ndim))
    if value.shape not in (shape, (channels,)):
        return None
    return value.reshape(channels)


def _bias(bias: _Bias | None, product: np.ndarray, channels: int, axis: int,
          ndim: int) -> np.ndarray | None | bool:
    """The int32 bias codes of a group as a vector (None without a bias), or False if the
    bias does not qualify: a constant with zero point 0 added along the output channels
    (``axis`` of the rank-``ndim`` result), its scale ``sx * sw`` (``product``)."""
    if bias is None:
        return None
    codes = bias.value.constant()
    if codes is None or np.any(bias.value.zero_point != 0):
        return False
    if bias.adder.op is _BIAS_ADD:
        along = bias.adder.attrs["axis"] % ndim == axis and codes.shape == (channels,)
    else:
        padded = (1,) * (ndim - codes.ndim) + codes.shape
        along = codes.ndim <= ndim and padded == tuple(channels if i == axis else 1 for i in range(ndim))
    if not along or bias.value.scale.size not in (1, channels):
        return False
    scales = np.broadcast_to(bias.value.scale.reshape(-1), (channels,))
    if not np.allclose(scales, np.broadcast_to(product, (channels,)), rtol=_BIAS_SCALE_RTOL, atol=0.0):
        return False
    return codes.reshape(channels).astype(np.int32)


def fuse_qdq_function(func: Function, mod: ir.IRModule, ctx: PassContext) -> Function:
    """The per-function body of :func:`FuseQDQ`."""
    if not ctx.get_config(ENABLED_CONFIG, True) or not calls_any(func, (_QUANTIZE,)):
        return func  # (every group it fuses ends in a quantize)
    ensure_typed(func, mod)
    return _Fuser(use_counts(func)).visit(func)


@register_pass("FuseQDQ")
def FuseQDQ() -> FunctionPass:  # noqa: N802 - pass factories are named like classes
    """QDQ groups (DequantizeLinear -> conv2d/matmul/dense/add -> QuantizeLinear) as integer
    ops on the quantized values (config ``relay.FuseQDQ.enabled``)."""
    return function_pass(fuse_qdq_function, opt_level=0, name="FuseQDQ", required=["InferType"],
                         reads_module=False)


__all__ = ["ENABLED_CONFIG", "FuseQDQ", "fuse_qdq_function"]

"""AlterOpLayout: run 2-D convolutions in the layout the CPU code generator prefers.

The choice: NHWC data with HWIO weights. With the channels innermost, the inner loop of
a convolution runs over contiguous input channels and writes contiguous output
channels, which the C code generator vectorizes; NCHW would stride by H*W. The config
``relay.AlterOpLayout.layout`` (default ``"NHWC"``) selects it; ``"NCHW"`` leaves every
function unchanged.

What the pass does, in one forward sweep over the dataflow (iterative, ExprMutator):

* every ``nn.conv2d`` in NCHW/OIHW becomes an NHWC/HWIO conv2d; its weight is re-laid by
  ``transpose(W, (2, 3, 1, 0))``, a transpose of a constant that FoldConstant removes;
  ``qnn.conv2d`` likewise (a per-channel weight zero point is re-laid with the weight);
  a lookup in a 1-D table (``take``) follows its indices;
* the NHWC value is then propagated through ops that do not care about the layout:
  elementwise ops (relu, exp, ...), binary broadcast ops whose other operand is NHWC too
  or smaller than the result (a per-channel bias or scale, re-laid by ``expand_dims`` +
  ``transpose``), the quantization ops the same way (their scales and zero points),
  ``nn.bias_add`` along the channels (its axis becomes 3), and the pools
  (``layout="NHWC"``), and ``concatenate`` along the channels (its axis becomes 3) when
  one of its operands is NHWC, and ``sum``/``mean``/``max``/``min`` over the rows and
  columns with ``keepdims`` (a quantized global average pool; axes 1 and 2);
* where an NCHW value is needed (any other op, the function result), one
  ``transpose(x, (0, 3, 1, 2))`` is inserted, and where an NCHW value enters a converted
  conv2d, one ``transpose(x, (0, 2, 3, 1))``; each is created once per value and shared.

So ``conv2d -> relu -> conv2d`` gets one transpose in and one out. Values bound by Let,
tuples and calls of functions keep NCHW (a transpose at the boundary): correct, merely
not optimal. Untyped nodes are left alone; the pass infers types first if needed.
"""

from __future__ import annotations

from collections.abc import Callable

from passinfra import ir
from passinfra.ir import op
from passinfra.ir.expr import Call, Expr, Function, Tuple
from passinfra.ir.op.registry import Op, OpPattern
from passinfra.ir.types import TensorType
from passinfra.transform.builtin.function_types import ensure_typed
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import function_pass
from passinfra.transform.errors import PassConfigError
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

LAYOUT_CONFIG = "relay.AlterOpLayout.layout"
register_config(LAYOUT_CONFIG, str)
SUPPORTED_LAYOUTS = ("NHWC", "NCHW")

NCHW_TO_NHWC = (0, 2, 3, 1)
NHWC_TO_NCHW = (0, 3, 1, 2)
OIHW_TO_HWIO = (2, 3, 1, 0)

_CONV2D = Op.get("nn.conv2d")
_QNN_CONV2D = Op.get("qnn.conv2d")
_TAKE = Op.get("take")
_BIAS_ADD = Op.get("nn.bias_add")
_POOLS = (Op.get("nn.max_pool2d"), Op.get("nn.avg_pool2d"), Op.get("nn.global_avg_pool2d"))
_CONCATENATE = Op.get("concatenate")
_REDUCTIONS = tuple(Op.get(name) for name in ("sum", "mean", "max", "min"))
# broadcast ops of more than two operands, each of which broadcasts (NumPy rules) to the
# result: a quantized model's (de)quantization between its convolutions (the scale and
# zero point per tensor, or per channel as [C, 1, 1]); without them every QDQ pair cost a
# transpose out of NHWC and one back in, and kept each convolution from its epilogue
_BROADCAST_MANY = frozenset(Op.get(name) for name in (
    "qnn.quantize", "qnn.dequantize", "qnn.requantize", "qnn.add", "qnn.mul"))


def _tensor_type(node: Expr) -> TensorType | None:
    ty = node._checked_type
    return ty if isinstance(ty, TensorType) else None


class _NHWCRewriter(ir.ExprMutator):
    """``self.visit(e)`` gives ``e`` rewritten, in its original (NCHW) layout;
    ``self.nhwc[e]`` holds its NHWC version when one was built."""

    def __init__(self) -> None:
        self.nhwc: dict[Expr, Expr] = {}
        self._entry_transposes: dict[Expr, Expr] = {}
        self._relaid_operands: dict[Expr, Expr] = {}  # one re-laid copy of a shared bias
        self._rules: dict[Op, Callable[[Call], Expr | None]] = {
            _CONV2D: self._conv2d, _QNN_CONV2D: self._qnn_conv2d, _BIAS_ADD: self._bias_add,
            _TAKE: self._lookup,
            _CONCATENATE: self._concatenate,
            **{pool: self._pool for pool in _POOLS},
            **{reduction: self._reduction for reduction in _REDUCTIONS},
        }

    def visit_call(self, call: Call) -> Expr:
        rule = self._rules.get(call.op) if isinstance(call.op, Op) else None
        if rule is None and isinstance(call.op, Op):
            rule = self._layout_free_rule(call)
        converted = rule(call) if rule is not None and _tensor_type(call) is not None else None
        if converted is None:
            return super().visit_call(call)
        self.nhwc[call] = converted
        return op.transpose(converted, NHWC_TO_NCHW)

    # ----- helpers -------------------------------------------------------------------
    def _as_nhwc(self, arg: Expr) -> Expr:
        """``arg`` in NHWC: its propagated version, or one shared entry transpose."""
        known = self.nhwc.get(arg)
        if known is not None:
            return known
        entry = self._entry_transposes.get(arg)
        if entry is None:
            entry = self._entry_transposes[arg] = op.transpose(self.visit(arg), NCHW_TO_NHWC)
        return entry

    def _relaid_operand(self, arg: Expr, out_type: TensorType) -> Expr | None:
        """A broadcast operand of an NHWC-converted op, re-laid to NHWC; None if it is
        neither NHWC already nor smaller than the result."""
        arg_type = _tensor_type(arg)
        if arg in self.nhwc and arg_type is not None and arg_type.shape == out_type.shape:
            return self.nhwc[arg]  # (of any dtype: a quantize's result is not its operand's)
        if arg_type is None or arg_type.ndim > 4:
            return None
        # a static operand of a result of symbolic size (a bias broadcast over a symbolic
        # batch) is re-laid like a smaller one; sizes compare when both are static; an
        # operand of symbolic size is left alone
        if not arg_type.is_static:
            return None
        if out_type.is_static and arg_type.size >= out_type.size:
            return None
        relaid = self._relaid_operands.get(arg)
        if relaid is None:
            relaid = self.visit(arg)
            if 0 < arg_type.ndim < 4:
                relaid = op.expand_dims(relaid, 0, 4 - arg_type.ndim)
            if arg_type.ndim > 0:
                relaid = op.transpose(relaid, NCHW_TO_NHWC)
            self._relaid_operands[arg] = relaid
        return relaid

    # ----- rules: each returns the NHWC version of the call, or None ---------------------
    def _conv2d(self, call: Call) -> Expr | None:
        if call.attrs["data_layout"] != "NCHW" or call.attrs["kernel_layout"] != "OIHW":
            return None
        data, weight = call.args
        attrs = call.attrs.with_item("data_layout", "NHWC").with_item("kernel_layout", "HWIO")
        new_weight = op.transpose(self.visit(weight), OIHW_TO_HWIO)
        return Call(_CONV2D, [self._as_nhwc(data), new_weight], attrs)

    def _qnn_conv2d(self, call: Call) -> Expr | None:
        """The integer convolution likewise; its zero points are scalars, or the weight's
        is per output channel ([O, 1, 1, 1], re-laid with the weight)."""
        if call.attrs["data_layout"] != "NCHW" or call.attrs["kernel_layout"] != "OIHW":
            return None
        data, weight, data_zero, weight_zero = call.args
        zero_types = (_tensor_type(data_zero), _tensor_type(weight_zero))
        if any(t is None for t in zero_types) or zero_types[0].ndim != 0 or zero_types[1].ndim not in (0, 4):
            return None
        attrs = call.attrs.with_item("data_layout", "NHWC").with_item("kernel_layout", "HWIO")
        new_weight = op.transpose(self.visit(weight), OIHW_TO_HWIO)
        new_zero = self.visit(weight_zero)
        if zero_types[1].ndim == 4:
            new_zero = op.transpose(new_zero, OIHW_TO_HWIO)
        return Call(_QNN_CONV2D, [self._as_nhwc(data), new_weight, self.visit(data_zero), new_zero], attrs)

    def _lookup(self, call: Call) -> Expr | None:
        """``take`` from a 1-D table (QuantizedLookupTables): the result has the indices'
        shape, element for element, in any layout."""
        table, indices = call.args
        table_type = _tensor_type(table)
        if indices not in self.nhwc or table_type is None or table_type.ndim != 1 or call.attrs["axis"] != 0:
            return None
        return Call(_TAKE, [self.visit(table), self.nhwc[indices]], call.attrs)

    def _bias_add(self, call: Call) -> Expr | None:
        data, bias = call.args
        if data not in self.nhwc or call.attrs["axis"] % 4 != 1:
            return None
        return Call(_BIAS_ADD, [self.nhwc[data], self.visit(bias)], call.attrs.with_item("axis", 3))

    def _pool(self, call: Call) -> Expr | None:
        data = call.args[0]
        if data not in self.nhwc or call.attrs["layout"] != "NCHW":
            return None
        return Call(call.op, [self.nhwc[data]], call.attrs.with_item("layout", "NHWC"))

    def _reduction(self, call: Call) -> Expr | None:
        """A reduction over the image's rows and columns that keeps its dimensions (a
        quantized model's global average pool: ``sum(cast(x), axis=(2, 3), keepdims=True)``):
        the same rows and columns of NHWC, in the same order, so the same values; the
        result ``[N, 1, 1, C]`` is NHWC, where an NCHW one cost a transpose of the whole
        image before it (ResNet-50 QDQ: 7 x 7 x 2048 int32, 51 us on one thread)."""
        data = call.args[0]
        # (attributes a text-IR call may leave out hold their defaults: all axes, not kept)
        axes = call.attrs.get("axis")
        if data not in self.nhwc or not call.attrs.get("keepdims", False) or axes is None:
            return None
        spatial = sorted(axis % 4 for axis in axes)
        if not spatial or any(axis not in (2, 3) for axis in spatial):
            return None
        relaid = tuple(NCHW_TO_NHWC.index(axis) for axis in spatial)
        return Call(call.op, [self.nhwc[data]], call.attrs.with_item("axis", relaid))

    def _concatenate(self, call: Call) -> Expr | None:
        """Joining along the channels, when some operand is NHWC already (DenseNet's
        blocks: otherwise every concatenation costs a transpose out and one back in)."""
        (fields,) = call.args
        if not isinstance(fields, Tuple) or not any(f in self.nhwc for f in fields.fields):
            return None
        types = [_tensor_type(f) for f in fields.fields]
        if any(t is None or t.ndim != 4 for t in types) or call.attrs["axis"] % 4 != 1:
            return None
        nhwc_fields = Tuple([self._as_nhwc(f) for f in fields.fields])
        return Call(_CONCATENATE, [nhwc_fields], call.attrs.with_item("axis", 3))

    def _layout_free_rule(self, call: Call) -> Callable[[Call], Expr | None] | None:
        """Elementwise and binary broadcast ops, which compute the same per element in
        any layout; stateful ops are never touched."""
        callee: Op = call.op
        if callee.stateful or not any(arg in self.nhwc for arg in call.args):
            return None
        if callee.pattern == OpPattern.ELEMWISE and len(call.args) == 1:
            return lambda c: Call(c.op, [self.nhwc[c.args[0]]], c.attrs)
        if callee.pattern == OpPattern.BROADCAST and (len(call.args) == 2 or callee in _BROADCAST_MANY):
            return self._broadcast
        return None

    def _broadcast(self, call: Call) -> Expr | None:
        out_type = _tensor_type(call)
        if out_type is None or out_type.ndim != 4:
            return None
        new_args = [self._relaid_operand(arg, out_type) for arg in call.args]
        if any(arg is None for arg in new_args):
            return None
        return Call(call.op, new_args, call.attrs)


def alter_op_layout_function(func: Function, mod: ir.IRModule, ctx: PassContext) -> Function:
    """The per-function body of :func:`AlterOpLayout`."""
    layout = ctx.get_config(LAYOUT_CONFIG, "NHWC")
    if layout not in SUPPORTED_LAYOUTS:
        raise PassConfigError(
            f"AlterOpLayout: {LAYOUT_CONFIG}={layout!r} is not supported; use one of {SUPPORTED_LAYOUTS}"
        )
    if layout == "NCHW":
        return func
    ensure_typed(func, mod)  # cached by the required InferType: the module is not read
    return _NHWCRewriter().visit(func)


@register_pass("AlterOpLayout")
def AlterOpLayout() -> FunctionPass:
    """Convert NCHW conv2d to NHWC/HWIO and propagate the layout to avoid transposes."""
    return function_pass(alter_op_layout_function, opt_level=3, name="AlterOpLayout",
                         required=["InferType"], reads_module=False)

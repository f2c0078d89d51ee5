"""ForwardFoldScaleAxis: fold a per-input-channel constant scale into the consuming weights.

``conv2d(multiply(x, s), W)`` with ``s`` a constant that only varies along the data's
channel axis becomes ``conv2d(x, multiply(W, s'))``, ``s'`` holding, for each weight
entry ``W[o, i, ...]``, the scale of the input channel that entry reads. Grouped and
depthwise convolutions are handled exactly: output channel ``o`` of group ``g`` reads
input channel ``g * (C / groups) + i``. Zero padding commutes with the scale
(``0 * s = 0``). ``dense(multiply(x, s), W)`` with ``s`` along the last axis scales W's
columns. The scale may also sit under a ``nn.relu`` when every entry is positive
(``relu(x * s) = relu(x) * s``).

Conservative, like the backward pass: the multiply (and the relu) must be used only by
the conv2d/dense, the weight must be a Constant, the scale finite, and the multiply must
not broadcast ``x`` to a bigger shape. The scaled weight is left as
``multiply(W, constant)`` for FoldConstant.
"""

from __future__ import annotations

import numpy as np

from passinfra import ir
from passinfra.ir.expr import Call, Constant, Expr, Function
from passinfra.transform.builtin.backward_fold_scale_axis import (
    CONV2D,
    DENSE,
    MULTIPLY,
    RELU,
    FunctionFacts,
    channel_vector,
    keeps_shape,
    scaled_constant,
    tensor_type,
)
from passinfra.transform.builtin.function_types import ensure_typed
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import function_pass
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass


def conv2d_input_factor(call: Call, vector: np.ndarray, weight_shape: tuple[int, ...]) -> np.ndarray:
    """Per-weight-entry factors (broadcastable to the weight) for an input-channel scale
    ``vector`` of the conv2d ``call``."""
    layout = call.attrs["kernel_layout"]
    o_axis, i_axis = layout.index("O"), layout.index("I")
    out_channels, group_channels = weight_shape[o_axis], weight_shape[i_axis]
    per_group = out_channels // call.attrs["groups"]
    group_of_output = np.arange(out_channels) // per_group
    input_channel = group_of_output[:, None] * group_channels + np.arange(group_channels)[None, :]
    factor = vector[input_channel]  # (O, I)
    if o_axis > i_axis:
        factor = factor.T
    shape = [1] * len(weight_shape)
    shape[o_axis], shape[i_axis] = out_channels, group_channels
    return factor.reshape(shape)


class _ForwardFolder(ir.ExprMutator):
    def __init__(self, facts: FunctionFacts) -> None:
        self.facts = facts

    def visit_call(self, call: Call) -> Expr:
        if call.op in (CONV2D, DENSE) and self.facts.is_constant(call.args[1]):
            folded = self._fold(call)
            if folded is not None:
                return folded
        return super().visit_call(call)

    def _scaled_input(self, data: Expr) -> tuple[Expr, Expr, bool] | None:
        """``(x, s, under_relu)`` when ``data`` is ``x * s`` or ``relu(x * s)``, each
        node used once."""
        under_relu = isinstance(data, Call) and data.op is RELU
        mul = data.args[0] if under_relu else data
        if under_relu and self.facts.uses[data] != 1:
            return None
        if not (isinstance(mul, Call) and mul.op is MULTIPLY) or self.facts.uses[mul] != 1:
            return None
        split = self.facts.split_constant_operand(mul)
        if split is None or not keeps_shape(mul, split[0]):
            return None
        return split[0], split[1], under_relu

    def _fold(self, call: Call) -> Expr | None:
        data, weight = call.args
        found = self._scaled_input(data)
        data_type = tensor_type(data)
        if found is None or data_type is None:
            return None
        value, scale, under_relu = found
        weight_type = tensor_type(weight)
        if not isinstance(scale, Constant) or weight_type is None:
            return None
        if call.op is CONV2D:
            axis = call.attrs["data_layout"].index("C")
        else:
            axis = data_type.ndim - 1
        vector = channel_vector(scale, data_type.shape, axis)
        if vector is None or (under_relu and not np.all(vector > 0)):
            return None
        if call.op is CONV2D:
            factor = conv2d_input_factor(call, vector, weight_type.shape)
        else:
            factor = vector.reshape(1, -1)  # dense weight is (units, in_features)
        new_data = self.visit(value)
        if under_relu:
            new_data = Call(RELU, [new_data], data.attrs)
        return Call(call.op, [new_data, scaled_constant(weight, factor)], call.attrs)


def forward_fold_function(func: Function, mod: ir.IRModule, ctx: PassContext) -> Function:
    """The per-function body of :func:`ForwardFoldScaleAxis`."""
    ensure_typed(func, mod)  # cached by the required InferType: the module is not read
    return _ForwardFolder(FunctionFacts(func)).visit(func)


@register_pass("ForwardFoldScaleAxis")
def ForwardFoldScaleAxis() -> FunctionPass:
    """Fold ``conv2d/dense(multiply(x, per-channel constant), W)`` into the weight."""
    return function_pass(forward_fold_function, opt_level=3, name="ForwardFoldScaleAxis",
                         required=["InferType"], reads_module=False)

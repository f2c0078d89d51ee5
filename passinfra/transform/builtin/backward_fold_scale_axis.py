"""BackwardFoldScaleAxis: fold a per-channel constant scale into the producing weights.

``multiply(conv2d(x, W), s)`` with ``s`` a constant that only varies along the output
channel axis (shape ``(C, 1, 1)``, ``(1, C, 1, 1)``, a scalar, ...) becomes
``conv2d(x, multiply(W, s'))`` with ``s'`` the scale laid along W's output-channel axis;
``multiply(dense(x, W), s)`` with a per-unit ``s`` likewise scales W's rows. The scale
may also cross, between the multiply and the conv2d/dense:

* ``nn.bias_add(., b)`` along the channel axis and ``add(., c)`` / ``subtract(., c)``
  with a per-channel constant ``c``: the constant is scaled too, since
  ``(y + c) * s = y * s + c * s``;
* ``nn.relu``, only when every scale entry is positive (``relu(y) * s = relu(y * s)``).

Conservative by design: every node between the multiply and the conv2d/dense (the
conv2d/dense included) must have a single use, the scale must be a finite Constant, the
weight and the added constants must be constant expressions (Constants and stateless
ops over them, so the pass also works before FoldConstant), and no operand may
broadcast the value to a bigger shape. The scaled weight and constants are left as IR
(``multiply`` of constants), as TVM does, for a following FoldConstant to fold; that
keeps this pass free of arithmetic of its own. The helpers here are shared with
ForwardFoldScaleAxis.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from passinfra import ir
from passinfra.ir import op
from passinfra.ir.expr import Call, Constant, Expr, Function, Tuple, TupleGetItem
from passinfra.ir.functor import expr_children, iter_post_order
from passinfra.ir.op.registry import Op
from passinfra.ir.types import TensorType
from passinfra.transform.builtin.function_types import ensure_typed
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import function_pass
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

MULTIPLY = Op.get("multiply")
ADD = Op.get("add")
SUBTRACT = Op.get("subtract")
RELU = Op.get("nn.relu")
BIAS_ADD = Op.get("nn.bias_add")
CONV2D = Op.get("nn.conv2d")
DENSE = Op.get("nn.dense")


# --------------------------------------------------------------------------- shared helpers


class FunctionFacts:
    """What the fold rules ask about a function, computed in one iterative sweep: how
    many distinct parents use each node, and which nodes compute a constant (only
    Constants and calls of stateless ops below them; FoldConstant folds those)."""

    def __init__(self, func: Function) -> None:
        self.uses: Counter = Counter()
        self.constants: set[Expr] = set()
        for node in iter_post_order(func):
            children = expr_children(node)
            for child in set(children):
                self.uses[child] += 1
            if isinstance(node, Constant) or self._constant_call(node, children):
                self.constants.add(node)

    def _constant_call(self, node: Expr, children: tuple) -> bool:
        if isinstance(node, Call):
            stateless = isinstance(node.op, Op) and not node.op.stateful
            return stateless and all(arg in self.constants for arg in node.args)
        if isinstance(node, (Tuple, TupleGetItem)):
            return all(child in self.constants for child in children)
        return False

    def is_constant(self, expr: Expr) -> bool:
        return expr in self.constants

    def split_constant_operand(self, call: Call) -> tuple[Expr, Expr] | None:
        """``(value, constant)`` for a binary call with exactly one constant operand."""
        lhs, rhs = call.args
        lhs_const, rhs_const = self.is_constant(lhs), self.is_constant(rhs)
        if rhs_const and not lhs_const:
            return lhs, rhs
        if lhs_const and not rhs_const:
            return rhs, lhs
        return None


def tensor_type(node: Expr) -> TensorType | None:
    """The inferred tensor type of ``node``, None if untyped or not a tensor."""
    ty = node._checked_type
    return ty if isinstance(ty, TensorType) else None


def keeps_shape(call: Call, value: Expr) -> bool:
    """Whether ``call`` has exactly ``value``'s type (its other operand only broadcasts)."""
    out, inp = tensor_type(call), tensor_type(value)
    return out is not None and out == inp


def varies_along_only(shape: tuple[int, ...], target: tuple[int, ...], axis: int) -> bool:
    """Whether a tensor of ``shape`` broadcast against one of ``target`` varies along
    ``axis`` only and does not enlarge it."""
    if len(shape) > len(target):
        return False
    padded = (1,) * (len(target) - len(shape)) + tuple(shape)
    if any(size != 1 for i, size in enumerate(padded) if i != axis):
        return False
    return padded[axis] in (1, target[axis])


def channel_vector(const: Constant, shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """The length-``shape[axis]`` vector equal to ``const`` broadcast against a tensor of
    ``shape``, if ``const`` varies along ``axis`` only (and is finite); else None."""
    data = const.data
    if not varies_along_only(data.shape, shape, axis) or not np.all(np.isfinite(data)):
        return None
    return np.broadcast_to(data.reshape(-1), (shape[axis],)).copy()


def along_axis(vector: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    """``vector`` reshaped to broadcast along ``axis`` of an ``ndim``-rank tensor, with
    the leading size-1 axes dropped (NumPy broadcasting adds them back)."""
    return vector.reshape((vector.size,) + (1,) * (ndim - 1 - axis))


def scaled_constant(value: Expr, factor: np.ndarray) -> Expr:
    """``multiply(value, factor)`` for a typed constant expression ``value``, left for
    FoldConstant."""
    return op.multiply(value, ir.const(factor.astype(tensor_type(value).dtype)))


def producer_axes(call: Call) -> tuple[int, int] | None:
    """For a conv2d/dense call: (channel axis of its output, output-channel axis of its
    weight); None for anything else."""
    if call.op is CONV2D:
        return call.attrs["data_layout"].index("C"), call.attrs["kernel_layout"].index("O")
    if call.op is DENSE:
        out = tensor_type(call)
        return (out.ndim - 1, 0) if out is not None else None
    return None


# --------------------------------------------------------------------------- the pass


class _BackwardFolder(ir.ExprMutator):
    def __init__(self, facts: FunctionFacts) -> None:
        self.facts = facts

    def visit_call(self, call: Call) -> Expr:
        if call.op is MULTIPLY:
            folded = self._fold(call)
            if folded is not None:
                return folded
        return super().visit_call(call)

    def _chain(self, start: Expr) -> tuple[list[Call], Call] | None:
        """The single-use calls from ``start`` down to a conv2d/dense with a constant
        weight, and that producer; None if the path holds anything else."""
        chain: list[Call] = []
        node = start
        while True:  # a loop, not recursion: the chain may be long
            if not isinstance(node, Call) or self.facts.uses[node] != 1:
                return None
            if node.op in (CONV2D, DENSE):
                return (chain, node) if self.facts.is_constant(node.args[1]) else None
            if node.op in (RELU, BIAS_ADD):
                if node.op is BIAS_ADD and not self.facts.is_constant(node.args[1]):
                    return None
                chain.append(node)
                node = node.args[0]
            elif node.op in (ADD, SUBTRACT):
                split = self.facts.split_constant_operand(node)
                if split is None or (node.op is SUBTRACT and split[1] is not node.args[1]):
                    return None
                if not keeps_shape(node, split[0]):
                    return None
                chain.append(node)
                node = split[0]
            else:
                return None

    def _fold(self, mul: Call) -> Expr | None:
        split = self.facts.split_constant_operand(mul)
        if split is None or not keeps_shape(mul, split[0]):
            return None
        value, scale = split
        if not isinstance(scale, Constant):
            return None
        found = self._chain(value)
        if found is None:
            return None
        chain, producer = found
        axes = producer_axes(producer)
        out_type = tensor_type(mul)
        if axes is None or out_type is None:
            return None
        channel_axis, weight_axis = axes
        vector = channel_vector(scale, out_type.shape, channel_axis)
        if vector is None or not self._chain_accepts(chain, vector, out_type, channel_axis):
            return None
        weight = producer.args[1]
        weight_type = tensor_type(weight)
        if weight_type is None:
            return None
        new_weight = scaled_constant(weight, along_axis(vector, weight_type.ndim, weight_axis))
        result: Expr = Call(producer.op, [self.visit(producer.args[0]), new_weight], producer.attrs)
        channel_factor = along_axis(vector, out_type.ndim, channel_axis)
        for node in reversed(chain):
            result = self._rebuild(node, result, vector, channel_factor)
        return result

    def _chain_accepts(self, chain: list[Call], vector: np.ndarray, out_type: TensorType, axis: int) -> bool:
        for node in chain:
            if node.op is RELU and not np.all(vector > 0):
                return False
            if node.op is BIAS_ADD and (node.attrs["axis"] % out_type.ndim) != axis:
                return False
            if node.op in (ADD, SUBTRACT):
                constant_type = tensor_type(self.facts.split_constant_operand(node)[1])
                if constant_type is None or not varies_along_only(constant_type.shape, out_type.shape, axis):
                    return False
        return True

    def _rebuild(self, node: Call, inner: Expr, vector: np.ndarray, channel_factor: np.ndarray) -> Expr:
        if node.op is RELU:
            return Call(RELU, [inner], node.attrs)
        if node.op is BIAS_ADD:
            return Call(BIAS_ADD, [inner, scaled_constant(node.args[1], vector)], node.attrs)
        value, constant = self.facts.split_constant_operand(node)
        scaled = scaled_constant(constant, channel_factor)
        args = [inner if arg is value else scaled for arg in node.args]
        return Call(node.op, args, node.attrs)


def backward_fold_function(func: Function, mod: ir.IRModule, ctx: PassContext) -> Function:
    """The per-function body of :func:`BackwardFoldScaleAxis`."""
    ensure_typed(func, mod)  # cached by the required InferType: the module is not read
    return _BackwardFolder(FunctionFacts(func)).visit(func)


@register_pass("BackwardFoldScaleAxis")
def BackwardFoldScaleAxis() -> FunctionPass:
    """Fold ``multiply(conv2d/dense(...), per-channel constant)`` into the weight."""
    return function_pass(backward_fold_function, opt_level=3, name="BackwardFoldScaleAxis",
                         required=["InferType"], reads_module=False)

"""The optimizers of the ``ai.onnx.preview.training`` domain: Adagrad, Adam, Momentum.

Each updates n tensors at once: inputs ``R`` (learning rate), ``T`` (step count), then
n of each per-tensor input (X, G, ...), outputs n of each updated tensor. The formulas
are element-wise, so each is written here as graph ops (arithmetic, ``sqrt``, ``power``,
``where`` on ``T > 0``), which fuse and compile like any other; R and T may be run-time
inputs. Everything is computed in X's dtype (R and T are cast to it), in the order the
ONNX reference writes each formula.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from passinfra.frontend.onnx_ops.context import NodeContext
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.ir import op
from passinfra.ir.expr import Expr

TRAINING = "ai.onnx.preview.training."  # the converter table's prefix for the domain


class _Update:
    """One tensor's update: its per-tensor inputs and the node's scalars, in X's dtype."""

    def __init__(self, node: NodeContext, tensors: Sequence[Expr], dtype: str) -> None:
        self.tensors, self.dtype = tensors, dtype
        rate, step = node.arg(0), node.arg(1)
        self.rate = rate if node.dtype(rate) == dtype else op.cast(rate, dtype)
        self.step = op.cast(step, dtype)
        self.started = op.greater(step, np.zeros((), node.dtype(step)))  # T > 0

    def const(self, value: float) -> np.ndarray:
        return np.asarray(value, dtype=self.dtype)

    def regularized(self, norm: float) -> Expr:
        """``norm * X + G``: the gradient with the L2 regularization term's."""
        x, g = self.tensors[0], self.tensors[1]
        return op.add(op.multiply(self.const(norm), x), g)


def _grouped(node: NodeContext, per_tensor: int, outputs: int,
             update: Callable[[_Update], tuple[Expr, ...]]) -> list[Expr]:
    """Split the inputs after R and T into ``per_tensor`` groups of n, run ``update`` per
    tensor, and order the results as ONNX does (every X_new, then every next output)."""
    count, extra = divmod(len(node.inputs) - 2, per_tensor)
    if count < 1 or extra or node.num_outputs != outputs * count:
        raise node.fail(f"expected R, T and {per_tensor} groups of n tensors in, {outputs} groups of n out; "
                        f"got {len(node.inputs)} inputs and {node.num_outputs} outputs")
    results = []
    for i in range(count):
        tensors = [node.arg(2 + group * count + i) for group in range(per_tensor)]
        dtype = node.dtype(tensors[0])
        if dtype not in ("float32", "float64"):
            raise node.fail(f"the tensors to update must be float32 or float64, got {dtype}")
        results.append(update(_Update(node, tensors, dtype)))
    return [result[k] for k in range(outputs) for result in results]


def _required(node: NodeContext, name: str) -> float:
    value = node.attr(name)
    if value is None:
        raise node.fail(f"attribute {name!r} is required")
    return value


@converter(TRAINING + "Adagrad")
def _adagrad(node: NodeContext) -> list[Expr]:
    decay, epsilon = node.attr("decay_factor", 0.0), node.attr("epsilon", 1e-6)
    norm = node.attr("norm_coefficient", 0.0)

    def update(s: _Update) -> tuple[Expr, ...]:
        x, h = s.tensors[0], s.tensors[2]
        rate = op.divide(s.rate, op.add(s.const(1.0), op.multiply(s.step, s.const(decay))))
        g = s.regularized(norm)
        h_new = op.add(h, op.multiply(g, g))
        scale = op.add(op.sqrt(h_new), s.const(epsilon))
        return op.subtract(x, op.divide(op.multiply(rate, g), scale)), h_new

    return _grouped(node, 3, 2, update)


@converter(TRAINING + "Adam")
def _adam(node: NodeContext) -> list[Expr]:
    alpha, beta = node.attr("alpha", 0.9), node.attr("beta", 0.999)
    epsilon, norm = node.attr("epsilon", 1e-6), node.attr("norm_coefficient", 0.0)
    norm_post = node.attr("norm_coefficient_post", 0.0)

    def update(s: _Update) -> tuple[Expr, ...]:
        x, v, h = s.tensors[0], s.tensors[2], s.tensors[3]
        g = s.regularized(norm)
        v_new = op.add(op.multiply(s.const(alpha), v), op.multiply(s.const(1.0 - alpha), g))
        h_new = op.add(op.multiply(s.const(beta), h), op.multiply(s.const(1.0 - beta), op.multiply(g, g)))
        scale = op.add(op.sqrt(h_new), s.const(epsilon))
        # bias correction from the first step on; at T = 0 the rate is R as given (the
        # correction's denominator is replaced by 1 there, so no 0 / 0 is computed)
        one = s.const(1.0)
        correction = op.sqrt(op.subtract(one, op.power(s.const(beta), s.step)))
        denominator = op.where(s.started, op.subtract(one, op.power(s.const(alpha), s.step)), one)
        rate = op.where(s.started, op.divide(op.multiply(s.rate, correction), denominator), s.rate)
        x_new = op.subtract(x, op.multiply(rate, op.divide(v_new, scale)))
        return op.multiply(s.const(1.0 - norm_post), x_new), v_new, h_new

    return _grouped(node, 4, 3, update)


@converter(TRAINING + "Momentum")
def _momentum(node: NodeContext) -> list[Expr]:
    alpha, beta = _required(node, "alpha"), _required(node, "beta")
    norm, mode = _required(node, "norm_coefficient"), _required(node, "mode")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("standard", "nesterov"):
        raise node.fail(f"mode must be 'standard' or 'nesterov', got {mode!r}")

    def update(s: _Update) -> tuple[Expr, ...]:
        x, v = s.tensors[0], s.tensors[2]
        g = s.regularized(norm)
        gain = op.where(s.started, s.const(beta), s.const(1.0))  # the first step takes G whole
        v_new = op.add(op.multiply(s.const(alpha), v), op.multiply(gain, g))
        step = v_new if mode == "standard" else op.add(g, op.multiply(s.const(alpha), v_new))
        return op.subtract(x, op.multiply(s.rate, step)), v_new

    return _grouped(node, 3, 2, update)

"""The length and magnitude of a graph's sums, for the bounds of tests/numerics.py.

A graph of convolutions, dense layers and matmuls followed by adds, multiplies and ReLU
computes each output as one sum (bias, residual and scaled terms included) whose terms'
absolute values add up to the graph run on the absolute values of its inputs and
constants: ReLU is monotone and 1-Lipschitz, adds and multiplies of absolute values give
the sum of the terms' absolute values, ops that only move values move them too. Graphs
with other ops (softmax, normalizations, sigmoid) have no such magnitude: they are
rejected, and their tests bound them otherwise.
"""

from __future__ import annotations

import numpy as np

from passinfra import ir
from passinfra.ir.expr import Call, Constant
from passinfra.ir.functor import ExprMutator, iter_post_order
from passinfra.ir.type_infer import infer_type
from passinfra.runtime.interpreter import evaluate

# ops that sum (their terms: the sum's length)
CONTRACTIONS = {"nn.conv2d", "nn.dense", "matmul", "sum", "mean", "nn.avg_pool2d"}
# ops through which running on absolute values gives the magnitude (a maximum of absolute
# values bounds the maximum's)
ABSOLUTE_OPS = CONTRACTIONS | {"nn.bias_add", "add", "multiply", "nn.relu", "reshape", "squeeze",
                               "expand_dims", "transpose", "layout_transform", "nn.batch_flatten", "cast",
                               "nn.max_pool2d"}


class _Absolute(ExprMutator):
    def visit_constant(self, const: Constant) -> Constant:
        return ir.const(np.abs(const.data)) if const.data.dtype.kind == "f" else const


def _contraction_length(call: Call) -> int:
    if call.op.name == "nn.conv2d":  # input channels per group times kernel taps
        shape = call.args[1].checked_type.shape
        return int(np.prod(shape)) // int(shape[call.attrs["kernel_layout"].index("O")])
    if call.op.name == "nn.avg_pool2d":
        return int(np.prod(call.attrs["pool_size"]))
    if call.op.name in ("sum", "mean"):
        return int(np.prod(call.args[0].checked_type.shape)) // int(np.prod(call.checked_type.shape))
    return int(call.args[0].checked_type.shape[-1])  # dense, matmul: the data's last axis


def graph_sums(mod: ir.IRModule, *inputs: np.ndarray) -> tuple[int, np.ndarray]:
    """``terms`` and ``magnitude`` for :func:`tests.numerics.assert_sums_close` of the
    outputs of ``mod``'s main function (a single tensor) on ``inputs``: the longest
    contraction plus one term for each other op's rounding, and the graph run on the
    absolute values of its inputs and constants."""
    func = infer_type(mod)["main"]
    calls = [n for n in iter_post_order(func.body) if isinstance(n, Call)]
    names = {c.op.name for c in calls}
    assert names <= ABSOLUTE_OPS, f"no magnitude by absolute values through {sorted(names - ABSOLUTE_OPS)}"
    lengths = [_contraction_length(c) for c in calls if c.op.name in CONTRACTIONS]
    # chained contractions (a dense after a dense) multiply their rounding: count each one's
    terms = sum(lengths) + len(calls) - len(lengths)
    absolute = ir.IRModule({"main": _Absolute().visit(func)})
    return terms, evaluate(absolute, *(np.abs(x) for x in inputs))

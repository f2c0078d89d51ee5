"""ONNX reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax/ArgMin.

The axes moved from an attribute to an input in opset 13 for ReduceSum and in opset 18
for the others; both forms are handled.
"""

from __future__ import annotations

from collections.abc import Callable

from passinfra.frontend.onnx_ops.context import NodeContext
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.ir import op
from passinfra.ir.expr import Expr
from passinfra.ir.op import extra


def _square(x: Expr) -> Expr:
    return op.multiply(x, x)


# op type -> (prepare the data, reduce with sum/max/..., finish the result); None = as is
_REDUCTIONS: dict[str, tuple[Callable | None, Callable, Callable | None]] = {
    "ReduceSum": (None, op.sum, None),
    "ReduceMean": (None, op.mean, None),
    "ReduceMax": (None, op.max, None),
    "ReduceMin": (None, op.min, None),
    "ReduceProd": (None, extra.prod, None),
    "ReduceL1": (op.abs, op.sum, None),
    "ReduceL2": (_square, op.sum, op.sqrt),
    "ReduceSumSquare": (_square, op.sum, None),
    "ReduceLogSum": (None, op.sum, op.log),
    "ReduceLogSumExp": (op.exp, op.sum, op.log),
}
# the opset where the axes became an input
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _reduction(op_type: str):
    prepare, reduce, finish = _REDUCTIONS[op_type]
    axes_input_since = _AXES_INPUT_SINCE.get(op_type, 18)

    def convert(node: NodeContext) -> Expr:
        data = node.arg(0)
        keepdims = bool(node.attr("keepdims", 1))
        if node.opset < axes_input_since:
            axes = node.attr("axes")
        else:
            axes = node.known_ints(1, "axes") if node.has_input(1) else None
        if axes is not None and len(axes) == 0:
            axes = None
        if axes is None and node.attr("noop_with_empty_axes", 0):
            return data
        if prepare is not None:
            data = prepare(data)
        result = reduce(data, axis=None if axes is None else list(axes), keepdims=keepdims)
        return finish(result) if finish is not None else result

    return convert


for _op_type in _REDUCTIONS:
    converter(_op_type)(_reduction(_op_type))


def _arg_reduction(builder: Callable):
    def convert(node: NodeContext) -> Expr:
        return builder(
            node.arg(0),
            axis=node.attr("axis", 0),
            keepdims=bool(node.attr("keepdims", 1)),
            select_last_index=bool(node.attr("select_last_index", 0)),
        )

    return convert


converter("ArgMax")(_arg_reduction(extra.argmax))
converter("ArgMin")(_arg_reduction(extra.argmin))

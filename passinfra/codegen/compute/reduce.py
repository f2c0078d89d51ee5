"""Compute rules of the reductions: sum, mean, max and min over axes, with keepdims.

Each is a :class:`ReduceOp` whose reduction axes are the reduced input axes, in input
order (so the innermost reduction loop walks the innermost, contiguous, reduced axis).
``mean`` divides the sum by the number of reduced elements in its finalize step.
"""

from __future__ import annotations

from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import Indices, ReduceOp, TensorHandle, imm, register_compute
from passinfra.ir.attrs import Attrs
from passinfra.ir.op._rel import normalize_axes
from passinfra.ir.types import TensorType, Type


def reduction(name: str, combiner: str, data: TensorHandle, axes: Sequence[int], keepdims: bool,
              out_shape: tuple[int, ...], mean: bool = False) -> ReduceOp:
    """``combiner`` of ``data`` over ``axes`` (sorted, non-negative)."""
    reduced = tuple(axes)
    extents = tuple(data.shape[a] for a in reduced)

    def body(out: Indices, red: Indices) -> tir.PrimExpr:
        reduction_index = dict(zip(reduced, red))
        kept = iter(out)
        indices = []
        for axis in range(len(data.shape)):
            if axis in reduction_index:
                indices.append(reduction_index[axis])
                if keepdims:
                    next(kept)  # the size-1 output axis standing for the reduced one
            else:
                indices.append(next(kept))
        return data.load(*indices)

    finalize = None
    if mean:
        count = 1
        for extent in extents:
            count *= extent

        def finalize(acc: tir.PrimExpr, out: Indices) -> tir.PrimExpr:
            return acc / imm(count, acc.dtype)

    return ReduceOp(name, out_shape, data.dtype, extents, combiner, body, finalize)


def _reduce_rule(name: str, combiner: str, mean: bool = False) -> None:
    @register_compute(name)
    def rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp:
        (data,) = inputs
        assert isinstance(out_type, TensorType)
        axes = normalize_axes(attrs["axis"], len(data.shape))
        return reduction(name, combiner, data, axes, attrs["keepdims"], out_type.shape, mean)


_reduce_rule("sum", "sum")
_reduce_rule("mean", "sum", mean=True)
_reduce_rule("max", "max")
_reduce_rule("min", "min")

"""DeduplicateFilters: compute each distinct filter of a convolution or dense layer once.

Why this pass exists: an optimized GEMM does not promise that an output element's
rounding is independent of where the element sits in the output. OpenBLAS's AVX2
(Haswell/Zen) sgemm kernel rounds some 8-column panels of the output differently from
the others (1 ulp at K=512; which panels depends on the width; measured by
``bench/duplicate_filters.py``), while its AVX-512 and AVX kernels do not. Two output
channels whose filters are bit-identical therefore came out of the compiled library
different on some CPUs and equal on others, and anything downstream that amplifies a
1-ulp gap (a softmax over logits of 1e10, an argmax) turned that into a different
answer per machine.

The guarantee this pass gives the generated code: output channels whose filters are
bit-identical are bit-identical, whichever CPU or BLAS kernel runs the library. It
rewrites ``conv2d(x, W)`` (one group) and ``dense(x, W)`` whose constant weight ``W``
repeats a filter into the same op over the distinct filters followed by a ``take``
along the output-channel axis that copies each distinct channel to its places. Layers
whose filters are all distinct (every trained model) are returned unchanged, and the
check reads a few values of each filter unless two filters agree there, so it costs
almost nothing on a model whose filters differ.
"""

from __future__ import annotations

import numpy as np

from passinfra import ir
from passinfra.file_pages import release_file_pages
from passinfra.ir import op
from passinfra.ir.expr import Call, Constant, Expr, Function
from passinfra.ir.op.registry import Op
from passinfra.transform.context import PassContext
from passinfra.transform.decorators import function_pass
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

_CONV2D = Op.get("nn.conv2d")
_DENSE = Op.get("nn.dense")
# values of each filter compared before whole filters are
_HEAD_VALUES = 16


def distinct_filters(weight: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(indices of the first copy of each distinct filter, filter -> distinct index)``
    for the filters of ``weight`` along ``axis``, compared bit for bit; None when every
    filter is distinct."""
    filters = np.moveaxis(weight, axis, 0)  # a view: no weight is copied unless needed
    count = filters.shape[0]
    if count < 2:
        return None
    # a few leading values of each filter first: distinct filters almost always differ there
    head = filters[(slice(None),) + (0,) * (filters.ndim - 2) + (slice(0, _HEAD_VALUES),)]
    if np.unique(_row_keys(head.reshape(count, -1))).size == count:
        return None
    # whole filters as dict keys: exact byte equality (what "bit-identical" means), in
    # one pass and in order of first appearance (sorting opaque keys with np.unique was
    # the pass's whole cost on the light models, whose filters are all equal)
    if weight.dtype.itemsize in (1, 2, 4, 8):  # one filter repeated: one vectorized bitwise check
        bits = weight.view(np.dtype(f"u{weight.dtype.itemsize}"))  # in place, whatever the layout
        if bool((bits == np.take(bits, [0], axis=axis)).all()):
            return np.zeros(1, dtype=np.int64), np.zeros(count, dtype=np.int64)
    rows = np.ascontiguousarray(filters.reshape(count, -1))
    distinct: dict[bytes, int] = {}
    first: list[int] = []
    channel_to_filter = np.empty(count, dtype=np.int64)
    for index in range(count):
        position = distinct.setdefault(rows[index].tobytes(), len(first))
        if position == len(first):
            first.append(index)
        channel_to_filter[index] = position
    if len(first) == count:
        return None
    return np.asarray(first, dtype=np.int64), channel_to_filter


def _row_keys(rows: np.ndarray) -> np.ndarray:
    """Each row of a matrix as one opaque value of its bytes, for np.unique (bit-exact:
    -0.0 and 0.0 differ, equal NaN payloads are equal)."""
    rows = np.ascontiguousarray(rows)
    return rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).reshape(-1)


def _filter_axes(call: Call) -> tuple[int, int] | None:
    """(filter axis of the weight, channel axis of the result), or None if not handled."""
    if call.op is _DENSE:
        return 0, -1
    if call.op is _CONV2D and call.attrs["groups"] == 1:
        return call.attrs["kernel_layout"].index("O"), call.attrs["data_layout"].index("C")
    return None


class _FilterDeduplicator(ir.ExprMutator):
    def visit_call(self, call: Call) -> Expr:
        new = super().visit_call(call)
        axes = _filter_axes(new)
        weight = new.args[1] if axes else None
        if not isinstance(weight, Constant):
            return new
        found = distinct_filters(weight.data, axes[0])
        # the check reads a few values of every filter, which for a weight mapped from
        # the model's file faults in (about) every page of it; they need not stay resident
        release_file_pages(weight.data)
        if found is None:
            return new
        first, channel_to_filter = found
        distinct = ir.const(np.take(weight.data, first, axis=axes[0]))
        reduced = Call(new.op, [new.args[0], distinct, *new.args[2:]], new.attrs)
        return op.take(reduced, ir.const(channel_to_filter.astype("int32")), axis=axes[1])


def deduplicate_filters_function(func: Function, mod: ir.IRModule, ctx: PassContext) -> Function:
    """The per-function body of :func:`DeduplicateFilters`."""
    return _FilterDeduplicator().visit(func)


@register_pass("DeduplicateFilters")
def DeduplicateFilters() -> FunctionPass:
    """Duplicate filters of conv2d/dense computed once, so their channels are bit-identical."""
    return function_pass(deduplicate_filters_function, opt_level=0, name="DeduplicateFilters",
                         reads_module=False)

"""StorageFlatten: N-d buffers become 1-d buffers indexed in row-major order.

Every buffer (parameters and Allocate'd ones) that is not already 1-d is replaced by a
new Buffer of ``size`` elements with the same name, dtype and scope; an access
``A[i, j, k]`` with shape ``(I, J, K)`` becomes ``A[i*J*K + j*K + k]`` (a 0-d buffer is
one element, index 0). The function gets attr ``flattened=True``, which the verifier
and the C renderer read; a function already flattened is returned unchanged.
"""

from __future__ import annotations

from passinfra.codegen.prim_func_pass import create_prim_func_pass
from passinfra.errors import IRError
from passinfra.tir import (
    Allocate,
    Buffer,
    BufferLoad,
    BufferStore,
    IntImm,
    Mul,
    PrimExpr,
    PrimFunc,
    Stmt,
)
from passinfra.tir.arith import sum_terms
from passinfra.tir.functor import StmtExprMutator
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass


def row_major_index(indices: tuple[PrimExpr, ...], shape: tuple[int, ...]) -> PrimExpr:
    """The flat offset of ``indices`` into a row-major array of ``shape``."""
    if len(indices) != len(shape):
        raise IRError(f"{len(indices)} indices for a buffer of shape {shape}")
    terms: list[PrimExpr] = []
    stride = 1
    for index, extent in zip(reversed(indices), reversed(shape)):
        if type(stride) is int:
            terms.append(index if stride == 1 else Mul(index, IntImm(stride, index.dtype)))
        elif not (isinstance(index, IntImm) and index.value == 0):  # a symbolic stride
            terms.append(Mul(index, stride))
        stride = extent if type(stride) is int and stride == 1 else stride * extent
    terms.reverse()
    dtype = indices[0].dtype if indices else "int64"
    return sum_terms(terms, dtype)


class _Flattener(StmtExprMutator):
    def __init__(self) -> None:
        self.flat: dict[Buffer, Buffer] = {}

    def flat_buffer(self, buf: Buffer) -> Buffer:
        new = self.flat.get(buf)
        if new is None:
            new = buf if len(buf.shape) == 1 else Buffer(buf.name, (buf.size,), buf.dtype, buf.scope)
            self.flat[buf] = new
        return new

    def _index(self, buf: Buffer, indices: tuple[PrimExpr, ...]) -> tuple[PrimExpr, ...]:
        if len(buf.shape) == 1:
            return indices
        try:
            return (row_major_index(indices, buf.shape),)
        except IRError as err:
            raise IRError(f"StorageFlatten: access to buffer {buf.name}: {err}") from None

    def rewrite_buffer_load(self, node: BufferLoad) -> PrimExpr:
        return BufferLoad(self.flat_buffer(node.buffer), self._index(node.buffer, node.indices))

    def visit_buffer_store(self, stmt: BufferStore) -> Stmt:
        value = self.visit_expr(stmt.value)
        indices = self._index(stmt.buffer, self.visit_exprs(stmt.indices))
        return BufferStore(self.flat_buffer(stmt.buffer), value, indices)

    def visit_allocate(self, stmt: Allocate) -> Stmt:
        return Allocate(self.flat_buffer(stmt.buffer), self.visit_stmt(stmt.body))


def storage_flatten_prim_func(func: PrimFunc) -> PrimFunc:
    if func.attrs.get("flattened", False):
        return func
    flattener = _Flattener()
    params = [flattener.flat_buffer(p) for p in func.params]
    body = flattener.visit_stmt(func.body)
    return PrimFunc(params, body, func.attrs.with_item("flattened", True), func.dims)


@register_pass("StorageFlatten")
def StorageFlatten() -> FunctionPass:
    """Flatten every PrimFunc's buffers to 1-d (see the module docstring)."""
    return create_prim_func_pass(lambda func, mod, ctx: storage_flatten_prim_func(func), opt_level=0,
                                 name="StorageFlatten", reads_module=False)


__all__ = ["StorageFlatten", "storage_flatten_prim_func", "row_major_index"]

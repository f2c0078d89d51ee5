"""WidenGemmOperands: a GEMM reading a float16/bfloat16 parameter widens it one panel at a time.

BLAS multiplies float32 matrices. A weight stored in 16 bits (ToMixedPrecision) reaches a
kernel as a float16/bfloat16 parameter read through a cast, and the lowering hands that
parameter to the GEMM itself, so no float32 copy of the whole weight is ever made. This
pass, the last one before C, turns each such GEMM into a loop over panels of the 16-bit
operand: each panel is widened (exactly: every 16-bit value is a float32) into a float32
scratch of :data:`PANEL_ELEMENTS` elements (more only where :data:`MIN_PANEL` rows or
columns of a very long reduction need it), which stays in cache while one BLAS call
multiplies it:

* a 16-bit right operand ``B`` is cut into panels of output columns: ``width`` columns of
  ``B`` (rows of it when transposed), and the GEMM computes those columns of ``C``;
* a 16-bit left operand ``A`` into panels of output rows (both: rows, then columns).

Panels are at least :data:`MIN_PANEL` rows or columns wide (a narrower GEMM spends its time
packing the other operand), the last one may be short. Each output element is still one
dot product over the whole reduction, accumulated in float32 by BLAS.

The lowering hands a GEMM the 16-bit parameter only for a weight larger than one panel;
a smaller one it widens once per call into a scratch buffer (LowerToPrimFunc), so every
GEMM this pass sees is worth cutting.

It runs after Parallelize, so a GEMM split into parts over threads is widened per part
(each thread widens its own panels into its own scratch, allocated once per thread's
range). Run on flattened PrimFuncs (after StorageFlatten); a GEMM whose operand is a
16-bit scratch buffer (a kernel's own 16-bit buffers hold floats) is left alone.
"""

from __future__ import annotations

from passinfra import tir
from passinfra.codegen.prim_func_pass import create_prim_func_pass
from passinfra.errors import IRError
from passinfra.ir.types import HALF_DTYPES
from passinfra.tir.arith import const_int
from passinfra.tir.functor import StmtExprMutator
from passinfra.tir.intrinsics import GEMM_INTRINSIC, is_gemm
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

# elements of one widened panel (512 KiB of float32: it stays in a core's L2 cache until
# BLAS has packed it). Each panel is one BLAS call, which re-reads (packs) the other
# operand: on ResNet-50's convolutions panels of 128 KiB / 16 columns ran 1.2-1.8x the
# float32 time, these 1.0-1.3x (bench/mixed_precision.py and the shapes measured there)
PANEL_ELEMENTS = 128 * 1024
# rows or columns per panel at least (when the operand has them): a narrower GEMM spends
# its time packing the other operand
MIN_PANEL = 64

_INDEX = tir.INDEX_DTYPE


def _index(value: int) -> tir.IntImm:
    return tir.IntImm(value, _INDEX)


def _size(value: int) -> tir.IntImm:
    return tir.IntImm(value, "int32")  # GEMM sizes and leading dimensions are C ints


def _constant(expr: tir.PrimExpr, what: str) -> int:
    value = const_int(expr)
    if value is None:
        raise IRError(f"WidenGemmOperands: the GEMM's {what} must be a constant, got {expr!r}")
    return value


def _is_zero(expr: tir.PrimExpr) -> bool:
    return const_int(expr) == 0


def _times(expr: tir.PrimExpr, factor: int) -> tir.PrimExpr:
    """``expr * factor`` (an index); 0 stays the immediate 0."""
    return _index(0) if _is_zero(expr) else expr * _index(factor)


def _as_index(expr: tir.PrimExpr) -> tir.PrimExpr:
    known = const_int(expr)
    return _index(known) if known is not None else tir.Cast(_INDEX, expr)


def _moved(load: tir.BufferLoad, offset: tir.PrimExpr) -> tir.BufferLoad:
    """The load ``offset`` elements after ``load`` (a flattened access)."""
    if _is_zero(offset):
        return load
    (start,) = load.indices
    return tir.BufferLoad(load.buffer, (offset if _is_zero(start) else start + offset,))


class _Panels:
    """The panels along one GEMM dimension: ``count`` of ``width`` (the last one
    ``extent - p * width``), with ``p`` the panel loop variable when there are several."""

    def __init__(self, extent: tir.PrimExpr, per_panel: int, name: str) -> None:
        known = const_int(extent)
        self.width = per_panel if known is None else max(1, min(per_panel, known))
        self.var = tir.TVar(name, _INDEX)
        if known is not None and known <= self.width:
            self.count: tir.PrimExpr | None = None  # one panel: no loop
            self.start: tir.PrimExpr = _index(0)
            self.size: tir.PrimExpr = extent
            return
        if known is not None:
            self.count = _index(-(-known // self.width))
        else:
            self.count = tir.FloorDiv(tir.Cast(_INDEX, extent) + _index(self.width - 1), _index(self.width))
        self.start = self.var * _index(self.width)
        if known is not None and known % self.width == 0:
            self.size = _size(self.width)
        else:  # the last panel is short
            self.size = tir.Min(_size(self.width), extent - tir.Cast("int32", self.start))

    def loop(self, body: tir.Stmt) -> tir.Stmt:
        if self.count is None:
            return body
        return tir.For(self.var, _index(0), self.count, tir.ForKind.SERIAL, body)


def _copy(scratch: tir.Buffer, source: tir.BufferLoad, rows: tir.PrimExpr, cols: tir.PrimExpr,
          source_ld: int, scratch_ld: int, name: str) -> tir.Stmt:
    """``scratch[r * scratch_ld + c] = float(source[r * source_ld + c])`` for the panel."""
    r, c = tir.TVar(f"{name}_r", _INDEX), tir.TVar(f"{name}_c", _INDEX)
    value = tir.Cast("float32", _moved(source, r * _index(source_ld) + c))
    store = tir.BufferStore(scratch, value, (r * _index(scratch_ld) + c,))
    inner = tir.For(c, _index(0), _as_index(cols), tir.ForKind.VECTORIZED, store)
    return tir.For(r, _index(0), _as_index(rows), tir.ForKind.SERIAL, inner)


def _gemm(a: tir.PrimExpr, b: tir.PrimExpr, c: tir.PrimExpr, sizes: tuple[tir.PrimExpr, ...]) -> tir.Stmt:
    return tir.Evaluate(tir.Intrinsic(GEMM_INTRINSIC, (a, b, c, *sizes), "int32"))


def _widen_a(call: tir.Intrinsic) -> tir.Stmt:
    """Panels of output rows: ``rows`` rows of A widened, times B, into those rows of C."""
    a, b, c, m, n, k, lda, ldb, ldc, trans_b = call.args
    depth, a_ld, c_ld = _constant(k, "k"), _constant(lda, "lda"), _constant(ldc, "ldc")
    panels = _Panels(m, max(MIN_PANEL, PANEL_ELEMENTS // max(depth, 1)), "a_panel")
    scratch = tir.Buffer(f"{a.buffer.name}_panel", (panels.width * depth,), "float32")
    fill = _copy(scratch, _moved(a, _times(panels.start, a_ld)), panels.size, k, a_ld, depth, "wa")
    product = _gemm(scratch.load(0), b, _moved(c, _times(panels.start, c_ld)),
                    (panels.size, n, k, _size(depth), ldb, ldc, trans_b))
    return tir.Allocate(scratch, panels.loop(tir.SeqStmt((fill, product))))


def _widen_b(call: tir.Intrinsic) -> tir.Stmt:
    """Panels of output columns: ``width`` columns of op(B) widened, A times them, into
    those columns of C."""
    a, b, c, m, n, k, lda, ldb, ldc, trans_b = call.args
    depth, b_ld = _constant(k, "k"), _constant(ldb, "ldb")
    transposed = bool(_constant(trans_b, "trans_b"))
    panels = _Panels(n, max(MIN_PANEL, PANEL_ELEMENTS // max(depth, 1)), "b_panel")
    scratch = tir.Buffer(f"{b.buffer.name}_panel", (panels.width * depth,), "float32")
    if transposed:  # B[n, k]: a panel is `size` whole rows, kept [size, k]
        fill = _copy(scratch, _moved(b, _times(panels.start, b_ld)), panels.size, k, b_ld, depth, "wb")
        scratch_ld = depth
    else:  # B[k, n]: a panel is `size` columns of every row, kept [k, width]
        fill = _copy(scratch, _moved(b, panels.start), k, panels.size, b_ld, panels.width, "wb")
        scratch_ld = panels.width
    product = _gemm(a, scratch.load(0), _moved(c, panels.start),
                    (m, panels.size, k, lda, _size(scratch_ld), ldc, trans_b))
    return tir.Allocate(scratch, panels.loop(tir.SeqStmt((fill, product))))


class _Widener(StmtExprMutator):
    def __init__(self, packed: set[tir.Buffer]) -> None:
        self.packed = packed

    def visit_expr(self, expr: tir.PrimExpr) -> tir.PrimExpr:
        return expr  # only GEMM statements change

    def visit_evaluate(self, stmt: tir.Evaluate) -> tir.Stmt:
        if not is_gemm(stmt.value):
            return stmt
        a, b = stmt.value.args[0], stmt.value.args[1]
        if a.buffer not in self.packed and b.buffer not in self.packed:
            return stmt
        return self.widen(stmt.value)

    def widen(self, call: tir.Intrinsic) -> tir.Stmt:
        a, b = call.args[0], call.args[1]
        if any(len(load.indices) != 1 for load in (a, b)):
            raise IRError("WidenGemmOperands runs on flattened PrimFuncs (after StorageFlatten)")
        if a.buffer in self.packed:
            widened = _widen_a(call)
            # the panel loop's GEMM reads the float32 rows; a 16-bit B is widened inside it
            return self.visit_stmt(widened) if b.buffer in self.packed else widened
        return _widen_b(call)


def widen_gemm_operands(func: tir.PrimFunc) -> tir.PrimFunc:
    """``func`` with every GEMM that reads a float16/bfloat16 parameter widening it panel
    by panel (module docstring); the same function when there is none."""
    packed = {buffer for buffer in func.params if buffer.dtype in HALF_DTYPES}
    if not packed:
        return func
    body = _Widener(packed).visit_stmt(func.body)
    return func if body is func.body else func.with_body(body)


@register_pass("WidenGemmOperands")
def WidenGemmOperands() -> FunctionPass:  # noqa: N802 - pass factories are named like classes
    """Widen the float16/bfloat16 operands of GEMMs one panel at a time (opt_level 0: a
    16-bit GEMM operand cannot be rendered otherwise)."""
    return create_prim_func_pass(lambda func, mod, ctx: widen_gemm_operands(func), opt_level=0,
                                 name="WidenGemmOperands", reads_module=False)


__all__ = ["MIN_PANEL", "PANEL_ELEMENTS", "WidenGemmOperands", "widen_gemm_operands"]

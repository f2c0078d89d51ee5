"""A grouped convolution as one BLAS GEMM per group (channels-last data, HWIO weight);
with one group, a blocked im2col + GEMM whose epilogue runs on each block in cache.

With NHWC data and an HWIO weight, group ``g``'s part of the convolution is a GEMM whose
operands are strided views of the buffers, so no weight or output is copied:

* ``A``: the group's input windows, ``[pixels, KH*KW*Cg]``. A 1x1, stride-1, unpadded
  convolution reads the data in place (row stride ``C``, from channel ``g*Cg``); any
  other one copies the group's windows of a block of output rows into a scratch buffer
  first (im2col restricted to the group's ``Cg`` channels);
* ``B``: the weight rows ``[KH*KW*Cg, Og]`` from column ``g*Og`` (row stride ``OC``);
* ``C``: the output columns ``g*Og ..`` of the block's pixels (row stride ``OC``).

Work is cut into blocks of whole output rows of one image (:func:`rows_per_block`; the
im2col block of a group is copied right before its GEMM reads it); a block runs every
group's GEMM, then the element-wise epilogue over the block. Blocks write disjoint rows of the output and own
their scratch, so the Parallelize pass runs blocks on different threads; each output
element comes from one GEMM, so the result does not depend on the thread count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from passinfra import tir
from passinfra.codegen.compute.base import imm, in_range, seq
from passinfra.codegen.compute.conv_direct import ConvGeometry, Epilogue
from passinfra.tir.intrinsics import GEMM_INTRINSIC

# the GEMM of a block has at least this many rows (output pixels) where the image has
# them: OpenBLAS on one thread ran a 13-row part of AlexNet's grouped conv4 at 61
# GFLOP/s, the whole 169 rows at 84
MIN_BLOCK_PIXELS = 128


def is_pointwise(g: ConvGeometry) -> bool:
    """1x1, stride 1, unpadded: the data is the GEMM operand as it is."""
    return g.kernel == (1, 1) and g.strides == (1, 1) and not any(g.padding)


def rows_per_block(g: ConvGeometry) -> int:
    """Output rows per block: the smallest divisor of the output height that gives the
    GEMM :data:`MIN_BLOCK_PIXELS` rows (a GEMM with fewer rows runs far below its peak),
    else the whole height. Small blocks let more threads share the work, and cost little
    more: a group's weight, which every block repacks, is small."""
    divisors = [rows for rows in range(1, g.out_height + 1) if g.out_height % rows == 0]
    return min((r for r in divisors if r * g.out_width >= MIN_BLOCK_PIXELS), default=g.out_height)


def _gemm(a: tir.BufferLoad, b: tir.BufferLoad, c: tir.BufferLoad, m: int, n: int, k: int,
          lda: int, ldb: int, ldc: int) -> tir.Stmt:
    """``C[m, n] = A[m, k] x B[k, n]`` with the given row strides (no transposes)."""
    ints = [tir.IntImm(v, "int32") for v in (m, n, k, lda, ldb, ldc, 0)]
    return tir.Evaluate(tir.Intrinsic(GEMM_INTRINSIC, (a, b, c, *ints), "int32"))


def _loop(var: tir.TVar, extent: int, body: tir.Stmt) -> tir.Stmt:
    return tir.For(var, tir.IntImm(0), tir.IntImm(int(extent)), tir.ForKind.SERIAL, body)


def _scaled(index: tir.PrimExpr, factor: int) -> tir.PrimExpr:
    return index if factor == 1 else index * tir.IntImm(factor)


def _offset(index: tir.PrimExpr, delta: int) -> tir.PrimExpr:
    return index + tir.IntImm(delta) if delta else index


def _fill_columns(g: ConvGeometry, data: tir.Buffer, columns: tir.Buffer, image: tir.PrimExpr,
                  first_row: tir.PrimExpr, group: tir.PrimExpr) -> tir.Stmt:
    """``columns[r, ox, ry, rx, c]`` = the zero-padded input of output pixel
    (``first_row + r``, ``ox``) through tap (ry, rx), channel ``c`` of ``group``. The
    padding tests sit outside the channel loop, which is a contiguous copy or fill."""
    (kh, kw), (sh, sw), (dh, dw) = g.kernel, g.strides, g.dilation
    top, left, bottom, right = g.padding
    r, ox, ry, rx, c = (tir.TVar(name) for name in ("r", "ox", "ry", "rx", "c"))
    at = (r, ox, ry, rx, c)
    rows = columns.shape[0]
    oy = r if isinstance(first_row, tir.IntImm) and first_row.value == 0 else first_row + r
    iy = _offset(_scaled(oy, sh) + _scaled(ry, dh), -top)
    ix = _offset(_scaled(ox, sw) + _scaled(rx, dw), -left)
    channel = _scaled(group, g.group_channels) + c
    copy = _loop(c, g.group_channels, tir.BufferStore(columns, data.load(image, iy, ix, channel), at))
    zero = _loop(c, g.group_channels, tir.BufferStore(columns, imm(0, data.dtype), at))
    column_may_leave = bool(left or right) or (g.out_width - 1) * sw + (kw - 1) * dw >= g.width
    row_may_leave = bool(top or bottom) or (g.out_height - 1) * sh + (kh - 1) * dh >= g.height
    tap = tir.IfThenElse(in_range(ix, g.width), copy, zero) if column_may_leave else copy
    row = _loop(rx, kw, tap)
    if row_may_leave:
        row = tir.IfThenElse(in_range(iy, g.height), row, _loop(rx, kw, zero))
    return _loop(r, rows, _loop(ox, g.out_width, _loop(ry, kh, row)))


def group_gemm_conv(g: ConvGeometry, data: tir.Buffer, weight: tir.Buffer, out: tir.Buffer,
                    new_buffer: Callable[[str, Sequence[int], str], tir.Buffer],
                    epilogue: Epilogue | None = None) -> tuple[tir.Stmt, list[tir.Buffer]]:
    """The statement computing ``out`` (NHWC) from ``data`` (NHWC) and ``weight`` (HWIO),
    one GEMM per group and block of output rows, then ``epilogue`` per block."""
    kh, kw = g.kernel
    cg, og, oc = g.group_channels, g.group_outputs, g.out_channels
    rows = rows_per_block(g)
    image, block, group = tir.TVar("n"), tir.TVar("b"), tir.TVar("grp")
    first_row = _scaled(block, rows) if rows < g.out_height else tir.IntImm(0)
    zero = tir.IntImm(0)
    pixels = rows * g.out_width
    weight_at = weight.load(zero, zero, zero, _scaled(group, og))
    out_at = out.load(image, first_row, zero, _scaled(group, og))
    if is_pointwise(g):
        data_at = data.load(image, first_row, zero, _scaled(group, cg))
        per_group = _gemm(data_at, weight_at, out_at, pixels, og, cg, g.channels, oc, oc)
        columns = None
    else:
        columns = new_buffer("group_im2col", (rows, g.out_width, kh, kw, cg), data.dtype)
        fill = _fill_columns(g, data, columns, image, first_row, group)
        columns_at = columns.load(zero, zero, zero, zero, zero)
        per_group = seq(fill, _gemm(columns_at, weight_at, out_at, pixels, og, kh * kw * cg, kh * kw * cg,
                                    oc, oc))
    body = [_loop(group, g.groups, per_group)]
    if epilogue is not None:
        body.append(epilogue(((image, 1), (first_row, rows), (zero, g.out_width), (zero, oc))))
    block_body = seq(*body)
    if columns is not None:
        block_body = tir.Allocate(columns, block_body)  # per block: blocks share nothing
    nest = _loop(image, g.batch, _loop(block, g.out_height // rows, block_body))
    return nest, []


__all__ = ["MIN_BLOCK_PIXELS", "group_gemm_conv", "is_pointwise", "rows_per_block"]

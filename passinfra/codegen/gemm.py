"""Contractions through an optimized BLAS: dense, matmul and conv2d as ``sgemm`` calls.

Hand-written loop nests leave most of a CPU's floating-point throughput unused on the
large contractions of real models; OpenBLAS (the ``scipy-openblas32`` wheel, whose
symbols carry the ``scipy_`` prefix) runs them blocked, vectorized and threaded. So the
lowering asks :func:`plan_contraction` whether a float32 dense / matmul / conv2d is big
enough (:data:`MIN_GEMM_MACS` multiply-adds) and has a layout a row-major GEMM can read
in place; if so the contraction becomes

* dense: one GEMM ``data[M, K] x weight[N, K]^T``;
* matmul: one GEMM per batch index (broadcast batch dimensions read index 0), or a
  single GEMM when the right operand has no batch dimensions;
* conv2d (groups 1): an im2col loop nest into a scratch buffer whose column order is the
  kernel's reduction order (so the weight is read in place), then a GEMM: NHWC per block
  of output rows (the block's columns stay in cache, see :data:`IM2COL_BLOCK_BYTES`),
  NCHW one per image. A 1x1, stride-1, unpadded convolution skips the im2col.

In the loop-level IR a GEMM is ``Evaluate(Intrinsic("rp_sgemm", ...))`` whose first
three arguments are ``BufferLoad``\\ s naming the first element of A, B and C (the C
renderer passes their addresses), so every TIR pass handles it without a new node kind
(its name and reference semantics: :mod:`passinfra.tir.intrinsics`).
An element-wise epilogue (bias, activation, residual add) the lowering hands to ``emit``
runs in place over each block of the result right after the GEMM that wrote it, while
the block is still in cache.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from passinfra import tir
from passinfra.codegen.c_intrinsics import IntrinsicRenderer, KernelLibrary, register_intrinsic_renderer
from passinfra.codegen.compute.base import imm, seq
from passinfra.codegen.compute.conv_microkernel import PANEL_WIDTH, matmul_call, matmul_row_parts, panel_width
from passinfra.codegen.compute.nn import _window_index
from passinfra.errors import IRError
from passinfra.ir.attrs import Attrs
from passinfra.ir.dims import bounds as dim_bounds
from passinfra.ir.dims import is_static as is_static_dim
from passinfra.tir.intrinsics import GEMM_INTRINSIC, evaluate_gemm, is_gemm
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext

BLAS_SYMBOL = "scipy_cblas_sgemm"
# A product with one row (a batch-1 dense layer, a decoder step) or one column is a
# matrix-vector product: sgemm would pack the whole weight into its panel format first
# and then run its GEMM kernel on one row, while sgemv streams the weight once. On
# AlexNet's 9216x4096 layer (OpenBLAS 0.3, one thread) sgemm took 43 ms and sgemv 12 ms.
# The choice is made in C from the call's sizes (rp_gemm below): the sizes of each call
# are fixed at compile time, whatever the thread count, so every run makes the same calls
GEMV_SYMBOL = "scipy_cblas_sgemv"
# below this many multiply-adds a plain loop nest is as fast as the call into BLAS
MIN_GEMM_MACS = 16384
# CBLAS enum values (cblas.h): the renderer passes them as ints, which is the enum ABI
CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS = 101, 111, 112

# A matmul whose right operand is one [k, n] matrix (a transformer's projections) with at
# least this many rows runs on the convolution microkernels (a 1x1 convolution; see
# passinfra.codegen.conv_runtime), which read the weight in place where sgemm packs it on
# every call: the zoo transformer's 64x1024x256 product took 0.48 ms through OpenBLAS,
# 0.31 on the microkernels (one thread). Fewer rows (a decoder step) or columns (a
# matrix-vector product, or fewer outputs than a vector has lanes) keep sgemv/sgemm
MIN_MICROKERNEL_ROWS = 8
MIN_MICROKERNEL_COLUMNS = 16
# codegen.matmul_microkernel (bool, default True): False keeps every matmul on BLAS
register_config("codegen.matmul_microkernel", bool)

# threads per BLAS call unless config codegen.blas_threads says otherwise: one, because
# OpenBLAS's spinning worker threads lose badly when the cores are shared (other kernels'
# processes, Ray workers), and a cluster node runs many such processes
DEFAULT_BLAS_THREADS = 1

# codegen.blas (bool): call BLAS for large contractions (default: when the library is installed)
register_config("codegen.blas", bool)
# codegen.blas_threads (int): OpenBLAS threads for the generated calls (0: OpenBLAS's default)
register_config("codegen.blas_threads", int)


def matmul_microkernel(ctx: PassContext | None = None) -> bool:
    """Config ``codegen.matmul_microkernel`` (default True)."""
    ctx = PassContext.current() if ctx is None else ctx
    return bool(ctx.get_config("codegen.matmul_microkernel", True))


def library_splits_blas(ctx: PassContext | None = None) -> bool:
    """The one rule of threads around BLAS: with ``codegen.blas_threads`` at its default
    of 1, every BLAS call runs on one thread and the library's own threads run GEMM parts
    side by side (the Parallelize pass splits them); any other value gives those threads
    to OpenBLAS instead, and then a kernel that calls BLAS runs no threads of its own, so
    the two never oversubscribe the cores."""
    ctx = PassContext.current() if ctx is None else ctx
    return ctx.get_config("codegen.blas_threads", DEFAULT_BLAS_THREADS) == 1


@dataclass(frozen=True)
class BlasLibrary:
    """Where the shared BLAS library is, for the link line (``-L dir -l name`` + rpath)."""

    lib_dir: str
    name: str

    def link_flags(self) -> tuple[str, ...]:
        return (f"-L{self.lib_dir}", f"-l{self.name}", f"-Wl,-rpath,{self.lib_dir}")


@functools.lru_cache(maxsize=1)
def blas_library() -> BlasLibrary | None:
    """The installed ``scipy-openblas32`` library, or None (then no BLAS calls are emitted)."""
    try:
        import scipy_openblas32
    except ImportError:
        return None
    return BlasLibrary(scipy_openblas32.get_lib_dir(), scipy_openblas32.get_library())


def blas_prototype(threads: int = DEFAULT_BLAS_THREADS) -> str:
    """The C declarations of the BLAS entries (no header needed at compile time) and
    ``rp_blas_threads()``, which sets OpenBLAS's (process-wide) thread count to
    ``threads`` before a call unless it already is (0 leaves OpenBLAS's default)."""
    setter = ("" if threads <= 0 else
              f"  if ({THREADS_GETTER}() != {threads}) {{ {THREADS_SETTER}({threads}); }}\n")
    row, no, yes = CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS
    return (f"extern void {BLAS_SYMBOL}(int order, int trans_a, int trans_b, int m, int n, int k, "
            "float alpha, const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);\n"
            f"extern void {GEMV_SYMBOL}(int order, int trans, int m, int n, float alpha, const float* a, "
            "int lda, const float* x, int incx, float beta, float* y, int incy);\n"
            f"extern int {THREADS_GETTER}(void);\n"
            f"extern void {THREADS_SETTER}(int num_threads);\n"
            f"static inline void rp_blas_threads(void) {{\n{setter}}}\n"
            "/* C[m, n] = A[m, k] x op(B), op(B) = B[k, n] or B[n, k] transposed (gemm.py) */\n"
            "static inline int rp_gemm(const float* a, const float* b, float* c, int m, int n, int k,\n"
            "                          int lda, int ldb, int ldc, int trans_b) {\n"
            "  rp_blas_threads();\n"
            "  if (m == 1) {  /* a row vector times op(B): y[n] = op(B)^T a */\n"
            f"    if (trans_b) {GEMV_SYMBOL}({row}, {no}, n, k, 1.0f, b, ldb, a, 1, 0.0f, c, 1);\n"
            f"    else {GEMV_SYMBOL}({row}, {yes}, k, n, 1.0f, b, ldb, a, 1, 0.0f, c, 1);\n"
            "  } else if (n == 1) {  /* A times a column vector: y[m] = A x, x strided in B */\n"
            f"    {GEMV_SYMBOL}({row}, {no}, m, k, 1.0f, a, lda, b, trans_b ? 1 : ldb, 0.0f, c, ldc);\n"
            "  } else {\n"
            f"    {BLAS_SYMBOL}({row}, {no}, trans_b ? {yes} : {no}, m, n, k, 1.0f, a, lda, b, ldb,\n"
            "                      0.0f, c, ldc);\n"
            "  }\n"
            "  return 0;\n"
            "}")


THREADS_GETTER = "scipy_openblas_get_num_threads"
THREADS_SETTER = "scipy_openblas_set_num_threads"


# --------------------------------------------------------------------------- the GEMM statement


def gemm_call(a: tir.BufferLoad, b: tir.BufferLoad, c: tir.BufferLoad, m: Any, n: Any, k: Any,
              trans_b: bool) -> tir.Stmt:
    """``C[m, n] = A[m, k] x op(B)`` (row-major, contiguous rows) with A, B, C starting at
    the given elements; ``op(B)`` is ``B[k, n]``, or ``B[n, k]`` transposed. A size may be
    symbolic (a graph-level dimension, read at run time)."""
    ldb = k if trans_b else n
    ints = [_int32(v) for v in (m, n, k, k, ldb, n, int(trans_b))]
    return tir.Evaluate(tir.Intrinsic(GEMM_INTRINSIC, (a, b, c, *ints), "int32"))


def _int32(value: Any) -> tir.PrimExpr:
    if is_static_dim(value):
        return tir.IntImm(int(value), "int32")
    return tir.Cast("int32", tir.as_prim(value))


def _pays(macs: Any, min_macs: int) -> bool:
    """Whether a contraction of ``macs`` multiply-adds is worth a BLAS call; a symbolic
    count is judged by its upper bound (none: it may be large, so yes). rp_gemm takes
    the matrix-vector path at run time when a size comes out as 1."""
    if is_static_dim(macs):
        return macs >= min_macs
    high = dim_bounds(macs)[1]
    return high is None or high >= min_macs


def render_gemm(args: Sequence[str]) -> str:
    """The C call of a ``rp_sgemm`` intrinsic whose arguments rendered to ``args``."""
    a, b, c, m, n, k, lda, ldb, ldc, trans_b = args
    return f"rp_gemm(&{a}, &{b}, &{c}, {m}, {n}, {k}, {lda}, {ldb}, {ldc}, {trans_b})"


def _render_gemm_call(renderer: Any, node: tir.Intrinsic, args: list[str]) -> str:
    packed = [load.buffer.name for load in node.args[:2] if load.buffer in renderer.packed_buffers]
    if packed:  # BLAS reads floats: a 16-bit weight is widened before C
        raise IRError(f"PrimFunc {renderer.symbol}: a GEMM reads the float16/bfloat16 parameter "
                      f"{packed[0]!r}; run WidenGemmOperands first")
    return render_gemm(args)


# the BLAS entries, declared in every kernel that calls them; LinkLibrary links OpenBLAS
BLAS_LIBRARY = KernelLibrary("blas", lambda options: blas_prototype(options.blas_threads))
register_intrinsic_renderer(GEMM_INTRINSIC, IntrinsicRenderer(_render_gemm_call, BLAS_LIBRARY))


# --------------------------------------------------------------------------- planning


# ``epilogue(box)``: the statement applying the element-wise epilogue in place to the box
# of the output given as one (start, extent) pair per axis
Epilogue = Callable[[Sequence[tuple[tir.PrimExpr, int]]], tir.Stmt]


@dataclass(frozen=True)
class GemmPlan:
    """How to compute one contraction with GEMMs; ``emit`` builds the statements.

    ``emit(inputs, out, new_buffer, epilogue=None)`` gets the input buffers (data/lhs
    first), the output buffer, a factory of scratch buffers and an optional epilogue
    (run on every part of ``out`` once, after the GEMM that wrote it); it returns the
    statement and the scratch buffers it allocated (the caller wraps the function body
    in their Allocates).
    """

    op_name: str
    emit: Callable[[Sequence[tir.Buffer], tir.Buffer, Callable], tuple[tir.Stmt, list[tir.Buffer]]]
    # output channels per panel in which ``emit`` can read its weight (the second input)
    # stored in panels (passinfra.ir.op.weight_panels; a matmul on the microkernels), 0: none
    panels: int = 0
    # whether ``emit`` also takes a weight that arrives in panels when ``panels`` is 0 (a
    # matrix product, on the microkernels then): a kernel specialized for sizes whose own
    # plan would not read panels, sharing the weight of a symbolic kernel that does
    takes_panels: bool = False


def plan_contraction(op_name: str, attrs: Attrs, in_shapes: Sequence[tuple[int, ...]], dtype: str,
                     out_shape: tuple[int, ...], min_macs: int = MIN_GEMM_MACS) -> GemmPlan | None:
    """A GEMM plan for the call, or None when BLAS does not apply or does not pay."""
    if dtype != "float32" or len(in_shapes) != 2:
        return None
    planner = _PLANNERS.get(op_name)
    if planner is None:
        return None
    return planner(attrs, in_shapes, out_shape, min_macs)


def _plan_dense(attrs: Attrs, shapes: Sequence[tuple[int, ...]], out_shape: tuple[int, ...],
                min_macs: int) -> GemmPlan | None:
    data, weight = shapes
    if len(weight) != 2 or not data:
        return None
    k, n = data[-1], weight[0]
    m = math.prod(data[:-1])
    if not _pays(m * n * k, min_macs):
        return None

    def emit(inputs: Sequence[tir.Buffer], out: tir.Buffer, new_buffer: Callable,
             epilogue: Epilogue | None = None):
        call = gemm_call(_first(inputs[0]), _first(inputs[1]), _first(out), m, n, k, trans_b=True)
        return _with_epilogue(call, out, epilogue), []

    return GemmPlan("nn.dense", emit)


def _plan_matmul(attrs: Attrs, shapes: Sequence[tuple[int, ...]], out_shape: tuple[int, ...],
                 min_macs: int) -> GemmPlan | None:
    lhs, rhs = shapes
    if len(lhs) < 2 or len(rhs) < 2:
        return None  # vector operands: leave them to the loop nest
    m, k, n = lhs[-2], lhs[-1], rhs[-1]
    batch_shape = out_shape[:-2]
    if not _pays(math.prod(batch_shape) * m * n * k, min_macs):
        return None
    if len(rhs) == 2 and tuple(lhs[:-2]) == tuple(batch_shape):
        # every batch of the left operand meets the same matrix: one tall GEMM
        rows = math.prod(lhs[:-1])
        wide = is_static_dim(k) and is_static_dim(n) and n >= MIN_MICROKERNEL_COLUMNS and matmul_microkernel()
        # rows known only at run time: the microkernels at every size, reading the weight
        # in panels (BLAS cannot), which a decode step's few rows stream once
        microkernel = wide and (not is_static_dim(rows) or rows >= MIN_MICROKERNEL_ROWS)

        def emit_flat(inputs: Sequence[tir.Buffer], out: tir.Buffer, new_buffer: Callable,
                      epilogue: Epilogue | None = None):
            lhs, rhs = inputs
            if panel_width(rhs) or (microkernel and lhs.dtype == rhs.dtype == "float32"):
                call = matmul_call(lhs, rhs, out, rows, k, n)  # the weight [k, n], or its panels
                if is_static_dim(rows) and rows == 1:  # a decode step's copy (SpecializeKernels)
                    call = matmul_row_parts(lhs, rhs, out, k, n) or call
                elif not is_static_dim(rows):
                    # one row (a decode step): parts of the columns, which threads share
                    one_row = matmul_row_parts(lhs, rhs, out, k, n)
                    if one_row is not None:
                        call = tir.IfThenElse(tir.EQ(tir.as_prim(rows), tir.IntImm(1)), one_row, call)
                    # the microkernels take at least one row
                    call = tir.IfThenElse(tir.GT(tir.as_prim(rows), tir.IntImm(0)), call)
            else:
                call = gemm_call(_first(lhs), _first(rhs), _first(out), rows, n, k, trans_b=False)
            return _with_epilogue(call, out, epilogue), []

        return GemmPlan("matmul", emit_flat, PANEL_WIDTH if microkernel else 0, takes_panels=True)

    def emit(inputs: Sequence[tir.Buffer], out: tir.Buffer, new_buffer: Callable,
             epilogue: Epilogue | None = None):
        batch = tuple(tir.TVar(f"b{i}") for i in range(len(batch_shape)))
        lhs_at = _batch_start(inputs[0], batch, batch_shape)
        rhs_at = _batch_start(inputs[1], batch, batch_shape)
        out_at = tir.BufferLoad(out, (*batch, tir.IntImm(0), tir.IntImm(0)))
        call = gemm_call(lhs_at, rhs_at, out_at, m, n, k, trans_b=False)
        return _with_epilogue(_serial_loops(batch, batch_shape, call), out, epilogue), []

    return GemmPlan("matmul", emit)


def _plan_conv2d(attrs: Attrs, shapes: Sequence[tuple[int, ...]], out_shape: tuple[int, ...],
                 min_macs: int) -> GemmPlan | None:
    data_layout, kernel_layout = attrs["data_layout"], attrs["kernel_layout"]
    if attrs["groups"] != 1 or (data_layout, kernel_layout) not in _CONV_LAYOUTS:
        return None
    data_shape, weight_shape = shapes
    dims = dict(zip(data_layout, data_shape))
    kernel = dict(zip(kernel_layout, weight_shape))
    out = dict(zip(data_layout, out_shape))
    batch, channels, out_channels = dims["N"], dims["C"], kernel["O"]
    kh, kw = kernel["H"], kernel["W"]
    pixels = out["H"] * out["W"]
    reduce_size = channels * kh * kw
    if batch * pixels * out_channels * reduce_size < min_macs:
        return None
    # a 1x1, stride-1, unpadded convolution reads the data as the GEMM operand in place
    direct = (kh == kw == 1 and tuple(attrs["strides"]) == (1, 1) and not any(attrs["padding"]))
    channels_last = data_layout == "NHWC"

    def emit(inputs: Sequence[tir.Buffer], result: tir.Buffer, new_buffer: Callable,
             epilogue: Epilogue | None = None):
        data, weight = inputs
        if direct:
            # out[N*OH*OW, O] = data[N*OH*OW, C] x weight[C, O] (NHWC), or per image
            # out[n][O, OH*OW] = weight[O, C] x data[n][C, OH*OW] (NCHW)
            gemms = _conv_gemms(data, weight, result, batch, pixels, out_channels, reduce_size, channels_last)
            return _with_epilogue(gemms, result, epilogue), []
        if channels_last:
            rows = _rows_per_block(out["H"], out["W"], reduce_size * _FLOAT_BYTES,
                                   reduce_size * out_channels * _FLOAT_BYTES)
            columns = new_buffer("im2col", (rows, out["W"], kh, kw, channels), data.dtype)
            image, block = tir.TVar("n"), tir.TVar("b")
            first_row = block * tir.IntImm(rows) if rows < out["H"] else tir.IntImm(0)
            fill = _im2col_rows(data, columns, attrs, image, first_row)
            # out[rows*OW, O] of this block = columns[rows*OW, KH*KW*C] x weight[KH*KW*C, O] (HWIO)
            call = gemm_call(_first(columns), _first(weight),
                             tir.BufferLoad(result, (image, first_row, tir.IntImm(0), tir.IntImm(0))),
                             rows * out["W"], out_channels, reduce_size, trans_b=False)
            zero = tir.IntImm(0)
            block_box = ((image, 1), (first_row, rows), (zero, out["W"]), (zero, out_channels))
            block_epilogue = [] if epilogue is None else [epilogue(block_box)]
            # each block allocates its own columns: blocks share nothing, so the
            # Parallelize pass can run them on different threads (the C renderer
            # allocates once per loop or per thread's range, not per block)
            body = tir.Allocate(columns, seq(fill, call, *block_epilogue))
            return _serial_loops((image, block), (batch, out["H"] // rows), body), []
        columns = new_buffer("im2col", (batch, channels, kh, kw, out["H"], out["W"]), data.dtype)
        stmts = [_im2col_channels_first(data, columns, attrs),
                 _conv_gemms(columns, weight, result, batch, pixels, out_channels, reduce_size, False)]
        return _with_epilogue(seq(*stmts), result, epilogue), [columns]

    return GemmPlan("nn.conv2d", emit)


# (data layout, kernel layout) pairs whose weight is a row-major matrix in GEMM order
_CONV_LAYOUTS = {("NHWC", "HWIO"), ("NCHW", "OIHW")}


# the channels-last im2col is filled and consumed one block of output rows at a time, the
# block at most this big: the columns stay in the L2 cache between the copy and the GEMM
# that reads them (a whole-image im2col of a 56x56x128 3x3 convolution is 14 MB, and
# writing it to memory and reading it back cost half as much as the GEMM)
IM2COL_BLOCK_BYTES = 512 * 1024
# ... but every block's GEMM reads the whole weight again, and a GEMM with few rows spends
# its time packing the weight rather than multiplying: a block has at least this many
# GEMM rows (output pixels) where the image has them, and may grow to the weight's size
MIN_GEMM_ROWS = 128
_FLOAT_BYTES = 4


def _rows_per_block(out_height: int, out_width: int, pixel_bytes: int, weight_bytes: int) -> int:
    """Output rows per im2col block: a divisor of ``out_height`` (every block is a full
    one), the most whose columns (``pixel_bytes`` per output pixel) fit the larger of
    :data:`IM2COL_BLOCK_BYTES` and the weight, and at least :data:`MIN_GEMM_ROWS` pixels
    when the image has that many."""
    divisors = [rows for rows in range(1, out_height + 1) if out_height % rows == 0]
    budget = max(IM2COL_BLOCK_BYTES, weight_bytes)
    fitting = max((rows for rows in divisors if rows * out_width * pixel_bytes <= budget), default=1)
    wide_enough = min((rows for rows in divisors if rows * out_width >= MIN_GEMM_ROWS), default=out_height)
    return max(fitting, wide_enough)


def _conv_gemms(columns: tir.Buffer, weight: tir.Buffer, result: tir.Buffer, batch: int, pixels: int,
                out_channels: int, reduce_size: int, channels_last: bool) -> tir.Stmt:
    """The GEMMs of a convolution whose columns (or data, 1x1) cover whole images."""
    if channels_last:
        # out[N*OH*OW, O] = columns[N*OH*OW, KH*KW*C] x weight (HWIO: [KH*KW*C, O])
        return gemm_call(_first(columns), _first(weight), _first(result), batch * pixels, out_channels,
                         reduce_size, trans_b=False)
    # per image: out[n][O, OH*OW] = weight[O, C*KH*KW] x columns[n][C*KH*KW, OH*OW]
    image = tir.TVar("n")
    zeros = (tir.IntImm(0),) * (len(columns.shape) - 1)
    call = gemm_call(_first(weight), tir.BufferLoad(columns, (image, *zeros)),
                     tir.BufferLoad(result, (image, *(tir.IntImm(0),) * 3)),
                     out_channels, pixels, reduce_size, trans_b=False)
    return _serial_loops((image,), (batch,), call)


def _im2col_rows(data: tir.Buffer, columns: tir.Buffer, attrs: Attrs, image: tir.PrimExpr,
                 first_row: tir.PrimExpr) -> tir.Stmt:
    """Fill ``columns[r, ox, ry, rx, c]`` (channels-last) with the zero-padded input window
    of output pixel (``first_row + r``, ``ox``) of image ``image``.

    The padding tests sit outside the innermost loop (an ``if`` per input row and per
    input pixel), so that loop is a plain contiguous copy or zero fill the C compiler
    vectorizes; a select per element with clamped indices made this copy cost more than
    the GEMM it feeds."""
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    top, left, bottom, right = attrs["padding"]
    height, width = data.shape[1], data.shape[2]
    loop_vars = tuple(tir.TVar(f"i{k}") for k in range(5))
    r, ox, ry, rx, c = loop_vars
    extents = columns.shape
    zero = imm(0, data.dtype)
    oy = r if isinstance(first_row, tir.IntImm) and first_row.value == 0 else first_row + r
    iy, ix = _window_index(oy, sh, ry, dh, top), _window_index(ox, sw, rx, dw, left)
    copy_element = tir.BufferStore(columns, data.load(image, iy, ix, c), loop_vars)
    copy = _serial_loops((c,), extents[4:], copy_element)
    fill = _serial_loops((c,), extents[4:], tir.BufferStore(columns, zero, loop_vars))
    pixel = _guarded(copy, fill, ix, width) if (left or right) else copy
    row = _serial_loops((rx,), extents[3:4], pixel)
    if sw == dw == 1 and extents[3] > 1:
        # stride and dilation 1: a window's row of taps is one contiguous run of the input
        # row (taps x channels), and of the columns: copied as one block where the whole
        # window row is inside the image (LoopPartition cuts the borders off)
        whole_row = _serial_loops((rx, c), extents[3:], copy_element)
        if left or right:
            # the first tap reads column ox - left, the last ox - left + taps - 1
            last_inside = width + left - extents[3]
            inside = tir.And(tir.GE(ox, tir.IntImm(left)), tir.LE(ox, tir.IntImm(last_inside)))
            row = tir.IfThenElse(inside, whole_row, row)
        else:
            row = whole_row
    row_fill = _serial_loops((rx, c), extents[3:], tir.BufferStore(columns, zero, loop_vars))
    body = _guarded(row, row_fill, iy, height) if (top or bottom) else row
    return _serial_loops((r, ox, ry), extents[:3], body)


def _im2col_channels_first(data: tir.Buffer, columns: tir.Buffer, attrs: Attrs) -> tir.Stmt:
    """Fill ``columns[n, c, ry, rx, oy, ox]`` with the zero-padded input windows (NCHW);
    the row padding test sits outside the innermost loop."""
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    top, left, bottom, right = attrs["padding"]
    height, width = data.shape[2], data.shape[3]
    loop_vars = tuple(tir.TVar(f"i{k}") for k in range(6))
    n, c, ry, rx, oy, ox = loop_vars
    extents = columns.shape
    zero = imm(0, data.dtype)
    iy, ix = _window_index(oy, sh, ry, dh, top), _window_index(ox, sw, rx, dw, left)
    if left or right:
        clamped = tir.Max(tir.Min(ix, tir.IntImm(width - 1)), tir.IntImm(0))
        value = tir.Select(_in_range(ix, width), data.load(n, c, iy, clamped), zero)
    else:
        value = data.load(n, c, iy, ix)
    row = _serial_loops((ox,), extents[5:], tir.BufferStore(columns, value, loop_vars))
    row_fill = _serial_loops((ox,), extents[5:], tir.BufferStore(columns, zero, loop_vars))
    body = _guarded(row, row_fill, iy, height) if (top or bottom) else row
    return _serial_loops((n, c, ry, rx, oy), extents[:5], body)


def _in_range(index: tir.PrimExpr, extent: int) -> tir.PrimExpr:
    return tir.And(tir.GE(index, tir.IntImm(0)), tir.LT(index, tir.IntImm(extent)))


def _guarded(inside: tir.Stmt, outside: tir.Stmt, index: tir.PrimExpr, extent: int) -> tir.Stmt:
    """``inside`` where ``0 <= index < extent``, else ``outside`` (the padding)."""
    return tir.IfThenElse(_in_range(index, extent), inside, outside)


def _with_epilogue(stmt: tir.Stmt, out: tir.Buffer, epilogue: Epilogue | None) -> tir.Stmt:
    """``stmt`` followed by the epilogue over the whole of ``out`` (when there is one)."""
    if epilogue is None:
        return stmt
    return seq(stmt, epilogue(tuple((tir.IntImm(0), extent) for extent in out.shape)))


def _first(buffer: tir.Buffer) -> tir.BufferLoad:
    """The load of the buffer's first element (the GEMM takes its address)."""
    return tir.BufferLoad(buffer, (tir.IntImm(0),) * len(buffer.shape))


def _batch_start(buffer: tir.Buffer, batch: tuple[tir.TVar, ...],
                 batch_shape: Sequence[int]) -> tir.BufferLoad:
    """The first element of the matrix of ``buffer`` (rank >= 2) for the output batch index
    ``batch``: batch dimensions align on the right; a dimension of size 1 broadcasts."""
    own = buffer.shape[:-2]
    offset = len(batch_shape) - len(own)
    index = [tir.IntImm(0) if dim == 1 else batch[offset + i] for i, dim in enumerate(own)]
    return tir.BufferLoad(buffer, (*index, tir.IntImm(0), tir.IntImm(0)))


def _serial_loops(loop_vars: Sequence[tir.TVar], extents: Sequence[Any], body: tir.Stmt) -> tir.Stmt:
    for loop_var, extent in zip(reversed(tuple(loop_vars)), reversed(tuple(extents))):
        body = tir.For(loop_var, tir.IntImm(0), tir.as_prim(extent), tir.ForKind.SERIAL, body)
    return body


_PLANNERS: dict[str, Callable[..., GemmPlan | None]] = {
    "nn.dense": _plan_dense,
    "matmul": _plan_matmul,
    "nn.conv2d": _plan_conv2d,
}


__all__ = [
    "BLAS_SYMBOL", "DEFAULT_BLAS_THREADS", "GEMM_INTRINSIC", "MIN_GEMM_MACS", "BlasLibrary", "GemmPlan",
    "blas_library", "blas_prototype", "evaluate_gemm", "gemm_call", "is_gemm", "plan_contraction",
    "render_gemm",
]

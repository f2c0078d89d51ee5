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
  kernel's reduction order (so the weight is read in place), then one GEMM (NHWC) or one
  per image (NCHW). A 1x1, stride-1, unpadded convolution skips the im2col.

In the loop-level IR a GEMM is ``Evaluate(Intrinsic("rp_sgemm", ...))`` whose first
three arguments are ``BufferLoad``\\ s naming the first element of A, B and C (the C
renderer passes their addresses), so every TIR pass handles it without a new node kind.
The element-wise epilogue (bias, activation) then runs as its own loop over the result.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from passinfra.codegen import tir
from passinfra.codegen.compute.base import imm, seq
from passinfra.codegen.compute.nn import _PaddedReader, _window_index
from passinfra.ir.attrs import Attrs
from passinfra.transform.config import register_config

GEMM_INTRINSIC = "rp_sgemm"
BLAS_SYMBOL = "scipy_cblas_sgemm"
# below this many multiply-adds a plain loop nest is as fast as the call into BLAS
MIN_GEMM_MACS = 16384
# CBLAS enum values (cblas.h): the renderer passes them as ints, which is the enum ABI
CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS = 101, 111, 112

# threads per BLAS call unless config codegen.blas_threads says otherwise: one, because
# OpenBLAS's spinning worker threads lose badly when the cores are shared (other kernels'
# processes, Ray workers), and a cluster node runs many such processes
DEFAULT_BLAS_THREADS = 1

# codegen.blas (bool): call BLAS for large contractions (default: when the library is installed)
register_config("codegen.blas", bool)
# codegen.blas_threads (int): OpenBLAS threads for the generated calls (0: OpenBLAS's default)
register_config("codegen.blas_threads", int)


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
    return (f"extern void {BLAS_SYMBOL}(int order, int trans_a, int trans_b, int m, int n, int k, "
            "float alpha, const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);\n"
            f"extern int {THREADS_GETTER}(void);\n"
            f"extern void {THREADS_SETTER}(int num_threads);\n"
            f"static inline void rp_blas_threads(void) {{\n{setter}}}")


THREADS_GETTER = "scipy_openblas_get_num_threads"
THREADS_SETTER = "scipy_openblas_set_num_threads"


# --------------------------------------------------------------------------- the GEMM statement


def gemm_call(a: tir.BufferLoad, b: tir.BufferLoad, c: tir.BufferLoad, m: int, n: int, k: int,
              trans_b: bool) -> tir.Stmt:
    """``C[m, n] = A[m, k] x op(B)`` (row-major, contiguous rows) with A, B, C starting at
    the given elements; ``op(B)`` is ``B[k, n]``, or ``B[n, k]`` transposed."""
    ldb = k if trans_b else n
    ints = [tir.IntImm(v, "int32") for v in (m, n, k, k, ldb, n, int(trans_b))]
    return tir.Evaluate(tir.Intrinsic(GEMM_INTRINSIC, (a, b, c, *ints), "int32"))


def is_gemm(expr: tir.PrimExpr) -> bool:
    return isinstance(expr, tir.Intrinsic) and expr.name == GEMM_INTRINSIC


def render_gemm(args: Sequence[str]) -> str:
    """The C call of a ``rp_sgemm`` intrinsic whose arguments rendered to ``args``."""
    a, b, c, m, n, k, lda, ldb, ldc, trans_b = args
    trans = f"({trans_b} ? {CBLAS_TRANS} : {CBLAS_NO_TRANS})"
    return (f"(rp_blas_threads(), {BLAS_SYMBOL}({CBLAS_ROW_MAJOR}, {CBLAS_NO_TRANS}, {trans}, {m}, {n}, "
            f"{k}, 1.0f, &{a}, {lda}, &{b}, {ldb}, 0.0f, &{c}, {ldc}))")


def evaluate_gemm(intrinsic: tir.Intrinsic, flat_view: Callable[[tir.BufferLoad], np.ndarray],
                  scalar: Callable[[tir.PrimExpr], int]) -> None:
    """Run a ``rp_sgemm`` in the TIR interpreter: ``flat_view(load)`` is the buffer's
    memory from the loaded element on (1-d view), ``scalar`` evaluates an argument."""
    a_load, b_load, c_load, *rest = intrinsic.args
    m, n, k, lda, ldb, ldc, trans_b = (int(scalar(x)) for x in rest)
    a = _matrix(flat_view(a_load), m, k, lda)
    b = _matrix(flat_view(b_load), n, k, ldb).T if trans_b else _matrix(flat_view(b_load), k, n, ldb)
    _matrix(flat_view(c_load), m, n, ldc)[...] = (a.astype(np.float64) @ b.astype(np.float64))


def _matrix(flat: np.ndarray, rows: int, cols: int, leading: int) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(flat, (rows, cols), (leading * flat.itemsize, flat.itemsize))


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class GemmPlan:
    """How to compute one contraction with GEMMs; ``emit`` builds the statements.

    ``emit(inputs, out, new_buffer)`` gets the input buffers (data/lhs first), the output
    buffer and a factory of scratch buffers; it returns the statement and the scratch
    buffers it allocated (the caller wraps the function body in their Allocates).
    """

    op_name: str
    emit: Callable[[Sequence[tir.Buffer], tir.Buffer, Callable], tuple[tir.Stmt, list[tir.Buffer]]]


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
    if m * n * k < min_macs:
        return None

    def emit(inputs: Sequence[tir.Buffer], out: tir.Buffer, new_buffer: Callable):
        return gemm_call(_first(inputs[0]), _first(inputs[1]), _first(out), m, n, k, trans_b=True), []

    return GemmPlan("nn.dense", emit)


def _plan_matmul(attrs: Attrs, shapes: Sequence[tuple[int, ...]], out_shape: tuple[int, ...],
                 min_macs: int) -> GemmPlan | None:
    lhs, rhs = shapes
    if len(lhs) < 2 or len(rhs) < 2:
        return None  # vector operands: leave them to the loop nest
    m, k, n = lhs[-2], lhs[-1], rhs[-1]
    batch_shape = out_shape[:-2]
    if math.prod(batch_shape) * m * n * k < min_macs:
        return None
    if len(rhs) == 2 and tuple(lhs[:-2]) == tuple(batch_shape):
        # every batch of the left operand meets the same matrix: one tall GEMM
        rows = math.prod(lhs[:-1])

        def emit_flat(inputs: Sequence[tir.Buffer], out: tir.Buffer, new_buffer: Callable):
            return gemm_call(_first(inputs[0]), _first(inputs[1]), _first(out), rows, n, k, trans_b=False), []

        return GemmPlan("matmul", emit_flat)

    def emit(inputs: Sequence[tir.Buffer], out: tir.Buffer, new_buffer: Callable):
        batch = tuple(tir.TVar(f"b{i}") for i in range(len(batch_shape)))
        lhs_at = _batch_start(inputs[0], batch, batch_shape)
        rhs_at = _batch_start(inputs[1], batch, batch_shape)
        out_at = tir.BufferLoad(out, (*batch, tir.IntImm(0), tir.IntImm(0)))
        call = gemm_call(lhs_at, rhs_at, out_at, m, n, k, trans_b=False)
        return _serial_loops(batch, batch_shape, call), []

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
    direct = (kh == kw == 1 and tuple(attrs["strides"]) == (1, 1) and not any(attrs["padding"]))
    channels_last = data_layout == "NHWC"

    def emit(inputs: Sequence[tir.Buffer], result: tir.Buffer, new_buffer: Callable):
        data, weight = inputs
        scratch: list[tir.Buffer] = []
        if direct:
            columns = data
        else:
            col_shape = ((batch, out["H"], out["W"], kh, kw, channels) if channels_last
                         else (batch, channels, kh, kw, out["H"], out["W"]))
            columns = new_buffer("im2col", col_shape, data.dtype)
            scratch.append(columns)
        stmts = [] if direct else [_im2col(data, columns, attrs, channels_last)]
        if channels_last:
            # out[N*OH*OW, O] = columns[N*OH*OW, KH*KW*C] x weight (HWIO: [KH*KW*C, O])
            stmts.append(gemm_call(_first(columns), _first(weight), _first(result), batch * pixels,
                                   out_channels, reduce_size, trans_b=False))
        else:
            # per image: out[n][O, OH*OW] = weight[O, C*KH*KW] x columns[n][C*KH*KW, OH*OW]
            image = tir.TVar("n")
            zeros = (tir.IntImm(0),) * (len(columns.shape) - 1)
            call = gemm_call(_first(weight), tir.BufferLoad(columns, (image, *zeros)),
                             tir.BufferLoad(result, (image, *(tir.IntImm(0),) * 3)),
                             out_channels, pixels, reduce_size, trans_b=False)
            stmts.append(_serial_loops((image,), (batch,), call))
        return seq(*stmts), scratch

    return GemmPlan("nn.conv2d", emit)


# (data layout, kernel layout) pairs whose weight is a row-major matrix in GEMM order
_CONV_LAYOUTS = {("NHWC", "HWIO"), ("NCHW", "OIHW")}


def _im2col(data: tir.Buffer, columns: tir.Buffer, attrs: Attrs, channels_last: bool) -> tir.Stmt:
    """The loop nest filling ``columns`` with the (zero-padded) input window of every
    output pixel, in the kernel's reduction order."""
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    top, left, _, _ = attrs["padding"]
    reader = _PaddedReader(data, attrs["data_layout"], attrs["padding"], imm(0, data.dtype))
    loop_vars = tuple(tir.TVar(f"i{k}") for k in range(6))
    if channels_last:
        n, oy, ox, ry, rx, c = loop_vars
    else:
        n, c, ry, rx, oy, ox = loop_vars
    value = reader.read(n, c, _window_index(oy, sh, ry, dh, top), _window_index(ox, sw, rx, dw, left))
    return _serial_loops(loop_vars, columns.shape, tir.BufferStore(columns, value, loop_vars))


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


def _serial_loops(loop_vars: Sequence[tir.TVar], extents: Sequence[int], body: tir.Stmt) -> tir.Stmt:
    for loop_var, extent in zip(reversed(tuple(loop_vars)), reversed(tuple(extents))):
        body = tir.For(loop_var, tir.IntImm(0), tir.IntImm(int(extent)), tir.ForKind.SERIAL, body)
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

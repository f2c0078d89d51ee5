"""Parallelize: split the top-level loop nests and GEMMs of each kernel over threads.

A top-level statement (one not inside a loop) of a PrimFunc becomes ``ForKind.PARALLEL``
when its iterations are independent and it has enough work for at least two threads
(:data:`~passinfra.codegen.thread_pool.MIN_WORK_PER_THREAD` each). The C renderer
outlines such a loop into a chunk function run by the library's thread pool
(:mod:`passinfra.codegen.thread_pool`), which gives each thread a contiguous range of
iterations and decides at run time how many threads a loop gets.

* A loop nest: the perfectly nested serial loops at its top are fused (LetStmts give
  the original variables back: ``i = f // 16``, ``j = f % 16``) until there are
  :data:`TARGET_ITERATIONS` iterations, so a batch-1 nest still splits over many
  cores; fewer when a deeper prefix is not independent.
* A GEMM (BLAS call) not inside a loop: it becomes a loop over parts of its output
  rows (or columns, when it has too few rows), each part one BLAS call on one thread.
  The parts are fixed at compile time, whatever the thread count, so every thread count
  makes exactly the same BLAS calls: OpenBLAS's own threads may split a product
  differently for different counts (and take different kernels for different sizes),
  which would change the last bits of the result. Parts are few and large, since each
  one repacks an operand: their cost on one thread stays within
  :data:`MAX_SPLIT_OVERHEAD`.

Independence (:func:`independent_iterations`) is proved, not assumed: every buffer the
loop body writes, except buffers allocated inside it (private to an iteration), must be
accessed at a flat index ``sum(c_j * v_j) + r`` affine in the parallel variables
``v_j``, with the same coefficients for every access and ``r`` in one range whose width
is below the smallest coefficient (mixed-radix, so distinct iterations touch disjoint
slabs). Reductions stay inside an iteration, so no sum is ever split across threads and
the result is bit-identical for every thread count.

BLAS threads follow one rule (:func:`passinfra.codegen.gemm.library_splits_blas`): with
``codegen.blas_threads`` at its default 1, BLAS calls run on one thread each and the
library's threads run them side by side; any other value gives the threads to OpenBLAS,
and then a kernel that calls BLAS gets no parallel loops of its own.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from passinfra import tir
from passinfra.codegen.c_intrinsics import uses_library
from passinfra.codegen.gemm import BLAS_LIBRARY, library_splits_blas
from passinfra.codegen.prim_func_pass import create_prim_func_pass
from passinfra.codegen.thread_pool import MIN_WORK_PER_THREAD, min_parallel_work
from passinfra.tir.arith import RangeAnalyzer, affine_coefficient, const_int
from passinfra.tir.functor import StmtExprVisitor, iter_expr_post_order, iter_expr_tree, substitute
from passinfra.tir.intrinsics import (
    CONV_FIRST_PIXEL,
    DEPTHWISE_CONV_INTRINSIC,
    ConvEpilogue,
    conv_regions,
    conv_sizes,
    is_conv,
    is_gemm,
    is_winograd,
    winograd_regions,
    winograd_tiles,
)
from passinfra.transform.context import PassContext
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

# outer loops are fused until a nest has this many iterations: enough for a balanced
# split over the cores of a large machine, few enough that the per-iteration index
# arithmetic stays negligible
TARGET_ITERATIONS = 64
# work units: about a nanosecond of one core (calibrated on a Zen 4 core with the
# kernels of DenseNet-121, resnet20 and the zoo transformer: thread CPU time against
# the estimate). A store of a computed value costs STORE_WORK plus NODE_WORK per
# expression node, a math intrinsic (expf, erff) more, and a vectorized loop of them
# runs VECTOR_SPEEDUP times faster; a copy or fill costs COPY_WORK vectorized or not
# (memory-bound: DenseNet's concatenations and layout changes copy ~0.4-1 ns an
# element), and so does a vectorized pick among loaded values (a max pool) per element
# it moves (:func:`_selection_work`); a GEMM does GEMM_MACS_PER_WORK multiply-adds a unit
# and reads and writes its operands once at COPY_WORK an element (a product with one
# row is bound by reading the weight, 0.5 ns a multiply-add). A slower core takes longer
# than estimated, which only keeps more loops serial
STORE_WORK = 1.0
NODE_WORK = 0.25
INTRINSIC_WORK = 4.0
COPY_WORK = 0.5
VECTOR_SPEEDUP = 8.0
GEMM_MACS_PER_WORK = 32
# an expression's estimate counts at most this many nodes
MAX_COUNTED_NODES = 1024
# A GEMM part repacks the operand it shares with the other parts (a split by rows packs
# B again, by columns A), which costs about PACK_MACS_ROWS (PACK_MACS_COLUMNS)
# multiply-adds per element: so the parts of a dimension of size D cost (parts - 1) *
# PACK_MACS_* / D of the product's time on one thread, which is kept within
# MAX_SPLIT_OVERHEAD (OpenBLAS on one thread, Zen 4: 196x128x960 in 2 row parts +3-5%,
# 196x512x1024 in 4 column parts +12%; EPYC, AVX-512: 2 row parts of 49x96x576 and
# 64x256x256 +10-11%, 2 column parts of 49x96x576, 49x576x96 and 64x{256,768}x256
# +1-4%, 4 column parts +3-5%, so repacking A costs a third of repacking B and columns
# split MobileNet's 1x1 convolutions of 49 rows). A part also has at least
# GEMM_PART_WORK units (scaled with config codegen.min_parallel_work): at 60_000 the zoo
# transformer's products of 64 rows split and it ran 1.84x faster on two cores (1.52x at
# 150_000), for 2-5% more time on one. With the pool's cheaper fork-join (a loop whose
# workers are awake costs ~0.3 us, not 6 us) 30_000 splits products of 30-60 us too:
# interleaved on 2 cores, the zoo transformer went from 1.75x to 1.83x its one-thread
# speed, MobileNetV3-like from 1.52x to 1.76x, resnet20 stayed at 1.0x (one thread: within 2%)
PACK_MACS_ROWS = 12
PACK_MACS_COLUMNS = 4
MAX_SPLIT_OVERHEAD = 0.08
GEMM_PART_WORK = 30_000
MAX_GEMM_PARTS = 48
# part counts that divide evenly over 2, 3, 4, 6 and 8 threads where they can
_BALANCED_PARTS = (48, 32, 24, 16, 12, 8, 6, 4, 3, 2)


# --------------------------------------------------------------------------- work

# a loop of unknown extent counts this many iterations in a work estimate: once in a static
# kernel (a bound computed from another loop's variable), and SYMBOLIC_EXTENT times in a
# kernel compiled for sizes known at run time (inside :func:`symbolic_work`): the size the
# memory planner plans dynamic models at, so their softmax rows and vector-math loops are
# split over threads and cloned for AVX2 as a static model's of that size are
SYMBOLIC_EXTENT = 64
_UNKNOWN_EXTENT: contextvars.ContextVar[int] = contextvars.ContextVar("unknown_extent", default=1)


@contextlib.contextmanager
def symbolic_work(active: bool) -> Iterator[None]:
    """While open (``active``: the kernel has symbolic sizes), work estimates count a loop
    of unknown extent as :data:`SYMBOLIC_EXTENT` iterations."""
    token = _UNKNOWN_EXTENT.set(SYMBOLIC_EXTENT if active else 1)
    try:
        yield
    finally:
        _UNKNOWN_EXTENT.reset(token)


def unknown_extent() -> int:
    """The iterations a loop of unknown extent counts in a work estimate now."""
    return _UNKNOWN_EXTENT.get()


def statement_work(stmt: tir.Stmt) -> int:
    """The estimated work of ``stmt`` in units of about a nanosecond of one core (module
    constants); a loop of unknown extent counts :func:`unknown_extent` times."""
    return max(round(_work(stmt)), 1)


def work_expression(stmt: tir.Stmt, sizes: Sequence[tir.TVar]) -> tir.PrimExpr:
    """:func:`statement_work` as an int64 expression over a kernel's ``sizes``: a loop whose
    extent is an expression of the sizes alone counts that many iterations at run time
    (the thread pool then sees the work of this call's sizes, not of typical ones); any
    other unknown extent counts :func:`unknown_extent` times."""
    total: tir.PrimExpr | None = None
    for extents, coefficient in _work_terms(stmt, frozenset(sizes)):
        term: tir.PrimExpr = tir.IntImm(max(math.ceil(coefficient), 1))
        for extent in extents:
            wide = extent if extent.dtype == tir.INDEX_DTYPE else tir.Cast(tir.INDEX_DTYPE, extent)
            term = tir.Mul(term, wide)
        total = term if total is None else tir.Add(total, term)
    return tir.Max(total, tir.IntImm(1)) if total is not None else tir.IntImm(1)


# a term of a work estimate: (extents multiplied, coefficient)
_Term = tuple[tuple[tir.PrimExpr, ...], float]


def _work_terms(stmt: tir.Stmt, sizes: frozenset[tir.TVar]) -> list[_Term]:
    if isinstance(stmt, tir.For):
        body = _work_terms(stmt.body, sizes)
        if stmt.kind is tir.ForKind.VECTORIZED and not (isinstance(stmt.body, tir.BufferStore)
                                                        and _is_copy(stmt.body)):
            body = [(extents, c / VECTOR_SPEEDUP) for extents, c in body]
        extent = const_int(stmt.extent)
        if extent is not None:
            return [(extents, c * max(extent, 0)) for extents, c in body]
        if _over(stmt.extent, sizes):
            return [((*extents, stmt.extent), c) for extents, c in body]
        return [(extents, c * unknown_extent()) for extents, c in body]
    if isinstance(stmt, tir.SeqStmt):
        return [term for s in stmt.stmts for term in _work_terms(s, sizes)]
    if isinstance(stmt, tir.IfThenElse):
        branches = [b for b in (stmt.then_case, stmt.else_case) if b is not None]
        heavier = max(branches, key=_work)
        return [((), _expr_work(stmt.cond)), *_work_terms(heavier, sizes)]
    if isinstance(stmt, (tir.Allocate, tir.LetStmt)):
        return [((), 1.0), *_work_terms(stmt.body, sizes)]
    if isinstance(stmt, tir.Evaluate) and is_gemm(stmt.value):
        m, n, k = stmt.value.args[3:6]
        if all(_over(size, sizes) for size in (m, n, k)):
            return [((m, n, k), 1 / GEMM_MACS_PER_WORK), ((m, k), COPY_WORK), ((k, n), COPY_WORK),
                    ((m, n), COPY_WORK)]
    return [((), _work(stmt))]


def _over(expr: tir.PrimExpr, sizes: frozenset[tir.TVar]) -> bool:
    """Whether ``expr`` reads the kernel's sizes and nothing else that varies."""
    return all(not isinstance(node, (tir.TVar, tir.BufferLoad)) or node in sizes
               for node in iter_expr_post_order(expr))


def _work(stmt: tir.Stmt) -> float:
    if isinstance(stmt, tir.BufferStore):
        return COPY_WORK if _is_copy(stmt) else STORE_WORK + _expr_work(stmt.value)
    if isinstance(stmt, tir.For):
        extent = const_int(stmt.extent)
        body = _work(stmt.body)
        if stmt.kind is tir.ForKind.VECTORIZED and not (isinstance(stmt.body, tir.BufferStore)
                                                        and _is_copy(stmt.body)):
            body /= VECTOR_SPEEDUP
            if isinstance(stmt.body, tir.BufferStore):
                body = max(body, _selection_work(stmt.body.value))
        return max(extent if extent is not None else unknown_extent(), 0) * body
    if isinstance(stmt, tir.SeqStmt):
        return sum(_work(s) for s in stmt.stmts)
    if isinstance(stmt, tir.IfThenElse):
        other = _work(stmt.else_case) if stmt.else_case is not None else 0.0
        return _expr_work(stmt.cond) + max(_work(stmt.then_case), other)
    if isinstance(stmt, (tir.Allocate, tir.LetStmt)):
        return 1.0 + _work(stmt.body)
    if isinstance(stmt, tir.Evaluate):
        if is_gemm(stmt.value):
            return _gemm_work(stmt.value)
        if is_winograd(stmt.value):
            return _winograd_work(stmt.value)
        return _conv_work(stmt.value) if is_conv(stmt.value) else _expr_work(stmt.value)
    return 1.0


def _selection_work(value: tir.PrimExpr) -> float:
    """A vectorized store of a value picked among loaded ones (a max pool's window, a
    clamp) moves memory as a copy does: :data:`COPY_WORK` per element moved, loads and the
    store, two to a copy (a 2x2 max pool over 16 channels took 1.0 ns an output, against
    0.4 estimated as arithmetic); 0 for any other value."""
    loads = 0
    for node in iter_expr_tree(value, lambda node: not isinstance(node, tir.BufferLoad)):
        if isinstance(node, tir.BufferLoad):
            loads += 1
        elif not isinstance(node, _SELECTION_NODES):
            return 0.0
    return COPY_WORK * (loads + 1) / 2


_SELECTION_NODES = (tir.Max, tir.Min, tir.IntImm, tir.FloatImm)


def _is_copy(store: tir.BufferStore) -> bool:
    return isinstance(store.value, (tir.BufferLoad, tir.IntImm, tir.FloatImm))


def _expr_work(expr: tir.PrimExpr) -> float:
    """The expression counted as a tree, capped at MAX_COUNTED_NODES nodes (a load counts
    as one node, its indices none). Not distinct nodes: which subexpressions are shared
    objects differs between a function and its copy sent to a worker, and the estimate
    is rendered into the C (parallel must equal sequential, byte for byte)."""
    # a load's index arithmetic is strength-reduced away: its indices are not counted
    nodes = itertools.islice(iter_expr_tree(expr, lambda node: not isinstance(node, tir.BufferLoad)),
                             MAX_COUNTED_NODES)
    return sum(INTRINSIC_WORK if isinstance(node, tir.Intrinsic) else NODE_WORK for node in nodes)


def _gemm_work(call: tir.Intrinsic) -> float:
    sizes = [_upper_bound(arg) for arg in call.args[3:6]]
    if any(size is None for size in sizes):
        if unknown_extent() == 1:
            return 1.0
        # a GEMM over sizes known at run time (attention's products): each such size at
        # the typical one
        sizes = [unknown_extent() if size is None else size for size in sizes]
    return gemm_work(*sizes)  # type: ignore[arg-type]


def _conv_work(call: tir.Intrinsic) -> float:
    """A convolution call runs as a GEMM of its output pixels by its output channels over
    the taps' input channels, without the packing: its operands are read about once."""
    sizes = [_upper_bound(arg) for arg in conv_sizes(call)]
    if any(size is None for i, size in enumerate(sizes) if i != CONV_FIRST_PIXEL):
        return 1.0
    _, _, channels, out_channels, kh, kw, *_rest, count, groups, _panel = sizes
    depthwise = call.name == DEPTHWISE_CONV_INTRINSIC
    image, weight, out = conv_regions(tuple(size or 0 for size in sizes), depthwise)
    # a depthwise output sums its taps only, at about half a GEMM's rate (30-80 GFLOP/s)
    macs = count * out_channels * kh * kw * (1 if depthwise else channels // max(groups, 1))  # type: ignore
    return macs / (GEMM_MACS_PER_WORK / (2 if depthwise else 1)) + (weight + out) * COPY_WORK


def _winograd_work(call: tir.Intrinsic) -> float:
    """A Winograd call: its GEMMs (one per point) of tiles by output channels over the inputs,
    and the transforms' passes over its scratch (about a copy an element each way)."""
    sizes = [_upper_bound(arg) for arg in call.args[3:]]
    if any(size is None for size in sizes):
        return 1.0
    _, _, channels, out_channels, _, _, out_height, out_width, tile = sizes
    points = (tile + 2) ** 2  # type: ignore[operator]
    tiles = winograd_tiles(out_height, out_width, tile)  # type: ignore[arg-type]
    image, transform, out = winograd_regions(tuple(sizes))  # type: ignore[arg-type]
    scratch = points * tiles * (channels + out_channels)  # type: ignore[operator]
    macs = tiles * points * channels * out_channels  # type: ignore[operator]
    return macs / GEMM_MACS_PER_WORK + (2 * scratch + image + transform + out) * COPY_WORK


def _upper_bound(expr: tir.PrimExpr) -> int | None:
    """An upper bound of a GEMM size: a constant, or ``min(part, rest)`` of a split one
    (whose variable a bound analysis of the statement alone does not know)."""
    while isinstance(expr, tir.Cast):
        expr = expr.value
    if isinstance(expr, tir.Min):
        bounds = [b for b in (_upper_bound(expr.a), _upper_bound(expr.b)) if b is not None]
        return min(bounds) if bounds else None
    bound = RangeAnalyzer().bound(expr)
    return None if bound is None else bound[1]


def gemm_work(m: int, n: int, k: int) -> float:
    """The estimated work of ``C[m, n] = A[m, k] x B[k, n]`` (module constants)."""
    return m * n * k / GEMM_MACS_PER_WORK + (m * k + k * n + m * n) * COPY_WORK


# --------------------------------------------------------------------------- independence


@dataclass
class _Access:
    coefficients: tuple[int, ...]
    low: int
    high: int


@dataclass
class _Accesses:
    """What a loop body does to the buffers it shares with other iterations."""

    loop_vars: tuple[tir.TVar, ...]
    analyzer: RangeAnalyzer = field(default_factory=RangeAnalyzer)
    private: set[tir.Buffer] = field(default_factory=set)
    writes: dict[tir.Buffer, list[_Access | None]] = field(default_factory=dict)
    reads: dict[tir.Buffer, list[_Access | None]] = field(default_factory=dict)
    ok: bool = True

    def bind(self, var: tir.TVar, bound: tuple[int, int] | None) -> None:
        if bound is None:
            self.analyzer.var_ranges.pop(var, None)
        elif self.analyzer.var_ranges.get(var) != bound:
            self.analyzer.var_ranges[var] = bound
        self.analyzer.reset()

    def access(self, buffer: tir.Buffer, indices: Sequence[tir.PrimExpr], extra: int = 0) -> _Access | None:
        """The access of ``buffer`` at ``indices`` (plus up to ``extra`` elements after),
        or None when it is not affine in the loop variables with a known range."""
        if len(indices) > 1:
            return None
        index = indices[0] if indices else tir.IntImm(0)
        coefficients = tuple(affine_coefficient(index, var) for var in self.loop_vars)
        if any(c is None for c in coefficients):
            return None
        rest = substitute(index, {var: tir.IntImm(0, var.dtype) for var in self.loop_vars})
        bound = self.analyzer.bound(rest)
        if bound is None:
            return None
        return _Access(coefficients, bound[0], bound[1] + extra)  # type: ignore[arg-type]

    def note(self, table: dict, buffer: tir.Buffer, access: _Access | None) -> None:
        if buffer not in self.private:
            table.setdefault(buffer, []).append(access)

    def expr(self, expr: tir.PrimExpr) -> None:
        for node in iter_expr_post_order(expr):
            if isinstance(node, tir.BufferLoad):
                self.note(self.reads, node.buffer, self.access(node.buffer, node.indices))

    def stmt(self, stmt: tir.Stmt) -> None:
        if isinstance(stmt, tir.BufferStore):
            self.expr(stmt.value)
            for index in stmt.indices:
                self.expr(index)
            self.note(self.writes, stmt.buffer, self.access(stmt.buffer, stmt.indices))
        elif isinstance(stmt, tir.For):
            self.expr(stmt.start)
            self.expr(stmt.extent)
            start, extent = const_int(stmt.start), const_int(stmt.extent)
            known = start is not None and extent is not None and extent > 0
            self.bind(stmt.loop_var, (start, start + extent - 1) if known else None)  # type: ignore[operator]
            self.stmt(stmt.body)
        elif isinstance(stmt, tir.SeqStmt):
            for child in stmt.stmts:
                self.stmt(child)
        elif isinstance(stmt, tir.IfThenElse):
            self.expr(stmt.cond)
            self.stmt(stmt.then_case)
            if stmt.else_case is not None:
                self.stmt(stmt.else_case)
        elif isinstance(stmt, tir.LetStmt):
            self.expr(stmt.value)
            integer = stmt.var.dtype.startswith("int")
            self.bind(stmt.var, self.analyzer.bound(stmt.value) if integer else None)
            self.stmt(stmt.body)
        elif isinstance(stmt, tir.Allocate):
            self.private.add(stmt.buffer)
            self.stmt(stmt.body)
        elif isinstance(stmt, tir.Evaluate) and is_gemm(stmt.value):
            self.gemm(stmt.value)
        elif isinstance(stmt, tir.Evaluate) and is_conv(stmt.value):
            self.conv(stmt.value)
        elif isinstance(stmt, tir.Evaluate) and is_winograd(stmt.value):
            self.winograd(stmt.value)
        elif isinstance(stmt, tir.Evaluate):
            self.expr(stmt.value)
        else:
            self.ok = False

    def gemm(self, call: tir.Intrinsic) -> None:
        a, b, c, *sizes = call.args
        for arg in sizes:
            self.expr(arg)
        bounds = [self.analyzer.bound(arg) for arg in sizes]
        if any(bound is None for bound in bounds):
            self.ok = False
            return
        m, n, k, lda, ldb, ldc, trans_b = (bound[1] for bound in bounds)  # type: ignore[index]
        b_extent = (n - 1) * ldb + k if trans_b else (k - 1) * ldb + n
        for load, extent in ((a, (m - 1) * lda + k), (b, b_extent)):
            for index in load.indices:
                self.expr(index)
            self.note(self.reads, load.buffer, self.access(load.buffer, load.indices, extent - 1))
        self.expr(c)
        self.note(self.writes, c.buffer, self.access(c.buffer, c.indices, (m - 1) * ldc + n - 1))

    def conv(self, call: tir.Intrinsic) -> None:
        # every size but the first pixel (which moves with the loop) bounds the regions
        bounds = self.sizes(conv_sizes(call), skip=CONV_FIRST_PIXEL)
        if bounds is not None:
            regions = conv_regions(bounds, call.name == DEPTHWISE_CONV_INTRINSIC)
            self.image_weight_out(call.args[:3], regions)
            self.epilogue(call, bounds[3], regions[2])

    def winograd(self, call: tir.Intrinsic) -> None:
        bounds = self.sizes(call.args[3:])
        if bounds is not None:
            self.image_weight_out(call.args[:3], winograd_regions(bounds))

    def epilogue(self, call: tir.Intrinsic, channels: int, out_extent: int) -> None:
        """What a convolution's epilogue reads: a bias per output channel, a residual laid
        out as the output."""
        epilogue = ConvEpilogue.of(call)
        if epilogue is None:
            return
        for load, extent in ((epilogue.bias, channels), (epilogue.residual, out_extent)):
            if load is not None:
                for index in load.indices:
                    self.expr(index)
                self.note(self.reads, load.buffer, self.access(load.buffer, load.indices, extent - 1))

    def sizes(self, sizes: Sequence[tir.PrimExpr], skip: int = -1) -> tuple[int, ...] | None:
        """The upper bounds of a kernel call's size arguments (the one at ``skip`` 0), or
        None (and the nest not provably independent) when one has none."""
        for arg in sizes:
            self.expr(arg)
        bounds = [self.analyzer.bound(arg) for arg in sizes]
        if any(bound is None for i, bound in enumerate(bounds) if i != skip):
            self.ok = False
            return None
        return tuple(0 if bound is None else bound[1] for bound in bounds)

    def image_weight_out(self, loads: Sequence[tir.PrimExpr], extents: Sequence[int]) -> None:
        """A convolution call's regions: it reads its image and weight, writes its output."""
        for load, extent, table in zip(loads, extents, (self.reads, self.reads, self.writes)):
            assert isinstance(load, tir.BufferLoad)
            for index in load.indices:
                self.expr(index)
            self.note(table, load.buffer, self.access(load.buffer, load.indices, extent - 1))


def independent_iterations(loop_vars: Sequence[tir.TVar], extents: Sequence[int], body: tir.Stmt) -> bool:
    """Whether the iterations of the loops ``loop_vars`` (outer first, of ``extents``)
    around ``body`` touch disjoint memory wherever one of them writes (module docstring)."""
    accesses = _Accesses(tuple(loop_vars))
    accesses.stmt(body)
    if not accesses.ok:
        return False
    for buffer, writes in accesses.writes.items():
        every = writes + accesses.reads.get(buffer, [])
        if any(access is None for access in every):
            return False
        coefficients = every[0].coefficients  # type: ignore[union-attr]
        if any(access.coefficients != coefficients for access in every):  # type: ignore[union-attr]
            return False
        low = min(access.low for access in writes)  # type: ignore[union-attr]
        high = max(access.high for access in writes)  # type: ignore[union-attr]
        if any(access.low < low or access.high > high for access in every):  # type: ignore[union-attr]
            return False
        span = high - low + 1
        for coefficient, extent in sorted((abs(c), e) for c, e in zip(coefficients, extents)):
            if extent == 1:
                continue
            if coefficient < span:
                return False
            span += coefficient * (extent - 1)
    return True


# --------------------------------------------------------------------------- loop nests


def _perfect_chain(loop: tir.For) -> list[tir.For]:
    """The serial loops with constant bounds at the top of the nest, outer first."""
    chain: list[tir.For] = []
    node: tir.Stmt = loop
    while isinstance(node, tir.For) and node.kind is tir.ForKind.SERIAL:
        if const_int(node.start) is None or const_int(node.extent) is None:
            break
        chain.append(node)
        node = node.body
    return chain


def parallel_nest(loop: tir.For, min_work: int = MIN_WORK_PER_THREAD) -> tir.Stmt:
    """``loop`` with its outer loops fused into one PARALLEL loop, or ``loop`` itself
    when no prefix of its loops is independent or worth splitting."""
    chain = _perfect_chain(loop)
    extents = [const_int(node.extent) for node in chain]
    # the innermost loop of a nest stays whole inside an iteration (its loop is what the
    # C compiler vectorizes), unless it is the only loop
    usable = len(chain) - 1 if len(chain) > 1 and not isinstance(chain[-1].body, tir.For) else len(chain)
    depth, iterations = 0, 1
    while depth < usable and iterations < TARGET_ITERATIONS:
        iterations *= extents[depth]  # type: ignore[operator]
        depth += 1
    for size in range(depth, 0, -1):
        prefix = chain[:size]
        count = math.prod(extents[:size])  # type: ignore[arg-type]
        body = prefix[-1].body
        if count < 2 or count * statement_work(body) < 2 * min_work:
            return loop  # a shorter prefix has no more work
        if independent_iterations([node.loop_var for node in prefix], extents[:size], body):  # type: ignore[arg-type]
            return _fused(prefix, extents[:size], body)  # type: ignore[arg-type]
    return loop


def _fused(prefix: list[tir.For], extents: list[int], body: tir.Stmt) -> tir.For:
    if len(prefix) == 1:
        only = prefix[0]
        return tir.For(only.loop_var, only.start, only.extent, tir.ForKind.PARALLEL, body)
    # the fused index is an int64 whatever the loops' own index types (their product may
    # not fit an int32); each variable gets its value back in its own type. The index is
    # never negative, so C's truncating division does (floor division's helper calls
    # made gcc take a quarter longer on such a kernel, over a whole model's build)
    dtype = tir.INDEX_DTYPE
    fused = tir.TVar("_".join(node.loop_var.name for node in prefix), dtype)
    stride = 1
    bindings = []
    for node, extent in zip(reversed(prefix), reversed(extents)):
        value: tir.PrimExpr = fused if stride == 1 else tir.Div(fused, tir.IntImm(stride, dtype))
        if node is not prefix[0]:  # value % extent
            size = tir.IntImm(extent, dtype)
            value = tir.Sub(value, tir.Mul(tir.Div(value, size), size))
        start = const_int(node.start)
        if start:
            value = tir.Add(value, tir.IntImm(start, dtype))
        if node.loop_var.dtype != dtype:
            value = tir.Cast(node.loop_var.dtype, value)
        bindings.append((node.loop_var, value))
        stride *= extent
    for var, value in bindings:  # innermost first, so the outermost binding ends up outside
        body = tir.LetStmt(var, value, body)
    zero, count = tir.IntImm(0, fused.dtype), tir.IntImm(stride, fused.dtype)
    return tir.For(fused, zero, count, tir.ForKind.PARALLEL, body)


# --------------------------------------------------------------------------- GEMMs


def _balanced(parts: int) -> int:
    return next((count for count in _BALANCED_PARTS if count <= parts), 1)


def split_gemm(stmt: tir.Evaluate, min_work: int = MIN_WORK_PER_THREAD) -> tir.Stmt:
    """A GEMM statement as a PARALLEL loop over parts of its output (module docstring),
    or ``stmt`` itself when it is too small to split."""
    a, b, c, *sizes = stmt.value.args  # type: ignore[attr-defined]
    values = [const_int(arg) for arg in sizes]
    if any(v is None for v in values) or any(len(load.indices) != 1 for load in (a, b, c)):
        return stmt
    m, n, k, lda, ldb, ldc, trans_b = values  # type: ignore[misc]
    part_work = max(GEMM_PART_WORK * min_work / MIN_WORK_PER_THREAD, 1.0)
    by_size = min(int(gemm_work(m, n, k) // part_work), MAX_GEMM_PARTS)
    # rows when they allow as many parts as columns do (A's rows are contiguous)
    by_rows = 1 + int(MAX_SPLIT_OVERHEAD * m / PACK_MACS_ROWS)
    by_columns = 1 + int(MAX_SPLIT_OVERHEAD * n / PACK_MACS_COLUMNS)
    rows = by_rows >= by_columns
    size, parts = (m, by_rows) if rows else (n, by_columns)
    parts = _balanced(min(parts, by_size))
    if parts < 2:
        return stmt
    chunk = -(-size // parts)
    parts = -(-size // chunk)
    part = tir.TVar("gemm_part", tir.INDEX_DTYPE)
    offset = part * tir.IntImm(chunk)
    # the last part may be short: its size is min(chunk, size - part * chunk)
    count: tir.PrimExpr = tir.IntImm(chunk, "int32")
    if size % chunk:
        remaining = tir.Cast("int32", tir.IntImm(size) - offset)
        count = tir.Min(tir.IntImm(chunk, "int32"), remaining)

    def moved(load: tir.BufferLoad, step: int) -> tir.BufferLoad:
        return tir.BufferLoad(load.buffer, (load.indices[0] + offset * tir.IntImm(step),))

    rest = list(sizes)
    if rows:  # A's and C's rows move
        args = (moved(a, lda), b, moved(c, ldc), count, *rest[1:])
    else:  # columns: B's rows (transposed) or columns move, and C's columns
        args = (a, moved(b, ldb if trans_b else 1), moved(c, 1), rest[0], count, *rest[2:])
    call = tir.Intrinsic(stmt.value.name, tuple(args), stmt.value.dtype)  # type: ignore[attr-defined]
    return tir.For(part, tir.IntImm(0), tir.IntImm(parts), tir.ForKind.PARALLEL, tir.Evaluate(call))


# --------------------------------------------------------------------------- captures


class _Uses(StmtExprVisitor):
    """Variables and buffers a statement uses and those it binds itself."""

    def __init__(self) -> None:
        self.used: dict[object, None] = {}  # insertion-ordered set
        self.bound: set[object] = set()

    def visit_tvar(self, node: tir.TVar) -> None:
        self.used.setdefault(node)

    def visit_buffer_load(self, node: tir.BufferLoad) -> None:
        self.used.setdefault(node.buffer)

    def visit_buffer_store(self, stmt: tir.BufferStore) -> None:
        self.used.setdefault(stmt.buffer)
        super().visit_buffer_store(stmt)

    def visit_for(self, stmt: tir.For) -> None:
        self.bound.add(stmt.loop_var)
        super().visit_for(stmt)

    def visit_let_stmt(self, stmt: tir.LetStmt) -> None:
        self.bound.add(stmt.var)
        super().visit_let_stmt(stmt)

    def visit_allocate(self, stmt: tir.Allocate) -> None:
        self.bound.add(stmt.buffer)
        super().visit_allocate(stmt)


def loop_captures(loop: tir.For) -> list[tir.TVar | tir.Buffer]:
    """What a loop reads from its surroundings: the variables and buffers it uses but
    does not bind (its own variable is bound by it), in order of first use. An outlined
    parallel loop receives exactly these."""
    uses = _Uses()
    uses.visit_stmt(loop)
    return [node for node in uses.used if node not in uses.bound]  # type: ignore[misc]


# --------------------------------------------------------------------------- the pass


def _parallel_top_level(stmt: tir.Stmt, split_blas: bool, min_work: int,
                        sizes: tuple[tir.TVar, ...] = ()) -> tir.Stmt:
    """``stmt`` with its top-level loop nests and GEMMs parallelized; ``sizes``: the
    kernel's symbolic sizes, over which a nest's independence is proved symbolically
    (:mod:`passinfra.codegen.symbolic_nests`) when the static proof does not apply."""
    if isinstance(stmt, tir.For):
        nest = parallel_nest(stmt, min_work)
        if nest is stmt and sizes:
            from passinfra.codegen.symbolic_nests import parallel_symbolic_nest  # it imports this module

            nest = parallel_symbolic_nest(stmt, sizes, split_static=statement_work(stmt) >= 2 * min_work)
        return nest
    if isinstance(stmt, tir.Evaluate) and is_gemm(stmt.value):
        return split_gemm(stmt, min_work) if split_blas else stmt
    if isinstance(stmt, tir.SeqStmt):
        stmts = tuple(_parallel_top_level(s, split_blas, min_work, sizes) for s in stmt.stmts)
        return stmt if all(a is b for a, b in zip(stmts, stmt.stmts)) else tir.SeqStmt(stmts)
    if isinstance(stmt, (tir.Allocate, tir.LetStmt)):
        # a chain of allocations and lets (one per intermediate) is peeled without recursion
        chain: list[tir.Stmt] = []
        node = stmt
        while isinstance(node, (tir.Allocate, tir.LetStmt)):
            chain.append(node)
            node = node.body
        body = _parallel_top_level(node, split_blas, min_work, sizes)
        if body is node:
            return stmt
        for wrapper in reversed(chain):
            if isinstance(wrapper, tir.Allocate):
                body = tir.Allocate(wrapper.buffer, body)
            else:
                body = tir.LetStmt(wrapper.var, wrapper.value, body)  # type: ignore[attr-defined]
        return body
    if isinstance(stmt, tir.IfThenElse):
        then_case = _parallel_top_level(stmt.then_case, split_blas, min_work, sizes)
        else_case = stmt.else_case
        if else_case is not None:
            else_case = _parallel_top_level(else_case, split_blas, min_work, sizes)
        if then_case is stmt.then_case and else_case is stmt.else_case:
            return stmt
        return tir.IfThenElse(stmt.cond, then_case, else_case)
    return stmt


def parallelize_prim_func(func: tir.PrimFunc, split_blas: bool = True,
                          min_work: int = MIN_WORK_PER_THREAD) -> tir.PrimFunc:
    """``func`` with its top-level loop nests and GEMMs marked PARALLEL where that is
    safe and gives each of two threads ``min_work``; ``split_blas=False`` (OpenBLAS has
    the threads) leaves a kernel that calls BLAS serial."""
    if not split_blas and uses_library(func, BLAS_LIBRARY.name):
        return func
    with symbolic_work(bool(func.dims)):
        body = _parallel_top_level(func.body, split_blas, min_work, func.dims)
    return func if body is func.body else func.with_body(body)


def _parallelize(func: tir.PrimFunc, mod: object, ctx: PassContext) -> tir.PrimFunc:
    return parallelize_prim_func(func, library_splits_blas(ctx), min_parallel_work(ctx))


@register_pass("Parallelize")
def Parallelize() -> FunctionPass:  # noqa: N802 - pass factories are named like classes
    """Mark the top-level loop nests and GEMMs of every PrimFunc PARALLEL where their
    iterations are independent and there is work for two threads (module docstring)."""
    return create_prim_func_pass(_parallelize, opt_level=1, name="Parallelize", reads_module=False)


__all__ = [
    "GEMM_PART_WORK", "MAX_GEMM_PARTS", "MAX_SPLIT_OVERHEAD", "PACK_MACS_COLUMNS", "PACK_MACS_ROWS",
    "Parallelize",
    "TARGET_ITERATIONS", "independent_iterations", "loop_captures", "parallel_nest", "parallelize_prim_func",
    "work_expression", "symbolic_work", "unknown_extent",
    "gemm_work", "split_gemm", "statement_work",
]

"""Parallel loop nests over sizes known at run time: the Parallelize pass's rule for a
kernel compiled for symbolic sizes (``PrimFunc.dims``).

A static nest's iterations are proved independent with constant strides
(:func:`~passinfra.codegen.transform.parallelize.independent_iterations`). Over symbolic
sizes the strides are expressions (``out[i0 * (256 * seq) + i1 * 256 + i2]``), so the
proof reads every index as a polynomial in graph-level dimension variables
(:mod:`passinfra.ir.dims`): each outer loop variable, each size of the kernel and each
inner loop variable (with its range) is one variable. Sizes count as at least 1: a loop
over a size of 0 runs no iteration, and an access scaled by a size of 0 is to a buffer of
no elements, which an in-bounds kernel never touches. Then, as for static nests,
every buffer the body writes must be accessed at ``sum(c_j * v_j) + r`` with the same
coefficients ``c_j`` (polynomials in the sizes) for every access and ``r`` within the
writes' range, and the coefficients must nest (innermost first, each at least the span
of everything inside it: ``c_j >= span``, then ``span += c_j * (extent_j - 1)``), proved
for every binding of the sizes. Anything the proof cannot read (a GEMM or convolution
call, a division of a loop variable, an inner loop of symbolic extent in an index) keeps
the nest serial.

The outer loops of such a nest (all of its perfect prefix but a last loop that the C
compiler vectorizes) become one PARALLEL loop over their product, computed at run time;
the thread pool picks the thread count from that count and the body's estimated work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from passinfra import tir
from passinfra.ir.dims import Dim, DimVar, free_vars, prove_le, relax_floordivs, substitute
from passinfra.tir.arith import const_int
from passinfra.tir.functor import any_expr, iter_expr_post_order, iter_stmts, stmt_exprs
from passinfra.tir.intrinsics import (
    CONV_FIRST_PIXEL,
    DEPTHWISE_CONV_INTRINSIC,
    ConvEpilogue,
    conv_regions,
    conv_sizes,
    is_conv,
    is_gemm,
)
from passinfra.tir.sizes import prim_to_dim

# a size of the kernel in a proof: at least 1 (see the module docstring)
_SIZE_LO = 1
# an access: the coefficient of each outer loop variable, and the least and greatest
# offset of the rest (polynomials in the sizes)
_Access = tuple[tuple[Dim, ...], Dim, Dim]


@dataclass
class _Proof:
    """What the body of a nest does to memory, as polynomials (see the module docstring)."""

    outer: tuple[tir.TVar, ...]
    sizes: frozenset[tir.TVar]
    variables: dict[tir.TVar, DimVar] = field(default_factory=dict)
    # an inner loop's variable -> its first and last value (polynomials in the sizes)
    ranges: dict[DimVar, tuple[Dim, Dim]] = field(default_factory=dict)
    size_vars: set[DimVar] = field(default_factory=set)
    private: set[tir.Buffer] = field(default_factory=set)
    writes: dict[tir.Buffer, list[_Access | None]] = field(default_factory=dict)
    reads: dict[tir.Buffer, list[_Access | None]] = field(default_factory=dict)
    ok: bool = True

    def dim_of(self, expr: tir.PrimExpr) -> Dim | None:
        """``expr`` as a polynomial, or None when it is not integer arithmetic of the
        kinds a proof reads."""
        return prim_to_dim(expr, self.variables.get)

    def access(self, indices: Sequence[tir.PrimExpr], extra: Dim = 0) -> _Access | None:
        """(coefficient of each outer variable, low, high of the rest) of a flat access
        (of ``extra`` more elements after the one indexed: a GEMM's operand)."""
        if len(indices) > 1:
            return None
        poly = self.dim_of(indices[0]) if indices else 0
        if poly is None:
            return None
        outer = [self.variables[var] for var in self.outer]
        rest = substitute(poly, dict.fromkeys(outer, 0))
        coefficients = []
        for var in outer:
            others = {v: 0 for v in outer if v is not var}
            coefficients.append(substitute(substitute(poly, others), {var: 1}) - rest)
        linear = rest
        for var, coefficient in zip(outer, coefficients):
            linear = linear + coefficient * var
        if linear != poly:
            return None  # an outer variable inside a product with another, or a division
        inner = set(outer) | {v for t, v in self.variables.items() if t not in self.sizes}
        if any(set(free_vars(c)) & inner for c in coefficients):
            return None
        extremes = self._extremes(rest)
        if extremes is None:
            return None
        return tuple(coefficients), extremes[0], extremes[1] + extra

    def _extremes(self, rest: Dim) -> tuple[Dim, Dim] | None:
        """The least and greatest value of ``rest`` over the inner loops' ranges, as
        polynomials in the sizes: ``rest`` must be linear in each inner variable with a
        coefficient that is never negative; None otherwise."""
        low, high = rest, rest
        for var in free_vars(rest):
            if var not in self.ranges:
                if var in self.size_vars:
                    continue
                return None  # a let's value, or a loop variable of unknown range
            at_zero = substitute(rest, {var: 0})
            coefficient = substitute(rest, {var: 1}) - at_zero
            if at_zero + coefficient * var != rest or set(free_vars(coefficient)) - self.size_vars:
                return None
            if prove_le(0, coefficient) is not True:
                return None
            first, last = self.ranges[var]
            low, high = substitute(low, {var: first}), substitute(high, {var: last})
        return low, high

    def expr(self, expr: tir.PrimExpr) -> None:
        for node in iter_expr_post_order(expr):
            if isinstance(node, tir.BufferLoad) and node.buffer not in self.private:
                self.reads.setdefault(node.buffer, []).append(self.access(node.indices))

    def stmt(self, stmt: tir.Stmt) -> None:
        if isinstance(stmt, tir.BufferStore):
            self.expr(stmt.value)
            for index in stmt.indices:
                self.expr(index)
            if stmt.buffer not in self.private:
                self.writes.setdefault(stmt.buffer, []).append(self.access(stmt.indices))
        elif isinstance(stmt, tir.For):
            var = self.variables[stmt.loop_var] = DimVar(f"_inner{len(self.variables)}")
            start, extent = self.dim_of(stmt.start), self.dim_of(stmt.extent)
            known = start is not None and extent is not None
            if known and not set(free_vars(start + extent)) - self.size_vars:  # type: ignore[operator]
                # the range of an iteration that runs (a loop of no iteration touches nothing)
                self.ranges[var] = (start, start + extent - 1)
            self.expr(stmt.start)
            self.expr(stmt.extent)
            self.stmt(stmt.body)
        elif isinstance(stmt, tir.SeqStmt):
            for child in stmt.stmts:
                self.stmt(child)
        elif isinstance(stmt, tir.IfThenElse):
            self.expr(stmt.cond)
            self.stmt(stmt.then_case)
            if stmt.else_case is not None:
                self.stmt(stmt.else_case)
        elif isinstance(stmt, tir.Allocate):
            self.private.add(stmt.buffer)
            self.stmt(stmt.body)
        elif isinstance(stmt, tir.LetStmt):
            self.expr(stmt.value)
            self.variables[stmt.var] = DimVar(f"_let{len(self.variables)}")  # unbounded
            self.stmt(stmt.body)
        elif isinstance(stmt, tir.Evaluate) and is_gemm(stmt.value):
            self.gemm(stmt.value)
        elif isinstance(stmt, tir.Evaluate) and is_conv(stmt.value):
            self.conv(stmt.value)
        elif isinstance(stmt, tir.Evaluate) and not _is_call(stmt.value):
            self.expr(stmt.value)
        else:
            self.ok = False  # a call whose regions are not read here

    def gemm(self, call: tir.Intrinsic) -> None:
        """A GEMM reads A and B and writes C over the regions its sizes give (the rows of
        a batched attention product, one batch index per iteration)."""
        a, b, c, *sizes = call.args
        values = [self.dim_of(arg) for arg in sizes]
        if any(value is None for value in values):
            self.ok = False
            return
        m, n, k, lda, ldb, ldc, trans_b = values
        if type(trans_b) is not int:
            self.ok = False
            return
        b_extent = (n - 1) * ldb + k if trans_b else (k - 1) * ldb + n  # type: ignore[operator]
        for load, extent in ((a, (m - 1) * lda + k), (b, b_extent)):  # type: ignore[operator]
            for index in load.indices:
                self.expr(index)
            if load.buffer not in self.private:
                self.reads.setdefault(load.buffer, []).append(self.access(load.indices, extent - 1))
        for index in c.indices:
            self.expr(index)
        if c.buffer not in self.private:
            extent = (m - 1) * ldc + n  # type: ignore[operator]
            self.writes.setdefault(c.buffer, []).append(self.access(c.indices, extent - 1))

    def conv(self, call: tir.Intrinsic) -> None:
        """A convolution call (a block of output rows of one image, per iteration): its
        image, weight and output regions (:func:`~passinfra.tir.intrinsics.conv_regions`),
        the image and the rows it writes possibly of symbolic size."""
        image, weight, out = call.args[:3]
        sizes = conv_sizes(call)
        values = [0 if i == CONV_FIRST_PIXEL else self.dim_of(arg) for i, arg in enumerate(sizes)]
        height, width, channels, out_channels, kh, kw, *_rest, count, groups, panel = values
        if any(v is None for v in values) or any(type(v) is not int for v in (channels, out_channels, kh, kw,
                                                                              groups, panel)):
            self.ok = False
            return
        static = (1, 1, channels, out_channels, kh, kw, *_rest, 1, groups, panel)
        _, weight_extent, _ = conv_regions(tuple(v if type(v) is int else 1 for v in static),
                                          call.name == DEPTHWISE_CONV_INTRINSIC)
        regions = [(image, height * width * channels, self.reads), (weight, weight_extent, self.reads),
                   (out, count * out_channels, self.writes)]  # type: ignore[operator]
        epilogue = ConvEpilogue.of(call)
        if epilogue is not None:  # a bias per output channel, a residual laid out as the output
            regions += [(load, extent, self.reads) for load, extent in
                        ((epilogue.bias, out_channels), (epilogue.residual, count * out_channels))  # type: ignore
                        if load is not None]
        for load, extent, table in regions:
            for index in load.indices:
                self.expr(index)
            if load.buffer not in self.private:
                table.setdefault(load.buffer, []).append(self.access(load.indices, extent - 1))

    def independent(self, extents: Sequence[Dim]) -> bool:
        if not self.ok:
            return False
        for buffer, writes in self.writes.items():
            every = writes + self.reads.get(buffer, [])
            if any(access is None for access in every):
                return False
            coefficients = every[0][0]  # type: ignore[index]
            if any(access[0] != coefficients for access in every):  # type: ignore[index]
                return False
            # the writes' hull: a low no write goes below, a high none goes above (a
            # vectorized main loop and its remainder write one row in two parts)
            low = next((w[1] for w in writes if all(_proves_le(w[1], v[1]) for v in writes)), None)  # type: ignore
            high = next((w[2] for w in writes if all(_proves_le(v[2], w[2]) for v in writes)), None)  # type: ignore
            if low is None or high is None:
                return False
            if any(not _proves_le(low, access[1]) or not _proves_le(access[2], high)
                   for access in every):  # type: ignore[index]
                return False
            span: Dim = high - low + 1
            for coefficient, extent in zip(reversed(coefficients), reversed(tuple(extents))):
                if not _proves_le(span, coefficient):
                    return False
                span = span + coefficient * (extent - 1)
        return True


def _proves_le(a: Dim, b: Dim) -> bool:
    """``a <= b`` for every binding (sizes at least 1), floor divisions included: a loop
    cut into whole vector blocks and a remainder ends where the loop did."""
    return prove_le(a, b) is True or prove_le(0, relax_floordivs(b - a)) is True


def _straight_line(body: tir.Stmt) -> bool:
    if isinstance(body, tir.SeqStmt):
        return all(isinstance(s, tir.BufferStore) for s in body.stmts)
    return isinstance(body, tir.BufferStore)


def _is_call(expr: tir.PrimExpr) -> bool:
    return isinstance(expr, tir.Intrinsic) and expr.name.startswith("rp_")


def parallel_symbolic_nest(loop: tir.For, sizes: Sequence[tir.TVar], split_static: bool = False) -> tir.Stmt:
    """``loop`` with its outer loops fused into one PARALLEL loop when their iterations
    are provably independent for every binding of ``sizes`` (module docstring), else
    ``loop`` itself. For nests with a loop over a symbolic size, and for nests whose outer
    loops are static but whose body indexes by the sizes (a kernel specialized for some
    sizes, SpecializeKernels: 4 heads of a symbolic past) when ``static_work`` (the
    work of the whole nest, by the static rule's estimate) is given, as the caller's
    threshold for splitting such a nest is met."""
    chain: list[tir.For] = []
    node: tir.Stmt = loop
    while isinstance(node, tir.For) and node.kind is tir.ForKind.SERIAL and const_int(node.start) == 0:
        chain.append(node)
        node = node.body
    # the innermost loop stays whole inside an iteration when it is the loop the C compiler
    # vectorizes (straight-line stores), unless it is the only loop
    innermost = len(chain) > 1 and _straight_line(chain[-1].body)
    usable = len(chain) - 1 if innermost else len(chain)
    if not chain[:usable]:
        return loop
    if all(const_int(n.extent) is not None for n in chain[:usable]):
        if not split_static or not _reads_sizes(chain[0].body, frozenset(sizes)):
            return loop
    # the longest prefix whose iterations are independent (a tiled transpose's loop order
    # is not its strides' order: its outer loops are)
    for length in range(usable, 0, -1):
        prefix = chain[:length]
        if _independent(prefix, sizes):
            return _fused(prefix, prefix[-1].body)
    return loop


def _reads_sizes(stmt: tir.Stmt, sizes: frozenset[tir.TVar]) -> bool:
    """Whether an index, bound or argument in ``stmt`` uses one of the sizes."""
    return any(any_expr(expr, lambda node: isinstance(node, tir.TVar) and node in sizes)
               for node in iter_stmts(stmt) for expr in stmt_exprs(node))


def _independent(prefix: list[tir.For], sizes: Sequence[tir.TVar]) -> bool:
    proof = _Proof(tuple(n.loop_var for n in prefix), frozenset(sizes))
    for size in sizes:
        proof.variables[size] = DimVar(f"_size_{size.name}", _SIZE_LO, None)
        proof.size_vars.add(proof.variables[size])
    for k, n in enumerate(prefix):
        proof.variables[n.loop_var] = DimVar(f"_outer{k}")
    extents = [proof.dim_of(n.extent) for n in prefix]
    if any(extent is None for extent in extents):
        return False
    proof.stmt(prefix[-1].body)
    return proof.independent(extents)  # type: ignore[arg-type]


def _fused(prefix: list[tir.For], body: tir.Stmt) -> tir.For:
    """One PARALLEL loop over the product of the prefix's extents (computed at run time),
    its iteration giving each variable back (``i = f / stride % extent``)."""
    if len(prefix) == 1:
        only = prefix[0]
        return tir.For(only.loop_var, only.start, only.extent, tir.ForKind.PARALLEL, body)
    dtype = tir.INDEX_DTYPE
    fused = tir.TVar("_".join(node.loop_var.name for node in prefix), dtype)
    stride: tir.PrimExpr | None = None
    bindings = []
    for node in reversed(prefix):
        extent = node.extent if node.extent.dtype == dtype else tir.Cast(dtype, node.extent)
        value: tir.PrimExpr = fused if stride is None else tir.Div(fused, stride)
        if node is not prefix[0]:  # value % extent (the index is never negative)
            value = tir.Sub(value, tir.Mul(tir.Div(value, extent), extent))
        if node.loop_var.dtype != dtype:
            value = tir.Cast(node.loop_var.dtype, value)
        bindings.append((node.loop_var, value))
        stride = extent if stride is None else tir.Mul(stride, extent)
    for var, value in bindings:  # innermost first, so the outermost binding ends up outside
        body = tir.LetStmt(var, value, body)
    assert stride is not None
    return tir.For(fused, tir.IntImm(0, dtype), stride, tir.ForKind.PARALLEL, body)


__all__ = ["parallel_symbolic_nest"]

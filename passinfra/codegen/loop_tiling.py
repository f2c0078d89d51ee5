"""Loop nests for element-wise stores: split at select boundaries and by divisors, tiled for transposes.

The lowering asks :func:`elementwise_nest` for the loop nest of one store per output
index (an injective group). Two rewrites make such nests cheaper; both only reorder or
partition independent iterations (no reduction), so they cannot change a value:

* Range splitting. ``concatenate`` computes ``i < 416 ? a[..i..] : b[..i - 416..]`` per
  element (clamped reads under a select). When a select's condition compares a loop
  variable with a constant, the loop is split there into ranges in which the select is
  decided, and the select is replaced by its branch; the clamps then fold away in
  Simplify (which knows the loop ranges), so each piece is a plain copy the C renderer
  turns into memcpy.
* Tiling. A layout change (NCHW <-> NHWC) stores along the output's innermost axis
  while one load walks that axis with a large stride: every step touches a new cache
  line, and with a stride like 56*56 floats the lines fall into a few cache sets, so
  nearly every read misses L1. The output's innermost axis and the axis the strided
  load reads contiguously are tiled, both tile loops innermost, so one tile's lines of
  both buffers stay in cache (the classic blocked transpose). An innermost axis of at
  most :data:`MAX_NARROW_INNERMOST` iterations (an image's channels) is not tiled: the
  loaded axis becomes innermost, so the loads are contiguous and the values vectorize,
  and a pixel's few channels are stored together (:func:`_grouped`), or, for a computed
  value (a quantizing input layer's), through a small buffer first (:func:`_staged`).
* Divisor splitting. A channel shuffle in the channels-last layout reads, per pixel,
  ``in[.., (c % g) * (C/g) + c // g]``: a floor division and a modulo per element (2.7
  cycles an element, 3-5x onnxruntime's shuffle). When the stored value, its index
  arithmetic simplified with the loops' ranges, divides the innermost variable by a
  constant ``k`` that divides its extent (``v // k`` or ``v % k``), the loop is split into
  ``v = o*k + i`` (``i`` innermost, so the store stays contiguous), and Simplify turns
  ``v // k`` into ``o`` and ``v % k`` into ``i``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from passinfra import tir
from passinfra.codegen.c_renderer import dtype_bytes
from passinfra.codegen.compute.base import seq
from passinfra.codegen.transform.simplify import Simplifier
from passinfra.ir.dims import DimVar, prove_le
from passinfra.tir.arith import affine_coefficient
from passinfra.tir.functor import StmtExprMutator, iter_expr_post_order, same_expr, substitute
from passinfra.tir.sizes import is_static_extent, prim_to_dim

# tile sizes tried, largest first: 16 float32 are one 64-byte cache line
TILE_SIZES = (16, 8, 4)
# a transposed nest whose innermost output axis has at most this many iterations runs
# with the loaded axis innermost: NCHW -> NHWC of a 3-channel image, quantized on the way
# into an integer model, took 2.6 ns an element (a 3-iteration inner loop, scalar
# divisions and roundings) of a 224x224 image's 0.39 ms
MAX_NARROW_INNERMOST = 4
# ... and when its value is computed (not a plain copy), staged through a buffer of at most
# this many bytes a pass of the outer loops: the values computed into it along the partner
# axis (contiguous, so they vectorize), then stored from it with the narrow axis unrolled
# (contiguous loads, grouped stores GCC vectorizes): the 3-channel quantizing transpose of a
# 224x224 image 85 -> 42 us on a Zen 3 (stored directly, each value a byte 3 apart)
MAX_STAGED_BYTES = 4096
# at most this many pieces per nest from range splitting (a concatenate of many fields
# keeps its selects past this)
MAX_PIECES = 8

# a loop: (variable, start, extent); the extent of a loop over a symbolic size is an index
# expression, and such a loop is never split or tiled (it runs whole, as it is)
Loop = tuple[tir.TVar, int, Any]


def elementwise_nest(loop_vars: Sequence[tir.TVar], extents: Sequence[int],
                     store: tir.BufferStore,
                     new_buffer: Callable[[str, Sequence[int], str], tir.Buffer] | None = None) -> tir.Stmt:
    """The loop nests running ``store`` (indexed by ``loop_vars``) over ``extents``,
    split at select boundaries, split by a divisor of the innermost variable, and tiled
    when a load is transposed (module docstring); ``new_buffer`` (the lowering's, for
    unique names) makes the buffer a narrow transpose is staged through, none: not staged."""
    loops = [(var, 0, int(extent) if is_static_extent(extent) else tir.as_prim(extent))
             for var, extent in zip(loop_vars, extents)]
    return seq(*(_tiled(*_divisor_split(piece_loops, piece), new_buffer)
                 for piece_loops, piece in _pieces(loops, store)))


# --------------------------------------------------------------------------- range splitting


def _pieces(loops: list[Loop], store: tir.BufferStore) -> list[tuple[list[Loop], tir.BufferStore]]:
    """(loops, store) pieces covering the iteration space, the selects on loop
    variables that a piece's ranges decide replaced by their branch."""
    done, work = [], [(loops, store)]
    while work:
        piece_loops, piece = work.pop()
        room = len(done) + len(work) + 1 < MAX_PIECES
        cut = _select_cut(piece_loops, piece.value) if room else None
        if cut is None and room:
            symbolic = _symbolic_select_cut(piece_loops, piece)
            if symbolic is not None:
                work.extend(symbolic)
                continue
        if cut is None:
            done.append((piece_loops, piece))
            continue
        position, boundary = cut
        var, start, extent = piece_loops[position]
        before, after = piece_loops[:position], piece_loops[position + 1:]
        below = [*before, (var, start, boundary - start), *after]
        above = [*before, (var, boundary, start + extent - boundary), *after]
        work.append((above, _decide_selects(piece, var, boundary, start + extent)))
        work.append((below, _decide_selects(piece, var, start, boundary)))
    return done


def _select_cut(loops: list[Loop], value: tir.PrimExpr) -> tuple[int, int] | None:
    """(loop position, boundary) of the first select ``var < c`` with ``c`` strictly
    inside ``var``'s range, or None."""
    positions = {id(var): k for k, (var, _, _) in enumerate(loops)}
    for node in iter_expr_post_order(value):
        bound = _var_below_constant(node.cond) if isinstance(node, tir.Select) else None
        if bound is None or id(bound[0]) not in positions:
            continue
        position = positions[id(bound[0])]
        _, start, extent = loops[position]
        if type(extent) is int and start < bound[1] < start + extent:
            return position, bound[1]
    return None


Piece = tuple[list[Loop], tir.BufferStore]


def _symbolic_select_cut(loops: list[Loop], store: tir.BufferStore) -> list[Piece] | None:
    """The two pieces (above, then below) of a cut at the first select ``var < b`` whose
    bound ``b`` is a size known at run time (a concatenation after a KV cache of ``past``
    rows), when ``start <= b <= end`` of ``var``'s loop holds for every size (sizes are
    never negative); None otherwise. The static cut is :func:`_select_cut`'s."""
    positions = {id(var): k for k, (var, _, _) in enumerate(loops)}
    for node in iter_expr_post_order(store.value):
        if not isinstance(node, tir.Select) or not isinstance(node.cond, tir.LT):
            continue
        var, bound = node.cond.a, node.cond.b
        if not isinstance(var, tir.TVar) or id(var) not in positions or isinstance(bound, tir.IntImm):
            continue
        position = positions[id(var)]
        _, start, extent = loops[position]
        sizes = _SizeDims({id(v) for v, _, _ in loops})
        first, count, cut = (prim_to_dim(tir.as_prim(e), sizes.dim) for e in (start, extent, bound))
        if first is None or count is None or cut is None:
            continue
        if prove_le(first, cut) is not True or prove_le(cut, first + count) is not True:
            continue
        before, after = loops[:position], loops[position + 1:]
        below_count = bound if isinstance(start, int) and start == 0 else tir.Sub(bound, tir.as_prim(start))
        above_count = tir.Sub(tir.Add(tir.as_prim(start), tir.as_prim(extent)), bound)
        below = [*before, (var, start, below_count), *after]
        above = [*before, (var, bound, above_count), *after]
        return [(above, _decide_symbolic(store, var, bound, below=False)),
                (below, _decide_symbolic(store, var, bound, below=True))]
    return None


class _SizeDims:
    """Each kernel size a bound reads as a dimension variable (never negative); a loop
    variable of the nest has none (a bound that moves with the nest is not cut at)."""

    def __init__(self, loop_vars: set[int]) -> None:
        self.loop_vars = loop_vars
        self.vars: dict[tir.TVar, DimVar] = {}

    def dim(self, var: tir.TVar) -> DimVar | None:
        if id(var) in self.loop_vars:
            return None
        return self.vars.setdefault(var, DimVar(f"_s{len(self.vars)}"))


class _SymbolicSelectDecider(StmtExprMutator):
    """Replaces ``select(var < b, t, f)`` by ``t`` (``below``: the piece where ``var < b``)
    or ``f`` for the one bound ``b`` a symbolic cut was made at."""

    def __init__(self, var: tir.TVar, bound: tir.PrimExpr, below: bool) -> None:
        self.var, self.bound, self.below = var, bound, below

    def rewrite_select(self, node: tir.Select) -> tir.PrimExpr:
        cond = node.cond
        if isinstance(cond, tir.LT) and cond.a is self.var and same_expr(cond.b, self.bound):
            return node.true_value if self.below else node.false_value
        return node


def _decide_symbolic(store: tir.BufferStore, var: tir.TVar, bound: tir.PrimExpr,
                     below: bool) -> tir.BufferStore:
    value = _SymbolicSelectDecider(var, bound, below).visit_expr(store.value)
    return store if value is store.value else tir.BufferStore(store.buffer, value, store.indices)


def _var_below_constant(cond: tir.PrimExpr) -> tuple[tir.TVar, int] | None:
    if isinstance(cond, tir.LT) and isinstance(cond.a, tir.TVar) and isinstance(cond.b, tir.IntImm):
        return cond.a, cond.b.value
    return None


class _SelectDecider(StmtExprMutator):
    """Replaces ``select(var < c, t, f)`` by ``t`` or ``f`` when ``var`` in [low, high)
    decides it."""

    def __init__(self, var: tir.TVar, low: int, high: int) -> None:
        self.var, self.low, self.high = var, low, high

    def rewrite_select(self, node: tir.Select) -> tir.PrimExpr:
        bound = _var_below_constant(node.cond)
        if bound is None or bound[0] is not self.var:
            return node
        if self.high <= bound[1]:
            return node.true_value
        if self.low >= bound[1]:
            return node.false_value
        return node


def _decide_selects(store: tir.BufferStore, var: tir.TVar, low: int, high: int) -> tir.BufferStore:
    value = _SelectDecider(var, low, high).visit_expr(store.value)
    return store if value is store.value else tir.BufferStore(store.buffer, value, store.indices)


# --------------------------------------------------------------------------- divisor splitting


def _divisor_split(loops: list[Loop], store: tir.BufferStore) -> tuple[list[Loop], tir.BufferStore]:
    """``loops`` and ``store`` with the innermost loop split by the divisor its variable
    is divided by in the stored value (module docstring), or both unchanged."""
    if not loops or loops[-1][1] != 0 or type(loops[-1][2]) is not int:
        return loops, store
    if not _divides(store.value, loops[-1][0]):
        return loops, store
    var, _, extent = loops[-1]
    # the index arithmetic of reshapes and transposes, reduced with the loops' ranges
    # (the Simplify pass would do the same later), shows what divides the variable
    ranges = {loop_var: (start, start + count - 1) for loop_var, start, count in loops
              if type(count) is int and type(start) is int}
    value = Simplifier(ranges).visit_expr(store.value)
    divisor = _divisor_of(value, var, extent)
    if divisor is None:
        return loops, store
    split_loops, index = _split(loops[-1], divisor)
    split_store = tir.BufferStore(store.buffer, value, store.indices)
    return [*loops[:-1], *split_loops], substitute(split_store, {var: index})


def _divides(value: tir.PrimExpr, var: tir.TVar) -> bool:
    """Whether a floor division or modulo by a constant has ``var`` in its dividend."""
    return any(isinstance(node, (tir.FloorDiv, tir.FloorMod)) and isinstance(node.b, tir.IntImm)
               and _mentions(node.a, var) for node in iter_expr_post_order(value))


def _divisor_of(value: tir.PrimExpr, var: tir.TVar, extent: int) -> int | None:
    """A constant ``k`` with ``var // k`` or ``var % k`` in ``value``, dividing
    ``extent`` into at least two parts of at least two, or None."""
    for node in iter_expr_post_order(value):
        divided = isinstance(node, (tir.FloorDiv, tir.FloorMod)) and node.a is var
        k = node.b.value if divided and isinstance(node.b, tir.IntImm) else 0
        if 1 < k < extent and extent % k == 0:
            return k
    return None


# --------------------------------------------------------------------------- tiling


def _tiled(loops: list[Loop], store: tir.BufferStore,
           new_buffer: Callable[[str, Sequence[int], str], tir.Buffer] | None = None) -> tir.Stmt:
    """The nest of ``loops`` around ``store``, tiled when a load is transposed."""
    loop_vars = tuple(var for var, _, _ in loops)
    partner = _transposed_partner(store.value, loop_vars) if len(loops) >= 2 else None
    if partner is not None and type(loops[partner][2]) is not int:
        partner = None
    if partner is not None and type(loops[-1][2]) is not int:
        return _tiled_symbolic(loops, store, partner)
    inner_tile = _tile(loops[-1][2]) if partner is not None else 1
    if partner is not None and loops[-1][2] <= MAX_NARROW_INNERMOST:
        # a few channels innermost (an image's 3 into channels-last): the partner axis
        # innermost instead, so the loads are contiguous and the values vectorize; a copy
        # stores a pixel's few channels together, a computed value goes through a buffer
        staged = _staged(loops, store, partner, new_buffer) or _grouped(loops, store, partner)
        if staged is not None:
            return staged
        order = [loop for k, loop in enumerate(loops) if k != partner] + [loops[partner]]
        return _nest(order, store)
    if partner is None:
        return _nest(loops, store)
    if inner_tile == 1:
        return _partner_blocks(loops, store, partner)
    last = len(loops) - 1
    outer = [loop for k, loop in enumerate(loops) if k not in (partner, last)]
    inner_loops, inner_index = _split(loops[last], inner_tile)
    partner_loops, partner_index = _split(loops[partner], _tile(loops[partner][2]))
    # outer axes, the tile of the innermost axis, then one tile of both axes
    order = [*outer, inner_loops[0], *partner_loops, inner_loops[1]]
    body = substitute(store, {loop_vars[last]: inner_index, loop_vars[partner]: partner_index})
    return _nest(order, body)


def _staged(loops: list[Loop], store: tir.BufferStore, partner: int,
            new_buffer: Callable[[str, Sequence[int], str], tir.Buffer] | None) -> tir.Stmt | None:
    """A narrow transposed nest (``loops[-1]`` of at most :data:`MAX_NARROW_INNERMOST`
    iterations) whose value is computed, through a buffer (:data:`MAX_STAGED_BYTES`): for
    each pass of the other loops, ``staged[c, p] = value`` over the narrow axis ``c`` and
    the partner axis ``p`` innermost, then ``out[.., p, c] = staged[c, p]`` over ``p`` with
    one store a ``c``. The same values in the same places (each computed once, by the same
    expression), only in another order. None where it does not apply: a plain copy
    (:func:`_grouped`'s), sizes known at run time, a larger buffer."""
    var, start, narrow = loops[-1]
    partner_var, partner_start, extent = loops[partner]
    if (new_buffer is None or isinstance(store.value, tir.BufferLoad)
            or any(type(loop[2]) is not int for loop in loops)
            or narrow * extent * dtype_bytes(store.buffer.dtype) > MAX_STAGED_BYTES):
        return None
    staged = new_buffer(f"{store.buffer.name}_staged", (narrow, extent), store.buffer.dtype)
    lane, column = tir.TVar(f"{var.name}_s"), tir.TVar(f"{partner_var.name}_s")
    at = {var: lane + tir.IntImm(start) if start else lane,
          partner_var: column + tir.IntImm(partner_start) if partner_start else column}
    compute = tir.For(lane, tir.IntImm(0), tir.IntImm(narrow), tir.ForKind.SERIAL,
                      tir.For(column, tir.IntImm(0), tir.IntImm(extent), tir.ForKind.SERIAL,
                              tir.BufferStore(staged, substitute(store.value, at), (lane, column))))
    stores = [substitute(tir.BufferStore(store.buffer, staged.load(tir.IntImm(c), column), store.indices),
                         {var: tir.IntImm(start + c), partner_var: at[partner_var]})
              for c in range(narrow)]
    scatter = tir.For(column, tir.IntImm(0), tir.IntImm(extent), tir.ForKind.SERIAL, seq(*stores))
    outer = [loop for k, loop in enumerate(loops) if k not in (partner, len(loops) - 1)]
    return _nest(outer, tir.Allocate(staged, seq(compute, scatter)))


def _grouped(loops: list[Loop], store: tir.BufferStore, partner: int) -> tir.Stmt | None:
    """A narrow transposed copy (``loops[-1]`` of at most :data:`MAX_NARROW_INNERMOST`
    iterations; :func:`_staged` takes computed values) with the partner axis innermost and
    one store a channel in its body: a pixel's channels stored side by side, which GCC
    vectorizes as one interleaved group (loads from each plane, shuffles, whole-vector
    stores), where with the narrow loop outside the partner's each store stepped by the
    channel count, one element a store: NCHW -> NHWC of a 3 x 224 x 224 float image in
    cache 41 -> 28 us (a C harness on a Zen 4, portable flags). In a model the image comes
    from memory: at one thread level (MobileNetV3-like 52 vs 55 us), at two 27.5 -> 20.5
    (RegNetX-like). None where sizes are known at run time."""
    var, start, narrow = loops[-1]
    if any(type(loop[2]) is not int for loop in loops):
        return None
    stores = [substitute(store, {var: tir.IntImm(start + c)}) for c in range(narrow)]
    outer = [loop for k, loop in enumerate(loops) if k not in (partner, len(loops) - 1)]
    return _nest([*outer, loops[partner]], seq(*stores))


def _partner_blocks(loops: list[Loop], store: tir.BufferStore, partner: int) -> tir.Stmt:
    """A transposing nest whose innermost output axis no tile size divides (an image's 14
    or 7 columns, channels-last into channels-first): the partner axis in blocks of a tile,
    each block walking the rest of the nest with the block's lanes innermost. A lane loop
    reads one cache line of the transposed input at once, so no line has to stay in cache
    until the next lane: untiled, the innermost loop read the input at a stride of the
    channel count, and with 1024 channels (4 KiB) every line fell into one cache set
    (ResNet-50's 14x14x1024 block output into NCHW: 3.2 ns an element, 0.64 ms). The
    stores walk the block's lanes' rows of the output, at most a tile of them at once."""
    tile = _tile(loops[partner][2])
    if tile == 1:
        return _nest(loops, store)
    partner_loops, partner_index = _split(loops[partner], tile)
    rest = [loop for k, loop in enumerate(loops) if k != partner]
    body = substitute(store, {loops[partner][0]: partner_index})
    return _nest([partner_loops[0], *rest, partner_loops[1]], body)


def _tiled_symbolic(loops: list[Loop], store: tir.BufferStore, partner: int) -> tir.Stmt:
    """A transposing nest whose innermost loop runs over a size known at run time (a KV
    cache's keys turned to ``[.., head_dim, past + seq]``): its whole tiles of
    ``TILE_SIZES[0]`` iterations tiled with the partner axis as :func:`_tiled` does, then
    the remaining iterations as they were."""
    var, start, extent = loops[-1]
    partner_tile = _tile(loops[partner][2])
    if start != 0 or partner_tile == 1:
        return _nest(loops, store)
    tile = TILE_SIZES[0]
    blocks = tir.FloorDiv(extent, tir.IntImm(tile, extent.dtype))
    block, lane = tir.TVar(f"{var.name}_o"), tir.TVar(f"{var.name}_i")
    last = len(loops) - 1
    outer = [loop for k, loop in enumerate(loops) if k not in (partner, last)]
    partner_loops, partner_index = _split(loops[partner], partner_tile)
    order = [*outer, (block, 0, blocks), *partner_loops, (lane, 0, tile)]
    tiled = substitute(store, {var: block * tir.IntImm(tile) + lane, loops[partner][0]: partner_index})
    done = tir.Mul(blocks, tir.IntImm(tile, extent.dtype))
    rest = [*loops[:-1], (var, done, tir.Sub(extent, done))]
    return seq(_nest(order, tiled), _nest(rest, store))


def _transposed_partner(value: tir.PrimExpr, loop_vars: tuple[tir.TVar, ...]) -> int | None:
    """The position of the loop variable a transposed load walks contiguously: a load
    whose last index moves with that variable (coefficient 1; a constant clamp around
    it is looked through) and not with the innermost loop variable, which moves one of
    its outer indices instead."""
    innermost = loop_vars[-1]
    for node in iter_expr_post_order(value):
        if not isinstance(node, tir.BufferLoad) or len(node.indices) < 2:
            continue
        *outer, last = node.indices
        last = _unclamped(last)
        if _mentions(last, innermost) or not any(_mentions(index, innermost) for index in outer):
            continue
        for position, loop_var in enumerate(loop_vars[:-1]):
            if affine_coefficient(last, loop_var) == 1:
                return position
    return None


def _unclamped(index: tir.PrimExpr) -> tir.PrimExpr:
    while isinstance(index, (tir.Min, tir.Max)) and isinstance(index.b, tir.IntImm):
        index = index.a
    return index


def _mentions(expr: tir.PrimExpr, var: tir.TVar) -> bool:
    return any(node is var for node in iter_expr_post_order(expr))


def _tile(extent: int) -> int:
    """The largest tile size that divides ``extent`` into at least two tiles, or 1."""
    return next((size for size in TILE_SIZES if extent % size == 0 and extent > size), 1)


def _split(loop: Loop, tile: int) -> tuple[list[Loop], tir.PrimExpr]:
    """The loops replacing ``loop``, outer first, and the expression of its variable in
    theirs (``start + outer * tile + inner``)."""
    var, start, extent = loop
    if tile == 1:
        return [loop], var
    outer, inner = tir.TVar(f"{var.name}_o"), tir.TVar(f"{var.name}_i")
    index = outer * tir.IntImm(tile) + inner
    return [(outer, 0, extent // tile), (inner, 0, tile)], index + tir.IntImm(start) if start else index


def _nest(loops: Sequence[Loop], body: tir.Stmt) -> tir.Stmt:
    for var, start, extent in reversed(tuple(loops)):
        body = tir.For(var, tir.IntImm(start), tir.as_prim(extent), tir.ForKind.SERIAL, body)
    return body


__all__ = ["MAX_PIECES", "TILE_SIZES", "elementwise_nest"]

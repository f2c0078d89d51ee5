"""A direct, register-tiled convolution kernel for channels-last data (NHWC / HWIO).

The generic loop nest of the conv2d compute rule keeps one scalar accumulator per output
element with the taps innermost, and never vectorizes (2-5 GFLOP/s on grouped and
depthwise convolutions); im2col plus a GEMM per group copies the input ``KH*KW`` times
to multiply matrices with a single column per group when the convolution is depthwise.
This kernel computes a *tile* of ``P`` output pixels (along an output row) by ``V``
lanes of output channels at a time, in a local accumulator the C compiler keeps in
vector registers, and loops over the taps and the group's input channels around it.
Two modes, by the number of outputs a group has (``Og = OC / groups``):

* **group mode** (``Og >= MIN_GROUP_LANES``): the ``V`` lanes are ``V`` outputs of one
  group (``V | Og``), which all read the same input channel: one input value is
  broadcast against ``V`` contiguous weights (HWIO: the output channel is the weight's
  innermost axis);
* **channel mode** (fewer outputs per group; depthwise): the ``V`` lanes are ``V``
  groups (``V | groups``), each with its ``Og`` outputs as ``Og`` accumulators; lane
  ``v`` reads input channel ``(t*V + v) * Cg + rc``, so for a depthwise convolution
  (``Cg == Og == 1``) the input and the weight are both contiguous ``V``-vectors. A
  row of taps is unrolled (:data:`MAX_UNROLLED_TAP_UPDATES`): with stride 1 the pixels
  of a tile read overlapping input through neighbouring taps, and the C compiler then
  loads each input vector once.

The loop over the ``V`` lanes is what VectorizeLoop marks; the ``P`` pixels are separate
statements. Padding: a row of taps outside the input is skipped (an ``if`` around the
row), a tap column outside is skipped per pixel (channel mode) or reads a zero (group
mode: a select on one scalar). Skipping adds nothing where the reference adds ``0 * w``;
the two differ only for a non-finite weight.

Loop order: images, output rows, full pixel tiles, channel tiles, then the same nest
for the last, partial pixel tile of every row (``OW % P`` pixels). The first three loops
of each nest write disjoint slabs of the output, so the Parallelize pass splits them over
threads; every output element is summed by one thread in one fixed order (tap rows, tap
columns, input channels), whatever the thread count.

An element-wise epilogue (bias, activation, residual add, a per-channel scale) runs in
place over each tile right after the tile is stored, while it is in the L1 cache.

Tile sizes were measured on this machine's CPU (one thread, the default portable flags,
so 4-lane SSE vectors; a shared, noisy 2-core machine: ranges over five depthwise
shapes from 3x3 to 7x7). Channel mode, GFLOP/s: 6 pixels x 8 lanes 15-30 (the best
median, 22), 4x8 17-27, 2x8 13-24, 8x4 8-36; without the unrolled row of taps 6x8 gave
17-26 and 4x8 11-21. Group mode 4x8: 31 on a 3x3 with 8 channels per group; a C
prototype of the same loops gave 1x8 16-19, 2x8 23-28, 4x8 24-35, 7x8 24-30.
bench/results_vs_onnxruntime.md has the kernel table against the other paths.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from passinfra import tir
from passinfra.codegen.compute.base import imm, in_range, seq

# an epilogue(box) statement: see passinfra.codegen.gemm.Epilogue
Epilogue = Callable[[Sequence[tuple[tir.PrimExpr, int]]], tir.Stmt]

GROUP_MODE, CHANNEL_MODE = "group", "channel"
# lanes per tile, tried in order: the first that divides what the lanes run over (the
# group's outputs in group mode, the groups in channel mode); 8 float32 are two SSE
# registers, one AVX register
CHANNEL_TILES = (8, 4, 16, 12, 6, 2)
# output pixels per tile, per mode (the module docstring has the measurements)
PIXEL_TILES = {GROUP_MODE: 4, CHANNEL_MODE: 6}
# a group with at least this many outputs is tiled in group mode
MIN_GROUP_LANES = 8
# channel mode unrolls a row of taps when it has at most this many (taps x pixels)
# vector updates: with stride 1, neighbouring pixels read the same input through
# neighbouring taps, and the C compiler reuses those loads once the row is unrolled
# (1.3-1.8x on depthwise 3x3-7x7); a 1-D kernel of 128 taps stays a loop
MAX_UNROLLED_TAP_UPDATES = 64


@dataclass(frozen=True)
class ConvGeometry:
    """A 2-D channels-last convolution: NHWC data, HWIO weight, NHWC output."""

    batch: int
    height: int
    width: int
    channels: int
    out_height: int
    out_width: int
    out_channels: int
    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilation: tuple[int, int]
    padding: tuple[int, int, int, int]  # top, left, bottom, right
    groups: int

    @property
    def group_channels(self) -> int:
        return self.channels // self.groups

    @property
    def group_outputs(self) -> int:
        return self.out_channels // self.groups

    @property
    def reduction(self) -> int:
        """Products summed into each output: taps times the group's input channels."""
        return self.kernel[0] * self.kernel[1] * self.group_channels

    @property
    def macs(self) -> int:
        kh, kw = self.kernel
        outputs = self.batch * self.out_height * self.out_width * self.out_channels
        return outputs * self.group_channels * kh * kw

    @staticmethod
    def of(attrs: Mapping[str, Any], data_shape: Sequence[int], weight_shape: Sequence[int],
           out_shape: Sequence[int]) -> ConvGeometry:
        """The geometry of an ``nn.conv2d`` in NHWC/HWIO from its attrs and shapes."""
        batch, height, width, channels = data_shape
        kh, kw, _, out_channels = weight_shape
        _, out_height, out_width, _ = out_shape
        return ConvGeometry(batch, height, width, channels, out_height, out_width, out_channels, (kh, kw),
                            tuple(attrs["strides"]), tuple(attrs["dilation"]), tuple(attrs["padding"]),
                            int(attrs["groups"]))


def tile_mode(g: ConvGeometry) -> str:
    """Group mode where a group has at least :data:`MIN_GROUP_LANES` outputs (a tile's
    lanes then lie in one group), else channel mode (lanes over groups)."""
    return GROUP_MODE if g.group_outputs >= MIN_GROUP_LANES else CHANNEL_MODE


def channel_tile(g: ConvGeometry, mode: str) -> int:
    """V, the tile's lanes: a divisor of the group's outputs (group mode) or of the
    number of groups (channel mode), the first of :data:`CHANNEL_TILES` that fits."""
    span = g.group_outputs if mode == GROUP_MODE else g.groups
    return next((v for v in CHANNEL_TILES if span % v == 0), 1)


def _scaled(index: tir.PrimExpr, factor: int) -> tir.PrimExpr:
    return index if factor == 1 else index * tir.IntImm(factor)


def _offset(index: tir.PrimExpr, delta: int) -> tir.PrimExpr:
    return index + tir.IntImm(delta) if delta else index


def _loop(var: tir.TVar, extent: int, body: tir.Stmt, kind: tir.ForKind = tir.ForKind.SERIAL) -> tir.Stmt:
    return tir.For(var, tir.IntImm(0), tir.IntImm(int(extent)), kind, body)


def _loops(loop_vars: Sequence[tir.TVar], extents: Sequence[int], body: tir.Stmt) -> tir.Stmt:
    for var, extent in zip(reversed(tuple(loop_vars)), reversed(tuple(extents))):
        body = _loop(var, extent, body)
    return body


class _Tile:
    """The statements of one tile: ``pixels`` output pixels from ``first_pixel`` on, of
    row ``row`` of image ``image``, by the channels of tile ``tile``: in group mode the
    ``lanes`` output channels from ``tile * lanes`` on; in channel mode the outputs of
    the ``lanes`` groups from ``tile * lanes`` on, lane ``v`` being group
    ``tile * lanes + v`` (its ``Og`` outputs are ``Og`` accumulators of the lane)."""

    def __init__(self, g: ConvGeometry, mode: str, data: tir.Buffer, weight: tir.Buffer, out: tir.Buffer,
                 image: tir.PrimExpr, row: tir.PrimExpr, first_pixel: tir.PrimExpr, tile: tir.PrimExpr,
                 pixels: int, lanes: int) -> None:
        self.g, self.mode, self.data, self.weight, self.out = g, mode, data, weight, out
        self.image, self.row, self.first_pixel, self.tile = image, row, first_pixel, tile
        self.pixels, self.lanes = pixels, lanes
        # outputs per lane: 1 in group mode, the group's outputs in channel mode
        self.per_lane = 1 if mode == GROUP_MODE else g.group_outputs
        self.acc = tir.Buffer("acc", (pixels * self.per_lane * lanes,), out.dtype, "local")
        self.first_lane = _scaled(tile, lanes)

    def pixel(self, p: int) -> tir.PrimExpr:
        return _offset(self.first_pixel, p)

    def acc_at(self, p: int, u: int, v: tir.TVar) -> tuple[tir.PrimExpr, ...]:
        return (_offset(v, (p * self.per_lane + u) * self.lanes),)

    def out_channel(self, u: int, v: tir.TVar) -> tir.PrimExpr:
        """The output channel of lane ``v``'s ``u``-th accumulator."""
        if self.mode == GROUP_MODE:
            return self.first_lane + v
        return _offset(_scaled(self.first_lane + v, self.per_lane), u)

    def statement(self, epilogue: Epilogue | None) -> tir.Stmt:
        zero = imm(0, self.out.dtype)
        slots = [(p, u) for p in range(self.pixels) for u in range(self.per_lane)]
        init = [self._lanes(lambda v, p=p, u=u: tir.BufferStore(self.acc, zero, self.acc_at(p, u, v)))
                for p, u in slots]
        stores = [self._lanes(lambda v, p=p, u=u: tir.BufferStore(
            self.out, self.acc.load(*self.acc_at(p, u, v)),
            (self.image, self.row, self.pixel(p), self.out_channel(u, v))))
            for p, u in slots]
        body = [*init, self._taps(), *stores]
        if epilogue is not None:
            channels = self.lanes * self.per_lane
            body.append(epilogue(((self.image, 1), (self.row, 1), (self.first_pixel, self.pixels),
                                  (_scaled(self.tile, channels), channels))))
        return tir.Allocate(self.acc, seq(*body))

    def _lanes(self, make: Callable[[tir.TVar], tir.Stmt]) -> tir.Stmt:
        v = tir.TVar("v")
        return _loop(v, self.lanes, make(v))

    def _taps(self) -> tir.Stmt:
        g = self.g
        (kh, kw), (sh, sw), (dh, dw) = g.kernel, g.strides, g.dilation
        top, left, bottom, right = g.padding
        ry, rx, rc = tir.TVar("ry"), tir.TVar("rx"), tir.TVar("rc")
        in_row = _offset(_scaled(self.row, sh) + _scaled(ry, dh), -top)
        column_may_leave = bool(left or right) or (g.out_width - 1) * sw + (kw - 1) * dw >= g.width
        updates = []
        for p in range(self.pixels):
            in_col = _offset(_scaled(self.pixel(p), sw) + _scaled(rx, dw), -left)
            if self.mode == GROUP_MODE:
                updates.append(self._broadcast_update(p, in_row, in_col, rx, ry, rc, column_may_leave))
            else:
                updates.append(self._vector_update(p, in_row, in_col, rx, ry, rc, column_may_leave))
        unroll = self.mode == CHANNEL_MODE and kw * self.pixels <= MAX_UNROLLED_TAP_UPDATES
        taps_kind = tir.ForKind.UNROLLED if unroll else tir.ForKind.SERIAL
        row_body = _loop(rx, kw, _loop(rc, g.group_channels, seq(*updates)), taps_kind)
        row_may_leave = bool(top or bottom) or (g.out_height - 1) * sh + (kh - 1) * dh >= g.height
        if row_may_leave:
            row_body = tir.IfThenElse(in_range(in_row, g.height), row_body)
        return _loop(ry, kh, row_body)

    def _broadcast_update(self, p: int, in_row, in_col, rx, ry, rc, may_leave: bool) -> tir.Stmt:
        """Group mode: one input value times the tile's ``V`` weights."""
        g = self.g
        tiles_per_group = g.group_outputs // self.lanes
        group = self.tile if tiles_per_group == 1 else tir.FloorDiv(self.tile, tir.IntImm(tiles_per_group))
        channel = _scaled(group, g.group_channels) + rc if g.group_channels > 1 else group
        column = in_col
        if may_leave:
            column = tir.Max(tir.Min(in_col, tir.IntImm(g.width - 1)), tir.IntImm(0))
        value: tir.PrimExpr = self.data.load(self.image, in_row, column, channel)
        if may_leave:
            value = tir.Select(in_range(in_col, g.width), value, imm(0, self.data.dtype))
        x = tir.TVar(f"x{p}", self.acc.dtype)
        update = self._lanes(lambda v: tir.BufferStore(
            self.acc, self.acc.load(*self.acc_at(p, 0, v))
            + x * self.weight.load(ry, rx, rc, self.first_lane + v), self.acc_at(p, 0, v)))
        return tir.LetStmt(x, value, update)

    def _vector_update(self, p: int, in_row, in_col, rx, ry, rc, may_leave: bool) -> tir.Stmt:
        """Channel mode: the ``V`` groups' input channels times their weights, once per
        output of a group (the loads are contiguous for a depthwise convolution, strided
        by ``Cg`` and ``Og`` otherwise)."""
        g = self.g

        def lane(u: int, v: tir.TVar) -> tir.Stmt:
            group = self.first_lane + v
            channel = _scaled(group, g.group_channels) + rc if g.group_channels > 1 else group
            product = (self.data.load(self.image, in_row, in_col, channel)
                       * self.weight.load(ry, rx, rc, self.out_channel(u, v)))
            at = self.acc_at(p, u, v)
            return tir.BufferStore(self.acc, self.acc.load(*at) + product, at)

        update = seq(*(self._lanes(lambda v, u=u: lane(u, v)) for u in range(self.per_lane)))
        return tir.IfThenElse(in_range(in_col, g.width), update) if may_leave else update


def direct_conv(g: ConvGeometry, data: tir.Buffer, weight: tir.Buffer, out: tir.Buffer,
                epilogue: Epilogue | None = None, mode: str | None = None, pixel_tile: int | None = None,
                lanes: int | None = None) -> tir.Stmt:
    """The kernel's statement: ``out`` (NHWC) = ``data`` (NHWC) convolved with ``weight``
    (HWIO), then ``epilogue`` on every tile (module docstring)."""
    mode = tile_mode(g) if mode is None else mode
    lanes = channel_tile(g, mode) if lanes is None else lanes
    pixels = max(1, min(PIXEL_TILES[mode] if pixel_tile is None else pixel_tile, g.out_width))
    full, rest = divmod(g.out_width, pixels)
    tiles = (g.out_channels if mode == GROUP_MODE else g.groups) // lanes
    image, row, block, tile = tir.TVar("n"), tir.TVar("oh"), tir.TVar("owb"), tir.TVar("t")
    nests = []
    if full:
        first = _scaled(block, pixels)
        body = _Tile(g, mode, data, weight, out, image, row, first, tile, pixels, lanes).statement(epilogue)
        nests.append(_loops((image, row, block, tile), (g.batch, g.out_height, full, tiles), body))
    if rest:
        first = tir.IntImm(full * pixels)
        body = _Tile(g, mode, data, weight, out, image, row, first, tile, rest, lanes).statement(epilogue)
        nests.append(_loops((image, row, tile), (g.batch, g.out_height, tiles), body))
    return seq(*nests)


__all__ = ["CHANNEL_MODE", "CHANNEL_TILES", "GROUP_MODE", "MAX_UNROLLED_TAP_UPDATES", "MIN_GROUP_LANES",
           "PIXEL_TILES", "ConvGeometry", "channel_tile", "direct_conv", "tile_mode"]

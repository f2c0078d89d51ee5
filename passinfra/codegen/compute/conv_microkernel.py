"""A convolution as calls of the C runtime's microkernels, per block of output rows
(channels-last data, HWIO weight, float32): any number of groups, depthwise ones on the
runtime's depthwise kernel.

Each block is one ``rp_conv2d`` statement (:data:`passinfra.tir.intrinsics.CONV_INTRINSIC`;
the kernels themselves: :mod:`passinfra.codegen.conv_runtime`) over the block's output
pixels and every output channel, then the element-wise epilogue (bias, activation,
residual add) over the block while it is in cache. Blocks write disjoint rows of the
output, so the Parallelize pass runs them on different threads; every output element is
summed by one call in one fixed order, whatever the thread count.

A block is one output row, or as few rows as give :data:`MIN_BLOCK_PIXELS` pixels (an
image a few pixels wide): one row keeps the blocks many (a 7x7 output still splits over
seven threads), and a row of 7-14 pixels already fills a tile or two of the microkernel.
"""

from __future__ import annotations

from typing import Any

from passinfra import tir
from passinfra.codegen.compute.base import seq
from passinfra.codegen.compute.conv_direct import ConvGeometry, Epilogue
from passinfra.codegen.compute.conv_epilogue import fuse_enabled, match_epilogue
from passinfra.tir.intrinsics import CONV_INTRINSIC, DEPTHWISE_CONV_INTRINSIC, ConvEpilogue
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.errors import PassConfigError

# a block has at least this many output pixels where the image has them
MIN_BLOCK_PIXELS = 4
# a weight larger than this is not re-read per block of rows: it would come from memory
# or the last-level cache each time (ResNet-50's 3x3 512->512 weight is 9 MiB). Such a
# convolution is one call per image, which the runtime splits over the threads by
# output-channel blocks, so each thread reads the weight once
CACHED_WEIGHT_BYTES = 256 * 1024
# output channels per panel of a weight stored in panels (passinfra.ir.op.weight_panels,
# the PanelWeights pass): the AVX-512 and AVX2 tiles' block, so a tile reads one panel
# (AVX2's 6 x 16 tiles, for blocks of up to 16 channels, half of each row; the portable
# ones a quarter)
PANEL_WIDTH = 32


# the two thresholds above as config keys, per kernel (a tuning Schedule sets them):
# codegen.conv_block_pixels (int >= 1) and codegen.conv_cached_weight_bytes (int >= 0)
BLOCK_PIXELS_CONFIG = "codegen.conv_block_pixels"
CACHED_WEIGHT_CONFIG = "codegen.conv_cached_weight_bytes"
register_config(BLOCK_PIXELS_CONFIG, int)
register_config(CACHED_WEIGHT_CONFIG, int)


def _positive_config(key: str, default: int, least: int) -> int:
    value = PassContext.current().get_config(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise PassConfigError(f"config {key!r} is {value!r}; expected an integer >= {least}")
    return value


def rows_per_block(g: ConvGeometry) -> int:
    """Output rows per call: the whole image when the weight is larger than
    :data:`CACHED_WEIGHT_BYTES`, else the smallest divisor of the output height giving
    :data:`MIN_BLOCK_PIXELS` pixels (else the whole height); the config keys above
    replace either threshold."""
    cached = _positive_config(CACHED_WEIGHT_CONFIG, CACHED_WEIGHT_BYTES, 0)
    if g.reduction * g.out_channels * 4 > cached:
        return g.out_height
    least = _positive_config(BLOCK_PIXELS_CONFIG, MIN_BLOCK_PIXELS, 1)
    divisors = [rows for rows in range(1, g.out_height + 1) if g.out_height % rows == 0]
    return min((r for r in divisors if r * g.out_width >= least), default=g.out_height)


def _int(value: Any) -> tir.PrimExpr:
    """An int64 argument: a constant, or a symbolic size as an expression."""
    if isinstance(value, tir.PrimExpr):
        return value
    if isinstance(value, int):
        return tir.IntImm(int(value), tir.INDEX_DTYPE)
    return tir.as_prim(value)


def conv_call(g: ConvGeometry, data: tir.Buffer, weight: tir.Buffer, out: tir.Buffer, image: tir.PrimExpr,
              first_row: tir.PrimExpr, rows: int, epilogue: ConvEpilogue | None = None) -> tir.Stmt:
    """The ``rp_conv2d`` statement computing output rows ``first_row ..`` (``rows`` of
    them) of image ``image``, applying ``epilogue`` as it stores them."""
    zero = _int(0)
    (kh, kw), (sh, sw), (dh, dw) = g.kernel, g.strides, g.dilation
    top, left, _, _ = g.padding
    first = first_row * _int(g.out_width) if g.out_width != 1 else first_row
    sizes = (g.height, g.width, g.channels, g.out_channels, kh, kw, sh, sw, dh, dw, top, left, g.out_width)
    args = (data.load(image, zero, zero, zero), _first(weight), out.load(image, first_row, zero, zero),
            *(_int(v) for v in sizes), first, _int(rows * g.out_width), _int(g.groups),
            _int(panel_width(weight)))
    name = DEPTHWISE_CONV_INTRINSIC if is_depthwise(g) else CONV_INTRINSIC
    if epilogue is not None:
        args = (*args, *epilogue.args())
    return tir.Evaluate(tir.Intrinsic(name, args, "int32"))


def panel_width(weight: tir.Buffer) -> int:
    """The output channels per panel of a weight stored in panels (``[blocks, rows,
    width]``, :mod:`passinfra.ir.op.weight_panels`), 0 for one in place (HWIO, or a
    matmul's ``[k, n]``)."""
    return int(weight.shape[2]) if len(weight.shape) == 3 else 0


def _first(buffer: tir.Buffer) -> tir.BufferLoad:
    return tir.BufferLoad(buffer, tuple(_int(0) for _ in buffer.shape))


def is_depthwise(g: ConvGeometry) -> bool:
    """One input channel and one output channel per group (no channel multiplier)."""
    return g.groups > 1 and g.group_channels == 1 and g.group_outputs == 1


def matmul_call(lhs: tir.Buffer, rhs: tir.Buffer, out: tir.Buffer, rows: int, k: int, n: int) -> tir.Stmt:
    """``out[rows, n] = lhs[rows, k] x rhs[k, n]`` (row-major, from each buffer's first
    element) as one microkernel call: a 1x1 convolution of a ``1 x rows`` image of ``k``
    channels, whose HWIO weight ``[1, 1, k, n]`` is ``rhs`` as it is (or ``rhs`` in panels:
    ``[blocks, k, width]``). The runtime splits the call over the threads."""
    sizes = (1, rows, k, n, 1, 1, 1, 1, 1, 1, 0, 0, rows, 0, rows, 1, panel_width(rhs))
    args = (_first(lhs), _first(rhs), _first(out), *(_int(v) for v in sizes))
    return tir.Evaluate(tir.Intrinsic(CONV_INTRINSIC, args, "int32"))


# a one-row product (a decode step) is split into at most this many parts over its
# output columns, so threads share it (the runtime splits a call by rows only)
MAX_ROW_PARTS = 8


def matmul_row_parts(lhs: tir.Buffer, rhs: tir.Buffer, out: tir.Buffer, k: int, n: int) -> tir.Stmt | None:
    """``out[1, n] = lhs[1, k] x rhs`` for ``rhs`` in panels, as a loop of microkernel calls
    over parts of the output columns (whole panels each), which the Parallelize pass runs
    on threads; every output is the same sum of the same products as in one call. None
    when ``rhs`` is not in panels or ``n`` is not whole panels."""
    width = panel_width(rhs)
    if not width or n % width or int(rhs.shape[0]) * width != n:
        return None
    blocks = int(rhs.shape[0])
    parts = max(p for p in range(1, min(blocks, MAX_ROW_PARTS) + 1) if blocks % p == 0)
    if parts == 1:
        return None
    per_part = blocks // parts
    part = tir.TVar("part")
    columns = part * _int(per_part * width)
    sizes = (1, 1, k, per_part * width, 1, 1, 1, 1, 1, 1, 0, 0, 1, 0, 1, 1, width)
    weight = tir.BufferLoad(rhs, (part * _int(per_part), _int(0), _int(0)))
    result = tir.BufferLoad(out, (*(_int(0) for _ in out.shape[:-1]), columns))
    args = (_first(lhs), weight, result, *(_int(v) for v in sizes))
    call = tir.Evaluate(tir.Intrinsic(CONV_INTRINSIC, args, "int32"))
    return tir.For(part, _int(0), _int(parts), tir.ForKind.SERIAL, call)


def microkernel_conv(g: ConvGeometry, data: tir.Buffer, weight: tir.Buffer, out: tir.Buffer,
                     epilogue: Epilogue | None = None) -> tir.Stmt:
    """The statement computing ``out`` (NHWC) from ``data`` (NHWC) and ``weight`` (HWIO),
    one call per image and block of output rows, each applying ``epilogue`` as it stores
    the outputs where the runtime can (:mod:`passinfra.codegen.compute.conv_epilogue`),
    else followed by it."""
    rows = rows_per_block(g)
    image, block = tir.TVar("n"), tir.TVar("b")
    first_row: tir.PrimExpr = block * _int(rows) if rows > 1 else block
    if rows == g.out_height:
        first_row = _int(0)
    nest = fused = None
    if epilogue is not None:
        box = ((image, 1), (first_row, rows), (_int(0), g.out_width), (_int(0), g.out_channels))
        nest = epilogue(box)
        if fuse_enabled():
            fused = match_epilogue(nest, out)
        if fused is not None and is_depthwise(g) and fused.activation == "none" and fused.residual is None:
            # a bias alone: the depthwise tiles' short sums lose more to carrying it than its
            # loop costs (ShuffleNet's 3x3 layers 1.06x their time fused; with an activation,
            # MobileNetV3-like's, 0.93-0.96x)
            fused = None
    body = [conv_call(g, data, weight, out, image, first_row, rows, fused)]
    if nest is not None and fused is None:
        body.append(nest)
    blocks = tir.For(block, tir.IntImm(0), tir.IntImm(g.out_height // rows), tir.ForKind.SERIAL, seq(*body))
    return tir.For(image, tir.IntImm(0), tir.IntImm(g.batch), tir.ForKind.SERIAL, blocks)


__all__ = ["BLOCK_PIXELS_CONFIG", "CACHED_WEIGHT_BYTES", "CACHED_WEIGHT_CONFIG", "MAX_ROW_PARTS",
           "MIN_BLOCK_PIXELS", "PANEL_WIDTH", "conv_call", "is_depthwise", "matmul_call", "matmul_row_parts",
           "microkernel_conv", "panel_width", "rows_per_block"]

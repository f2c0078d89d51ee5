"""A stride-1 3x3 convolution by Winograd's F(4x4, 3x3) or F(2x2, 3x3) (channels-last data,
the weight's transform of :mod:`passinfra.ir.op.winograd_weights`, float32).

One ``rp_winograd`` statement per image (:data:`passinfra.tir.intrinsics.WINOGRAD_INTRINSIC`;
the C runtime's ``rp_winograd_f32`` in ``c/conv_runtime.c``): the runtime cuts the image
into units of whole tile rows (m x m outputs a tile; about 24 tiles a unit, whose (m + 2)-
square input patches and products stay in L2) by parts of the output channels where the
image has few tile rows, and runs the units on the library's threads; a unit transforms its
patches, runs one GEMM per point of the transform ((m + 2)^2 of them) on the convolution
microkernels' pointwise tiles and transforms the products back. The units follow from the
shape alone, so every output is the same sum whatever the thread count. The element-wise
epilogue (bias, activation, residual add) is a nest of its own after the call, which the
Parallelize pass splits like any other.

Measured (kernel alone, one Zen 3 core, AVX2, time against the direct microkernels,
medians of 15 interleaved calls; one thread, two threads within a few percent of it):

==========================  ========  ========
3x3 convolution             F(4x4)    F(2x2)
==========================  ========  ========
64->64 at 56x56             0.39-0.40 0.64-0.68
128->32 at 56x56            0.44      0.78-0.82
128->128 at 28x28           0.39-0.43 0.57-0.66
256->256 at 28x28           0.37-0.38 0.69-0.80
256->256 at 14x14           0.69-0.74 0.63-0.70
128->128 at 14x14           0.63      0.73-0.75
64->64 at 14x14             0.65      0.73
64->256 at 13x13            0.79-0.82 0.83-0.87
32->128 at 27x27            0.48-0.49 0.74-0.78
32->64 at 55x55             0.45-0.48 0.75-0.82
16->64 at 55x55             0.56      0.95-0.98
16->16 at 32x32             0.75-0.76 1.14-1.28
32->32 at 16x16             0.61-0.62 0.87-0.95
64->64 at 8x8               0.68      0.76-0.80
128->128 at 7x7             0.68-0.76 1.05-1.11
256->256 at 7x7             1.02-1.04 0.99-1.08
512->512 at 7x7             1.06-1.16 1.00-1.07
==========================  ========  ========

So the default tile is 4 (:data:`DEFAULT_TILE`), and :func:`applies` takes 16+ channels
(32 for tiles of 2), outputs of 7x7 (8x8) and more, and at most
:data:`MAX_TRANSFORM_BYTES_PER_PIXEL` of the transform per output pixel (the 7x7 outputs of
256 and 512 channels read 9 and 38 MiB of it). The runtime's unit rule, measured the same
way: units over tile rows re-read the transform, so one larger than 1 MiB is read once per
part of the outputs instead (512->512 at 7x7 with units of one tile row, F(2x2): 1.51 one
thread); transforms up to 1 MiB in units of tile rows (128->128 at 28x28: 0.62 against 0.69
as parts).

Numerics: the products are summed in another order and the transforms round (F(4x4)'s
multiply by up to 8 and a sixth), so a result differs from the direct sum: max |difference|
/ max |output| against a float64 reference here 3e-6 to 1.8e-5 for F(4x4), 2-8e-7 for
F(2x2), the direct kernel's 5e-7 to 2.4e-6.
"""

from __future__ import annotations

from passinfra import tir
from passinfra.codegen.compute.base import seq
from passinfra.codegen.compute.conv_direct import ConvGeometry, Epilogue
from passinfra.tir.intrinsics import WINOGRAD_INTRINSIC
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.errors import PassConfigError

# per tile: the input and output channels from which the transforms pay, and the output
# rows and columns (module docstring: F(2x2) level at 16 channels and slower at 7x7, F(4x4)
# faster at both)
MIN_CHANNELS = {2: 32, 4: 16}
MIN_SIZE = {2: 8, 4: 7}
# a call reads the weight's whole transform; above this many of its bytes per output pixel
# the reads cost what the products save (F(4x4) at 7x7: 128 channels, 48 KiB a pixel, 0.68 of
# the direct time; 256, 192 KiB, 1.02; 512 1.06; at 14x14 with 256 channels, 48 KiB, 0.69)
MAX_TRANSFORM_BYTES_PER_PIXEL = 64 * 1024


def applies(g: ConvGeometry, tile: int) -> bool:
    """Whether the Winograd kernel with tiles of ``tile`` computes ``g``: 3x3, stride 1, no
    dilation, one group, static sizes, channels (:data:`MIN_CHANNELS`) and an output
    (:data:`MIN_SIZE`) large enough for the tile, and a transform the output's pixels pay
    for (:data:`MAX_TRANSFORM_BYTES_PER_PIXEL`)."""
    static = all(isinstance(v, int) for v in (g.batch, g.height, g.width, g.out_height, g.out_width))
    if not (static and g.kernel == (3, 3) and g.strides == (1, 1) and g.dilation == (1, 1) and g.groups == 1):
        return False
    transform_bytes = (tile + 2) ** 2 * g.channels * g.out_channels * 4
    return (min(g.channels, g.out_channels) >= MIN_CHANNELS[tile]
            and min(g.out_height, g.out_width) >= MIN_SIZE[tile]
            and transform_bytes <= MAX_TRANSFORM_BYTES_PER_PIXEL * g.out_height * g.out_width)


# codegen.winograd_tile (int): the outputs a tile per side, F(4x4, 3x3) (the default: 36
# multiplications per 16 outputs and channel pair where the direct sum has 144; its weight
# stored in 4x the bytes, results within ~1e-5 of the output's magnitude) or F(2x2, 3x3) (16
# per 4 outputs against 36; 16/9 the bytes, ~5e-7)
TILE_CONFIG = "codegen.winograd_tile"
TILES = (2, 4)
DEFAULT_TILE = 4
register_config(TILE_CONFIG, int)


def winograd_tile(ctx: PassContext | None = None) -> int:
    """Config ``codegen.winograd_tile``, checked."""
    ctx = PassContext.current() if ctx is None else ctx
    value = ctx.get_config(TILE_CONFIG, DEFAULT_TILE)
    if isinstance(value, bool) or value not in TILES:
        expected = ", ".join(map(str, TILES))
        raise PassConfigError(f"config {TILE_CONFIG!r} is {value!r}; expected one of {expected}")
    return int(value)


def _int(value: int) -> tir.IntImm:
    return tir.IntImm(int(value), tir.INDEX_DTYPE)


def winograd_conv(g: ConvGeometry, data: tir.Buffer, transform: tir.Buffer, out: tir.Buffer, tile: int,
                  epilogue: Epilogue | None = None) -> tir.Stmt:
    """The statement computing ``out`` (NHWC) from ``data`` (NHWC) and the weight's
    ``transform`` for tiles of ``tile`` x ``tile`` outputs: one call per image, then
    ``epilogue`` over the output as a nest of its own (which the Parallelize pass splits
    over the threads)."""
    image = tir.TVar("n")
    zero = _int(0)
    top, left, _, _ = g.padding
    sizes = (g.height, g.width, g.channels, g.out_channels, top, left, g.out_height, g.out_width, tile)
    loads = (data.load(image, zero, zero, zero), transform.load(zero, zero, zero),
             out.load(image, zero, zero, zero))
    args = (*loads, *(_int(v) for v in sizes))
    call = tir.Evaluate(tir.Intrinsic(WINOGRAD_INTRINSIC, args, "int32"))
    nests = [tir.For(image, zero, _int(g.batch), tir.ForKind.SERIAL, call)]
    if epilogue is not None:
        box = ((image, 1), (zero, g.out_height), (zero, g.out_width), (zero, g.out_channels))
        nests.append(tir.For(image, zero, _int(g.batch), tir.ForKind.SERIAL, epilogue(box)))
    return seq(*nests)


__all__ = ["DEFAULT_TILE", "MAX_TRANSFORM_BYTES_PER_PIXEL", "MIN_CHANNELS", "MIN_SIZE", "TILES",
           "TILE_CONFIG", "applies", "winograd_conv", "winograd_tile"]

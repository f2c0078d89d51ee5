"""A stride-1 3x3 convolution by Winograd's F(2x2, 3x3) (channels-last data, the weight's
transform of :mod:`passinfra.ir.op.winograd_weights`, float32).

One ``rp_winograd`` statement per image (:data:`passinfra.tir.intrinsics.WINOGRAD_INTRINSIC`;
the C runtime's ``rp_winograd_f32`` in ``c/conv_runtime.c``): the runtime cuts the image
into units of whole tile rows (2x2 outputs a tile; about 24 tiles a unit, whose 4x4 input
patches and products stay in L2) by parts of the output channels where the image has few
tile rows, and runs the units on the library's threads; a unit transforms its patches
(adds), runs the 16 points' GEMMs on the convolution microkernels' pointwise tiles and
transforms the products back (adds). The units follow from the shape alone, so every
output is the same sum whatever the thread count. The element-wise epilogue (bias,
activation, residual add) is a nest of its own after the call, which the Parallelize pass
splits like any other.

When it pays (:func:`applies`; kernel alone, one Zen 3 core, AVX2, time against the direct
microkernels, medians of 15 interleaved calls, one thread / two): 3x3 64->64 at 56x56
0.66 / 0.63, 128->32 at 56x56 0.82 / 0.84, 128->128 at 28x28 0.62-0.65 / 0.60-0.68,
256->256 at 14x14 0.63-0.67 / 0.64-0.65, 256->256 at 28x28 0.69 / 0.70, 128->128 at 14x14
0.73 / 0.73, 64->256 at 13x13 0.83 / 0.84, 32->128 at 27x27 0.75 / 0.77, 32->64 at 55x55
0.75 / 0.74, 64->64 at 8x8 0.76 / 0.80, 32->32 at 16x16 0.87 / 0.95. Where it does not: a
7x7 output (16 tiles cover 8x8: 512->512 1.00 / 1.06, 256->256 0.99 / 0.94), fewer than 32
input or output channels (16->64 at 55x55 0.98, 16->16 at 32x32 1.14: the transforms cost
what the GEMMs save). The runtime's unit rule, measured the same way: units over tile rows
re-read the transform, so one larger than 1 MiB is read once per part of the outputs
instead (512->512 at 7x7 with units of one tile row: 1.51 one thread); transforms up to
1 MiB in units of tile rows (128->128 at 28x28: 0.62 against 0.69 as parts).

Numerics: the products are summed in another order and the transforms round, so a result
differs from the direct sum by a few units in the last place of the outputs' magnitude
(max |difference| / max |output| 2-8e-7 against a float64 reference here, the direct
kernel's 5e-7 to 2.4e-6).
"""

from __future__ import annotations

from passinfra import tir
from passinfra.codegen.compute.base import seq
from passinfra.codegen.compute.conv_direct import ConvGeometry, Epilogue
from passinfra.tir.intrinsics import WINOGRAD_INTRINSIC

# input and output channels from which the transforms pay (module docstring)
MIN_CHANNELS = 32
# output rows and columns from which the 2x2 tiles pay: a 7x7 output is 16 tiles covering
# 8x8 (3x3 512->512 and 256->256 at 7x7 ran level with the direct kernel)
MIN_SIZE = 8


def applies(g: ConvGeometry) -> bool:
    """Whether ``g`` is a convolution the Winograd kernel computes: 3x3, stride 1, no
    dilation, one group, static sizes, channels (:data:`MIN_CHANNELS`) and an output
    (:data:`MIN_SIZE`) large enough."""
    static = all(isinstance(v, int) for v in (g.batch, g.height, g.width, g.out_height, g.out_width))
    return (static and g.kernel == (3, 3) and g.strides == (1, 1) and g.dilation == (1, 1) and g.groups == 1
            and g.channels >= MIN_CHANNELS and g.out_channels >= MIN_CHANNELS
            and g.out_height >= MIN_SIZE and g.out_width >= MIN_SIZE)


def _int(value: int) -> tir.IntImm:
    return tir.IntImm(int(value), tir.INDEX_DTYPE)


def winograd_conv(g: ConvGeometry, data: tir.Buffer, transform: tir.Buffer, out: tir.Buffer,
                  epilogue: Epilogue | None = None) -> tir.Stmt:
    """The statement computing ``out`` (NHWC) from ``data`` (NHWC) and the weight's
    ``transform``: one call per image, then ``epilogue`` over the output as a nest of its
    own (which the Parallelize pass splits over the threads)."""
    image = tir.TVar("n")
    zero = _int(0)
    top, left, _, _ = g.padding
    sizes = (g.height, g.width, g.channels, g.out_channels, top, left, g.out_height, g.out_width)
    loads = (data.load(image, zero, zero, zero), transform.load(zero, zero, zero),
             out.load(image, zero, zero, zero))
    args = (*loads, *(_int(v) for v in sizes))
    call = tir.Evaluate(tir.Intrinsic(WINOGRAD_INTRINSIC, args, "int32"))
    nests = [tir.For(image, zero, _int(g.batch), tir.ForKind.SERIAL, call)]
    if epilogue is not None:
        box = ((image, 1), (zero, g.out_height), (zero, g.out_width), (zero, g.out_channels))
        nests.append(tir.For(image, zero, _int(g.batch), tir.ForKind.SERIAL, epilogue(box)))
    return seq(*nests)


__all__ = ["MIN_CHANNELS", "MIN_SIZE", "applies", "winograd_conv"]

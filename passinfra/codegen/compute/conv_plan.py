"""Which kernel computes a 2-D convolution: the rule, per convolution shape.

The lowering (:mod:`passinfra.codegen.lower`) asks :func:`plan_conv2d` first for every
``nn.conv2d``; a float32 convolution in the channels-last layout AlterOpLayout produces
(NHWC data, HWIO weight; 1-D convolutions arrive as 2-D ones over a unit height) gets

* ``"winograd"`` (:mod:`.conv_winograd`) on the AVX2 target for a stride-1 3x3
  convolution with one group, channels and an output large enough and a transform its
  output pays for
  (:func:`.conv_winograd.applies`; config ``codegen.winograd`` off: never);
* ``"microkernel"`` (:mod:`.conv_microkernel`, the C runtime
  :mod:`passinfra.codegen.conv_runtime`) for a depthwise convolution (one input and one
  output channel per group); for a convolution with one group and a kernel wider than
  1x1, unless (with BLAS) it sums fewer than :data:`MICROKERNEL_MIN_REDUCTION` products
  per output into more than :data:`MICROKERNEL_SHORT_SUM_MAX_OUTPUTS` channels (a 3x3
  RGB stem into 64); for a 1x1 with BLAS from :data:`MICROKERNEL_MIN_POINTWISE_CHANNELS`
  input channels into enough output channels, or from
  :data:`MICROKERNEL_MIN_EXPANSION_CHANNELS` expanding them
  :data:`MICROKERNEL_MIN_EXPANSION` times or more into an output of 14x14 or more (without BLAS, from
  :data:`MICROKERNEL_MIN_POINTWISE_CHANNELS_NO_BLAS`); and for a
  grouped one with at least :data:`MICROKERNEL_MIN_GROUP_CHANNELS` channels per group
  whose per-group GEMMs would be one block of rows, or whose groups are wide (the
  constants' comments have the measurements);
* ``"direct"`` (:mod:`.conv_direct`) when each group reads one input channel and has
  several outputs (a channel multiplier), and for every grouped convolution when there
  is no BLAS;
* ``"group_gemm"`` (:mod:`.conv_group_gemm`) for the other grouped convolutions, and
  for a convolution with one group the microkernels leave whose weight is at most
  :data:`SMALL_WEIGHT_BYTES`;
* nothing otherwise: the BLAS planner's im2col + GEMM
  (:func:`passinfra.codegen.gemm.plan_contraction`), or the generic loop nest below its
  size threshold, as before.

Below :data:`~passinfra.codegen.gemm.MIN_GEMM_MACS` multiply-adds no BLAS is called: a
grouped convolution runs direct, one with one group the generic loop nest.

Every other convolution (NCHW, other dtypes) keeps the generic paths. Config
``codegen.conv_kernel`` forces one kernel wherever it applies (``"direct"``,
``"group_gemm"``, ``"microkernel"``, ``"winograd"``: elsewhere the rule's) or turns them
all off (``"none"``); the default ``"auto"`` is this rule.

The rule has a target: the instruction set the library's kernels will run with, config
``codegen.target_isa`` (``"avx512"``, ``"avx2"`` or ``"portable"``; :func:`target_isa`).
A library runs on every x86-64 CPU whatever its target (the microkernels pick their
instruction set at run time); the target decides which kernels it is fastest on. The
measurements below are AVX-512 ones, and the rule above is the AVX-512 (and portable)
target's. With AVX2 the microkernels' tiles differ (8-lane vectors: a block of 16 output
channels is two whole vectors, and a 1x1 convolution has tiles without tap setup) and
OpenBLAS runs its Haswell kernels, so the AVX2 target runs more on the microkernels
(:func:`_avx2_on_microkernels`, measurements at its constants). :func:`passinfra.build`
sets the target once, in the process that starts the build (this machine's instruction
set, capped by ``RAYPASS_MAX_ISA``, unless the config names one), so every worker of a
build compiles for the same target.

The microkernels against im2col + OpenBLAS (one Zen 4 core, AVX-512 on both sides; the
kernels alone, GFLOP/s; module docstring of :mod:`passinfra.codegen.conv_runtime` for
more): 3x3 256->256 at 14x14 104-111 vs 100, 3x3 64->64 at 56x56 103-107 vs 85-88, 3x3
512->512 at 7x7 102 vs 81, 1x1 1024->256 at 14x14 102-108 vs 102, 7x7 stride-2 stem over
3 channels 84 vs 50, 3x3 over 8 channels 89 vs 60. In ResNet-50 the convolutions' time
went from 97.8 to 84.4 ms, one thread. Depthwise, against the direct loop nest (the
kernel table below): 3x3 at 56x56x128 50 vs 21, 5x5 at 28x28x240 71 vs 28, 7x7 at
56x56x96 82 vs 29, 3x3 stride 2 at 112x112x32 39 vs 21.

The measurements behind it: one thread, the best of 10-15 calls of the kernel alone
with its bias + ReLU epilogue, in GFLOP/s. The generated loops are compiled with the
portable default flags, so they use 4-lane SSE vectors, while OpenBLAS picks its
AVX-512 kernels at run time. The machine is a shared 2-core one: ranges are over
repeated runs. ``python -m bench.vs_onnxruntime --kernels`` prints the table (copy in
bench/results_vs_onnxruntime.md); "loop nest" is the generic path.

=========================================  ==========  ======  ==========
convolution (batch 1)                       loop nest   direct  group_gemm
=========================================  ==========  ======  ==========
depthwise 3x3, 56x56x128                    3.8-20      16-22   1.2-2
depthwise 5x5, 28x28x240                    2.0         12-30   1.0-2
depthwise 7x7, 56x56x96                     2.1-2.3     11-29   2.7-3
depthwise 3x3 stride 2, 112x112x32          4.9-20      14-18   1.6
depthwise 3x3 with a x2 multiplier          2.6-6       4.4-5   2.9-3.1
grouped 3x3, 2 channels per group           2.0         3.0-3.6 3.5-5.3
grouped 3x3, 4 per group, 28x28x128         2.3-3       2.6-18  13-21
grouped 3x3, 8 per group, 28x28x64          2.6-3       14-31   29-51
grouped 3x3, 16 per group (RegNet)          2.3         31      63-83
grouped 3x3, 48 per group                   2.2         32      75-89
grouped 1x1, 4 groups of 68 (ShuffleNet)    1.8-2.4     27      81-98
AlexNet conv2 (5x5, 2 groups of 48)         2.0         25-28   87-95
=========================================  ==========  ======  ==========

(The 3x3 depthwise loop nest got faster during this work: its nine taps are now one
expression per output and its channel loop vectorizes, see ``_combined_taps`` in the
lowering.) So the direct kernel wins by 1.2-20x on the stride-1 depthwise shapes; on
the stride-2 one and with a channel multiplier the loop nest was level or ahead in some
runs (20 against 14, 6 against 5), not in others, and the rule keeps one kernel for
every ``Cg == 1`` shape. The direct kernel loses to the per-group GEMM from two input
channels per group on (OpenBLAS's AVX-512 kernels against SSE loops): the rule splits
at ``Cg == 1``.

Convolutions with one group (issue 18 item 3, the resnet20 shapes with 16-64 channels):
the direct kernel (group mode, one group) ran at 25-38 GFLOP/s against 38-88 for
im2col + BLAS, at every shape measured (3x3 at 32x32x16: 33 vs 61-69; 16x16x32: 36 vs
78; 8x8x64: 38 vs 88; 1x1 112x112 16->96: 29 vs 59; the 3->16 stem: 25 vs 38), so it
is never chosen there. The blocked per-group GEMM with one group (blocks of 128 output
pixels, each GEMM's epilogue while its block is in cache) against im2col + BLAS, time
ratio: 0.79 (3x3 16 channels, 9 KiB weight), 0.96 (3x3 32, 36 KiB), 0.83 (1x1 16->96,
6 KiB), 0.76 (1x1 96->24, 9 KiB), 0.79 (3->16 stem, 2 KiB), 0.98 (7x7 3->64 stem, 37
KiB); 0.98-1.04 from 64 KiB to 9 MiB (3x3 at 64-512 channels, ResNet-50's 1x1s). Since
the AVX-512 row tiles, only 1x1 convolutions and short sums into many channels leave the
microkernels, and the blocked GEMM serves them with a small weight at any image size
(1x1 24->144 at 28x28: 93 vs 63 GFLOP/s): :data:`SMALL_WEIGHT_BYTES`. With wider
vectors in the generated code (``-mavx2`` in ``codegen.cflags``) the direct depthwise
kernel ran 1.5-2x faster (25-56 GFLOP/s); the portable default flags do not assume them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from passinfra import tir
from passinfra.codegen.compute.conv_direct import ConvGeometry, Epilogue, direct_conv
from passinfra.codegen.compute.conv_group_gemm import group_gemm_conv
from passinfra.codegen.compute.conv_group_gemm import rows_per_block as group_gemm_rows
from passinfra.codegen.compute.conv_microkernel import PANEL_WIDTH, is_depthwise, microkernel_conv
from passinfra.codegen.compute.conv_winograd import applies as winograd_applies
from passinfra.codegen.compute.conv_winograd import winograd_conv, winograd_tile
from passinfra.codegen.gemm import MIN_GEMM_MACS
from passinfra.ir.attrs import Attrs
from passinfra.ir.op import winograd_weights
from passinfra.runtime.module import CONV_ISA_LEVELS, host_isa
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.errors import PassConfigError

# the dtypes the kernels below are written for (accumulating in the dtype, as the
# generic loop nest does)
DTYPES = ("float32",)

# codegen.conv_kernel (str): "auto" (the rule below), or one kernel for every
# convolution it can compute: "direct", "group_gemm", "microkernel", "winograd", or "none"
# (im2col + BLAS for groups 1, the generic loop nest otherwise) -- for measurements, tests
# and the tuning space
CONV_KERNEL_CONFIG = "codegen.conv_kernel"
CONV_KERNELS = ("auto", "direct", "group_gemm", "microkernel", "winograd", "none")
register_config(CONV_KERNEL_CONFIG, str)
# codegen.winograd (bool, default True): whether the rule runs the convolutions the
# Winograd kernel computes (conv_winograd.applies) on it; off, they stay on the microkernels
WINOGRAD_CONFIG = "codegen.winograd"
register_config(WINOGRAD_CONFIG, bool)
# codegen.target_isa (str): the instruction set the rule picks kernels for, one of
# CONV_ISA_LEVELS (default: this machine's, capped by RAYPASS_MAX_ISA)
TARGET_ISA_CONFIG = "codegen.target_isa"
register_config(TARGET_ISA_CONFIG, str)

# A convolution with one group and a kernel wider than 1x1 runs on the microkernels,
# with BLAS unless it sums fewer than MICROKERNEL_MIN_REDUCTION products per output into
# more than MICROKERNEL_SHORT_SUM_MAX_OUTPUTS channels. The AVX-512 row tiles
# (passinfra.codegen.conv_runtime) made short sums fast into one row tile's channels.
# Kernel alone with bias + ReLU, one thread, GFLOP/s, microkernel vs group_gemm: 3x3
# stride-2 stems at 224x224 into 16, 32, 64 channels: 69/55, 82/57, 81/82 (SqueezeNet's
# into 64: 0.52 vs 0.47 ms); 3x3 over 8 channels into 32 at 56x56: 94/91; 3x3 stride 2
# 16->16 at 112x112: 94/88; the 7x7 stem (147 products): 88/81.
MICROKERNEL_MIN_REDUCTION = 75
MICROKERNEL_SHORT_SUM_MAX_OUTPUTS = 32
# A 1x1 one sums only C products per output; with BLAS it runs on the microkernels from
# MICROKERNEL_MIN_POINTWISE_CHANNELS input channels into at least
# MICROKERNEL_MIN_POINTWISE_OUTPUTS output channels whose last vector of 16 is at least
# 7/8 full (a masked tail costs a whole vector), else as the blocked per-row GEMM (a
# weight up to SMALL_WEIGHT_BYTES) or one im2col + GEMM per image. Microkernel /
# group_gemm / im2col + BLAS, GFLOP/s: 256->64 at 56x56 107/95/94, 256->32 at 27x27
# 107/91/89, 384->48 at 13x13 99/92/92, 128->512 at 28x28 103/99/92, 512->128 105/101/95,
# 576->96 at 7x7 105/86/88, 480->80 at 14x14 104/95/95, SqueezeNet's classifier 512->1000
# at 13x13 1.65/2.23/- ms; against, fewer input channels: 64->256 at 56x56 97/93/87,
# 64->64 96/108/102, 96->576 at 7x7 93/102/105, 80->480 at 14x14 92/97/97, 40->120 at
# 28x28 75/96/78, 24->144 62/93/63, 16->64 at 56x56 74/84/72; a tail or one vector:
# 144->24 at 56x56 78/104/100, 96->24 69/97/93, 240->40 at 14x14 83/105/107, 128->16 at
# 55x55 97/109/107. Without BLAS a 1x1 runs on the microkernels from
# MICROKERNEL_MIN_POINTWISE_CHANNELS_NO_BLAS input channels (else the loop nest)
MICROKERNEL_MIN_POINTWISE_CHANNELS = 128
MICROKERNEL_MIN_POINTWISE_OUTPUTS = 32
# ... and from MICROKERNEL_MIN_EXPANSION_CHANNELS input channels when it expands them at
# least MICROKERNEL_MIN_EXPANSION times (a bottleneck's or an inverted residual's 1x1 out):
# alone such a kernel measured level or slower on the microkernels (the table above), but in
# the model the BLAS paths write the large output and then pass over it again for the bias,
# residual and activation, which the microkernels apply in registers. In-model kernel times
# (Module.profile, 9 interleaved rounds), an Intel Xeon with AVX-512, microkernels / BLAS:
# ResNet-50's 64->256 at 56x56 0.76-0.81 (projection) and 0.85 (with the residual), one
# thread and two; EfficientNet-B0-like's 80->480 and 112->672 at 14x14 0.87-0.89. From
# MICROKERNEL_MIN_EXPANSION_PIXELS output pixels: a 7x7 output stays in the cache between
# the two passes (not measured in a model; alone 96->576 at 7x7 ran 93/102/105 GFLOP/s)
MICROKERNEL_MIN_EXPANSION_CHANNELS = 64
MICROKERNEL_MIN_EXPANSION = 4
MICROKERNEL_MIN_EXPANSION_PIXELS = 14 * 14
MICROKERNEL_MIN_POINTWISE_CHANNELS_NO_BLAS = 32
# the blocked per-row GEMM repacks the weight per block of rows: up to this size it is
# faster than one im2col + GEMM per image (up to 1.5x: 24->144 at 28x28, 93 vs 63
# GFLOP/s), beyond it level or slower (64->256 at 56x56 93 vs 87, 96->576 at 7x7 102 vs
# 105, 512->1000 at 13x13 2.23 ms against 1.65 on the microkernels)
SMALL_WEIGHT_BYTES = 48 * 1024
# a grouped convolution runs on the microkernels when its groups have at least this many
# input channels (4 per group ran at 11 GFLOP/s there against 21 as per-group GEMMs, 8 at
# 30 against 48) and either the per-group GEMMs would be one block of rows (a 14x14 or
# 7x7 output: one thread only, where the microkernels split the groups over the threads),
# or the groups are wide: AlexNet's two groups of 128-192 outputs ran at 101-107 against
# 92-95, RegNet's groups of 16 at 70 against 86 (one thread)
MICROKERNEL_MIN_GROUP_CHANNELS = 16
MICROKERNEL_MIN_GROUP_OUTPUTS = 64
MICROKERNEL_MIN_GROUP_REDUCTION = 256
# The AVX2 target (one Zen 3 core, AVX2 + FMA; OpenBLAS's Haswell kernels; kernel alone
# with bias + ReLU, GFLOP/s, microkernel / the AVX-512 rule's pick, best of 7-9
# interleaved rounds, one thread and two) runs every convolution on the microkernels but
# a channel multiplier (one input channel a group into several outputs: the direct loop
# nest, 17.6 us against 25.8 per-group GEMMs and 32.6 microkernels for 8 groups of 3 at
# 14x14). Grouped, from AVX2_MIN_GROUP_CHANNELS channels a group: RegNet's groups of 16,
# 3x3 stride 2 at 112x112 57/44, 2 threads; at 28x28 79/53, stride 2 at 56x56 51/32;
# fewer channels a group, where the per-group GEMMs are short (model in-process, conv
# kernels' time in it, us, microkernel / per-group GEMMs, one thread and two):
# ShuffleNet's 1x1 of 4 groups of 6 into 28 at 56x56 159/317 and 85/170, 4 of 4 into 16
# 102/348, 4 of 8 into 32 136/201, 8 of 8 into 16 at 28x28 68/177, 2 of 4 into 8 at
# 112x112 77/353, 3x3 4 of 6 into 28 at 56x56 652/882, 8 of 8 into 8 820/1181, 2 a group:
# 3x3 16 of 2 at 56x56 797/843, 1x1 8 of 2 into 8 64/342. One group, 1x1 (96->576 at
# 7x7 80/70 one thread, 95/76 two; 40->240 at 14x14 76/62, 94/44; 16->72 at 56x56 61/48,
# 82/85; 24->96 at 28x28 45/37, 95/78; 48->288 at 14x14 74/65, 120/105; 64->256 at 56x56
# 86/76, 119/108; outputs that leave the AVX-512 rule a short last vector are whole AVX2
# vectors: 144->24 at 56x56 86/73, 150/125; 128->16 83/64, 136/106; the one shape
# measured slower: 240->40 at 14x14, 72-77/77 and 75-100/81-88, whose last block of 8
# channels keeps 6 accumulators), and 1x1 of few input channels (us, microkernel / BLAS:
# 8->64 at 56x56 69/93, 3->32 at 112x112 93/149, 12->512 at 14x14 58/109). Short-sum
# stems, which the AVX-512 rule leaves to BLAS (us: 3->64 3x3 at 224x224 2960/3967, at
# 112x112 693/846, 1->64 at 128x128 940/1178, 1->32 253/434, 8->64 at 56x56 477/568).
AVX2_MIN_GROUP_CHANNELS = 2
# the targets whose rule runs the stride-1 3x3 convolutions :func:`.conv_winograd.applies`
# takes by Winograd's F(4x4, 3x3) (or F(2x2, 3x3): ``codegen.winograd_tile``;
# :mod:`.conv_winograd`, measurements there): AVX2, and AVX-512, where the products run on
# the AVX-512 tiles (an AMD EPYC Zen 4, one thread: light ResNet-50 15.8 -> 12.7 ms,
# bench/results_vs_onnxruntime_avx512_cpu.md; the transforms were AVX2 code then, 16-lane
# vectors since, which made an Intel Xeon's 14x14 and 28x28 layers 0.86-0.89 of that); the
# portable target's tiles are 4x8 of scalar products
WINOGRAD_ISAS = ("avx2", "avx512")
# On AVX-512, whose microkernels have twice AVX2's lanes, only where its per-point products
# are long, its work large and its tiles cover the output without much waste: from
# WINOGRAD_AVX512_MIN_CHANNELS input channels, WINOGRAD_AVX512_MIN_MACS multiply-adds, and
# at most WINOGRAD_AVX512_MAX_TILE_WASTE times the output's pixels in whole tiles (13x13 is
# 16x16 of 4x4 tiles: 1.51; 14x14 1.31). In-model kernel times on an Intel Xeon
# (Module.profile, 9-11 interleaved rounds, one thread / two), microkernels / Winograd:
# kept: ResNet-50's 64 at 56x56 1.42 and 128 at 28x28 1.34, Inception v2's 14x14 layers of
# 64-192 channels 1.03-1.27, 256 at 14x14 0.97; not: SqueezeNet's 16->64 at 55x55 0.89 /
# 0.86, its 48->192 and 64->256 at 13x13 0.83 / 0.77-0.84; resnet20's 16 at 32x32, 32 at
# 16x16 and 64 at 8x8 (2.4M multiply-adds each) 0.77 / 0.68 together, the whole model 0.58
# at two threads; DenseNet-121's 128->32 at 14x14 (7.2M) 0.65 and at 7x7 0.45
WINOGRAD_AVX512_MIN_CHANNELS = 32
WINOGRAD_AVX512_MIN_MACS = 10_000_000
WINOGRAD_AVX512_MAX_TILE_WASTE = 1.35


@dataclass(frozen=True)
class ConvPlan:
    """A kernel for one convolution, in the shape of :class:`passinfra.codegen.gemm.GemmPlan`
    (the lowering treats both alike): ``emit(inputs, out, new_buffer, epilogue=None)``
    returns the statement and the scratch buffers it allocated (the lowering finds the
    BLAS and microkernel calls in the statement, which decide what the library links)."""

    op_name: str
    kind: str  # "direct", "group_gemm", "microkernel" or "winograd"
    emit: Callable[..., tuple[tir.Stmt, list[tir.Buffer]]]
    # output channels per panel in which the kernel can read a weight stored in panels
    # (passinfra.ir.op.weight_panels; the microkernels with one group), 0: HWIO only
    panels: int = 0
    # takes a weight in panels of any width PanelWeights stored (the Winograd plan: its
    # transform, or, where PanelWeights planned another kernel, the microkernels' panels)
    takes_panels: bool = False
    # the Winograd plan's outputs a tile per side (its weight's transform: F(tile x tile, 3x3))
    winograd_tile: int = 0


def _emit_direct(geometry: ConvGeometry, inputs: Sequence[tir.Buffer], out: tir.Buffer, new_buffer: Callable,
                 epilogue: Epilogue | None = None) -> tuple[tir.Stmt, list[tir.Buffer]]:
    data, weight = inputs
    return direct_conv(geometry, data, weight, out, epilogue), []


def _emit_group_gemm(geometry: ConvGeometry, inputs: Sequence[tir.Buffer], out: tir.Buffer,
                     new_buffer: Callable,
                     epilogue: Epilogue | None = None) -> tuple[tir.Stmt, list[tir.Buffer]]:
    data, weight = inputs
    if data.dtype != "float32" or weight.dtype != "float32":
        # the lowering hands a float16 weight over in place (mixed precision): sgemm cannot
        # read it, the direct kernel's loads widen it
        return _emit_direct(geometry, inputs, out, new_buffer, epilogue)
    return group_gemm_conv(geometry, data, weight, out, new_buffer, epilogue)


def _emit_winograd(geometry: ConvGeometry, tile: int, inputs: Sequence[tir.Buffer], out: tir.Buffer,
                   new_buffer: Callable,
                   epilogue: Epilogue | None = None) -> tuple[tir.Stmt, list[tir.Buffer]]:
    data, weight = inputs
    if tuple(int(n) for n in weight.shape) == winograd_weights.winograd_shape(geometry.channels,
                                                                              geometry.out_channels, tile):
        return winograd_conv(geometry, data, weight, out, tile, epilogue), []
    # the weight as it is, or in the microkernels' panels (not a constant PanelWeights
    # transformed for this kernel)
    return _emit_microkernel(geometry, inputs, out, new_buffer, epilogue)


def _emit_microkernel(geometry: ConvGeometry, inputs: Sequence[tir.Buffer], out: tir.Buffer,
                      new_buffer: Callable,
                      epilogue: Epilogue | None = None) -> tuple[tir.Stmt, list[tir.Buffer]]:
    data, weight = inputs
    if data.dtype != "float32" or weight.dtype != "float32":
        return _emit_direct(geometry, inputs, out, new_buffer, epilogue)  # a 16-bit weight in place
    return microkernel_conv(geometry, data, weight, out, epilogue), []


def conv_kernel_setting(ctx: PassContext | None = None) -> str:
    """Config ``codegen.conv_kernel``, checked (default ``"auto"``)."""
    ctx = PassContext.current() if ctx is None else ctx
    value = ctx.get_config(CONV_KERNEL_CONFIG, "auto")
    if value not in CONV_KERNELS:
        raise PassConfigError(f"config {CONV_KERNEL_CONFIG!r} is {value!r}; expected one of "
                              f"{', '.join(CONV_KERNELS)}")
    return value


def target_isa(ctx: PassContext | None = None) -> str:
    """Config ``codegen.target_isa``, checked; unset, this machine's instruction set
    (:func:`passinfra.runtime.module.host_isa`)."""
    ctx = PassContext.current() if ctx is None else ctx
    value = ctx.get_config(TARGET_ISA_CONFIG, None)
    if value is None:
        return host_isa()
    if value not in CONV_ISA_LEVELS:
        raise PassConfigError(f"config {TARGET_ISA_CONFIG!r} is {value!r}; expected one of "
                              f"{', '.join(CONV_ISA_LEVELS)}")
    return value


def _avx2_on_microkernels(g: ConvGeometry) -> bool:
    """Whether the AVX2 target runs a convolution on the microkernels: every one with one
    group, and grouped ones of :data:`AVX2_MIN_GROUP_CHANNELS` channels a group or more
    (the measurements there)."""
    return g.groups == 1 or g.group_channels >= AVX2_MIN_GROUP_CHANNELS


def _winograd_pays_on_avx512(g: ConvGeometry) -> bool:
    """Whether the AVX-512 rule runs a convolution Winograd applies to by it (the
    constants' comment has the measurements)."""
    tile = winograd_tile()
    tiled = -(-g.out_height // tile) * tile * -(-g.out_width // tile) * tile
    return (g.channels >= WINOGRAD_AVX512_MIN_CHANNELS and g.macs >= WINOGRAD_AVX512_MIN_MACS
            and tiled <= WINOGRAD_AVX512_MAX_TILE_WASTE * g.out_height * g.out_width)


def _one_group_on_microkernels(g: ConvGeometry, use_blas: bool) -> bool:
    """Whether a convolution with one group runs on the microkernels (the constants'
    comment has the measurements)."""
    if g.kernel != (1, 1):
        return (not use_blas or g.reduction >= MICROKERNEL_MIN_REDUCTION
                or g.out_channels <= MICROKERNEL_SHORT_SUM_MAX_OUTPUTS)
    if not use_blas:
        return g.channels >= MICROKERNEL_MIN_POINTWISE_CHANNELS_NO_BLAS
    unused_lanes = -g.out_channels % 16  # of the last vector of 16 channels
    expands = (g.channels >= MICROKERNEL_MIN_EXPANSION_CHANNELS
               and g.out_channels >= MICROKERNEL_MIN_EXPANSION * g.channels
               and g.out_height * g.out_width >= MICROKERNEL_MIN_EXPANSION_PIXELS)
    return ((g.channels >= MICROKERNEL_MIN_POINTWISE_CHANNELS or expands)
            and g.out_channels >= MICROKERNEL_MIN_POINTWISE_OUTPUTS and 8 * unused_lanes <= g.out_channels)


def choose_kernel(g: ConvGeometry, use_blas: bool, isa: str = "avx512") -> str:
    """``"winograd"``, ``"microkernel"``, ``"direct"``, ``"group_gemm"`` or ``"none"`` for a
    float32 NHWC/HWIO convolution on target ``isa`` (the rule of the module docstring)."""
    if is_depthwise(g):
        return "microkernel"
    if g.group_channels == 1 and g.groups > 1:
        return "direct"  # a channel multiplier
    winograd_on = PassContext.current().get_config(WINOGRAD_CONFIG, True)
    if isa in WINOGRAD_ISAS and winograd_on and winograd_applies(g, winograd_tile()) and (
            isa != "avx512" or _winograd_pays_on_avx512(g)):
        return "winograd"
    if isa == "avx2" and _avx2_on_microkernels(g):
        return "microkernel"
    if g.groups == 1 and _one_group_on_microkernels(g, use_blas):
        return "microkernel"
    if g.groups > 1 and g.group_channels >= MICROKERNEL_MIN_GROUP_CHANNELS:
        # one block of rows per image: the per-group GEMMs would run on one thread, the
        # microkernels split the groups over the threads; wide groups: they are faster
        single_block = g.batch == 1 and group_gemm_rows(g) == g.out_height
        wide = (g.group_outputs >= MICROKERNEL_MIN_GROUP_OUTPUTS
                and g.reduction >= MICROKERNEL_MIN_GROUP_REDUCTION)
        if single_block or wide or not use_blas:
            return "microkernel"
    if not use_blas or g.macs < MIN_GEMM_MACS:  # no BLAS, or too little work to call it
        return "none" if g.groups == 1 else "direct"
    if g.groups == 1:
        kh, kw = g.kernel
        return "group_gemm" if kh * kw * g.channels * g.out_channels * 4 <= SMALL_WEIGHT_BYTES else "none"
    return "group_gemm"


def panel_width(g: ConvGeometry) -> int:
    """The output channels per panel in which the microkernels read ``g``'s weight
    (:mod:`passinfra.ir.op.weight_panels`), 0 for HWIO as it is. One group:
    :data:`PANEL_WIDTH`. Grouped: a group's outputs when they fit one panel (a group is
    then exactly one panel: RegNet's groups of 16), :data:`PANEL_WIDTH` when they are whole
    panels; in HWIO a group's weight is short runs a row of every group's outputs apart,
    which the prefetcher does not stream (RegNet's 3x3 at 7x7x384 with its 221 KiB weight
    cold took 1.6x its time with the weight in cache). Depthwise: none (its own kernel)."""
    if is_depthwise(g):
        return 0
    if g.groups == 1 or g.group_outputs % PANEL_WIDTH == 0:
        return PANEL_WIDTH
    return g.group_outputs if g.group_outputs < PANEL_WIDTH else 0


def plan_conv2d(attrs: Attrs, in_shapes: Sequence[tuple[int, ...]], dtype: str, out_shape: tuple[int, ...],
                use_blas: bool) -> ConvPlan | None:
    """The kernel for an ``nn.conv2d``, or None to leave it to the BLAS planner
    (:func:`passinfra.codegen.gemm.plan_contraction`) and the generic loop nest."""
    setting = conv_kernel_setting()
    if setting == "none" or dtype not in DTYPES or len(in_shapes) != 2:
        return None
    if (attrs["data_layout"], attrs["kernel_layout"]) != ("NHWC", "HWIO"):
        return None
    geometry = ConvGeometry.of(attrs, in_shapes[0], in_shapes[1], out_shape)
    kind = choose_kernel(geometry, use_blas, target_isa()) if setting == "auto" else setting
    if kind == "winograd" and (setting == "auto" or winograd_applies(geometry, winograd_tile())):
        tile = winograd_tile()
        emit = functools.partial(_emit_winograd, geometry, tile)
        return ConvPlan("nn.conv2d", "winograd", emit, takes_panels=True, winograd_tile=tile)
    if kind == "winograd":  # forced where it does not apply: the rule's kernel
        kind = choose_kernel(geometry, use_blas, target_isa())
    if kind == "group_gemm" and not use_blas:
        kind = "direct"  # no BLAS library (or codegen.blas off): the kernel needing none
    if kind == "microkernel":
        emit = functools.partial(_emit_microkernel, geometry)
        return ConvPlan("nn.conv2d", "microkernel", emit, panel_width(geometry) if dtype == "float32" else 0)
    if kind == "direct":
        return ConvPlan("nn.conv2d", "direct", functools.partial(_emit_direct, geometry))
    if kind == "group_gemm":
        emit = functools.partial(_emit_group_gemm, geometry)
        return ConvPlan("nn.conv2d", "group_gemm", emit)
    return None


__all__ = ["CONV_KERNELS", "CONV_KERNEL_CONFIG", "ConvPlan", "DTYPES", "MICROKERNEL_MIN_GROUP_CHANNELS",
           "MICROKERNEL_MIN_GROUP_OUTPUTS", "MICROKERNEL_MIN_GROUP_REDUCTION",
           "MICROKERNEL_MIN_POINTWISE_CHANNELS", "MICROKERNEL_MIN_POINTWISE_CHANNELS_NO_BLAS",
           "MICROKERNEL_MIN_POINTWISE_OUTPUTS", "MICROKERNEL_MIN_REDUCTION",
           "MICROKERNEL_SHORT_SUM_MAX_OUTPUTS", "SMALL_WEIGHT_BYTES", "TARGET_ISA_CONFIG",
           "AVX2_MIN_GROUP_CHANNELS", "WINOGRAD_CONFIG",
           "WINOGRAD_ISAS", "choose_kernel", "conv_kernel_setting", "plan_conv2d", "target_isa"]

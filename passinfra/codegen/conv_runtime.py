"""The convolution microkernels: a C runtime object linked into libraries that need it.
Its C is ``c/conv_runtime.c``; this module holds its tunables (``runtime_defines``),
compiles it once per compiler settings, and renders the kernels' calls of it.

A float32 convolution with one group in the channels-last layout (NHWC data, HWIO
weight) is the GEMM ``out[pixels, OC] = im2col(data)[pixels, KH*KW*C] x weight[KH*KW*C,
OC]`` whose left operand is never built. Each call of ::

    int rp_conv2d_f32(const float* image, const float* weight, float* out,
                      int64_t H, int64_t W, int64_t C, int64_t OC, int64_t KH, int64_t KW,
                      int64_t stride_h, int64_t stride_w, int64_t dilation_h, int64_t dilation_w,
                      int64_t pad_top, int64_t pad_left, int64_t OW, int64_t first, int64_t count,
                      int64_t groups, int64_t panel);

computes output pixels ``first .. first+count`` (flat ``oy*OW + ox`` indices) of one
image, every output channel, into ``out`` (the first of those pixels; pixel stride
``OC``); with ``groups`` > 1, group ``g`` reads input channels ``g*C/groups ..`` and
writes output channels ``g*OC/groups ..`` (HWIO: the weight's columns). ``panel`` is 0
for an HWIO weight read in place, or ``B`` for a weight stored in panels of ``B`` output
channels (``[ceil(OC/B), KH*KW*C/groups, B]``, a group's outputs one panel or whole
panels; :mod:`passinfra.ir.op.weight_panels`):
a block of output channels then reads one contiguous run of memory instead of ``KH*KW*C``
rows ``OC`` floats apart, which the hardware prefetcher streams from memory (ResNet-50's
3x3 512->512 at 7x7 with its weight cold: 72 -> 93 GFLOP/s; 1x1 2048->512: 69 -> 100). The
lowering
(:mod:`passinfra.codegen.compute.conv_microkernel`) calls it per block of output rows,
so the Parallelize pass runs blocks on different threads; a call with a large weight
covers the image and the runtime splits it over the threads itself, by group, channel
block and pixels.

How a call computes: per block of output channels (two vectors) and *tile* of output
pixels, the tile's accumulators stay in vector registers while the loop runs over the
input channels, the tap rows and the tap columns; each step loads the weight row once (the
output channel is HWIO's innermost axis) and broadcasts one input value per pixel
against it. Each pixel of a tile reads the input through its own pointer per tap, so a
tile may span output rows, and a tap outside the image reads a row of zeros (a tap row
outside the image for every pixel of a tile is skipped): padding needs no copy. This
is the blocking of a GEMM microkernel (MLAS's and BLIS's), without the packing: the
weight is read in place and the input windows are never copied. Measured against
im2col + OpenBLAS sgemm on one Zen 4 core (AVX-512), GFLOP/s: 3x3 256->256 at 14x14
111 vs 100; 3x3 64->64 at 56x56 107 vs 85; 1x1 1024->256 at 14x14 108 vs 102; 3x3
512->512 at 7x7 103 vs 81; 3x3 64->64 at 224x224 99 vs 59 (im2col of a large image
leaves the cache).

The instruction set is picked at run time, once, from what the CPU and OS support:
AVX-512F (tiles of 8 pixels x 32 channels; on pixels of one output row, 12 x 32 and
16 x 16, whose pixels share their input pointers), AVX2 + FMA (3 x 32; 6 x 16 for blocks
of up to 16 channels; on pixels of one output row inside the image, the same shapes with
shared input pointers; a pointwise convolution's tiles without tap setup), or portable C
(4 x 8; no fused multiply-add). The AVX-512 and AVX2 variants accumulate every output in the
same order with the same fused multiply-adds, so they give identical bits; the portable
variant rounds each product, as the generic loop nests do. ``raypass_conv_isa(level)``
(exported; ``Module.conv_isa`` calls it) forces a level for tests and measurements
(``-1``: only report; the level in effect is returned, capped at what the CPU supports),
numbered as :data:`CONV_ISA_LEVELS`. The environment variable ``RAYPASS_MAX_ISA``
(``portable`` or ``avx2``; :data:`passinfra.runtime.module.MAX_ISA_ENV`) caps what the CPU
supports, read once per library at its first convolution: an AVX-512 machine then runs
exactly the code a CPU without AVX-512 runs (the suite's AVX2-only mode); ``avx2`` means
AVX2 and FMA only, so the integer GEMM's AVX-VNNI body (``c/qgemm.c``, which the AVX2
level runs on a CPU that has AVX-VNNI) is off too.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future

from passinfra.codegen.c import read_c_file
from passinfra.codegen.c_intrinsics import IntrinsicRenderer, KernelLibrary, register_intrinsic_renderer
from passinfra.codegen.cc_driver import CompileResult, CompilerSettings, compile_c_result
from passinfra.codegen.transform.parallelize import GEMM_MACS_PER_WORK
from passinfra.interrupts import wait_for
from passinfra.runtime.module import CONV_ISA_LEVELS
from passinfra.tir.intrinsics import (
    CONV_INTRINSIC,
    CONV_SIZE_ARGS,
    DEPTHWISE_CONV_INTRINSIC,
    LOOKUP_INTRINSIC,
    MATMUL_NBITS_INTRINSIC,
    QCONV_INTRINSIC,
    QGEMM_ARGUMENTS,
    QGEMM_INTRINSIC,
    QGEMM_RESIDUAL_ARGUMENTS,
    WINOGRAD_INTRINSIC,
    ConvEpilogue,
)

RUNTIME_SYMBOL = "raypass_conv_runtime"
CONV_FUNCTION = "rp_conv2d_f32"
# the same with an element-wise epilogue applied as the outputs are stored
CONV_EPILOGUE_FUNCTION = "rp_conv2d_f32_epi"
DEPTHWISE_EPILOGUE_FUNCTION = "rp_dwconv2d_f32_epi"
DEPTHWISE_FUNCTION = "rp_dwconv2d_f32"
# a stride-1 3x3 convolution by Winograd's F(m x m, 3x3) (passinfra.codegen.compute.conv_winograd)
WINOGRAD_FUNCTION = "rp_winograd_f32"
# input channels per pass over the tiles of a span: every tile of the span sums one
# chunk before the next begins (keeping its partial sums in the output), so the chunk's
# weight rows (CHANNEL_CHUNK * KH*KW rows of the output-channel block) stay in L2 for
# all of them. Each output sums its taps chunk by chunk: the size fixes the order
CHANNEL_CHUNK = 256
# zeros a tap outside the image reads: a chunk of channels, or a merged row of taps
# (KW * C values) up to this many
ZERO_RUN = 2048
# floats of the window copy a 16-pixel row tile at the image's border reads (32 KiB of stack)
ROW_WINDOW = 8192
# output pixels per unit of work a thread takes (a multiple of every tile width: 8, 6, 4)
UNIT_PIXELS = 48
# multiply-adds per work unit of the thread pool (about a nanosecond of one core): the
# Parallelize pass's estimate for a GEMM
MACS_PER_WORK = GEMM_MACS_PER_WORK

# what a kernel calling the runtime declares
DECLARATION = "\n".join(f"""\
extern int {name}(const float* image, const float* weight, float* out, int64_t H, int64_t W,
    int64_t C, int64_t OC, int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
    int64_t pt, int64_t pl, int64_t OW, int64_t first, int64_t count, int64_t groups, int64_t panel);"""
    for name in (CONV_FUNCTION, DEPTHWISE_FUNCTION)) + f"""
extern int {CONV_EPILOGUE_FUNCTION}(const float* image, const float* weight, float* out, int64_t H, int64_t W,
    int64_t C, int64_t OC, int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
    int64_t pt, int64_t pl, int64_t OW, int64_t first, int64_t count, int64_t groups, int64_t panel,
    int64_t flags, float p0, float p1, const float* bias, const float* residual);
extern int {DEPTHWISE_EPILOGUE_FUNCTION}(const float* image, const float* weight, float* out, int64_t H,
    int64_t W, int64_t C, int64_t OC, int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
    int64_t pt, int64_t pl, int64_t OW, int64_t first, int64_t count, int64_t groups, int64_t panel,
    int64_t flags, float p0, float p1, const float* bias, const float* residual);
extern int {WINOGRAD_FUNCTION}(const float* image, const float* transform, float* out, int64_t H, int64_t W,
    int64_t C, int64_t OC, int64_t pt, int64_t pl, int64_t OH, int64_t OW, int64_t m);"""

# after runtime_defines(); the weight-only quantized matmul (c/matmul_nbits.c) shares the
# object: one compile, and the instruction-set choice (raypass_conv_isa) of both
_SOURCE = read_c_file("conv_runtime.c") + read_c_file("matmul_nbits.c") + read_c_file("qgemm.c")
MATMUL_NBITS_FUNCTION = "rp_matmul_nbits_f32"
MATMUL_NBITS_DECLARATION = (f"extern int {MATMUL_NBITS_FUNCTION}(const float* A, const uint8_t* codes, "
                            "const float* scales, const uint8_t* zp, float* out, int64_t M, int64_t N, "
                            "int64_t K, int64_t block, int64_t bits);")
# the integer matmul (c/qgemm.c), in the same object
QGEMM_FUNCTION, QCONV_FUNCTION = "rp_qgemm_i8", "rp_qconv_i8"
# the variants with a residual add (_add), a lookup table (_lut) or both (_add_lut)
QGEMM_VARIANTS = ("", "_add", "_lut", "_add_lut")
_QGEMM_RESIDUAL = ("const void* residual, float lhs_scale, int64_t lhs_zero, float rhs_scale, "
                   "int64_t rhs_zero, float add_scale, int64_t add_zero, int64_t residual_first")
_QGEMM_EPILOGUE = ("const void* bias, const void* multiplier, const void* out_zero, int64_t bias_kind, "
                   "int64_t multiplier_step, int64_t out_type")
_QGEMM_MATRIX = ("const void* A, const void* B, const void* za, const void* zb, "
                 "void* out, int64_t M, int64_t N, int64_t K, int64_t a_signed, int64_t b_signed, "
                 "int64_t za_step, int64_t zb_step, int64_t b_packed, int64_t groups")
_QGEMM_IMAGE = ("const void* image, const void* B, const void* za, const void* zb, "
                "void* out, int64_t batch, int64_t height, int64_t width, int64_t channels, "
                "int64_t out_height, int64_t out_width, int64_t kh, int64_t kw, int64_t sh, int64_t sw, "
                "int64_t dh, int64_t dw, int64_t top, int64_t left, int64_t N, int64_t groups, "
                "int64_t a_signed, int64_t b_signed, int64_t zb_step, int64_t b_packed")


def _qgemm_variant(name: str, variant: str) -> str:
    """The name of a variant of a ``rp_q*_i8`` entry point."""
    return name.replace("_i8", f"{variant}_i8")


QGEMM_DECLARATION = "\n".join(
    f"extern int {_qgemm_variant(function, variant)}({parameters}, {_QGEMM_EPILOGUE}"
    + (f", {_QGEMM_RESIDUAL}" if "add" in variant else "")
    + (", const void* table" if "lut" in variant else "") + ");"
    for function, parameters in ((QGEMM_FUNCTION, _QGEMM_MATRIX), (QCONV_FUNCTION, _QGEMM_IMAGE))
    for variant in QGEMM_VARIANTS)
# a take of a table of 256 bytes by uint8 indices (c/qgemm.c), in the same object
LOOKUP_FUNCTION = "rp_lookup_u8"
LOOKUP_DECLARATION = (f"extern int {LOOKUP_FUNCTION}(const void* table, const void* indices, void* out, "
                      "int64_t count);")


def runtime_defines() -> dict[str, int]:
    """The macros ``c/conv_runtime.c`` needs: this module's tunables."""
    return {"RP_CHANNEL_CHUNK": CHANNEL_CHUNK, "RP_UNIT_PIXELS": UNIT_PIXELS,
            "RP_MACS_PER_WORK": MACS_PER_WORK, "RP_ZERO_RUN": ZERO_RUN, "RP_ROW_WINDOW": ROW_WINDOW}


def runtime_source() -> str:
    """The C source of the runtime object: ``c/conv_runtime.c`` after its macros."""
    return "".join(f"#define {name} {value}\n" for name, value in runtime_defines().items()) + _SOURCE


# Compiling the runtime takes ~2.5 s (three instruction sets of unrolled tiles), once per
# compiler settings and cache. A build starts it in the background when its first kernel
# that calls the runtime is compiled (CompileC), so it overlaps the kernels' compiles
# instead of adding to the link at the end (DenseNet-121's cold build: 8.7 s without it)
_compiles: dict[CompilerSettings, Future] = {}
_compiles_lock = threading.Lock()


def _forget_in_child() -> None:
    """A forked child has no compile thread: a future of the parent's would never finish."""
    global _compiles_lock
    _compiles.clear()
    _compiles_lock = threading.Lock()


def _compile_in_background(settings: CompilerSettings) -> Future:
    """The runtime's compile on a thread of its own, which ends with the compile. Not a
    ThreadPoolExecutor: a Ctrl-C that lands inside ``submit`` can leave the pool's thread
    started but unregistered, waiting for work forever, and the interpreter's exit waits
    for it (seen as an interrupted ``raypass compile`` that never exited)."""
    future: Future = Future()

    def compile_runtime() -> None:
        future.set_running_or_notify_cancel()
        try:
            future.set_result(compile_c_result(runtime_source(), settings, RUNTIME_SYMBOL))
        except BaseException as error:  # noqa: BLE001  (handed to whoever waits for it)
            future.set_exception(error)

    threading.Thread(target=compile_runtime, name="raypass-conv-runtime").start()
    return future


os.register_at_fork(after_in_child=_forget_in_child)


# False in a scheduler's worker process (workers.actor): the driver links, and a worker
# killed at shutdown in the middle of the compile would leave the compiler's temporary
# directory behind (and spend a core on it while the kernels compile)
_prefetch = True


def disable_prefetch() -> None:
    """Never start the runtime's compile ahead of the link in this process."""
    global _prefetch
    _prefetch = False


def prefetch_runtime_compile(settings: CompilerSettings) -> None:
    """Start the runtime's compile in the background, unless this process is a worker."""
    if _prefetch:
        start_runtime_compile(settings)


# where the runtime's object is cached when set (else in the build's own cache): a machine
# that builds into many cache directories (CI jobs, a test run's fresh directory per test)
# compiles the runtime once instead of once per directory
RUNTIME_CACHE_ENV = "RAYPASS_RUNTIME_CACHE_DIR"


def runtime_settings(settings: CompilerSettings) -> CompilerSettings:
    """The settings the runtime compiles under for a build with ``settings``.

    The object cache is used even under ``codegen.no_cache``: that switch makes a build
    compile every kernel of its model again, and the runtime is no kernel of a model but
    a part of raypass, the same for every model (as OpenBLAS is). Compiling it again on
    every ``--no-cache`` build cost 2.5 s of CPU, which on two cores shared with the pool's
    workers made a warm-pool compile of DenseNet-121 1.6 s slower."""
    cache_dir = os.environ.get(RUNTIME_CACHE_ENV) or settings.cache_dir
    return dataclasses.replace(settings, use_cache=True, cache_dir=cache_dir)


def start_runtime_compile(settings: CompilerSettings) -> Future:
    """Start compiling the runtime object for a build with ``settings`` in the background
    (once per :func:`runtime_settings` in this process; from the object cache when it is
    there)."""
    settings = runtime_settings(settings)
    with _compiles_lock:
        future = _compiles.get(settings)
        if future is None:
            future = _compile_in_background(settings)
            _compiles[settings] = future
        return future


def runtime_object(settings: CompilerSettings) -> CompileResult:
    """The runtime's object code for ``settings``: waits for the background compile, or
    starts and waits for it. A failed compile is forgotten, so the next build tries again."""
    future = start_runtime_compile(settings)
    try:
        return wait_for(future)  # Ctrl-C after it: passinfra.interrupts
    except BaseException:
        with _compiles_lock:
            key = runtime_settings(settings)
            if _compiles.get(key) is future:
                del _compiles[key]
        raise


def render_conv_call(args: Sequence[str], depthwise: bool = False,
                     epilogue: ConvEpilogue | None = None) -> str:
    """The C call of a ``rp_conv2d`` (or ``rp_dwconv2d``) intrinsic whose rendered
    arguments are ``args`` (the three buffer loads first: their addresses are passed),
    with ``epilogue`` (:class:`~passinfra.tir.intrinsics.ConvEpilogue`) the call of
    ``rp_conv2d_f32_epi`` (``rp_dwconv2d_f32_epi``): its flags and parameters, then the bias
    and residual loads' addresses (0 for one it has not)."""
    image, weight, out = args[:3]
    sizes = list(args[3:3 + CONV_SIZE_ARGS])
    if epilogue is None:
        function = DEPTHWISE_FUNCTION if depthwise else CONV_FUNCTION
        return f"{function}(&{image}, &{weight}, &{out}, {', '.join(sizes)})"
    flags, p0, p1, *loads = args[3 + CONV_SIZE_ARGS:]
    pointers = [f"&{loads.pop(0)}" if load is not None else "0"
                for load in (epilogue.bias, epilogue.residual)]
    rest = ", ".join([*sizes, flags, p0, p1, *pointers])
    function = DEPTHWISE_EPILOGUE_FUNCTION if depthwise else CONV_EPILOGUE_FUNCTION
    return f"{function}(&{image}, &{weight}, &{out}, {rest})"


# the microkernels, declared in every kernel that calls them; LinkLibrary links their object
CONV_RUNTIME_LIBRARY = KernelLibrary("conv_runtime", lambda options: DECLARATION)
# the quantized matmul, in the same object (a library of its own only for its declaration)
MATMUL_NBITS_LIBRARY = KernelLibrary("matmul_nbits_runtime", lambda options: MATMUL_NBITS_DECLARATION)
QGEMM_LIBRARY = KernelLibrary("qgemm_runtime", lambda options: QGEMM_DECLARATION)
LOOKUP_LIBRARY = KernelLibrary("lookup_runtime", lambda options: LOOKUP_DECLARATION)
RUNTIME_LIBRARIES = (CONV_RUNTIME_LIBRARY, MATMUL_NBITS_LIBRARY, QGEMM_LIBRARY, LOOKUP_LIBRARY)
register_intrinsic_renderer(CONV_INTRINSIC, IntrinsicRenderer(
    lambda renderer, node, args: render_conv_call(args, epilogue=ConvEpilogue.of(node)),
    CONV_RUNTIME_LIBRARY))
register_intrinsic_renderer(DEPTHWISE_CONV_INTRINSIC, IntrinsicRenderer(
    lambda renderer, node, args: render_conv_call(args, depthwise=True, epilogue=ConvEpilogue.of(node)),
    CONV_RUNTIME_LIBRARY))
register_intrinsic_renderer(WINOGRAD_INTRINSIC, IntrinsicRenderer(
    lambda renderer, node, args: f"{WINOGRAD_FUNCTION}(&{args[0]}, &{args[1]}, &{args[2]}, "
                                 f"{', '.join(args[3:])})", CONV_RUNTIME_LIBRARY))
register_intrinsic_renderer(LOOKUP_INTRINSIC, IntrinsicRenderer(
    lambda renderer, node, args: f"{LOOKUP_FUNCTION}(&{args[0]}, &{args[1]}, &{args[2]}, {args[3]})",
    LOOKUP_LIBRARY))
register_intrinsic_renderer(MATMUL_NBITS_INTRINSIC, IntrinsicRenderer(
    lambda renderer, node, args: f"{MATMUL_NBITS_FUNCTION}(&{args[0]}, &{args[1]}, &{args[2]}, &{args[3]}, "
                                 f"&{args[4]}, {', '.join(args[5:])})", MATMUL_NBITS_LIBRARY))
def _qgemm_call(function: str, base: int, args: list[str]) -> str:
    """The C call of a ``rp_qgemm`` / ``rp_qconv`` of ``base`` arguments: its five leading
    buffers and the three of its epilogue (its last six arguments) passed by address; with
    a residual add (eight more arguments) or a table (one more), the variant that has them,
    the residual and the table passed by address too."""
    extra = len(args) - base
    residual, table = extra >= QGEMM_RESIDUAL_ARGUMENTS, extra % 2 == 1
    pointers = {0, 1, 2, 3, 4, base - 6, base - 5, base - 4} | ({base} if residual else set())
    if table:
        pointers.add(len(args) - 1)
    variant = ("_add" if residual else "") + ("_lut" if table else "")
    name = _qgemm_variant(function, variant)
    return f"{name}({', '.join(f'&{a}' if i in pointers else a for i, a in enumerate(args))})"


for _intrinsic, _function in ((QGEMM_INTRINSIC, QGEMM_FUNCTION), (QCONV_INTRINSIC, QCONV_FUNCTION)):
    register_intrinsic_renderer(_intrinsic, IntrinsicRenderer(
        lambda renderer, node, args, function=_function, base=QGEMM_ARGUMENTS[_intrinsic]:
            _qgemm_call(function, base, list(args)), QGEMM_LIBRARY))


__all__ = ["CHANNEL_CHUNK", "CONV_FUNCTION", "CONV_ISA_LEVELS", "DECLARATION", "MATMUL_NBITS_LIBRARY",
           "QGEMM_LIBRARY", "RUNTIME_CACHE_ENV", "RUNTIME_LIBRARIES",
           "RUNTIME_SYMBOL", "disable_prefetch", "prefetch_runtime_compile", "render_conv_call",
           "runtime_defines", "runtime_object", "runtime_settings", "runtime_source", "start_runtime_compile",
           "WINOGRAD_FUNCTION"]

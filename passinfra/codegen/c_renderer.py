"""Render a flattened PrimFunc as C source.

ABI (what the host code and the runtime rely on). For a PrimFunc with global symbol
``sym``, inputs ``a, b`` and output ``out`` (float32), the renderer emits::

    static int sym(const float* restrict a, const float* restrict b, float* restrict out);
    int sym_packed(void** args);   /* args = {a, b, out}: the uniform, exported entry */

Both return 0 on success and -1 if a heap allocation failed. The host calls every
kernel through ``sym_packed``, so it needs no per-kernel prototype knowledge.

A ``ForKind.PARALLEL`` loop becomes a chunk function ``static int sym_parallel(void* ctx,
int64_t begin, int64_t end)`` running the loop's body over iterations ``[begin, end)``,
reading what the loop captures (buffers and variables bound outside it) from a struct,
and the kernel calls ``rp_parallel_for`` of the library's thread pool
(:mod:`passinfra.codegen.thread_pool`) with it. A PARALLEL loop inside a chunk runs
serially. Heap allocations at the top of a loop body are made once before the loop
(once per chunk in a chunk function), not once per iteration.

Data types. Integer kernels compute in their own C types (``int8_t`` ... ``uint64_t``);
8- and 16-bit arithmetic is done in ``uint32_t`` and truncated back to the type, so it
wraps around as NumPy and ONNX do, never meeting C's signed-overflow undefined behaviour
(32- and 64-bit unsigned types wrap natively). float16 and bfloat16 are storage types,
as on onnxruntime's CPU provider: a kernel's parameter buffers hold their 16-bit
patterns (``uint16_t``); a load widens the value to ``float``, all arithmetic is float32,
and a store into a parameter buffer (or an IR ``cast`` to the type) rounds to nearest-even
(overflow becomes inf, NaN stays NaN). A kernel's own scratch buffers and accumulators of
those types hold ``float``s: a float16 sum or matmul accumulates in float32 and rounds once.
float64 to float16 rounds directly, as NumPy does; casts to bfloat16 go through float32,
as ml_dtypes and onnxruntime do.

The target details are tables (:data:`C_TYPES`, :data:`BINARY_OPERATORS`,
:data:`INTRINSICS`); the :class:`CRenderer` walks statements and expressions with
explicit stacks (no recursion, so deep expressions cannot hit Python's limit) and names
temporaries with per-function counters, so one PrimFunc always renders to the same bytes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from passinfra import tir
from passinfra.codegen import vector_math
from passinfra.codegen.block_copy import BlockCopy, match_block_copy
from passinfra.codegen.c_intrinsics import (
    IntrinsicRenderer,
    intrinsic_renderer,
    kernel_libraries,
    register_intrinsic_renderer,
)
from passinfra.codegen.gemm import DEFAULT_BLAS_THREADS
from passinfra.codegen.multiversion import (
    CLONE_MACRO,
    DEFAULT_MULTIVERSION,
    MIN_CLONE_WORK,
    clone_macro_definition,
    wants_clone,
)
from passinfra.codegen.thread_pool import KERNEL_DECLARATIONS, PARALLEL_FOR
from passinfra.codegen.transform.parallelize import (
    loop_captures,
    statement_work,
    symbolic_work,
    work_expression,
)
from passinfra.errors import IRError
from passinfra.ir.types import is_float_dtype
from passinfra.tir.arith import const_int
from passinfra.tir.functor import any_stmt, fold_expr
from passinfra.tir.intrinsics import REINTERPRET, is_kernel_call

# the C type a value of each dtype has in expressions (float16/bfloat16: float)
C_TYPES: dict[str, str] = {
    "float16": "float",
    "bfloat16": "float",
    "float32": "float",
    "float64": "double",
    "int8": "int8_t",
    "int16": "int16_t",
    "int32": "int32_t",
    "int64": "int64_t",
    "uint8": "uint8_t",
    "uint16": "uint16_t",
    "uint32": "uint32_t",
    "uint64": "uint64_t",
    "bool": "bool",
}
# half-precision dtypes: in a parameter buffer, the 16-bit pattern; helpers from PREAMBLE
# convert on load (rp_<name>_load) and round on store (rp_<name>_store) or cast (rp_round_<name>)
HALF_TYPES: dict[str, str] = {"float16": "f16", "bfloat16": "bf16"}
PACKED_HALF_C_TYPE = "uint16_t"
# 8- and 16-bit integers: C promotes them to int, so +, -, * are done in uint32_t and
# truncated back (wrap-around, as NumPy; int arithmetic could overflow: undefined)
NARROW_INTS = frozenset({"int8", "int16", "uint8", "uint16"})

# C infix operators, used for every dtype
BINARY_OPERATORS: dict[type, str] = {
    tir.Add: "+",
    tir.Sub: "-",
    tir.Mul: "*",
    tir.Div: "/",
    tir.EQ: "==",
    tir.NE: "!=",
    tir.LT: "<",
    tir.LE: "<=",
    tir.GT: ">",
    tir.GE: ">=",
    tir.And: "&&",
    tir.Or: "||",
}

# binary ops rendered as a call of a helper from PREAMBLE: rp_<name>_<ctype suffix>
HELPER_OPERATORS: dict[type, str] = {
    tir.FloorDiv: "floordiv",
    tir.FloorMod: "floormod",
    tir.Min: "min",
    tir.Max: "max",
}

# narrow integers use the int32 helpers (their values promote exactly and the result
# fits back); float16/bfloat16 values are floats in expressions
_HELPER_SUFFIX = {"float16": "f32", "bfloat16": "f32", "float32": "f32", "float64": "f64",
                  "int8": "i32", "int16": "i32", "int32": "i32", "int64": "i64",
                  "uint8": "i32", "uint16": "i32", "uint32": "u32", "uint64": "u64", "bool": "i32"}
# but min and max of narrow integers in their own type: the same value, and GCC then
# vectorizes them at their width (VPMAXUB: 32 lanes) where through int32 it widened every
# load to 8 lanes (a uint8 max pool of ResNet-50, 112 x 112 x 64: 236 us, onnxruntime's 78)
_MIN_MAX_SUFFIX = {**_HELPER_SUFFIX, "int8": "i8", "int16": "i16", "uint8": "u8", "uint16": "u16"}

# intrinsic name -> C function per dtype (float32 uses the float variants: expf, not exp)
INTRINSICS: dict[str, dict[str, str]] = {
    name: {"float32": name + "f", "float64": name}
    for name in ("exp", "log", "sqrt", "tanh", "erf", "pow", "fabs", "floor", "ceil", "round",
                 "sin", "cos", "tan", "exp2", "log2", "log10", "expm1", "log1p", "trunc", "fmod",
                 "atan", "atan2", "asin", "acos", "sinh", "cosh", "nearbyint")
}
INTRINSICS["fabs"].update({"int32": "abs", "int64": "llabs"})
INTRINSICS["abs"] = {"float32": "fabsf", "float64": "fabs", "int32": "abs", "int64": "llabs"}
INTRINSICS["sigmoid"] = {"float32": "rp_sigmoid_f32", "float64": "rp_sigmoid_f64"}
INTRINSICS["rsqrt"] = {"float32": "rp_rsqrt_f32", "float64": "rp_rsqrt_f64"}
for _table in INTRINSICS.values():
    if "float32" in _table:  # float16/bfloat16 compute in float32
        _table.update({half: _table["float32"] for half in HALF_TYPES})
    if "int32" in _table:  # |x| of a narrow integer in int, truncated back by the consumer
        _table.update({narrow: _table["int32"] for narrow in NARROW_INTS})
        _table.update({"uint32": "rp_abs_u32", "uint64": "rp_abs_u64"})

# bitwise intrinsics (passinfra.tir.intrinsics) -> C operator; the result is cast back to
# the dtype, since C computes an 8-/16-bit operand's bits in int (~ of a uint8 is negative)
BITWISE_OPERATORS: dict[str, str] = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^",
                                     "bitwise_not": "~"}
# reinterpret (bitcast): a value's bits as C holds them in memory (a 16-bit float is a
# float in expressions, rounded back to its pattern exactly; a bool one byte, 0 or 1), and
# a value from such bits; the bits change type through a union, which C99 defines
_BITS_OF = {"float16": "rp_f16_store({})", "bfloat16": "rp_bf16_store({})", "bool": "(uint8_t)({})"}
_VALUE_OF = {"float16": "rp_f16_load({})", "bfloat16": "rp_bf16_load({})", "bool": "({} != 0)"}
_BITS_TYPES = {"float16": "uint16_t", "bfloat16": "uint16_t", "bool": "uint8_t"}

# what kernels included before they declared the C library themselves (see
# _libc_declarations); still what a compiler without GCC's predefined macros gets
SYSTEM_HEADERS = "".join(f"#include <{name}.h>\n" for name in ("math", "stdbool", "stdint", "stdlib",
                                                                "string"))
# libm functions of two arguments among the intrinsics' C functions (the others take one)
_BINARY_MATH = frozenset({"pow", "powf", "atan2", "atan2f", "fmod", "fmodf"})


def _libc_declarations() -> str:
    """What kernels use of the C library, declared by the kernel itself (C11 7.1.4 allows
    it) instead of by ``<math.h>``, ``<stdint.h>``, ``<stdlib.h>`` and ``<string.h>``:
    parsing those headers was half of the fixed cost of every kernel's compile (9 of
    18 ms on gcc 12; a kernel's own code costs ~20 ms more), and the objects come out
    byte for byte the same (GCC knows these functions as built-ins either way; measured
    by ``bench/compile_overhead.py``). A compiler without GCC's predefined type macros
    (``__INT64_TYPE__``, ...) gets the headers."""
    math_functions = {  # C function -> its C type (expf: float)
        function: C_TYPES[dtype] for table in INTRINSICS.values() for dtype, function in table.items()
        if dtype in ("float32", "float64") and not function.startswith("rp_")
    }
    lines = ["#if defined(__GNUC__) && defined(__INT64_TYPE__) && defined(__UINT64_TYPE__) "
             "&& defined(__SIZE_TYPE__)",
             "/* the C library functions kernels call, declared here: faster to compile than its headers */",
             "#include <stdbool.h>"]
    for bits in (8, 16, 32, 64):
        for kind in ("INT", "UINT"):
            lines.append(f"typedef __{kind}{bits}_TYPE__ {kind.lower()}{bits}_t;")
            lines.append(f"#define {kind}{bits}_C(c) __{kind}{bits}_C(c)")
    lines += [
        "typedef __SIZE_TYPE__ size_t;",
        "void *malloc(size_t);",
        "void free(void *);",
        "void abort(void) __attribute__((__noreturn__));",
        "int abs(int);",
        "long long llabs(long long);",
        "void *memcpy(void *restrict, const void *restrict, size_t);",
        "void *memset(void *, int, size_t);",
        "#define NULL ((void *)0)",
        "#define INFINITY (__builtin_inff())",
        '#define NAN (__builtin_nanf(""))',
    ]
    for function, ctype in sorted(math_functions.items()):
        arity = 2 if function in _BINARY_MATH else 1
        lines.append(f"{ctype} {function}({', '.join([ctype] * arity)});")
    return "\n".join(lines) + "\n#else\n" + SYSTEM_HEADERS + "#endif\n"


LIBC_DECLARATIONS = _libc_declarations()

# the lines that open a block of declarations kernels share (``/* rp-shared: <role> */``)
# and the kernel's own code (what passinfra.codegen.compile_units splits a source at)
SHARED_MARKER_PREFIX = "/* rp-shared: "
KERNEL_MARKER = "/* rp-kernel */"


def shared_marker(role: str) -> str:
    return f"{SHARED_MARKER_PREFIX}{role} */"
PREAMBLE = LIBC_DECLARATIONS + vector_math.declarations() + """
/* floor division and modulo with Python's sign rules (C's / and % truncate) */
static inline int64_t rp_floordiv_i64(int64_t a, int64_t b) {
  int64_t q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t rp_floormod_i64(int64_t a, int64_t b) {
  int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline int32_t rp_floordiv_i32(int32_t a, int32_t b) {
  int32_t q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int32_t rp_floormod_i32(int32_t a, int32_t b) {
  int32_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline float rp_floordiv_f32(float a, float b) { return floorf(a / b); }
static inline double rp_floordiv_f64(double a, double b) { return floor(a / b); }
static inline float rp_floormod_f32(float a, float b) { return a - floorf(a / b) * b; }
static inline double rp_floormod_f64(double a, double b) { return a - floor(a / b) * b; }
/* min/max propagate NaN like NumPy's minimum/maximum (fminf/fmaxf would drop it), in two
   forms with the same results. rp_min/rp_max: two selects, for scalar code, where the
   short-circuit || of the other form becomes branches (an NCHW max pool over rows ran
   5.7x slower with it on random data). rp_vmin/rp_vmax: for the loops the C renderer
   marks for vectorization, a select written as bit operations on a comparison mask. GCC
   turns selects into vector blends only where it can if-convert them, and it cannot
   after partial redundancy elimination has moved code into their arms, as it does with
   hard-swish's x * min(max(x/6 + 1/2, 0), 1): that loop stayed scalar with either select
   form (0.9 ns an element) and vectorizes with this one */
static inline float rp_min_f32(float a, float b) { return a != a ? a : (a < b ? a : b); }
static inline float rp_max_f32(float a, float b) { return a != a ? a : (a > b ? a : b); }
static inline double rp_min_f64(double a, double b) { return a != a ? a : (a < b ? a : b); }
static inline double rp_max_f64(double a, double b) { return a != a ? a : (a > b ? a : b); }
static inline float rp_vselect_f32(int take_a, float a, float b) {
  union { float f; int32_t i; } x = {a}, y = {b}, r;
  const int32_t mask = -(int32_t)take_a;
  r.i = (x.i & mask) | (y.i & ~mask);
  return r.f;
}
static inline double rp_vselect_f64(int take_a, double a, double b) {
  union { double f; int64_t i; } x = {a}, y = {b}, r;
  const int64_t mask = -(int64_t)take_a;
  r.i = (x.i & mask) | (y.i & ~mask);
  return r.f;
}
/* the ordered forms, which return b where a or b is NaN (as MINPS/MAXPS do, so GCC emits
   one instruction for each): the extremum of a window's taps (_Extremum) is these over every
   tap, its NaN-propagating value chosen by one unordered check of the taps */
static inline float rp_omin_f32(float a, float b) { return a < b ? a : b; }
static inline float rp_omax_f32(float a, float b) { return a > b ? a : b; }
static inline double rp_omin_f64(double a, double b) { return a < b ? a : b; }
static inline double rp_omax_f64(double a, double b) { return a > b ? a : b; }
static inline float rp_vmin_f32(float a, float b) { return rp_vselect_f32((a < b) | (a != a), a, b); }
static inline float rp_vmax_f32(float a, float b) { return rp_vselect_f32((a > b) | (a != a), a, b); }
static inline double rp_vmin_f64(double a, double b) { return rp_vselect_f64((a < b) | (a != a), a, b); }
static inline double rp_vmax_f64(double a, double b) { return rp_vselect_f64((a > b) | (a != a), a, b); }
/* min and max of integers, in the type itself (of 8 and 16 bits too: GCC vectorizes them at
   the type's width) */
#define RP_INT_MIN_MAX(S, T) \\
  static inline T rp_min_##S(T a, T b) { return a < b ? a : b; } \\
  static inline T rp_max_##S(T a, T b) { return a > b ? a : b; }
RP_INT_MIN_MAX(i8, int8_t) RP_INT_MIN_MAX(u8, uint8_t) RP_INT_MIN_MAX(i16, int16_t)
RP_INT_MIN_MAX(u16, uint16_t) RP_INT_MIN_MAX(i32, int32_t) RP_INT_MIN_MAX(u32, uint32_t)
RP_INT_MIN_MAX(i64, int64_t) RP_INT_MIN_MAX(u64, uint64_t)
/* a float Select evaluates both of its sides (the loop-level IR allows it, and every load
   under a Select is clamped into its buffer): an unconditional load lets the compiler turn
   the select into a blend and vectorize the loop, where C's lazy ?: would keep it scalar */
static inline float rp_select_f32(bool c, float a, float b) { return c ? a : b; }
static inline double rp_select_f64(bool c, double a, double b) { return c ? a : b; }
static inline uint32_t rp_floordiv_u32(uint32_t a, uint32_t b) { return a / b; }
static inline uint32_t rp_floormod_u32(uint32_t a, uint32_t b) { return a % b; }
static inline uint64_t rp_floordiv_u64(uint64_t a, uint64_t b) { return a / b; }
static inline uint64_t rp_floormod_u64(uint64_t a, uint64_t b) { return a % b; }
static inline uint32_t rp_abs_u32(uint32_t a) { return a; }
static inline uint64_t rp_abs_u64(uint64_t a) { return a; }
/* float16 / bfloat16 <-> float, by their bits (no compiler extension needed), rounding
   to nearest-even; too large a value becomes inf, a NaN stays a (quiet) NaN */
static inline float rp_f16_load(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1fu) bits = sign | 0x7f800000u | (mantissa << 13);
  else if (exponent != 0) bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  else if (mantissa == 0) bits = sign;
  else { float tiny = (float)mantissa * 5.9604644775390625e-8f; return sign ? -tiny : tiny; }
  float f; memcpy(&f, &bits, sizeof f); return f;
}
static inline uint16_t rp_f16_store(double d) {
  uint64_t u; memcpy(&u, &d, sizeof u);
  uint16_t sign = (uint16_t)((u >> 48) & 0x8000u);
  int exponent = (int)((u >> 52) & 0x7ff);
  uint64_t mantissa = u & 0xfffffffffffffULL;
  if (exponent == 0x7ff) return (uint16_t)(sign | (mantissa ? 0x7e00u : 0x7c00u));
  int e = exponent - 1008; /* the float16's biased exponent */
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0 && (exponent == 0 || 43 - e > 63)) return sign; /* below half the smallest subnormal */
  uint64_t full = e >= 1 ? mantissa : (mantissa | (1ULL << 52));
  int shift = e >= 1 ? 42 : 43 - e;
  uint64_t kept = full >> shift, rest = full & ((1ULL << shift) - 1), half = 1ULL << (shift - 1);
  uint16_t bits = (uint16_t)((e >= 1 ? (uint64_t)e << 10 : 0) | kept);
  if (rest > half || (rest == half && (kept & 1u))) bits++; /* a carry moves into the exponent */
  return (uint16_t)(sign | bits);
}
static inline float rp_round_f16(double d) { return rp_f16_load(rp_f16_store(d)); }
static inline float rp_bf16_load(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16; float f; memcpy(&f, &bits, sizeof f); return f;
}
static inline uint16_t rp_bf16_store(float f) {
  uint32_t u; memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline float rp_round_bf16(float f) { return rp_bf16_load(rp_bf16_store(f)); }
static inline float rp_sigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline double rp_sigmoid_f64(double x) { return 1.0 / (1.0 + exp(-x)); }
static inline float rp_rsqrt_f32(float x) { return 1.0f / sqrtf(x); }
static inline double rp_rsqrt_f64(double x) { return 1.0 / sqrt(x); }
"""

# buffers up to this size are allocated on the stack; larger ones on the heap
MAX_STACK_ALLOCATION_BYTES = 16 * 1024
# `#pragma GCC unroll N` needs N < 65535
MAX_UNROLL_PRAGMA = 65534
DEFAULT_UNROLL_FACTOR = 8

_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "int16": 2,
                "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1}


def c_type(dtype: str) -> str:
    """The C type of a ``dtype`` value in expressions; IRError naming it when C has none
    in this backend."""
    try:
        return C_TYPES[dtype]
    except KeyError:
        raise IRError(f"the C backend has no type for dtype {dtype!r}") from None


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype`` in memory shared with the host (float16: 2)."""
    try:
        return _DTYPE_BYTES[dtype]
    except KeyError:
        raise IRError(f"the C backend has no type for dtype {dtype!r}") from None


def sanitize_identifier(name: str) -> str:
    """``name`` as a C identifier: non-identifier characters become ``_``."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name) or "_"
    return "_" + ident if ident[0].isdigit() else ident


@dataclass(frozen=True)
class RenderOptions:
    """Target switches that change the emitted C (derived from the compiler flags)."""

    # OpenMP enabled by the flags: it only adds `omp simd` to VECTORIZED loops. PARALLEL
    # loops always run on the library's own thread pool (see _emit_parallel), never
    # through `omp parallel for`: one thread count, set at run time, and fork-safe
    openmp: bool = False
    openmp_simd: bool = False  # emit `omp simd` on VECTORIZED loops
    blas_threads: int = DEFAULT_BLAS_THREADS  # OpenBLAS threads of the GEMM calls (0: its default)
    # AVX2 clones of the vector-math kernels, picked at load time (passinfra.codegen.multiversion)
    multiversion: bool = DEFAULT_MULTIVERSION
    multiversion_min_work: int = MIN_CLONE_WORK  # the rule's work threshold

    @staticmethod
    def from_cflags(cflags: str, blas_threads: int = DEFAULT_BLAS_THREADS,
                    multiversion: bool = DEFAULT_MULTIVERSION,
                    multiversion_min_work: int = MIN_CLONE_WORK) -> RenderOptions:
        flags = cflags.split()
        openmp = "-fopenmp" in flags
        return RenderOptions(openmp=openmp, openmp_simd=openmp or "-fopenmp-simd" in flags,
                             blas_threads=blas_threads, multiversion=multiversion,
                             multiversion_min_work=multiversion_min_work)


class CRenderer:
    """Renders one flattened PrimFunc; create a new renderer per function."""

    def __init__(self, options: RenderOptions | None = None,
                 work_override: Sequence[tir.PrimExpr] | None = None,
                 clone_override: Sequence[bool] | None = None) -> None:
        """``work_override``: the work estimate of each PARALLEL loop's iteration, in the
        order they are rendered, instead of the renderer's own (a generic kernel takes its
        kernels' estimates as numbers, :mod:`passinfra.codegen.shared_kernels`);
        ``clone_override``: each AVX2-clone decision, in the order they are made."""
        self.options = options or RenderOptions()
        self._work_override = tuple(work_override) if work_override is not None else None
        self._clone_override = tuple(clone_override) if clone_override is not None else None
        # what a static kernel's rendering decided, in order: each PARALLEL loop's work per
        # iteration, each function's clone decision (what its generic kernel must repeat)
        self.parallel_work: list[int] = []
        self.clone_decisions: list[bool] = []
        self._parallel_loops = 0
        self._names: dict[object, str] = {}  # TVar / Buffer -> C name of the current binding
        self._used_names: set[str] = set()
        self._lines: list[str] = []
        self._input_buffers: set[tir.Buffer] = set()
        self._packed: set[tir.Buffer] = set()  # float16/bfloat16 parameters: 16-bit patterns
        self._symbol = ""
        self._sizes: tuple[tir.TVar, ...] = ()  # the size variables of a kernel of symbolic sizes
        self._outlined: list[str] = []  # chunk functions of PARALLEL loops, before the kernel
        self._in_chunk = False  # rendering a chunk function: a PARALLEL loop inside runs serially
        self._vector_depth = 0  # VECTORIZED loops around the statement being rendered
        self._libraries: frozenset[str] = frozenset()  # what the body's kernel calls need
        self._clones = 0  # functions rendered with AVX2 clones (CLONE_MACRO)
        self._extrema = 0  # _Extremum expressions rendered: their temporaries' names

    # ----- names ---------------------------------------------------------------------
    def _fresh_name(self, hint: str) -> str:
        base = sanitize_identifier(hint)
        if base.startswith("rp_"):  # keep the helper namespace for the preamble
            base = "v_" + base
        name, counter = base, 0
        while name in self._used_names or name in _RESERVED:
            counter += 1
            name = f"{base}_{counter}"
        self._used_names.add(name)
        return name

    def _bind(self, node: object, hint: str) -> str:
        name = self._fresh_name(hint)
        self._names[node] = name
        return name

    def _name_of(self, node: tir.TVar | tir.Buffer) -> str:
        try:
            return self._names[node]
        except KeyError:
            kind = "variable" if isinstance(node, tir.TVar) else "buffer"
            raise IRError(f"{kind} {node.name!r} is used but not bound in this PrimFunc") from None

    # ----- function ------------------------------------------------------------------
    def render(self, func: tir.PrimFunc) -> str:
        """The C source (preamble, kernel and packed wrapper) of ``func``."""
        symbol = func.attrs.get("global_symbol")
        if not isinstance(symbol, str) or not symbol:
            raise IRError("a PrimFunc needs a 'global_symbol' attr (its C name) to be rendered")
        symbol = sanitize_identifier(symbol)
        num_inputs = func.attrs.get("num_inputs", len(func.params))
        if not isinstance(num_inputs, int) or not 0 <= num_inputs <= len(func.params):
            raise IRError(f"PrimFunc {symbol}: 'num_inputs' must be an int in [0, {len(func.params)}], "
                          f"got {num_inputs!r}")
        self._used_names.update({symbol, symbol + "_packed"})
        self._symbol = symbol
        self._sizes = func.dims
        libraries = kernel_libraries(func.body)
        self._libraries = frozenset(library.name for library in libraries)
        params = []
        for index, buffer in enumerate(func.params):
            is_input = index < num_inputs
            if is_input:
                self._input_buffers.add(buffer)
            const = "const " if is_input else ""
            if buffer.dtype in HALF_TYPES:
                self._packed.add(buffer)
            params.append(f"{const}{self._storage_type(buffer)}* restrict {self._bind(buffer, buffer.name)}")
        # symbolic sizes: int64 parameters after the buffers, passed by the packed entry
        # from the pointers that follow the buffer pointers in ``args``
        params += [f"const int64_t {self._bind(var, var.name)}" for var in func.dims]
        # static: only the packed entry is exported, so a kernel named like a libc function
        # (``step``, ``index``) cannot be interposed by it when the library is loaded
        signature = f"static int {symbol}({', '.join(params) or 'void'})"
        self._lines = []
        with symbolic_work(bool(func.dims)):  # loops over run-time sizes count as typical ones
            self._emit_body(func.body, indent=1)
            clone = self._clone(func.body, skip_parallel=True)
        if clone:
            signature = f"{CLONE_MACRO} {signature}"
        clones = [clone_macro_definition()] if self._clones else []
        casts = [
            f"({'const ' if i < num_inputs else ''}{self._storage_type(b)}*)args[{i}]"
            for i, b in enumerate(func.params)
        ]
        casts += [f"*(const int64_t*)args[{len(func.params) + k}]" for k in range(len(func.dims))]
        # the declarations a kernel shares with others come first, each block under a
        # marker line, then the kernel's own code: so several kernels can be compiled as
        # one translation unit, each shared block once (passinfra.codegen.compile_units)
        shared = [("preamble", PREAMBLE), *(("clones", text) for text in clones),
                  *((f"library {library.name}", library.declaration(self.options) + "\n")
                    for library in libraries),
                  *([("parallel-for", KERNEL_DECLARATIONS + "\n")] if self._outlined else [])]
        parts = [
            f"/* generated by raypass CodegenC: {symbol} */",
            *(line for role, text in shared for line in (shared_marker(role), text)),
            KERNEL_MARKER,
            *self._outlined,
            signature + " {",
            *self._lines,
            "  return 0;",
            "}",
            "",
            f"int {symbol}_packed(void** args) {{",
            "  (void)args;" if not casts else f"  return {symbol}({', '.join(casts)});",
            *(["  return 0;"] if not casts else []),
            "}",
            "",
        ]
        if (self._work_override is not None and self._parallel_loops != len(self._work_override)) or (
                self._clone_override is not None and len(self.clone_decisions) != len(self._clone_override)):
            raise IRError(f"PrimFunc {self._symbol}: its parallel loops or functions are not those of the "
                          "estimates and decisions given")
        return "\n".join(parts)

    # ----- statements: an explicit work stack of statements and closing lines -----------
    def _emit_body(self, body: tir.Stmt, indent: int) -> None:
        work: list[tuple[str, object, int]] = [("stmt", body, indent)]
        while work:
            kind, item, level = work.pop()
            if kind == "line":
                self._lines.append("  " * level + str(item))
            elif kind == "vector_exit":
                self._vector_depth -= 1
            else:
                self._emit_stmt(item, level, work)  # type: ignore[arg-type]

    def _emit_stmt(self, stmt: tir.Stmt, level: int, work: list) -> None:
        pad = "  " * level
        emit = self._lines.append
        if isinstance(stmt, tir.SeqStmt):
            work.extend(("stmt", s, level) for s in reversed(stmt.stmts))
        elif isinstance(stmt, tir.BufferStore):
            if stmt.buffer in self._input_buffers:
                raise IRError(f"PrimFunc stores into its input buffer {stmt.buffer.name!r}")
            target = self._access(stmt.buffer, stmt.indices)
            value = self.expr(stmt.value)
            if stmt.buffer in self._packed:  # round to the 16-bit type on store
                value = f"rp_{HALF_TYPES[stmt.buffer.dtype]}_store({value})"
            emit(f"{pad}{target} = {value};")
        elif isinstance(stmt, tir.For):
            self._emit_for(stmt, level, work)
        elif isinstance(stmt, tir.LetStmt):
            value = self.expr(stmt.value)
            emit(f"{pad}const {c_type(stmt.var.dtype)} {self._bind(stmt.var, stmt.var.name)} = {value};")
            work.append(("stmt", stmt.body, level))
        elif isinstance(stmt, tir.IfThenElse):
            emit(f"{pad}if ({self.expr(stmt.cond)}) {{")
            if stmt.else_case is not None:
                work.append(("line", "}", level))
                work.append(("stmt", stmt.else_case, level + 1))
                work.append(("line", "} else {", level))
            else:
                work.append(("line", "}", level))
            work.append(("stmt", stmt.then_case, level + 1))
        elif isinstance(stmt, tir.Allocate):
            self._emit_allocate(stmt, level, work)
        elif isinstance(stmt, tir.Evaluate):
            emit(f"{pad}(void)({self.expr(stmt.value)});")
        else:
            raise IRError(f"the C backend cannot render statement {type(stmt).__name__}")

    def _emit_for(self, loop: tir.For, level: int, work: list) -> None:
        pad = "  " * level
        # a copy inside a loop nest or branch (level > 1: it runs many times) becomes a
        # memcpy / memset; a lone top-level loop is left as written
        block = match_block_copy(loop) if level > 1 else None
        if block is not None and block.source is not None and (
                (block.source in self._packed) != (block.target in self._packed)):
            block = None  # a float16 pattern and a float: not the same bytes
        if block is not None and block.target not in self._input_buffers:
            self._emit_block_copy(block, pad)
            return
        if loop.kind is tir.ForKind.PARALLEL and not self._in_chunk:
            self._emit_parallel(loop, level)
            return
        ctype = c_type(loop.loop_var.dtype)
        start = self.expr(loop.start)
        extent = self.expr(loop.extent)
        frees, body = self._hoist_allocations(loop.body, pad)
        work.extend(("line", free, level) for free in reversed(frees))
        name = self._bind(loop.loop_var, loop.loop_var.name)
        bound = extent if _is_zero(loop.start) else f"{start} + {extent}"
        if loop.kind is tir.ForKind.VECTORIZED:
            if self.options.openmp_simd:
                self._lines.append(f"{pad}#pragma omp simd")
            self._lines.append(f"{pad}#pragma GCC ivdep")
        elif loop.kind is tir.ForKind.UNROLLED:
            factor = loop.extent.value if isinstance(loop.extent, tir.IntImm) else DEFAULT_UNROLL_FACTOR
            self._lines.append(f"{pad}#pragma GCC unroll {max(1, min(factor, MAX_UNROLL_PRAGMA))}")
        self._lines.append(f"{pad}for ({ctype} {name} = {start}; {name} < {bound}; ++{name}) {{")
        work.append(("line", "}", level))
        if loop.kind is tir.ForKind.VECTORIZED:
            self._vector_depth += 1
            work.append(("vector_exit", None, level))
        work.append(("stmt", body, level + 1))

    def _hoist_allocations(self, body: tir.Stmt, pad: str) -> tuple[list[str], tir.Stmt]:
        """Heap allocations at the top of a loop body, made once before the loop (each
        iteration still finds the buffer uninitialized, as Allocate says): a malloc and
        free per iteration of a blocked convolution cost more than its copies. The free
        lines for after the loop, and the body left."""
        frees: list[str] = []
        heap = MAX_STACK_ALLOCATION_BYTES
        while isinstance(body, tir.Allocate) and self._allocation_bytes(body.buffer) > heap:
            frees.append(self._open_allocation(body.buffer, pad))
            body = body.body
        return frees, body

    def _emit_parallel(self, loop: tir.For, level: int) -> None:
        """A PARALLEL loop as a chunk function (its body over ``[begin, end)`` of the
        iterations, reading what it captures from a struct) run by the library's thread
        pool (:mod:`passinfra.codegen.thread_pool`); the pool returns -1 when a chunk's
        heap allocation failed."""
        pad = "  " * level
        function = self._fresh_name(f"{self._symbol}_parallel")
        fields = []
        for node in loop_captures(loop):
            name = self._name_of(node)
            if isinstance(node, tir.Buffer):
                const = "const " if node in self._input_buffers else ""
                pointer = f"{const}{self._storage_type(node)}*"
                fields.append((pointer, f"{pointer} restrict", name))
            else:
                ctype = c_type(node.dtype)
                fields.append((ctype, f"const {ctype}", name))
        lanes = _lanes(loop)
        extent = self.expr(loop.extent) if lanes == 1 else str(const_int(loop.extent) // lanes)
        saved, self._lines, self._in_chunk = self._lines, [], True
        try:
            self._emit_chunk_function(function, fields, loop, lanes)
        finally:
            chunk, self._lines, self._in_chunk = self._lines, saved, False
        self._outlined.extend(chunk)
        # a kernel of symbolic sizes: the work of this call's sizes, computed at run time
        index, self._parallel_loops = self._parallel_loops, self._parallel_loops + 1
        if self._work_override is not None:
            if index >= len(self._work_override):
                raise IRError(f"PrimFunc {self._symbol}: more parallel loops than work estimates")
            work = self.expr(tir.Mul(self._work_override[index], tir.IntImm(lanes)))
        elif not self._sizes:
            self.parallel_work.append(statement_work(loop.body))
            work = self.parallel_work[-1] * lanes
        else:
            work = self.expr(tir.Mul(work_expression(loop.body, self._sizes), tir.IntImm(lanes)))
        if not fields:
            call = f"{PARALLEL_FOR}({function}, NULL, {extent}, {work})"
            self._lines.append(f"{pad}if ({call} != 0) {{ return -1; }}")
            return
        values = ", ".join(name for _, _, name in fields)
        call = f"{PARALLEL_FOR}({function}, &rp_parallel_args, {extent}, {work})"
        self._lines += [
            f"{pad}{{",
            f"{pad}  struct {function}_args rp_parallel_args = {{{values}}};",
            f"{pad}  if ({call} != 0) {{ return -1; }}",
            f"{pad}}}",
        ]

    def _emit_chunk_function(self, function: str, fields: list[tuple[str, str, str]], loop: tir.For,
                             lanes: int) -> None:
        """The loop over a range of iterations in a function of its own, whose captured
        buffers are ``restrict`` parameters: gcc trusts ``restrict`` on parameters, not on
        pointers copied out of a struct, and without it versions or gives up vectorizing.
        With ``lanes`` > 1 the range counts blocks of that many iterations, each a loop
        of constant trip count, which gcc's -O2 cost model vectorizes (one whose bounds
        are the range's would need a scalar epilogue, which it refuses). Then the chunk
        function the pool calls, unpacking the struct."""
        emit = self._lines.append
        params = "".join(f"{local_type} {name}, " for _, local_type, name in fields)
        clones = f"{CLONE_MACRO} " if self._clone(loop, skip_parallel=False) else ""
        emit(f"{clones}static int {function}_body({params}int64_t rp_begin, int64_t rp_end) {{")
        frees, body = self._hoist_allocations(loop.body, "  ")
        ctype = c_type(loop.loop_var.dtype)
        start = "" if _is_zero(loop.start) else f"{self.expr(loop.start)} + "
        name = self._bind(loop.loop_var, loop.loop_var.name)
        if lanes == 1:
            emit(f"  for ({ctype} {name} = {start}rp_begin; {name} < {start}rp_end; ++{name}) {{")
            self._emit_body(body, indent=2)
            emit("  }")
        else:
            emit("  for (int64_t rp_block = rp_begin; rp_block < rp_end; ++rp_block) {")
            emit(f"    for (int64_t rp_lane = 0; rp_lane < {lanes}; ++rp_lane) {{")
            emit(f"      const {ctype} {name} = ({ctype})({start}rp_block * {lanes} + rp_lane);")
            self._emit_body(body, indent=3)
            emit("    }")
            emit("  }")
        self._lines += [f"  {free}" for free in frees]
        emit("  return 0;")
        emit("}")
        if fields:
            emit(f"struct {function}_args {{")
            for field_type, _, name in fields:
                emit(f"  {field_type} {name};")
            emit("};")
        emit(f"static int {function}(void* rp_context, int64_t rp_begin, int64_t rp_end) {{")
        if fields:
            emit(f"  const struct {function}_args* rp_args = (const struct {function}_args*)rp_context;")
            values = "".join(f"rp_args->{name}, " for _, _, name in fields)
        else:
            emit("  (void)rp_context;")
            values = ""
        emit(f"  return {function}_body({values}rp_begin, rp_end);")
        emit("}")
        emit("")

    def _clone(self, body: tir.Stmt, skip_parallel: bool) -> bool:
        """Whether the function of ``body`` gets AVX2 clones (counted when it does)."""
        index = len(self.clone_decisions)
        if self._clone_override is not None:
            if index >= len(self._clone_override):
                raise IRError(f"PrimFunc {self._symbol}: more functions than clone decisions")
            wanted = self._clone_override[index]
        else:
            wanted = self.options.multiversion and wants_clone(body, skip_parallel,
                                                               self.options.multiversion_min_work)
        self.clone_decisions.append(bool(wanted))
        if not wanted:
            return False
        self._clones += 1
        return True

    def _emit_block_copy(self, block: BlockCopy, pad: str) -> None:
        # a contiguous copy / zero fill as memcpy / memset: gcc -O2 leaves the loop scalar
        nbytes = block.count * self._element_bytes(block.target)
        target = f"&{self._access(block.target, (block.target_start,))}"
        if block.source is None:
            self._lines.append(f"{pad}memset({target}, 0, {nbytes});")
        else:
            source = f"&{self._access(block.source, (block.source_start,))}"
            self._lines.append(f"{pad}memcpy({target}, {source}, {nbytes});")

    def _emit_allocate(self, alloc: tir.Allocate, level: int, work: list) -> None:
        pad = "  " * level
        buffer = alloc.buffer
        ctype = self._storage_type(buffer)  # a float16 scratch buffer holds floats
        if not buffer.is_static:  # sized at run time: always on the heap
            work.append(("line", self._open_allocation(buffer, pad), level))
            work.append(("stmt", alloc.body, level))
            return
        name = self._bind(buffer, buffer.name)
        count = max(buffer.size, 1)
        nbytes = count * self._element_bytes(buffer)
        if nbytes <= MAX_STACK_ALLOCATION_BYTES:
            self._lines.append(f"{pad}{ctype} {name}[{count}];")
            work.append(("stmt", alloc.body, level))
            return
        # a kernel and a chunk function both return -1 when an allocation fails
        self._lines.append(f"{pad}{ctype}* restrict {name} = ({ctype}*)malloc({nbytes});")
        self._lines.append(f"{pad}if ({name} == NULL) {{ return -1; }}")
        work.append(("line", f"free({name});", level))
        work.append(("stmt", alloc.body, level))

    def _allocation_bytes(self, buffer: tir.Buffer) -> float:
        """The bytes of a buffer; a buffer sized at run time counts as unbounded (heap)."""
        if not buffer.is_static:
            return math.inf
        return max(buffer.size, 1) * self._element_bytes(buffer)

    def _open_allocation(self, buffer: tir.Buffer, pad: str) -> str:
        """Emit the malloc of a heap buffer; the line that frees it."""
        ctype = self._storage_type(buffer)
        name = self._bind(buffer, buffer.name)
        if buffer.is_static:
            nbytes: Any = self._allocation_bytes(buffer)
        else:  # at least one element, as for static buffers (malloc(0) may return NULL)
            count = self.expr(tir.Max(tir.as_prim(buffer.size), tir.IntImm(1)))
            nbytes = f"(size_t){count} * {self._element_bytes(buffer)}"
        self._lines.append(f"{pad}{ctype}* restrict {name} = ({ctype}*)malloc({nbytes});")
        self._lines.append(f"{pad}if ({name} == NULL) {{ return -1; }}")
        return f"free({name});"

    def _storage_type(self, buffer: tir.Buffer) -> str:
        """The C element type of ``buffer`` in memory (a float16 parameter: uint16_t)."""
        return PACKED_HALF_C_TYPE if buffer in self._packed else c_type(buffer.dtype)

    def _element_bytes(self, buffer: tir.Buffer) -> int:
        return 4 if buffer.dtype in HALF_TYPES and buffer not in self._packed else dtype_bytes(buffer.dtype)

    def _access(self, buffer: tir.Buffer, indices: tuple[tir.PrimExpr, ...]) -> str:
        name = self._name_of(buffer)
        if len(indices) == 1:
            return f"{name}[{self.expr(indices[0])}]"
        if not indices and buffer.size == 1:
            return f"{name}[0]"
        raise IRError(
            f"the C renderer only accepts flattened (1-d) buffer accesses; buffer {buffer.name!r} "
            f"of shape {buffer.shape} is accessed with {len(indices)} indices (run StorageFlatten first)"
        )

    # ----- expressions: post-order over an explicit stack --------------------------------
    def expr(self, root: tir.PrimExpr) -> str:
        """The C text of ``root`` (fully parenthesized where precedence could matter)."""
        return fold_expr(root, self._render_node)

    def _render_node(self, node: tir.PrimExpr, args: list[str]) -> str:
        render = _NODE_RENDERERS.get(type(node))
        if render is not None:
            return render(self, node, args)
        op = BINARY_OPERATORS.get(type(node))
        if op is not None:
            if isinstance(node, _WRAPPING_OPS) and node.dtype in NARROW_INTS:
                return _render_narrow_arithmetic(node, op, args)
            return f"({args[0]} {op} {args[1]})"
        helper = HELPER_OPERATORS.get(type(node))
        if helper is not None:
            dtype = node.a.dtype  # type: ignore[attr-defined]
            c_type(dtype)
            # (a narrow helper only where both operands have the type: it converts to it)
            narrow = helper in ("min", "max") and node.b.dtype == dtype  # type: ignore[attr-defined]
            suffix = (_MIN_MAX_SUFFIX if narrow else _HELPER_SUFFIX)[dtype]
            if self._vector_depth and helper in ("min", "max") and suffix in ("f32", "f64"):
                return self._vector_extremum(node, helper, suffix, args)
            return f"rp_{helper}_{suffix}({args[0]}, {args[1]})"
        raise IRError(f"the C backend cannot render expression {type(node).__name__}")

    def _vector_extremum(self, node: tir.PrimExpr, kind: str, suffix: str, args: list[str]) -> str:
        """A float min/max in a VECTORIZED loop. Of two values: rp_vmin/rp_vmax, the form GCC
        vectorizes best (PREAMBLE). A tree of three or more (a window's taps: a max pool)
        becomes one expression over its leaves (:class:`_Extremum`). An operand that is the
        operation's identity (the -inf a max reduction starts from) is dropped: max(-inf,
        x) is x for every x, NaN included."""
        identity = -math.inf if kind == "max" else math.inf
        operands = [node.a, node.b]  # type: ignore[attr-defined]
        kept = [arg for operand, arg in zip(operands, args)
                if not (isinstance(operand, tir.FloatImm) and operand.value == identity)]
        if len(kept) == 1:
            return kept[0]
        parts = [arg if isinstance(arg, _Extremum) and arg.kind == kind and arg.suffix == suffix
                 else _Extremum.leaf(arg, kind, suffix) for arg in args]
        tree = (parts[0].tree, _Extremum.shifted(parts[1].tree, len(parts[0].leaves)))
        leaves = parts[0].leaves + parts[1].leaves
        if len(leaves) < 3:
            text = f"rp_v{kind}_{suffix}({args[0]}, {args[1]})"
        else:
            self._extrema += 1
            text = _Extremum.render(leaves, tree, kind, suffix, f"rp_t{self._extrema}_")
        return _Extremum(text, kind, suffix, leaves, tree)

    def _render_intrinsic(self, node: tir.Intrinsic, args: list[str]) -> str:
        renderer = intrinsic_renderer(node.name)
        if renderer.library is not None and renderer.library.name not in self._libraries:
            # kernel_libraries finds calls that are statements: one inside an expression
            # would go undeclared and unlinked
            raise IRError(f"PrimFunc {self._symbol}: a {node.name} call must be a statement of its own")
        return renderer.render(self, node, args)

    @property
    def symbol(self) -> str:
        """The C name of the function being rendered (for messages)."""
        return self._symbol

    @property
    def packed_buffers(self) -> frozenset[tir.Buffer]:
        """The float16/bfloat16 parameters, which hold 16-bit patterns in memory."""
        return frozenset(self._packed)


def _render_reinterpret(renderer: CRenderer, node: tir.Intrinsic, args: list[str]) -> str:
    source, target = node.args[0].dtype, node.dtype
    from_type, to_type = (_BITS_TYPES.get(t, C_TYPES[t]) for t in (source, target))
    bits = _BITS_OF.get(source, "{}").format(args[0])
    if from_type != to_type:
        bits = f"((union {{ {from_type} from; {to_type} to; }}){{ .from = {bits} }}).to"
    return _VALUE_OF.get(target, "{}").format(bits) if source != target else args[0]


def _render_bitwise(renderer: CRenderer, node: tir.Intrinsic, args: list[str]) -> str:
    operator = BITWISE_OPERATORS[node.name]
    expression = f"{operator}{args[0]}" if len(args) == 1 else f"{args[0]} {operator} {args[1]}"
    return f"(({c_type(node.dtype)})({expression}))"


def _render_math(renderer: CRenderer, node: tir.Intrinsic, args: list[str]) -> str:
    function = INTRINSICS[node.name].get(node.dtype)
    if function is None:
        raise IRError(f"math intrinsic {node.name!r} has no C function for dtype {node.dtype!r}")
    return f"{function}({', '.join(args)})"


def _register_intrinsics() -> None:
    """The intrinsics C spells itself: libm's functions, bitwise operators, reinterpret
    (the kernel calls are registered by the modules of their kernels)."""
    register_intrinsic_renderer(REINTERPRET, IntrinsicRenderer(_render_reinterpret))
    for name in BITWISE_OPERATORS:
        register_intrinsic_renderer(name, IntrinsicRenderer(_render_bitwise))
    for name in INTRINSICS:
        register_intrinsic_renderer(name, IntrinsicRenderer(_render_math))


_register_intrinsics()


_RESERVED = frozenset(
    "args auto break case char const continue default do double else enum extern float for goto if "
    "inline int long register restrict return short signed sizeof static struct switch typedef union "
    "unsigned void volatile while bool true false free malloc abort memcpy memset".split()
) | frozenset(function for table in INTRINSICS.values() for function in table.values())  # sqrt, expf, ...


def _is_zero(expr: tir.PrimExpr) -> bool:
    return isinstance(expr, tir.IntImm) and expr.value == 0


# a parallel loop whose body has no loop longer than MAX_LANE_INNER_EXTENT (gcc unrolls
# such loops whole) is itself what the compiler would vectorize: its chunks run blocks
# of this many iterations (the first of these that divides the extent at least twice)
LANE_BLOCKS = (16, 8, 4)
MAX_LANE_INNER_EXTENT = 16


def _keeps_lanes_apart(node: tir.Stmt) -> bool:
    """A statement that rules out lane blocks inside a parallel loop: a long or unknown
    inner loop, or a kernel call (their code is not vectorized across lanes)."""
    if isinstance(node, tir.For):
        inner = const_int(node.extent)
        return inner is None or inner > MAX_LANE_INNER_EXTENT
    return isinstance(node, tir.Evaluate) and is_kernel_call(node.value)


def _lanes(loop: tir.For) -> int:
    """Iterations per block of a parallel loop's chunks (see LANE_BLOCKS); 1 for none."""
    extent = const_int(loop.extent)
    if extent is None:
        return 1
    if any_stmt(loop.body, _keeps_lanes_apart):
        return 1
    return next((lanes for lanes in LANE_BLOCKS if extent % lanes == 0 and extent >= 2 * lanes), 1)


_WRAPPING_OPS = (tir.Add, tir.Sub, tir.Mul, tir.Div)


def _render_narrow_arithmetic(node: tir.BinaryOp, op: str, args: list[str]) -> str:
    """8-/16-bit arithmetic: in uint32_t (wraps; int could overflow), truncated back to
    the type (C's conversion to a narrower type is modular, as NumPy's wrap-around).
    Division is exact in int and only needs the truncation (-128 / -1 wraps to -128)."""
    ctype = C_TYPES[node.dtype]
    if isinstance(node, tir.Div):
        return f"(({ctype})({args[0]} / {args[1]}))"
    return f"(({ctype})((uint32_t){args[0]} {op} (uint32_t){args[1]}))"


def _render_int(renderer: CRenderer, node: tir.IntImm, args: list[str]) -> str:
    if node.dtype == "bool":
        return "true" if node.value else "false"
    value = int(node.value)
    if node.dtype == "int64" and not -(2**31) < value < 2**31:
        return f"INT64_C({value})"
    if node.dtype in ("uint32", "uint64"):
        return f"UINT{node.dtype[4:]}_C({value})"
    if value < 0:
        return f"({value})"
    return str(value)


def _render_float(renderer: CRenderer, node: tir.FloatImm, args: list[str]) -> str:
    value = float(node.value)
    suffix = "f" if c_type(node.dtype) == "float" else ""  # float16/bfloat16 compute in float
    cast = f"({c_type(node.dtype)})"
    if math.isnan(value):
        return f"{cast}NAN"
    if math.isinf(value):
        return f"{cast}INFINITY" if value > 0 else f"(-{cast}INFINITY)"
    # repr is the shortest text that round-trips the double; a float32 value is exact in
    # a double, so the f-suffixed literal rounds back to the same float
    text = repr(value)
    if "." not in text and "e" not in text:
        text += ".0"
    return f"({text}{suffix})" if value < 0 else text + suffix


_EAGER_SELECTS = {"float16": "rp_select_f32", "bfloat16": "rp_select_f32", "float32": "rp_select_f32",
                  "float64": "rp_select_f64"}


ExtremumTree = int | tuple["ExtremumTree", "ExtremumTree"]


class _Extremum(str):
    """The C text of a float min or max in a VECTORIZED loop, carrying its leaves and the
    shape of its tree so that an enclosing min (max) of the same kind joins them. Of three
    leaves or more the text is one GNU statement expression: the leaves in temporaries,
    the ordered min/max (rp_omin/rp_omax) over them in the tree's own shape, which is the
    NaN-propagating one wherever no leaf is NaN (ties and signed zeros included), and where
    one is (one unordered check per pair of leaves), their sum, a NaN. A 3x3 max pool's nine
    taps: 8 MAXPS, 5 CMPUNORDPS, 4 ORs, 8 adds and a blend a vector, against 54
    instructions for nine rp_vmax (each two compares, an OR and a three-instruction blend).
    (The sum's NaN is the first NaN leaf's, bits included, unless an inf - inf comes
    before it.)"""

    kind: str
    suffix: str
    leaves: tuple[str, ...]
    tree: ExtremumTree

    def __new__(cls, text: str, kind: str, suffix: str, leaves: tuple[str, ...],
                tree: ExtremumTree) -> _Extremum:
        self = super().__new__(cls, text)
        self.kind, self.suffix, self.leaves, self.tree = kind, suffix, leaves, tree
        return self

    @classmethod
    def leaf(cls, text: str, kind: str, suffix: str) -> _Extremum:
        return cls(text, kind, suffix, (str(text),), 0)

    @staticmethod
    def shifted(tree: ExtremumTree, by: int) -> ExtremumTree:
        if isinstance(tree, int):
            return tree + by
        return (_Extremum.shifted(tree[0], by), _Extremum.shifted(tree[1], by))

    @staticmethod
    def render(leaves: tuple[str, ...], tree: ExtremumTree, kind: str, suffix: str, prefix: str) -> str:
        names = [f"{prefix}{i}" for i in range(len(leaves))]

        def ordered(node: ExtremumTree) -> str:
            if isinstance(node, int):
                return names[node]
            return f"rp_o{kind}_{suffix}({ordered(node[0])}, {ordered(node[1])})"

        ctype = "float" if suffix == "f32" else "double"
        pairs = [names[i:i + 2] for i in range(0, len(names), 2)]
        unordered = " | ".join(f"__builtin_isunordered({pair[0]}, {pair[-1]})" for pair in pairs)
        declarations = ", ".join(f"{name} = {leaf}" for name, leaf in zip(names, leaves))
        return (f"({{ const {ctype} {declarations}; rp_vselect_{suffix}({unordered}, "
                f"{' + '.join(names)}, {ordered(tree)}); }})")


def _render_select(node: tir.Select, args: list[str], vector: bool = False) -> str:
    eager = _EAGER_SELECTS.get(node.dtype)
    if eager is not None and vector and node.dtype in ("float32", "float64"):
        # in a VECTORIZED loop the bit-mask form, which GCC turns into a blend where it
        # cannot if-convert a ?: (a quantize's clamp kept the loop scalar: PREAMBLE)
        return f"rp_vselect_{eager[-3:]}({args[0]}, {args[1]}, {args[2]})"
    if eager is not None:
        return f"{eager}({args[0]}, {args[1]}, {args[2]})"
    # integer selects stay lazy: an index computation under a false condition may divide
    # by zero. An int64 select is cast: its branches may both be small immediates, which C
    # types as int, and arithmetic on two such selects would overflow in 32 bits
    if node.dtype == "int64":
        return f"((int64_t)({args[0]} ? {args[1]} : {args[2]}))"
    return f"({args[0]} ? {args[1]} : {args[2]})"


def _render_load(renderer: CRenderer, node: tir.BufferLoad, args: list[str]) -> str:
    if node.buffer in renderer._packed:  # widen the 16-bit pattern to a float
        return f"rp_{HALF_TYPES[node.buffer.dtype]}_load({renderer._access(node.buffer, node.indices)})"
    return renderer._access(node.buffer, node.indices)


def _render_cast(node: tir.Cast, args: list[str]) -> str:
    """A cast to float16 rounds straight from the value (a double holds every source
    exactly but 64-bit integers past 2**53, which overflow float16 anyway), as NumPy's
    casts do; a cast to bfloat16 rounds through float32, as ml_dtypes' casts do."""
    if node.dtype == "float16":
        return f"rp_round_f16({args[0]})"
    if node.dtype == "bfloat16":
        return f"rp_round_bf16((float)({args[0]}))"
    wider = _FLOAT_TO_INT_VIA.get(node.dtype) if is_float_dtype(node.value.dtype) else None
    if wider is not None:
        # a float converts to a wider integer first, then wraps to the type, as NumPy and
        # onnxruntime do (300.5 -> int8 is 44); C's direct conversion of an out-of-range
        # value is undefined
        return f"(({c_type(node.dtype)})({wider}){args[0]})"
    return f"(({c_type(node.dtype)}){args[0]})"


_FLOAT_TO_INT_VIA = {**{narrow: "int32_t" for narrow in NARROW_INTS}, "uint32": "int64_t"}


_NODE_RENDERERS: dict[type, Callable[[CRenderer, object, list[str]], str]] = {
    tir.IntImm: _render_int,  # type: ignore[dict-item]
    tir.FloatImm: _render_float,  # type: ignore[dict-item]
    tir.TVar: lambda r, n, a: r._name_of(n),  # type: ignore[arg-type]
    tir.Not: lambda r, n, a: f"(!{a[0]})",
    tir.Select: lambda r, n, a: _render_select(n, a, r._vector_depth > 0),  # type: ignore[arg-type]
    tir.Cast: lambda r, n, a: _render_cast(n, a),  # type: ignore[arg-type]
    tir.Intrinsic: lambda r, n, a: r._render_intrinsic(n, a),  # type: ignore[arg-type]
    tir.BufferLoad: _render_load,  # type: ignore[dict-item]
}


def render_prim_func(func: tir.PrimFunc, options: RenderOptions | None = None) -> str:
    """C source of a flattened PrimFunc (see the module docstring for the ABI)."""
    return CRenderer(options).render(func)


__all__ = [
    "C_TYPES", "HALF_TYPES", "NARROW_INTS", "BINARY_OPERATORS", "HELPER_OPERATORS", "INTRINSICS",
    "KERNEL_MARKER", "LIBC_DECLARATIONS", "PREAMBLE", "SHARED_MARKER_PREFIX", "SYSTEM_HEADERS", "CRenderer",
    "RenderOptions", "render_prim_func", "c_type", "dtype_bytes", "sanitize_identifier",
]

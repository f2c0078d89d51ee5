"""Function multiversioning: AVX2 clones of the kernels that call vector math, chosen at load time.

The kernels compile with portable flags (SSE2: 4 floats a vector), so one library runs
on any x86-64 and every node of a cluster builds the same bytes. A function that passes
:func:`wants_clone` is rendered with :data:`CLONE_MACRO`, which GCC (and clang) turn into
``target_clones("avx2", "default")``: two compiled bodies and a resolver that picks the
AVX2 one at load time on a CPU that has it. The C text, the object and the library stay
the same bytes everywhere; only the code a CPU runs differs.

What the clones compute:

- AVX2 without FMA: the clone target is ``avx2`` only (``fma`` is a separate target), and
  the compiler runs with ``-ffp-contract=off`` (:func:`contract_flag`), so no ``a*b+c``
  is ever contracted, whatever flags a user adds; float reductions are not reassociated
  (no ``-ffast-math``); the arithmetic of the two clones is the same bits;
- vector math: a loop calling ``expf`` in the AVX2 clone calls libmvec's 8-lane AVX2
  variant, the default clone its 4-lane SSE one (which libmvec itself dispatches to SSE2
  or SSE4.1 code by CPU). They agree to a few ulps, not bit for bit (about 10% of
  ``expf`` results differ by an ulp), as OpenBLAS's per-CPU kernels already do for every
  GEMM. So a library's results may differ in the last bits between two CPU models; on
  one machine they never change, for any thread count or backend.

Which functions are cloned: a clone doubles a function's compile time, so only functions
(a kernel, or the chunk function of a parallel loop) that pay for it: a loop GCC's -O2
vectorizer takes (contiguous stores, only short inner loops) storing floats computed
with a math function libmvec vectorizes (exp, erf, tanh, log, sigmoid, pow, ...: the
AVX2 variants do 8 lanes where the SSE ones do 4), or a min/max over a pooling window
(:data:`MIN_WINDOW_SELECTS`) or accumulated in lanes (a dynamic quantization's range
pass), or a rounding to an integer (:data:`ROUNDING_INTRINSICS`:
quantizing), or an int32 product (an integer convolution: SSE2 has no 32-bit vector
multiply), with an estimated work of at least :data:`MIN_CLONE_WORK`.
Plain arithmetic gains little (batch-norm + ReLU kernels ~3%: DenseNet-121's build
took 1.09x the CPU time with them cloned for a 3% faster library).
A function that calls a GEMM or the convolution microkernels is cloned for its epilogue
when that does any float arithmetic (a bias, a ReLU, a hard-swish, a residual add), with
the epilogue's work alone against the threshold: the epilogue reads what the call just
wrote, from the L1/L2 cache, so unlike a batch-norm kernel reading memory it is bound by
its arithmetic (MobileNetV3-like's 14x14x240 depthwise convolution + hard-swish: the
epilogue took 17 us of 62 on SSE2 and 7.5 on AVX2; the model 0.90x on one thread). The
call itself runs the same code from either clone (OpenBLAS and the microkernels dispatch
by CPU themselves).
Measured on one thread (the same library, clones on / off): EfficientNet-like
(swish = x * sigmoid(x)) 0.67-0.77, the zoo transformer (softmax, GELU) 0.96,
wav2vec2-like 0.96; DenseNet-121 has no such kernel, so its build does not change.

Config ``codegen.multiversion`` (bool, default True): False renders no clones (the
default body only), which the tests use to compare clones with the portable code;
``codegen.multiversion_min_work`` (int, default :data:`MIN_CLONE_WORK`): the work
threshold of the rule (1 clones every function the rule takes, as the tests do on small
programs).
"""

from __future__ import annotations

from passinfra import tir
from passinfra.codegen import vector_math
from passinfra.codegen.transform.parallelize import statement_work, unknown_extent
from passinfra.ir.types import is_float_dtype
from passinfra.tir.arith import affine_coefficient, const_int
from passinfra.tir.functor import any_stmt, iter_expr_post_order, stmt_children
from passinfra.tir.intrinsics import is_kernel_call
from passinfra.transform.config import register_config

register_config("codegen.multiversion", bool)
register_config("codegen.multiversion_min_work", int)

DEFAULT_MULTIVERSION = True
CLONE_TARGETS = ("avx2", "default")
# the attribute macro a cloned function is declared with (empty where the compiler or
# the architecture has no target_clones, so the C text is the same for every target)
CLONE_MACRO = "RP_CLONES"
# work units (about a nanosecond of one core, see parallelize.statement_work): below
# this a function's clone saves less than a microsecond a call
MIN_CLONE_WORK = 20_000
# float min/max in one stored value from which it is a pooling window's (a 2x2 window
# has four): each is a NaN-propagating select, which AVX2 does in half the operations
# and twice the lanes (SqueezeNet's 3x3 max pooling of 111x111x64: 0.32 ms on SSE2,
# 0.11 on AVX2); a ReLU's single max reads memory and gains little
MIN_WINDOW_SELECTS = 4
# inner loops up to this constant extent are unrolled whole by GCC, so a loop around them
# still vectorizes (c_renderer.MAX_LANE_INNER_EXTENT)
SHORT_LOOP_EXTENT = 16
# the attribute that gives a cloned function -O3's vectorizer cost model (GCC only)
VECTORIZE_CHEAP = 'optimize("vect-cost-model=cheap")'
# the flag that keeps a*b+c two roundings in every clone
CONTRACT_FLAG = "-ffp-contract=off"

# math intrinsics (passinfra.codegen.c_renderer.INTRINSICS) whose C functions libmvec
# vectorizes; sigmoid's helper calls expf
VECTOR_MATH_INTRINSICS = frozenset({*vector_math.UNARY, *vector_math.BINARY, "sigmoid"})
# roundings to an integer that SSE4.1's ROUNDSS/ROUNDPS do exactly (in the AVX2 clone one
# inline instruction, in the SSE2 default a libm call): qnn.quantize of 32 x 5632 floats
# (a decoder's activations) took 1.09 ms on one thread with the call, 0.048 ms cloned
ROUNDING_INTRINSICS = frozenset({"nearbyint", "floor", "ceil", "trunc"})


def contract_flag(cflags: str) -> str:
    """:data:`CONTRACT_FLAG` unless ``cflags`` choose their own ``-ffp-contract``."""
    return "" if "-ffp-contract=" in cflags else CONTRACT_FLAG


def clone_macro_definition() -> str:
    """The C block defining :data:`CLONE_MACRO` (part of every kernel with clones)."""
    targets = ", ".join(f'"{target}"' for target in CLONE_TARGETS)
    return (
        "/* AVX2 clones picked at load time (issue 18): same C, same library bytes everywhere;\n"
        "   GCC's -O2 vectorizer cost model lets a long quantizing epilogue stay scalar, the\n"
        "   cheap one (-O3's) vectorizes it (exact either way: no reassociation) */\n"
        "#if defined(__x86_64__) && defined(__has_attribute)\n"
        "#if __has_attribute(target_clones)\n"
        "#if defined(__GNUC__) && !defined(__clang__)\n"
        f"#define {CLONE_MACRO} __attribute__((target_clones({targets}), {VECTORIZE_CHEAP}))\n"
        "#else\n"
        f"#define {CLONE_MACRO} __attribute__((target_clones({targets})))\n"
        "#endif\n"
        "#define RP_CLONES_ON 1\n"
        "#endif\n"
        "#endif\n"
        f"#ifndef {CLONE_MACRO}\n"
        f"#define {CLONE_MACRO}\n"
        "#endif\n"
    )


def wants_clone(stmt: tir.Stmt, skip_parallel: bool, min_work: int = MIN_CLONE_WORK) -> bool:
    """Whether a function whose body is ``stmt`` gets AVX2 clones (module docstring).

    ``skip_parallel``: the function is a kernel whose PARALLEL loops are rendered as
    chunk functions of their own, so their bodies do not count here.
    """
    if _calls_kernel(stmt, skip_parallel):
        # the epilogue of a GEMM or convolution call: any float arithmetic pays, as it
        # reads the call's output from the L1/L2 cache
        return (_computes_floats(stmt, skip_parallel, any_arithmetic=True)
                and _epilogue_work(stmt, skip_parallel) >= min_work)
    if not _computes_floats(stmt, skip_parallel):
        return False
    return _work(stmt, skip_parallel) >= min_work


def _calls_kernel(root: tir.Stmt, skip_parallel: bool) -> bool:
    enter = _outside_parallel_loops if skip_parallel else None
    return any_stmt(root, lambda node: isinstance(node, tir.Evaluate) and is_kernel_call(node.value), enter)


def _outside_parallel_loops(node: tir.Stmt) -> bool:
    return not _is_parallel_loop(node)


def _is_parallel_loop(node: tir.Stmt) -> bool:
    return isinstance(node, tir.For) and node.kind is tir.ForKind.PARALLEL


def _epilogue_work(node: tir.Stmt, skip_parallel: bool) -> int:
    """The work of ``node`` without its GEMM and convolution calls (their code is the
    same in both clones)."""
    if isinstance(node, tir.Evaluate) and is_kernel_call(node.value):
        return 0
    if isinstance(node, tir.For):
        if skip_parallel and node.kind is tir.ForKind.PARALLEL:
            return 0
        extent = const_int(node.extent)
        iterations = unknown_extent() if extent is None else extent or 1
        return max(iterations, 0) * _epilogue_work(node.body, skip_parallel)
    if isinstance(node, tir.SeqStmt):
        return sum(_epilogue_work(child, skip_parallel) for child in node.stmts)
    if isinstance(node, (tir.Allocate, tir.LetStmt)):
        return _epilogue_work(node.body, skip_parallel)
    if isinstance(node, tir.IfThenElse):
        return max(_epilogue_work(child, skip_parallel) for child in stmt_children(node))
    return statement_work(node)


def _computes_floats(root: tir.Stmt, skip_parallel: bool, any_arithmetic: bool = False) -> bool:
    """A vectorizable store (:func:`_vectorizable`) of a float computed with vector math
    (:data:`VECTOR_MATH_INTRINSICS`), or with any arithmetic (``any_arithmetic``: not
    a plain copy); or of any value rounded to an integer (:data:`ROUNDING_INTRINSICS`)."""
    found = False
    # (statement, enclosing loops, innermost last)
    stack: list[tuple[tir.Stmt, tuple[tir.For, ...]]] = [(root, ())]
    while stack:
        node, loops = stack.pop()
        if isinstance(node, tir.For):
            if skip_parallel and node.kind is tir.ForKind.PARALLEL:
                continue
            stack.append((node.body, (*loops, node)))
        elif isinstance(node, tir.BufferStore):
            computes = (not isinstance(node.value, (tir.BufferLoad, tir.FloatImm)) if any_arithmetic
                        else _calls_vector_math(node.value) or _is_window_select(node.value)
                        or _is_lane_extremum(node))
            # a rounding pays whatever the stored type (a quantized tensor is integers)
            rounds = not any_arithmetic and _calls_vector_math(node.value, ROUNDING_INTRINSICS)
            products = not any_arithmetic and _multiplies_int32(node.value)
            found = found or ((is_float_dtype(node.buffer.dtype) and computes or rounds or products)
                              and _vectorizable(node, loops))
        else:
            stack.extend((child, loops) for child in stmt_children(node))
    return found


def _is_window_select(value: tir.PrimExpr) -> bool:
    """A min or max over a window (max pooling): at least :data:`MIN_WINDOW_SELECTS`
    float min/max in one value, each of which is six SSE2 operations (NaN-propagating
    selects, see c_renderer) and three on AVX2."""
    selects = sum(1 for node in iter_expr_post_order(value)
                  if isinstance(node, (tir.Min, tir.Max)) and is_float_dtype(node.dtype))
    return selects >= MIN_WINDOW_SELECTS


def _is_lane_extremum(store: tir.BufferStore) -> bool:
    """A float min or max accumulated in the element it reads: a range pass's lanes
    (qnn.dynamic_quantize), each a NaN-propagating select of six SSE2 operations on 4
    floats, three AVX2 on 8 (a dynamic quantization of 32 x 5632 floats, its range pass then
    on one thread: 120 -> 89 us at two threads on a Sapphire Rapids)."""
    value = store.value
    return (isinstance(value, (tir.Min, tir.Max)) and is_float_dtype(value.dtype)
            and any(isinstance(side, tir.BufferLoad) and side.buffer is store.buffer
                    for side in (value.a, value.b)))


def _multiplies_int32(value: tir.PrimExpr) -> bool:
    """An int32 product (an integer convolution's): SSE2 has no 32-bit vector multiply
    (PMULLD is SSE4.1), so the default clone emulates it in four instructions."""
    return any(isinstance(node, tir.Mul) and node.dtype == "int32" for node in iter_expr_post_order(value))


def _calls_vector_math(value: tir.PrimExpr, names: frozenset[str] = VECTOR_MATH_INTRINSICS) -> bool:
    return any(isinstance(node, tir.Intrinsic) and node.name in names for node in iter_expr_post_order(value))


# the largest step between a loop's stores that still counts as vectorizable
MAX_STORE_STEP = 4


def _vectorizable(store: tir.BufferStore, loops: tuple[tir.For, ...]) -> bool:
    """The store walks its buffer contiguously in a loop GCC's -O2 vectorizer takes: one
    whose variable has coefficient 1 in the (flattened) index, with no inner loop but
    short ones of constant extent (which GCC unrolls, as in the lanes of a chunk
    function); a store inside a longer inner loop (a reduction) is not."""
    if len(store.indices) != 1:
        return False
    for loop in reversed(loops):
        step = affine_coefficient(store.indices[0], loop.loop_var)
        # or by a few elements: a layout change of a few channels (loop_tiling's narrow
        # innermost axis), whose loads and values GCC vectorizes, storing lane by lane
        if step == 1 or (loop is loops[-1] and isinstance(step, int) and 1 < step <= MAX_STORE_STEP):
            return _only_short_loops(loop.body)
        extent = const_int(loop.extent)
        if extent is None or extent > SHORT_LOOP_EXTENT:
            return False
    return False


def _only_short_loops(root: tir.Stmt) -> bool:
    return not any_stmt(root, _is_long_loop)


def _is_long_loop(node: tir.Stmt) -> bool:
    if not isinstance(node, tir.For):
        return False
    extent = const_int(node.extent)
    return extent is None or extent > SHORT_LOOP_EXTENT


def _work(stmt: tir.Stmt, skip_parallel: bool) -> int:
    if not skip_parallel:
        return statement_work(stmt)
    # the kernel's own work: its statements outside the PARALLEL loops
    total, stack = 0, [stmt]
    while stack:
        node = stack.pop()
        if isinstance(node, tir.SeqStmt):
            stack.extend(node.stmts)
        elif isinstance(node, tir.For) and node.kind is tir.ForKind.PARALLEL:
            continue
        elif isinstance(node, (tir.Allocate, tir.LetStmt)) and _has_parallel(node.body):
            stack.append(node.body)
        elif _has_parallel(node):
            # a serial loop or branch around a parallel one: its own iterations only
            total += 1
        else:
            total += statement_work(node)
    return total


def _has_parallel(root: tir.Stmt) -> bool:
    return any_stmt(root, _is_parallel_loop)


__all__ = [
    "CLONE_MACRO", "CLONE_TARGETS", "CONTRACT_FLAG", "DEFAULT_MULTIVERSION", "MIN_CLONE_WORK",
    "MIN_WINDOW_SELECTS", "ROUNDING_INTRINSICS", "VECTOR_MATH_INTRINSICS", "clone_macro_definition",
    "contract_flag", "wants_clone",
]

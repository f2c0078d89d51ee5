"""Render a flattened PrimFunc as C source.

ABI (what the host code and the runtime rely on). For a PrimFunc with global symbol
``sym``, inputs ``a, b`` and output ``out`` (float32), the renderer emits::

    static int sym(const float* restrict a, const float* restrict b, float* restrict out);
    int sym_packed(void** args);   /* args = {a, b, out}: the uniform, exported entry */

Both return 0 on success and -1 if a heap allocation failed. The host calls every
kernel through ``sym_packed``, so it needs no per-kernel prototype knowledge.

The target details are tables (:data:`C_TYPES`, :data:`BINARY_OPERATORS`,
:data:`INTRINSICS`); the :class:`CRenderer` walks statements and expressions with
explicit stacks (no recursion, so deep expressions cannot hit Python's limit) and names
temporaries with per-function counters, so one PrimFunc always renders to the same bytes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from passinfra import tir
from passinfra.codegen import vector_math
from passinfra.codegen.block_copy import BlockCopy, match_block_copy
from passinfra.codegen.gemm import DEFAULT_BLAS_THREADS, GEMM_INTRINSIC, blas_prototype, render_gemm
from passinfra.errors import IRError

C_TYPES: dict[str, str] = {
    "float32": "float",
    "float64": "double",
    "int32": "int32_t",
    "int64": "int64_t",
    "bool": "bool",
}

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

_HELPER_SUFFIX = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool": "i32"}

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

PREAMBLE = """\
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
""" + vector_math.declarations() + """
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
/* min/max propagate NaN like NumPy's minimum/maximum (fminf/fmaxf would drop it) */
static inline float rp_min_f32(float a, float b) { return (a < b || a != a) ? a : b; }
static inline float rp_max_f32(float a, float b) { return (a > b || a != a) ? a : b; }
static inline double rp_min_f64(double a, double b) { return (a < b || a != a) ? a : b; }
static inline double rp_max_f64(double a, double b) { return (a > b || a != a) ? a : b; }
static inline int32_t rp_min_i32(int32_t a, int32_t b) { return a < b ? a : b; }
static inline int32_t rp_max_i32(int32_t a, int32_t b) { return a > b ? a : b; }
static inline int64_t rp_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t rp_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }
/* a float Select evaluates both of its sides (the loop-level IR allows it, and every load
   under a Select is clamped into its buffer): an unconditional load lets the compiler turn
   the select into a blend and vectorize the loop, where C's lazy ?: would keep it scalar */
static inline float rp_select_f32(bool c, float a, float b) { return c ? a : b; }
static inline double rp_select_f64(bool c, double a, double b) { return c ? a : b; }
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

_DTYPE_BYTES = {"float32": 4, "float64": 8, "int32": 4, "int64": 8, "bool": 1}


def c_type(dtype: str) -> str:
    """The C type of ``dtype``; IRError naming it when C has none in this backend."""
    try:
        return C_TYPES[dtype]
    except KeyError:
        raise IRError(f"the C backend has no type for dtype {dtype!r}") from None


def dtype_bytes(dtype: str) -> int:
    return _DTYPE_BYTES[dtype]


def sanitize_identifier(name: str) -> str:
    """``name`` as a C identifier: non-identifier characters become ``_``."""
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name) or "_"
    return "_" + ident if ident[0].isdigit() else ident


@dataclass(frozen=True)
class RenderOptions:
    """Target switches that change the emitted C (derived from the compiler flags)."""

    openmp: bool = False  # emit `omp parallel for` on PARALLEL loops
    openmp_simd: bool = False  # emit `omp simd` on VECTORIZED loops
    blas_threads: int = DEFAULT_BLAS_THREADS  # OpenBLAS threads of the GEMM calls (0: its default)

    @staticmethod
    def from_cflags(cflags: str, blas_threads: int = DEFAULT_BLAS_THREADS) -> RenderOptions:
        flags = cflags.split()
        openmp = "-fopenmp" in flags
        return RenderOptions(openmp=openmp, openmp_simd=openmp or "-fopenmp-simd" in flags,
                             blas_threads=blas_threads)


class CRenderer:
    """Renders one flattened PrimFunc; create a new renderer per function."""

    def __init__(self, options: RenderOptions | None = None) -> None:
        self.options = options or RenderOptions()
        self._names: dict[object, str] = {}  # TVar / Buffer -> C name of the current binding
        self._used_names: set[str] = set()
        self._lines: list[str] = []
        self._input_buffers: set[tir.Buffer] = set()
        self._parallel_depth = 0
        self._calls_blas = False  # a GEMM intrinsic was rendered: declare the BLAS entry

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
        params = []
        for index, buffer in enumerate(func.params):
            is_input = index < num_inputs
            if is_input:
                self._input_buffers.add(buffer)
            const = "const " if is_input else ""
            params.append(f"{const}{c_type(buffer.dtype)}* restrict {self._bind(buffer, buffer.name)}")
        # static: only the packed entry is exported, so a kernel named like a libc function
        # (``step``, ``index``) cannot be interposed by it when the library is loaded
        signature = f"static int {symbol}({', '.join(params) or 'void'})"
        self._lines = []
        self._emit_body(func.body, indent=1)
        casts = [
            f"({'const ' if i < num_inputs else ''}{c_type(b.dtype)}*)args[{i}]"
            for i, b in enumerate(func.params)
        ]
        parts = [
            f"/* generated by raypass CodegenC: {symbol} */",
            PREAMBLE,
            *([blas_prototype(self.options.blas_threads), ""] if self._calls_blas else []),
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
        return "\n".join(parts)

    # ----- statements: an explicit work stack of statements and closing lines -----------
    def _emit_body(self, body: tir.Stmt, indent: int) -> None:
        work: list[tuple[str, object, int]] = [("stmt", body, indent)]
        while work:
            kind, item, level = work.pop()
            if kind == "line":
                self._lines.append("  " * level + str(item))
            elif kind == "leave_parallel":
                self._parallel_depth -= 1
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
            emit(f"{pad}{target} = {self.expr(stmt.value)};")
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
        if block is not None and block.target not in self._input_buffers:
            self._emit_block_copy(block, pad)
            return
        ctype = c_type(loop.loop_var.dtype)
        start = self.expr(loop.start)
        extent = self.expr(loop.extent)
        name = self._bind(loop.loop_var, loop.loop_var.name)
        bound = extent if _is_zero(loop.start) else f"{start} + {extent}"
        if loop.kind is tir.ForKind.VECTORIZED:
            if self.options.openmp_simd:
                self._lines.append(f"{pad}#pragma omp simd")
            self._lines.append(f"{pad}#pragma GCC ivdep")
        elif loop.kind is tir.ForKind.UNROLLED:
            factor = loop.extent.value if isinstance(loop.extent, tir.IntImm) else DEFAULT_UNROLL_FACTOR
            self._lines.append(f"{pad}#pragma GCC unroll {max(1, min(factor, MAX_UNROLL_PRAGMA))}")
        elif loop.kind is tir.ForKind.PARALLEL and self.options.openmp and self._parallel_depth == 0:
            self._lines.append(f"{pad}#pragma omp parallel for")
            self._parallel_depth += 1
            work.append(("leave_parallel", None, level))
        self._lines.append(f"{pad}for ({ctype} {name} = {start}; {name} < {bound}; ++{name}) {{")
        work.append(("line", "}", level))
        work.append(("stmt", loop.body, level + 1))

    def _emit_block_copy(self, block: BlockCopy, pad: str) -> None:
        # a contiguous copy / zero fill as memcpy / memset: gcc -O2 leaves the loop scalar
        nbytes = block.count * dtype_bytes(block.target.dtype)
        target = f"&{self._access(block.target, (block.target_start,))}"
        if block.source is None:
            self._lines.append(f"{pad}memset({target}, 0, {nbytes});")
        else:
            source = f"&{self._access(block.source, (block.source_start,))}"
            self._lines.append(f"{pad}memcpy({target}, {source}, {nbytes});")

    def _emit_allocate(self, alloc: tir.Allocate, level: int, work: list) -> None:
        pad = "  " * level
        buffer = alloc.buffer
        ctype = c_type(buffer.dtype)
        name = self._bind(buffer, buffer.name)
        count = max(buffer.size, 1)
        nbytes = count * dtype_bytes(buffer.dtype)
        if nbytes <= MAX_STACK_ALLOCATION_BYTES:
            self._lines.append(f"{pad}{ctype} {name}[{count}];")
            work.append(("stmt", alloc.body, level))
            return
        # a return is not allowed inside an OpenMP parallel region: abort there instead
        on_failure = "abort();" if self._parallel_depth else "return -1;"
        self._lines.append(f"{pad}{ctype}* restrict {name} = ({ctype}*)malloc({nbytes});")
        self._lines.append(f"{pad}if ({name} == NULL) {{ {on_failure} }}")
        work.append(("line", f"free({name});", level))
        work.append(("stmt", alloc.body, level))

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
        done: dict[int, str] = {}
        stack: list[tuple[tir.PrimExpr, bool]] = [(root, False)]
        while stack:
            node, children_done = stack.pop()
            if id(node) in done:
                continue
            children = _expr_children(node)
            if children_done or not children:
                done[id(node)] = self._render_node(node, [done[id(c)] for c in children])
                continue
            stack.append((node, True))
            stack.extend((c, False) for c in reversed(children) if id(c) not in done)
        return done[id(root)]

    def _render_node(self, node: tir.PrimExpr, args: list[str]) -> str:
        render = _NODE_RENDERERS.get(type(node))
        if render is not None:
            return render(self, node, args)
        op = BINARY_OPERATORS.get(type(node))
        if op is not None:
            return f"({args[0]} {op} {args[1]})"
        helper = HELPER_OPERATORS.get(type(node))
        if helper is not None:
            dtype = node.a.dtype  # type: ignore[attr-defined]
            c_type(dtype)
            return f"rp_{helper}_{_HELPER_SUFFIX[dtype]}({args[0]}, {args[1]})"
        raise IRError(f"the C backend cannot render expression {type(node).__name__}")

    def _render_intrinsic(self, node: tir.Intrinsic, args: list[str]) -> str:
        if node.name == GEMM_INTRINSIC:
            self._calls_blas = True
            return render_gemm(args)
        table = INTRINSICS.get(node.name)
        if table is None:
            raise IRError(f"unknown math intrinsic {node.name!r}; known: {', '.join(sorted(INTRINSICS))}")
        function = table.get(node.dtype)
        if function is None:
            raise IRError(f"math intrinsic {node.name!r} has no C function for dtype {node.dtype!r}")
        return f"{function}({', '.join(args)})"


_RESERVED = frozenset(
    "args auto break case char const continue default do double else enum extern float for goto if "
    "inline int long register restrict return short signed sizeof static struct switch typedef union "
    "unsigned void volatile while bool true false free malloc abort".split()
)


def _is_zero(expr: tir.PrimExpr) -> bool:
    return isinstance(expr, tir.IntImm) and expr.value == 0


def _expr_children(node: tir.PrimExpr) -> tuple[tir.PrimExpr, ...]:
    if isinstance(node, (tir.BinaryOp, tir.CmpOp)):
        return (node.a, node.b)
    if isinstance(node, tir.Not):
        return (node.a,)
    if isinstance(node, tir.Select):
        return (node.cond, node.true_value, node.false_value)
    if isinstance(node, tir.Cast):
        return (node.value,)
    if isinstance(node, tir.Intrinsic):
        return node.args
    if isinstance(node, tir.BufferLoad):
        return node.indices
    return ()


def _render_int(renderer: CRenderer, node: tir.IntImm, args: list[str]) -> str:
    if node.dtype == "bool":
        return "true" if node.value else "false"
    value = int(node.value)
    if node.dtype == "int64" and not -(2**31) < value < 2**31:
        return f"INT64_C({value})"
    if value < 0:
        return f"({value})"
    return str(value)


def _render_float(renderer: CRenderer, node: tir.FloatImm, args: list[str]) -> str:
    value = float(node.value)
    suffix = "f" if node.dtype == "float32" else ""
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


_EAGER_SELECTS = {"float32": "rp_select_f32", "float64": "rp_select_f64"}


def _render_select(node: tir.Select, args: list[str]) -> str:
    eager = _EAGER_SELECTS.get(node.dtype)
    if eager is not None:
        return f"{eager}({args[0]}, {args[1]}, {args[2]})"
    # integer selects stay lazy: an index computation under a false condition may divide
    # by zero
    return f"({args[0]} ? {args[1]} : {args[2]})"


def _render_load(renderer: CRenderer, node: tir.BufferLoad, args: list[str]) -> str:
    return renderer._access(node.buffer, node.indices)


_NODE_RENDERERS: dict[type, Callable[[CRenderer, object, list[str]], str]] = {
    tir.IntImm: _render_int,  # type: ignore[dict-item]
    tir.FloatImm: _render_float,  # type: ignore[dict-item]
    tir.TVar: lambda r, n, a: r._name_of(n),  # type: ignore[arg-type]
    tir.Not: lambda r, n, a: f"(!{a[0]})",
    tir.Select: lambda r, n, a: _render_select(n, a),  # type: ignore[arg-type]
    tir.Cast: lambda r, n, a: f"(({c_type(n.dtype)}){a[0]})",  # type: ignore[attr-defined]
    tir.Intrinsic: lambda r, n, a: r._render_intrinsic(n, a),  # type: ignore[arg-type]
    tir.BufferLoad: _render_load,  # type: ignore[dict-item]
}


def render_prim_func(func: tir.PrimFunc, options: RenderOptions | None = None) -> str:
    """C source of a flattened PrimFunc (see the module docstring for the ABI)."""
    return CRenderer(options).render(func)


__all__ = [
    "C_TYPES", "BINARY_OPERATORS", "HELPER_OPERATORS", "INTRINSICS", "PREAMBLE", "CRenderer",
    "RenderOptions", "render_prim_func", "c_type", "dtype_bytes", "sanitize_identifier",
]

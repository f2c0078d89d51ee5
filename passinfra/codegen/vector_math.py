"""Vector math: loops that call exp, erf, tanh, ... vectorize through glibc's libmvec.

C's math functions are scalar, so a loop that calls ``expf`` (softmax, sigmoid) or
``erff`` (GELU) stays scalar and the call dominates it: about 9 ns per ``erff``. glibc
(2.35 and later) ships SIMD variants of them in libmvec, and GCC calls those from a
vectorized loop when the function is declared with the ``simd`` attribute. glibc's own
headers declare them so only under ``-ffast-math``, which would also change the
floating-point semantics of everything else; raypass declares them itself instead,
behind the :data:`MACRO` guard. On this machine a GELU over 64K floats went from 540 to
110 us, ``expf`` from 230 to 80 us, ``tanhf`` from 915 to 113 us.

The variants keep C's results to a few ULP and handle NaN, infinities and overflow
like the scalar functions. libmvec picks the code for the running CPU itself (the
baseline SSE entry points dispatch at load time), so the portable default flags stay
portable; the library needs libmvec (glibc >= 2.35) where it runs.

Config ``codegen.vector_math`` (bool, default True): use libmvec when the compiler can
link against every variant raypass declares (a probe, once per compiler and flags);
False, or a system without it, keeps the scalar calls.
"""

from __future__ import annotations

import functools
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from passinfra.transform.config import register_config

register_config("codegen.vector_math", bool)

# defined on the compiler's command line when vector math is on; the kernels' C declares
# the SIMD variants only under it, so the C text is the same either way
MACRO = "RP_VECTOR_MATH"
LINK_FLAG = "-lmvec"

# math functions the C renderer calls and libmvec vectorizes, by number of arguments
UNARY = ("exp", "log", "tanh", "erf", "sin", "cos", "tan", "exp2", "log2", "log10", "expm1",
         "log1p", "atan", "asin", "acos", "sinh", "cosh")
BINARY = ("pow", "atan2")

# vector ABI name parts: ISA letter -> lanes of (float, double)
_ISA_LANES = {"b": (4, 2), "c": (8, 4), "d": (8, 4), "e": (16, 8)}


def _c_names() -> list[tuple[str, str, int]]:
    """``(C function, C type, arity)`` of every declared function, float then double."""
    names = []
    for base in (*UNARY, *BINARY):
        arity = 2 if base in BINARY else 1
        names.append((base + "f", "float", arity))
        names.append((base, "double", arity))
    return names


def declarations() -> str:
    """The guarded C block that declares the SIMD variants (part of every kernel)."""
    lines = [f"#ifdef {MACRO}",
             "/* libmvec has SIMD variants of these: declared so, GCC vectorizes loops calling them */"]
    for name, ctype, arity in _c_names():
        params = ", ".join([ctype] * arity)
        lines.append(f'{ctype} {name}({params}) __attribute__((__simd__("notinbranch")));')
    lines.append("#endif")
    return "\n".join(lines) + "\n"


def _variant_symbols() -> list[str]:
    """Every libmvec symbol a kernel may call, for any ISA the flags may select."""
    symbols = []
    for name, ctype, arity in _c_names():
        for isa, (float_lanes, double_lanes) in _ISA_LANES.items():
            lanes = float_lanes if ctype == "float" else double_lanes
            symbols.append(f"_ZGV{isa}N{lanes}{'v' * arity}_{name}")
    return symbols


def _probe_source() -> str:
    symbols = _variant_symbols()
    externs = "\n".join(f"extern void {symbol}(void);" for symbol in symbols)
    table = ", ".join(f"(void*){symbol}" for symbol in symbols)
    return (f"{externs}\nvoid* volatile rp_vector_math_table[] = {{{table}}};\n"
            "int main(void) { return rp_vector_math_table[0] == 0; }\n")


@functools.lru_cache(maxsize=16)
def vector_math_available(cc: str, cflags: str) -> bool:
    """True when ``cc`` with ``cflags`` links a program that references every libmvec
    variant raypass may call (so no kernel can fail to link or load for a missing one)."""
    path = shutil.which(cc)
    if path is None:
        return False
    workdir = tempfile.mkdtemp(prefix="raypass-mvec-")
    try:
        (Path(workdir) / "probe.c").write_text(_probe_source(), encoding="utf-8")
        flags = [flag for flag in shlex.split(cflags) if flag not in ("-shared", "-c")]
        command = [path, *flags, "probe.c", "-o", "probe", LINK_FLAG, "-lm"]
        try:
            result = subprocess.run(command, capture_output=True, cwd=workdir, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            return False
        if result.returncode < 0:
            # stopped by a signal (Ctrl-C reaches the probe too): no answer, and a cached
            # False would change every later kernel's C in this process
            from passinfra.codegen.cc_driver import stopped_by

            raise stopped_by(result.returncode)(f"the vector-math probe ({path}) was stopped by signal "
                                                f"{-result.returncode}")
        return result.returncode == 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


__all__ = ["BINARY", "LINK_FLAG", "MACRO", "UNARY", "declarations", "vector_math_available"]

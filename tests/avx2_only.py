"""Run a command as an x86-64 CPU without AVX-512 would run it, on a machine that has it.

    python -m tests.avx2_only python -m pytest -q      (what `make test-avx2` runs)

The suite must pass on AVX2-only CPUs too, and what changes there is not the C the code
generator writes (portable flags, the same bytes everywhere) but every choice some code
makes from the CPU when it runs. Each has its own switch, all set here, inherited by every
process the command starts (Ray workers, the pool's daemon, ``raypass`` subprocesses):

- the convolution microkernels (:mod:`passinfra.codegen.conv_runtime`) pick AVX2 + FMA
  (``RAYPASS_MAX_ISA=avx2``);
- OpenBLAS runs its Haswell kernels, an AVX2 CPU's (``OPENBLAS_CORETYPE``);
- NumPy's own SIMD loops (reductions, exp, sort, ...; the interpreter the tests compare
  against) skip their AVX-512 variants (``NPY_DISABLE_CPU_FEATURES``, the dispatch targets
  of this NumPy build that need AVX-512);
- glibc's CPU-dispatched functions (libm's ``expf``, libmvec's vector math, which the
  kernels' ``target_clones`` call) see no AVX-512 (``GLIBC_TUNABLES``).

``target_clones`` themselves choose between AVX2 and SSE2 bodies, both present on AVX2
CPUs, so they need no switch. A machine without AVX-512 runs the same with or without
this wrapper.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

# glibc's names (sysdeps/x86/include/cpu-features.h) of the AVX-512 features its ifunc
# resolvers test; a name this glibc does not know is ignored
GLIBC_AVX512 = ("AVX512F", "AVX512CD", "AVX512ER", "AVX512PF", "AVX512VL", "AVX512DQ", "AVX512BW",
                "AVX512_4FMAPS", "AVX512_4VNNIW", "AVX512_BITALG", "AVX512_IFMA", "AVX512_VBMI",
                "AVX512_VBMI2", "AVX512_VNNI", "AVX512_VPOPCNTDQ", "AVX512_BF16", "AVX512_FP16")


def numpy_avx512_targets() -> list[str]:
    """This NumPy build's dispatch targets that need AVX-512 (the names change between
    NumPy versions: AVX512_SKX in 1.x, X86_V4 in 2.4), the only ones it lets one disable."""
    from numpy._core._multiarray_umath import __cpu_dispatch__

    return [name for name in __cpu_dispatch__ if "AVX512" in name or name == "X86_V4"]


def avx2_only_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with every switch above set; a GLIBC_TUNABLES already there is kept."""
    env = dict(base)
    env["RAYPASS_MAX_ISA"] = "avx2"
    env["OPENBLAS_CORETYPE"] = "Haswell"
    env["NPY_DISABLE_CPU_FEATURES"] = " ".join(numpy_avx512_targets())
    hwcaps = "glibc.cpu.hwcaps=" + ",".join("-" + name for name in GLIBC_AVX512)
    env["GLIBC_TUNABLES"] = ":".join(filter(None, [base.get("GLIBC_TUNABLES", ""), hwcaps]))
    return env


def numpy_runs_avx512() -> bool:
    """Whether NumPy in this process runs AVX-512 code (its features in effect)."""
    from numpy._core._multiarray_umath import __cpu_features__

    dispatched = set(numpy_avx512_targets())
    return any(enabled and name in dispatched for name, enabled in __cpu_features__.items())


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m tests.avx2_only COMMAND [ARG ...]", file=sys.stderr)
        return 2
    os.execvpe(argv[0], argv, avx2_only_environment(os.environ))
    return 0  # not reached: exec replaces this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

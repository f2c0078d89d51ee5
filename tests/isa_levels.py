"""What the integer-kernel tests share: the assertion that a library's results are the same
bits on two threads and one, and on every instruction-set level its runtime can run here;
and the counters of the bodies its integer GEMM took."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

from passinfra.runtime.module import CONV_ISA_LEVELS


def assert_same_on_every_isa(lib, args: Sequence[np.ndarray], expected: np.ndarray,
                             runtime: bool | None = True) -> None:
    """``lib(*args)`` equals ``expected`` on two threads and one, at every level the runtime
    (and its integer kernels) has here: AMX, AVX-512 VNNI, AVX2 and portable where the CPU
    has them. ``runtime``: whether the library must link the runtime (False: a library of
    generated kernels only, which the levels do not change; None: either)."""
    assert np.array_equal(lib(*args), expected)
    lib.set_num_threads(1)
    try:
        assert np.array_equal(lib(*args), expected)
        isa = lib.conv_isa()
        if runtime is not None:
            assert (isa is not None) == runtime, "the runtime (its integer kernels) is linked as expected"
        if isa is None:
            return
        for level in CONV_ISA_LEVELS[:CONV_ISA_LEVELS.index(isa) + 1]:
            assert lib.conv_isa(level) == level
            assert np.array_equal(lib(*args), expected), level
        lib.conv_isa(isa)
    finally:
        lib.set_num_threads(2)


QGEMM_BODIES = 11  # RP_QGEMM_BODIES of passinfra/codegen/c/qgemm.c


def qgemm_body_calls(lib) -> list[int]:
    """How many GEMM calls each body of the library's runtime has run (c/qgemm.c)."""
    entry = lib._cdll.rp_qgemm_body_calls
    entry.restype, entry.argtypes = ctypes.c_int64, [ctypes.c_int]
    return [entry(body) for body in range(QGEMM_BODIES)]

"""Contraction FLOPs of a model: the work of its GEMM-shaped ops (convolution, dense,
matmul), two flops per multiply-add. They dominate the models of bench/codegen.py, so
FLOPs over seconds says how close an implementation runs to the core's peak, and what
a latency target asks of it."""

from __future__ import annotations

import math

from passinfra.ir.expr import Call
from passinfra.ir.functor import iter_post_order
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op
from passinfra.ir.type_infer import infer_type


def _elements(shape) -> int:
    return math.prod(int(d) for d in shape)


def _multiply_adds(call: Call) -> int:
    name = call.op.name
    if name not in ("nn.conv2d", "nn.dense", "matmul"):
        return 0
    out = _elements(call.checked_type.shape)
    if name == "nn.conv2d":
        # every output element reduces over the weight of its output channel
        weight = call.args[1].checked_type.shape
        layout = call.attrs["kernel_layout"]
        return out * _elements(weight) // int(weight[layout.index("O")])
    return out * int(call.args[0].checked_type.shape[-1])  # dense, matmul: the inner dimension


def contraction_flops(mod: IRModule) -> int:
    """Two flops per multiply-add of every conv2d, dense and matmul in ``main``."""
    infer_type(mod)
    total = 0
    for node in iter_post_order(mod["main"].body):
        if isinstance(node, Call) and isinstance(node.op, Op):
            total += 2 * _multiply_adds(node)
    return total


def sgemm_ceiling(size: int = 1024, repeat: int = 5) -> float | None:
    """GFLOP/s of the best of ``repeat`` single-threaded ``size``-cubed sgemms through the
    OpenBLAS the compiled libraries call: what one core reaches on the friendliest GEMM
    (None without scipy-openblas32)."""
    import ctypes
    import os
    import time

    import numpy as np

    from passinfra.codegen.gemm import BLAS_SYMBOL, THREADS_SETTER, blas_library

    library = blas_library()
    if library is None:
        return None
    names = [f for f in os.listdir(library.lib_dir) if f.startswith(f"lib{library.name}") and ".so" in f]
    blas = ctypes.CDLL(os.path.join(library.lib_dir, sorted(names)[0]))
    getattr(blas, THREADS_SETTER)(1)
    sgemm = getattr(blas, BLAS_SYMBOL)
    c_float, pointer = ctypes.c_float, ctypes.c_void_p
    sgemm.argtypes = [ctypes.c_int] * 6 + [c_float, pointer, ctypes.c_int, pointer, ctypes.c_int, c_float,
                                           pointer, ctypes.c_int]
    rng = np.random.default_rng(0)
    a, b = (rng.random((size, size), np.float32) for _ in range(2))
    c = np.zeros((size, size), np.float32)
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        sgemm(101, 111, 111, size, size, size, 1.0, a.ctypes.data, size, b.ctypes.data, size, 0.0,
              c.ctypes.data, size)
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best / 1e9


__all__ = ["contraction_flops", "sgemm_ceiling"]

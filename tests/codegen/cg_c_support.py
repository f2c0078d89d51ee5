"""Helpers for the C backend tests: compile hand-written PrimFuncs and call them."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from passinfra import tir
from passinfra.codegen.c_renderer import RenderOptions, render_prim_func
from passinfra.codegen.cc_driver import CompilerSettings, compile_c, link_shared


def prim_func(params: list[tir.Buffer], body: tir.Stmt, num_inputs: int, symbol: str) -> tir.PrimFunc:
    return tir.PrimFunc(params, body, {"num_inputs": num_inputs, "global_symbol": symbol})


def loop(var: tir.TVar, extent: int, body: tir.Stmt, kind: tir.ForKind = tir.ForKind.SERIAL) -> tir.For:
    return tir.For(var, tir.IntImm(0), tir.IntImm(extent), kind, body)


class CompiledKernel:
    """One PrimFunc compiled into its own shared library, called through ``<sym>_packed``."""

    def __init__(self, func: tir.PrimFunc, tmp_path: Path, settings: CompilerSettings,
                 options: RenderOptions | None = None) -> None:
        self.func = func
        self.source = render_prim_func(func, options)
        symbol = func.attrs["global_symbol"]
        obj = compile_c(self.source, settings, name=symbol)
        path = tmp_path / f"{symbol}.so"
        path.write_bytes(link_shared([(symbol, obj)], settings))
        self._lib = ctypes.CDLL(str(path))
        self._entry = getattr(self._lib, f"{symbol}_packed")
        self._entry.restype = ctypes.c_int

    def __call__(self, *arrays: np.ndarray, sizes: dict[str, int] | None = None) -> int:
        for array, buffer in zip(arrays, self.func.params):
            assert array.dtype == np.dtype(buffer.dtype) and array.flags.c_contiguous
        # a kernel compiled for symbolic sizes takes a pointer to each size's int64 value
        # after the buffers (in the order of func.dims)
        values = [ctypes.c_int64(int(sizes[var.name])) for var in self.func.dims] if sizes else []
        addresses = [a.ctypes.data for a in arrays] + [ctypes.addressof(v) for v in values]
        pointers = (ctypes.c_void_p * max(len(addresses), 1))(*addresses)
        return self._entry(pointers)

"""The loop-level evaluator's math intrinsics mean what the C renderer's functions do:
every intrinsic the C renderer knows can be evaluated, and the rounding ones round
halves as C does (round: away from zero; nearbyint: to even), checked against the
compiled C on the same values."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest

from passinfra import tir
from passinfra.codegen.c_renderer import INTRINSICS, render_prim_func
from passinfra.codegen.cc_driver import CompilerSettings, compile_c, link_shared
from passinfra.tir.evaluator import _INTRINSICS, run_prim_func

HALVES = np.array([0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997, -3.5, 4.0, -0.0, 7.5000005], "float32")
BINARY = {"pow", "atan2", "fmod"}


def kernel(name: str, n: int) -> tir.PrimFunc:
    a, out = tir.Buffer("a", (n,), "float32"), tir.Buffer("out", (n,), "float32")
    i = tir.TVar("i")
    operands = (a.load(i), a.load(i)) if name in BINARY else (a.load(i),)
    store = tir.BufferStore(out, tir.Intrinsic(name, operands, "float32"), (i,))
    body = tir.For(i, tir.IntImm(0), tir.IntImm(n), tir.ForKind.SERIAL, store)
    return tir.PrimFunc([a, out], body, {"num_inputs": 1, "global_symbol": f"math_{name}", "flattened": True})


def compiled(func: tir.PrimFunc, values: np.ndarray, tmp_path: Path) -> np.ndarray:
    settings = CompilerSettings(cache_dir=str(tmp_path / "cache"))
    symbol = func.attrs["global_symbol"]
    library = tmp_path / f"{symbol}.so"
    obj = compile_c(render_prim_func(func), settings, name=symbol)
    library.write_bytes(link_shared([(symbol, obj)], settings))
    entry = getattr(ctypes.CDLL(str(library)), f"{symbol}_packed")
    entry.restype = ctypes.c_int
    out = np.zeros_like(values)
    assert entry((ctypes.c_void_p * 2)(values.ctypes.data, out.ctypes.data)) == 0
    return out


def test_every_intrinsic_the_c_renderer_knows_can_be_evaluated():
    assert sorted(set(INTRINSICS) - set(_INTRINSICS)) == []


@pytest.mark.parametrize("name, expected", [
    ("round", [1.0, -1.0, 2.0, 3.0, -3.0, 0.0, -4.0, 4.0, -0.0, 8.0]),
    ("nearbyint", [0.0, -0.0, 2.0, 2.0, -2.0, 0.0, -4.0, 4.0, -0.0, 8.0]),
])
def test_rounding_halves_as_c_does(name: str, expected: list[float], tmp_path: Path):
    func = kernel(name, len(HALVES))
    evaluated = np.asarray(run_prim_func(func, HALVES))
    np.testing.assert_array_equal(evaluated, np.array(expected, "float32"))
    assert evaluated.tobytes() == compiled(func, HALVES, tmp_path).tobytes()  # signs of zeros too

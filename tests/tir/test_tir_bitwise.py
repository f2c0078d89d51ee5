"""The bitwise intrinsics of the loop-level IR (``bitwise_and``, ``bitwise_or``,
``bitwise_xor``, ``bitwise_not``): checked construction, text, structure and wire
format, the TIR interpreter, and the C renderer compiled and run, for every integer
dtype, against NumPy."""

from __future__ import annotations

import ctypes
import pickle
from pathlib import Path

import numpy as np
import pytest

from passinfra import ir, tir
from passinfra.codegen.c_renderer import render_prim_func
from passinfra.codegen.cc_driver import CompilerSettings, compile_c, link_shared
from passinfra.errors import IRError
from passinfra.tir.evaluator import run_prim_func
from passinfra.tir.intrinsics import bitwise
from passinfra.tir.printer import tir_astext
from passinfra.tir.structural import tir_structural_equal
from passinfra.tir.verify import verify_prim_func

INT_DTYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
N = 16
NUMPY = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}


def kernel(dtype: str) -> tir.PrimFunc:
    """out[j, i] for j = and, or, xor, not of a[i] and b[i]; and one nested expression
    (~(a & b) ^ a) in row 4, so operands that are themselves intrinsics render right."""
    a, b = tir.Buffer("a", (N,), dtype), tir.Buffer("b", (N,), dtype)
    out = tir.Buffer("out", (5 * N,), dtype)
    i = tir.TVar("i")
    x, y = a.load(i), b.load(i)
    values = [bitwise("bitwise_and", x, y), bitwise("bitwise_or", x, y), bitwise("bitwise_xor", x, y),
              bitwise("bitwise_not", x),
              bitwise("bitwise_xor", bitwise("bitwise_not", bitwise("bitwise_and", x, y)), x)]
    stores = [tir.BufferStore(out, value, (i + tir.IntImm(row * N),)) for row, value in enumerate(values)]
    body = tir.For(i, tir.IntImm(0), tir.IntImm(N), tir.ForKind.SERIAL, tir.SeqStmt(tuple(stores)))
    return tir.PrimFunc([a, b, out], body, {"num_inputs": 2, "global_symbol": f"bits_{dtype}",
                                            "flattened": True})


def expected(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    rows = [NUMPY[name](a, b) for name in ("bitwise_and", "bitwise_or", "bitwise_xor")]
    rows += [np.invert(a), np.bitwise_xor(np.invert(np.bitwise_and(a, b)), a)]
    return np.concatenate(rows)


def operands(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    a = rng.integers(info.min, info.max, N, dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, N, dtype=dtype, endpoint=True)
    a[:3], b[:3] = [info.min, info.max, 0], [info.max, info.min, info.max]
    return a, b


def test_construction_checks_name_arity_and_dtypes():
    i32, f32 = tir.TVar("x", "int32"), tir.TVar("f", "float32")
    assert bitwise("bitwise_and", i32, i32).dtype == "int32"
    with pytest.raises(IRError, match=r"unknown bitwise intrinsic 'bitwise_nand'"):
        bitwise("bitwise_nand", i32, i32)
    with pytest.raises(IRError, match=r"bitwise_not takes 1 operand\(s\), got 2"):
        bitwise("bitwise_not", i32, i32)
    with pytest.raises(IRError, match=r"bitwise_or needs integer operands of one dtype, got float32, f"):
        bitwise("bitwise_or", f32, f32)
    with pytest.raises(IRError, match=r"got int32, int64"):
        bitwise("bitwise_xor", i32, tir.TVar("y", "int64"))
    with pytest.raises(IRError, match=r"got bool"):
        bitwise("bitwise_not", tir.TVar("c", "bool"))


def test_text_structure_and_wire_format():
    func = kernel("int16")
    text = tir_astext(func)
    assert "bitwise_xor(bitwise_not(bitwise_and(a[i], b[i])), a[i])" in text
    assert tir_structural_equal(func, kernel("int16"))
    assert not tir_structural_equal(func, kernel("int32"))
    restored = pickle.loads(pickle.dumps(ir.IRModule({"k": func})))["k"]
    assert tir_structural_equal(restored, func) and tir_astext(restored) == text
    verify_prim_func(func)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_interpreter_matches_numpy(dtype: str):
    a, b = operands(dtype)
    got = run_prim_func(kernel(dtype), a, b)
    np.testing.assert_array_equal(got, expected(a, b))
    assert got.dtype == np.dtype(dtype)


def test_c_casts_each_result_back_to_the_dtype():
    source = render_prim_func(kernel("uint8"))
    # ~ of a uint8 is a negative int in C: the cast makes it the uint8 NumPy gives
    assert "((uint8_t)(~a[i]))" in source
    assert "((uint8_t)(a[i] & b[i]))" in source


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_compiled_matches_numpy(dtype: str, tmp_path: Path):
    func = kernel(dtype)
    settings = CompilerSettings(cache_dir=str(tmp_path / "cache"))
    symbol = func.attrs["global_symbol"]
    library = tmp_path / f"{symbol}.so"
    obj = compile_c(render_prim_func(func), settings, name=symbol)
    library.write_bytes(link_shared([(symbol, obj)], settings))
    entry = getattr(ctypes.CDLL(str(library)), f"{symbol}_packed")
    entry.restype = ctypes.c_int
    a, b = operands(dtype)
    out = np.zeros(5 * N, dtype)
    assert entry((ctypes.c_void_p * 3)(a.ctypes.data, b.ctypes.data, out.ctypes.data)) == 0
    np.testing.assert_array_equal(out, expected(a, b))

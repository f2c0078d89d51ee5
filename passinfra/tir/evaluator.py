"""A small interpreter of loop-level IR, for tests: slow (one Python step per scalar
operation) but exact, with C's semantics (truncating integer ``Div``, floor ``FloorDiv``
and ``FloorMod``, float32 arithmetic in float32) and bounds-checked buffer accesses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from passinfra.errors import EvaluationError
from passinfra.ir.op.bitcast import reinterpret_array
from passinfra.tir import nodes as n
from passinfra.tir.functor import fold_expr
from passinfra.tir.intrinsics import (
    BITWISE_INTRINSICS,
    REINTERPRET,
    evaluate_conv,
    evaluate_gemm,
    evaluate_lookup,
    evaluate_matmul_nbits,
    evaluate_qgemm,
    evaluate_winograd,
    is_conv,
    is_gemm,
    is_lookup,
    is_matmul_nbits,
    is_qgemm,
    is_winograd,
)
from passinfra.tir.nodes import Buffer, PrimExpr, PrimFunc, Stmt, TVar


def _c_div(a: Any, b: Any) -> Any:
    if isinstance(a, (np.floating, float)):
        return a / b
    if b == 0:
        raise EvaluationError("integer division by zero")
    quotient = abs(int(a)) // abs(int(b))
    return type(a)(quotient if (a >= 0) == (b >= 0) else -quotient)


def _floor_div(a: Any, b: Any) -> Any:
    if isinstance(a, (np.floating, float)):
        return type(a)(np.floor(a / b))
    if b == 0:
        raise EvaluationError("integer floordiv by zero")
    return a // b


def _floor_mod(a: Any, b: Any) -> Any:
    if not isinstance(a, (np.floating, float)) and b == 0:
        raise EvaluationError("integer floormod by zero")
    return a - _floor_div(a, b) * b


# Shared with Simplify's constant folding, so folding and evaluation cannot disagree.
BINARY_OPS: dict[type, Callable[[Any, Any], Any]] = {
    n.Add: lambda a, b: a + b,
    n.Sub: lambda a, b: a - b,
    n.Mul: lambda a, b: a * b,
    n.Div: _c_div,
    n.FloorDiv: _floor_div,
    n.FloorMod: _floor_mod,
    n.Min: lambda a, b: min(a, b),
    n.Max: lambda a, b: max(a, b),
    n.EQ: lambda a, b: np.bool_(a == b),
    n.NE: lambda a, b: np.bool_(a != b),
    n.LT: lambda a, b: np.bool_(a < b),
    n.LE: lambda a, b: np.bool_(a <= b),
    n.GT: lambda a, b: np.bool_(a > b),
    n.GE: lambda a, b: np.bool_(a >= b),
    n.And: lambda a, b: np.bool_(a and b),
    n.Or: lambda a, b: np.bool_(a or b),
}

def _round_half_away(x: Any) -> Any:
    """C's round(): halves away from zero (NumPy's round takes halves to even)."""
    whole = np.trunc(x)
    return whole + np.sign(x) if abs(x - whole) >= 0.5 else whole


_INTRINSICS: dict[str, Callable[..., Any]] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh, "fabs": np.abs, "abs": np.abs,
    "floor": np.floor, "ceil": np.ceil, "pow": np.power, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "erf": lambda x: type(x)(math.erf(float(x))), "round": _round_half_away, "trunc": np.trunc,
    "nearbyint": np.rint,  # the default rounding mode: halves to even
    "exp2": np.exp2, "log2": np.log2, "log10": np.log10, "atan": np.arctan, "atan2": np.arctan2,
    "asin": np.arcsin, "acos": np.arccos, "sinh": np.sinh, "cosh": np.cosh, "fmod": np.fmod,
    "rsqrt": lambda x: type(x)(1) / np.sqrt(x), "sigmoid": lambda x: type(x)(1) / (type(x)(1) + np.exp(-x)),
    "fmax": np.fmax, "fmin": np.fmin, "log1p": np.log1p, "expm1": np.expm1,
    **{name: meaning for name, (_, meaning) in BITWISE_INTRINSICS.items()},
}


def _scalar(value: Any, dtype: str) -> Any:
    return np.dtype(dtype).type(value)


class _Interpreter:
    def __init__(self) -> None:
        self.env: dict[TVar, Any] = {}
        self.memory: dict[Buffer, np.ndarray] = {}

    def expr(self, root: PrimExpr) -> Any:
        # a shared node's value is computed once: an expression reads memory that does not
        # change while it is evaluated
        return fold_expr(root, self.expr_node)

    def expr_node(self, node: Any, args: list[Any]) -> Any:
        kind = type(node)
        if kind is n.IntImm or kind is n.FloatImm:
            return _scalar(node.value, node.dtype)
        if kind is TVar:
            if node not in self.env:
                raise EvaluationError(f"variable {node.name} has no value here")
            return self.env[node]
        operation = BINARY_OPS.get(kind)
        if operation is not None:
            return operation(*args)
        if kind is n.Not:
            return np.bool_(not args[0])
        if kind is n.Select:
            return args[1] if args[0] else args[2]
        if kind is n.Cast:
            return _scalar(args[0], node.dtype)
        if kind is n.Intrinsic:
            if node.name == REINTERPRET:  # the bits, not the value, become the dtype
                return reinterpret_array(args[0], node.dtype)[()]
            function = _INTRINSICS.get(node.name)
            if function is None:
                raise EvaluationError(f"the TIR interpreter has no intrinsic {node.name!r}")
            return _scalar(function(*args), node.dtype)
        if kind is n.BufferLoad:
            held = self.memory.get(node.buffer)
            if held is not None and held.size == 0:
                # the unused side of a select over an empty tensor (a KV cache of past 0):
                # C may read there too, and never uses what it reads
                return _garbage(node.buffer.dtype)
            return self.array(node.buffer, args)[tuple(int(i) for i in args)]
        raise EvaluationError(f"cannot evaluate a {kind.__name__}")

    def array(self, buf: Buffer, indices: list[Any]) -> np.ndarray:
        array = self.memory.get(buf)
        if array is None:
            raise EvaluationError(f"buffer {buf.name} is not allocated here")
        if len(indices) != array.ndim or any(not 0 <= int(i) < d for i, d in zip(indices, array.shape)):
            raise EvaluationError(f"index {tuple(int(i) for i in indices)} is out of bounds for buffer "
                                  f"{buf.name} of shape {array.shape}")
        return array

    def flat_view(self, load: n.BufferLoad) -> np.ndarray:
        """The memory of the loaded buffer from the loaded element on, as a 1-d view."""
        indices = [int(self.expr(i)) for i in load.indices]
        held = self.memory.get(load.buffer)
        if held is not None and held.size == 0:
            return held.reshape(-1)  # a call on no elements (a size 0 at run time) reads none
        array = self.array(load.buffer, indices) if indices else self.memory[load.buffer]
        flat = array.reshape(-1)
        assert np.shares_memory(flat, array), "buffers are contiguous"
        offset = int(np.ravel_multi_index(indices, array.shape)) if indices else 0
        return flat[offset:]

    def stmt(self, node: Stmt) -> None:
        kind = type(node)
        if kind is n.SeqStmt:
            for child in node.stmts:
                self.stmt(child)
        elif kind is n.For:
            start, extent = int(self.expr(node.start)), int(self.expr(node.extent))
            dtype = np.dtype(node.loop_var.dtype).type
            for value in range(start, start + extent):
                self.env[node.loop_var] = dtype(value)
                self.stmt(node.body)
            self.env.pop(node.loop_var, None)
        elif kind is n.BufferStore:
            indices = [self.expr(i) for i in node.indices]
            value = self.expr(node.value)
            self.array(node.buffer, indices)[tuple(int(i) for i in indices)] = value
        elif kind is n.Allocate:
            # garbage-filled, like C's uninitialized memory, so reads before writes show up
            shape = tuple(d if type(d) is int else int(self.expr(d)) for d in node.buffer.shape)
            self.memory[node.buffer] = np.full(shape, _garbage(node.buffer.dtype))
            self.stmt(node.body)
            del self.memory[node.buffer]
        elif kind is n.IfThenElse:
            if self.expr(node.cond):
                self.stmt(node.then_case)
            elif node.else_case is not None:
                self.stmt(node.else_case)
        elif kind is n.LetStmt:
            self.env[node.var] = self.expr(node.value)
            self.stmt(node.body)
            del self.env[node.var]
        elif kind is n.Evaluate and is_gemm(node.value):
            evaluate_gemm(node.value, self.flat_view, self.expr)
        elif kind is n.Evaluate and is_conv(node.value):
            evaluate_conv(node.value, self.flat_view, self.expr)
        elif kind is n.Evaluate and is_winograd(node.value):
            evaluate_winograd(node.value, self.flat_view, self.expr)
        elif kind is n.Evaluate and is_matmul_nbits(node.value):
            evaluate_matmul_nbits(node.value, self.flat_view, self.expr)
        elif kind is n.Evaluate and is_qgemm(node.value):
            evaluate_qgemm(node.value, self.flat_view, self.expr)
        elif kind is n.Evaluate and is_lookup(node.value):
            evaluate_lookup(node.value, self.flat_view, self.expr)
        elif kind is n.Evaluate:
            self.expr(node.value)
        else:
            raise EvaluationError(f"cannot execute a {kind.__name__}")


def _garbage(dtype: str) -> Any:
    if dtype.startswith("float"):
        return np.nan
    return np.iinfo(dtype).max if dtype != "bool" else True


def run_prim_func(func: PrimFunc, *arrays: np.ndarray, sizes: Mapping[str, int] | None = None) -> Any:
    """Run ``func`` on NumPy arrays; return its output(s) (one array, or a tuple).

    Give either the inputs only (outputs are allocated, zero-filled) or every parameter
    (outputs are written in place). An array may have any shape with the buffer's number
    of elements, so one set of N-d arrays runs a function before and after flattening.
    ``sizes``: the value of each of the function's size variables (``func.dims``), by
    name, for a kernel compiled for symbolic sizes.
    """
    params = func.params
    num_inputs = int(func.attrs.get("num_inputs", len(params) - 1))
    interpreter = _Interpreter()
    sizes = dict(sizes or {})
    for var in func.dims:
        if var.name not in sizes:
            raise EvaluationError(f"run_prim_func: no value for the size {var.name} (give sizes={{...}})")
        interpreter.env[var] = np.int64(sizes[var.name])

    def shape_of(buffer: Any) -> tuple[int, ...]:
        return tuple(d if type(d) is int else int(interpreter.expr(d)) for d in buffer.shape)

    if len(arrays) == num_inputs:
        arrays = (*arrays, *(np.zeros(shape_of(p), p.dtype) for p in params[num_inputs:]))
    if len(arrays) != len(params):
        raise EvaluationError(f"run_prim_func: the function takes {num_inputs} inputs "
                              f"({len(params)} parameters), got {len(arrays)} arrays")
    for param, array in zip(params, arrays):
        array = np.asarray(array)
        shape = shape_of(param)
        if array.dtype != np.dtype(param.dtype) or array.size != math.prod(shape):
            raise EvaluationError(f"parameter {param.name} is a {param.dtype} buffer of shape {shape}, "
                                  f"got a {array.dtype} array of shape {array.shape}")
        view = array.reshape(shape)
        if not np.shares_memory(view, array) and array.size:
            raise EvaluationError(f"parameter {param.name}: the array must be contiguous")
        interpreter.memory[param] = view
    with np.errstate(all="ignore"):
        interpreter.stmt(func.body)
    outputs = tuple(arrays[num_inputs:])
    return outputs[0] if len(outputs) == 1 else outputs


__all__ = ["run_prim_func", "BINARY_OPS"]

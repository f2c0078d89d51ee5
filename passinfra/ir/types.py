"""Types of the graph-level IR: tensors, tuples and functions.

Types are value objects: frozen, compared structurally, hashed once. A tensor's
dimensions are ints or symbolic dimensions (:mod:`passinfra.ir.dims`); a type whose
dimensions are all ints is *static* and is exactly what it was before symbolic
dimensions existed (same checks, hash, repr, text and wire bytes).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import ml_dtypes  # noqa: F401  (registers "bfloat16" with NumPy: np.dtype("bfloat16") works)
import numpy as np

from passinfra.errors import IRError
from passinfra.ir.dims import Dim, DimVar, SymDim, bounds, dim_text, free_vars

# float16 and bfloat16 are storage types: the interpreter computes every op on them in
# float32 and rounds the result to nearest-even (passinfra.ir.op.precision), and compiled
# kernels load them, compute in float32 and round on store, as onnxruntime does on CPU.
# The integer types wrap around on overflow (two's complement), as NumPy and ONNX do.
HALF_DTYPES: tuple[str, ...] = ("float16", "bfloat16")
FLOAT_DTYPES: tuple[str, ...] = (*HALF_DTYPES, "float32", "float64")
SIGNED_INT_DTYPES: tuple[str, ...] = ("int8", "int16", "int32", "int64")
UNSIGNED_INT_DTYPES: tuple[str, ...] = ("uint8", "uint16", "uint32", "uint64")
INT_DTYPES: tuple[str, ...] = SIGNED_INT_DTYPES + UNSIGNED_INT_DTYPES
DTYPES: tuple[str, ...] = (*FLOAT_DTYPES, *INT_DTYPES, "bool")

_FLOATS = frozenset(FLOAT_DTYPES)
_INTS = frozenset(INT_DTYPES)


def is_float_dtype(dtype: str) -> bool:
    """Is ``dtype`` (a canonical name) a floating-point type (bfloat16 included)?"""
    return dtype in _FLOATS


def is_int_dtype(dtype: str) -> bool:
    """Is ``dtype`` (a canonical name) a signed or unsigned integer type (not bool)?"""
    return dtype in _INTS


def normalize_dtype(dtype: Any) -> str:
    """Return the canonical dtype name, or raise IRError naming the bad dtype."""
    if type(dtype) is str and dtype in DTYPES:  # the common case, without asking NumPy
        return dtype
    if isinstance(dtype, np.dtype):
        cached = _NUMPY_DTYPE_NAMES.get(dtype)
        if cached is not None:
            return cached
    try:
        name = np.dtype(dtype).name
    except TypeError as err:
        raise IRError(f"unknown dtype {dtype!r}; supported: {', '.join(DTYPES)}") from err
    if name not in DTYPES:
        raise IRError(f"unsupported dtype {name!r}; supported: {', '.join(DTYPES)}")
    if isinstance(dtype, np.dtype):
        _NUMPY_DTYPE_NAMES[dtype] = name
    return name


# np.dtype -> name, because asking NumPy costs microseconds and Constant asks every time
_NUMPY_DTYPE_NAMES: dict[np.dtype, str] = {}


class Type:
    """Base of all IR types. Subclasses are immutable and hash structurally."""

    __slots__ = ("_hash", "_dim_vars")

    @property
    def is_static(self) -> bool:
        """Whether every tensor dimension in this type is an int."""
        return not self._dim_vars

    @property
    def dim_vars(self) -> tuple[DimVar, ...]:
        """The symbolic dimension variables this type mentions (first appearance first)."""
        return self._dim_vars

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _key(self) -> tuple:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return self._hash

    def __str__(self) -> str:
        from passinfra.ir.printer import type_to_text

        return type_to_text(self)

    def __reduce__(self):
        return (type(self), self._key())


def _merge_dim_vars(groups: Iterable[tuple[DimVar, ...]]) -> tuple[DimVar, ...]:
    """The variables of several types, each once, in order of first appearance."""
    merged: dict[DimVar, None] = {}
    for group in groups:
        merged.update(dict.fromkeys(group))
    return tuple(merged)


class TensorType(Type):
    """A tensor of ``shape`` (a tuple of dims: ints, or symbolic dimensions such as
    ``DimVar("batch")`` or ``seq * 64``) and ``dtype`` (a name in DTYPES)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: Iterable[Dim] = (), dtype: Any = "float32") -> None:
        shape = tuple(shape)
        dims: list[Dim] = []
        symbolic: list[tuple[DimVar, ...]] = []
        for dim in shape:
            if type(dim) is int and dim >= 0:  # the common case first
                dims.append(dim)
                continue
            if isinstance(dim, SymDim):
                _check_symbolic_dim(dim, shape)
                symbolic.append(free_vars(dim))
                dims.append(dim)
                continue
            if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)):
                raise IRError(f"TensorType shape must hold ints (or symbolic dimensions), got {dim!r} "
                              f"in {shape!r}")
            if dim < 0:
                raise IRError(f"TensorType shape must be non-negative, got {shape!r}")
            dims.append(int(dim))
        object.__setattr__(self, "shape", tuple(dims))
        object.__setattr__(self, "dtype", normalize_dtype(dtype))
        object.__setattr__(self, "_hash", hash(("TensorType", self.shape, self.dtype)))
        object.__setattr__(self, "_dim_vars", _merge_dim_vars(symbolic) if symbolic else ())

    def _key(self) -> tuple:
        return (self.shape, self.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> Dim:
        """The number of elements: an int for a static shape, else a symbolic dimension
        (callers that need an int check ``is_static`` first)."""
        if not self._dim_vars:
            return int(np.prod(self.shape, dtype=np.int64))
        return math.prod(self.shape)

    def __repr__(self) -> str:
        return f"TensorType({self.shape!r}, {self.dtype!r})"


def _check_symbolic_dim(dim: SymDim, shape: Iterable[Dim]) -> None:
    # a dim that may be negative for some bindings (n - 1 with n >= 0) is accepted: the
    # binding decides; one that is negative for every binding is a mistake now
    hi = bounds(dim)[1]
    if hi is not None and hi < 0:
        shown = ", ".join(dim_text(d) if isinstance(d, SymDim) else repr(d) for d in shape)
        raise IRError(f"TensorType shape must be non-negative, got ({shown}): {dim} is at most {hi}")


class TupleType(Type):
    """A tuple of ``fields`` types."""

    __slots__ = ("fields",)

    def __init__(self, fields: Iterable[Type]) -> None:
        fields = tuple(fields)
        for field in fields:
            if not isinstance(field, Type):
                raise IRError(f"TupleType fields must be types, got {field!r}")
        object.__setattr__(self, "fields", fields)
        object.__setattr__(self, "_hash", hash(("TupleType", fields)))
        object.__setattr__(self, "_dim_vars", _merge_dim_vars(f._dim_vars for f in fields))

    def _key(self) -> tuple:
        return (self.fields,)

    def __repr__(self) -> str:
        return f"TupleType({list(self.fields)!r})"


class FuncType(Type):
    """A function from ``arg_types`` to ``ret_type``."""

    __slots__ = ("arg_types", "ret_type")

    def __init__(self, arg_types: Iterable[Type], ret_type: Type) -> None:
        arg_types = tuple(arg_types)
        for t in (*arg_types, ret_type):
            if not isinstance(t, Type):
                raise IRError(f"FuncType needs types, got {t!r}")
        object.__setattr__(self, "arg_types", arg_types)
        object.__setattr__(self, "ret_type", ret_type)
        object.__setattr__(self, "_hash", hash(("FuncType", arg_types, ret_type)))
        object.__setattr__(
            self, "_dim_vars", _merge_dim_vars(t._dim_vars for t in (*arg_types, ret_type))
        )

    def _key(self) -> tuple:
        return (self.arg_types, self.ret_type)

    def __repr__(self) -> str:
        return f"FuncType({list(self.arg_types)!r}, {self.ret_type!r})"

"""Random ops (``op.random.*``, registered as ``"random.<name>"``).

They are stateful: two calls with equal arguments may give different values, so passes
must not fold, deduplicate or drop them. The implementation draws from one NumPy
``default_rng`` per process; :func:`seed` makes the draws reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op._rel import FLOAT_DTYPES, REQUIRED, int_tuple, register_tensor_op
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, Type, normalize_dtype

__all__ = ["uniform", "seed"]

_generator = np.random.default_rng()


def seed(value: int | None) -> None:
    """Restart the generator behind the random ops (None: fresh OS entropy)."""
    global _generator
    _generator = np.random.default_rng(value)


def _uniform_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    return TensorType(attrs["shape"], attrs["dtype"])


def _uniform_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    draws = _generator.uniform(attrs["low"], attrs["high"], size=attrs["shape"])
    return np.asarray(draws).astype(attrs["dtype"])


register_tensor_op("random.uniform", attrs={"low": 0.0, "high": 1.0, "shape": REQUIRED, "dtype": "float32"},
                   num_inputs=0, type_rel=_uniform_relation, impl=_uniform_impl,
            pattern=OpPattern.OPAQUE, stateful=True, doc="uniform draws in [low, high)")


def uniform(low: float, high: float, shape: Any, dtype: Any = "float32") -> Call:
    """A tensor of ``shape`` drawn uniformly from ``[low, high)`` (a call with no arguments)."""
    dtype = normalize_dtype(dtype)
    if dtype not in FLOAT_DTYPES:
        raise IRError(f"random.uniform needs a float dtype, got {dtype}")
    if not low <= high:
        raise IRError(f"random.uniform needs low <= high, got low={low}, high={high}")
    dims = int_tuple(shape, None, "shape")
    if any(d < 0 for d in dims):
        raise IRError(f"shape must be non-negative, got {dims}")
    return call_op("random.uniform", low=float(low), high=float(high), shape=dims, dtype=dtype)

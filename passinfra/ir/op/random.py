"""Random ops (``op.random.*``, registered as ``"random.<name>"``).

They are stateful: two calls with equal arguments may give different values, so passes
must not fold, deduplicate or drop them. The implementation draws from one NumPy
``default_rng`` per process; :func:`seed` makes the draws reproducible.

``random.uniform`` has two forms. With Python numbers for ``low`` and ``high`` it is a
call with no arguments and the bounds are attributes (the compact form, kept so text and
existing programs stay as they were). With an expression for either bound (Relay's form)
both bounds are arguments: scalar expressions of the result dtype, and the ``low``/``high``
attributes are left unset.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRError, IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call, Constant, Expr
from passinfra.ir.op._rel import (
    FLOAT_DTYPES,
    REQUIRED,
    expect_tensor,
    int_tuple,
    register_tensor_op,
    type_text,
)
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, Type, normalize_dtype

__all__ = ["uniform", "seed"]

_generator = np.random.default_rng()

# the bounds of the compact (attribute) form when a hand-written call leaves them out
_DEFAULT_LOW, _DEFAULT_HIGH = 0.0, 1.0


def seed(value: int | None) -> None:
    """Restart the generator behind the random ops (None: fresh OS entropy)."""
    global _generator
    _generator = np.random.default_rng(value)


def _uniform_relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    result = TensorType(attrs["shape"], attrs["dtype"])
    if not arg_types:
        return result
    if len(arg_types) != 2:
        raise IRTypeError(
            f"expected no arguments (low and high as attributes) or two (low and high as "
            f"expressions), got {len(arg_types)}"
        )
    if attrs["low"] is not None or attrs["high"] is not None:
        # two sources for one bound: say so rather than silently pick one
        raise IRTypeError("low and high are given both as arguments and as attributes; give one form")
    scalar = TensorType((), attrs["dtype"])
    for ty, what in zip(arg_types, ("low", "high"), strict=True):
        if expect_tensor(ty, what) != scalar:
            raise IRTypeError(f"expected {what} of type {type_text(scalar)} (a scalar of the result "
                              f"dtype), got {type_text(ty)}")
    return result


def _uniform_bounds(args: Sequence[Any], attrs: Attrs) -> tuple[float, float]:
    if args:
        low, high = (float(np.asarray(a).reshape(())) for a in args)
    else:
        low = _DEFAULT_LOW if attrs["low"] is None else attrs["low"]
        high = _DEFAULT_HIGH if attrs["high"] is None else attrs["high"]
    # NumPy would quietly draw from [high, low); the builder rejects that for numbers,
    # and bounds only known at run time get the same check here
    if not low <= high:
        raise ValueError(f"random.uniform needs low <= high, got low={low}, high={high}")
    return low, high


def _uniform_impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    low, high = _uniform_bounds(args, attrs)
    draws = _generator.uniform(low, high, size=attrs["shape"])
    return np.asarray(draws).astype(attrs["dtype"])


register_tensor_op("random.uniform", attrs={"low": None, "high": None, "shape": REQUIRED, "dtype": "float32"},
                   num_inputs=-1, type_rel=_uniform_relation, impl=_uniform_impl,
                   pattern=OpPattern.OPAQUE, stateful=True,
                   doc="uniform draws in [low, high); low/high as attributes or as two scalar arguments")


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _bound_expr(value: Any, dtype: str, what: str) -> Expr:
    """A bound of the expression form: an expression as is, a number as a scalar constant
    of the result dtype (so the pair type-checks whatever Python type the number had)."""
    if isinstance(value, Expr):
        return value
    if _is_number(value):
        return Constant(np.asarray(value, dtype=dtype))
    raise IRError(f"random.uniform: {what} must be a number or an expression, got {value!r}")


def _known_value(value: Any) -> float | None:
    """The bound's value when it is known while building (a number or a scalar constant)."""
    if _is_number(value):
        return float(value)
    if isinstance(value, Constant) and value.data.size == 1:
        return float(value.data.reshape(()))
    return None


def uniform(low: float | Expr, high: float | Expr, shape: Any, dtype: Any = "float32") -> Call:
    """A tensor of ``shape`` drawn uniformly from ``[low, high)``.

    With numbers for both bounds this is a call with no arguments (the bounds are
    attributes); with an expression for either one, both bounds become arguments,
    scalar expressions of ``dtype``.
    """
    dtype = normalize_dtype(dtype)
    if dtype not in FLOAT_DTYPES:
        raise IRError(f"random.uniform needs a float dtype, got {dtype}")
    known_low, known_high = _known_value(low), _known_value(high)
    if known_low is not None and known_high is not None and not known_low <= known_high:
        raise IRError(f"random.uniform needs low <= high, got low={known_low}, high={known_high}")
    dims = int_tuple(shape, None, "shape")
    if any(d < 0 for d in dims):
        raise IRError(f"shape must be non-negative, got {dims}")
    if _is_number(low) and _is_number(high):
        return call_op("random.uniform", low=float(low), high=float(high), shape=dims, dtype=dtype)
    return call_op("random.uniform", _bound_expr(low, dtype, "low"), _bound_expr(high, dtype, "high"),
                   shape=dims, dtype=dtype)

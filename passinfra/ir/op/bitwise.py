"""Bitwise ops on integer tensors (ONNX BitwiseAnd/Or/Xor/Not, opset 18).

``bitwise_and``, ``bitwise_or``, ``bitwise_xor`` broadcast two integer tensors of one
dtype; ``bitwise_not`` flips every bit. Signed values are two's complement, as in NumPy
and in C on every platform the code generator targets.

Compute rules: :mod:`passinfra.codegen.compute.bitwise`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from passinfra.ir.expr import Call
from passinfra.ir.op._rel import INT_DTYPES, register_tensor_op
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import _binary_impl, _binary_relation, _unary_impl, _unary_relation, call_op

__all__ = ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"]

_BINARY = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor}

for _name, _kernel in _BINARY.items():
    register_tensor_op(_name, attrs={}, num_inputs=2, type_rel=_binary_relation(INT_DTYPES),
                       impl=_binary_impl(_kernel), pattern=OpPattern.BROADCAST,
                       doc=f"elementwise {_name} of integers, with NumPy broadcasting", symbolic=True)
register_tensor_op("bitwise_not", attrs={}, num_inputs=1, type_rel=_unary_relation(INT_DTYPES),
                   impl=_unary_impl(np.invert), pattern=OpPattern.ELEMWISE,
                   doc="every bit of an integer flipped (~x)", symbolic=True)


def bitwise_and(lhs: Any, rhs: Any) -> Call:
    """``lhs & rhs`` on integers, with broadcasting."""
    return call_op("bitwise_and", lhs, rhs)


def bitwise_or(lhs: Any, rhs: Any) -> Call:
    """``lhs | rhs`` on integers, with broadcasting."""
    return call_op("bitwise_or", lhs, rhs)


def bitwise_xor(lhs: Any, rhs: Any) -> Call:
    """``lhs ^ rhs`` on integers, with broadcasting."""
    return call_op("bitwise_xor", lhs, rhs)


def bitwise_not(data: Any) -> Call:
    """``~data`` on integers."""
    return call_op("bitwise_not", data)

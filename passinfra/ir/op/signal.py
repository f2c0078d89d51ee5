"""``dft``: the discrete Fourier transform along one axis (ONNX DFT; STFT is built from
it by the importer), as a direct sum over a table of twiddle factors.

The data is ``[..., N, ..., C]``: C = 1 holds real values, C = 2 (real, imaginary)
pairs. With L = ``length`` (the input is cut to it, or zero-padded), output index k is

    forward:  X[k] = sum_n x[n] exp(-2 pi i k n / L)             (k < L, or L // 2 + 1 onesided)
    inverse:  x[k] = (1 / L) sum_n X[n] exp(+2 pi i k n / L)      (k < L)

and the output is ``[..., K, ..., 2]``. ``inverse`` with ``onesided`` is the real
inverse (irfft, as the ONNX reference runs it): the input holds the first L // 2 + 1
bins of a Hermitian spectrum; the missing ones are the conjugates of those given, so bin
n counts twice, except bin 0 and (L even) bin L / 2, whose imaginary parts are ignored;
the output is real, ``[..., L, ..., 1]``.

The second argument is the twiddle table ``T[m, c, d]`` (``[L, 2, 2]``, the data's
dtype) that :func:`twiddles` builds: output part c gets ``x_d[n] * T[(k n) mod L, c, d]``,
a rotation by the angle 2 pi m / L whose direction says forward or inverse. cos and sin
are taken once, at build time, in float64 (exact 0 and +-1 at the quarter turns), so
neither the reference nor compiled code calls them per term. Sums are in the data's
precision (float32 for float16 and bfloat16), in order of n then d in compiled code
(:mod:`passinfra.codegen.compute.signal`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call, Constant
from passinfra.ir.op._rel import (
    FLOAT_DTYPES,
    REQUIRED,
    expect_dtype,
    expect_tensor,
    normalize_axis,
    register_tensor_op,
    type_text,
)
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, Type, normalize_dtype

__all__ = ["dft", "dft_plan", "twiddles"]

# cos and sin of a quarter turn q (angle q * pi / 2), exactly
_QUARTER_COS, _QUARTER_SIN = (1.0, 0.0, -1.0, 0.0), (0.0, 1.0, 0.0, -1.0)


def twiddles(length: int, inverse: bool, dtype: str) -> np.ndarray:
    """The ``[length, 2, 2]`` rotation table of :func:`dft` (see the module docstring)."""
    m = np.arange(length)
    angle = 2.0 * np.pi * m / length
    cos, sin = np.cos(angle), np.sin(angle)
    quarter = (4 * m) % length == 0
    turns = (4 * m[quarter]) // length
    cos[quarter] = np.take(_QUARTER_COS, turns)
    sin[quarter] = np.take(_QUARTER_SIN, turns)
    sign = -1.0 if inverse else 1.0
    table = np.empty((length, 2, 2))
    table[:, 0, 0], table[:, 0, 1] = cos, sign * sin
    table[:, 1, 0], table[:, 1, 1] = -sign * sin, cos
    return table.astype(normalize_dtype(dtype))


def dft_plan(in_shape: Sequence[int], attrs: Attrs) -> tuple[int, int, int, int]:
    """(axis, bins out, inputs summed, parts out) of a call with ``attrs`` on data of
    ``in_shape``; IRTypeError naming what is wrong."""
    if len(in_shape) < 2 or in_shape[-1] not in (1, 2):
        raise IRTypeError(f"expected data [..., N, ..., C] with C = 1 (real) or 2 (complex), got shape "
                          f"{tuple(in_shape)}")
    axis = normalize_axis(attrs["axis"], len(in_shape))
    if axis == len(in_shape) - 1:
        raise IRTypeError("axis must not be the last one (it holds the real and imaginary parts)")
    length = attrs["length"]
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        raise IRTypeError(f"length must be a positive int, got {length!r}")
    if attrs["inverse"] and attrs["onesided"]:  # irfft: L // 2 + 1 bins in, L reals out
        return axis, length, min(in_shape[axis], length // 2 + 1), 1
    bins = length // 2 + 1 if attrs["onesided"] else length
    return axis, bins, min(in_shape[axis], length), 2


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    expect_dtype(data, FLOAT_DTYPES, "the data")
    axis, bins, _, parts = dft_plan(data.shape, attrs)
    table = expect_tensor(arg_types[1], "the twiddle table")
    expected = TensorType((attrs["length"], 2, 2), data.dtype)
    if table != expected:
        raise IRTypeError(f"expected the twiddle table of type {type_text(expected)}, got {type_text(table)}")
    shape = list(data.shape)
    shape[axis], shape[-1] = bins, parts
    return TensorType(tuple(shape), data.dtype)


def irfft_weights(n: np.ndarray, length: int) -> np.ndarray:
    """``[len(n), 2]``: how often bin n's real and imaginary parts count in an irfft."""
    edge = (n == 0) | (2 * n == length)
    return np.stack([np.where(edge, 1, 2), np.where(edge, 0, 2)], axis=-1)


def _impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data, table = np.asarray(args[0]), np.asarray(args[1])
    axis, bins, used, parts = dft_plan(data.shape, attrs)
    length = attrs["length"]
    signal = np.moveaxis(data, axis, -2)[..., :used, :]  # [..., n, d]
    n, k = np.arange(used), np.arange(bins)
    rotation = table[(k[:, None] * n[None, :]) % length][:, :, :parts, : data.shape[-1]]  # [k, n, c, d]
    if attrs["inverse"] and attrs["onesided"]:
        rotation = rotation * irfft_weights(n, length)[None, :, None, : data.shape[-1]].astype(table.dtype)
    with np.errstate(all="ignore"):  # inf/NaN data: IEEE results
        out = np.einsum("...nd,kncd->...kc", signal, rotation)
        if attrs["inverse"]:
            out = out / out.dtype.type(length)
    return np.moveaxis(out, -2, axis).astype(data.dtype, copy=False)


register_tensor_op("dft", attrs={"length": REQUIRED, "axis": 1, "inverse": False, "onesided": False},
                   num_inputs=2, type_rel=_relation, impl=_impl, pattern=OpPattern.OUT_EWISE_FUSABLE,
                   doc="discrete Fourier transform along one axis ([..., C] real or complex pairs)")


def dft(data: Any, length: int, dtype: str, axis: int = 1, inverse: bool = False,
        onesided: bool = False) -> Call:
    """The DFT of ``data`` (of ``dtype``) along ``axis`` over ``length`` points; the
    twiddle table is made here, a constant argument of the call."""
    table = Constant(twiddles(int(length), bool(inverse), dtype))
    return call_op("dft", data, table, length=int(length), axis=int(axis), inverse=bool(inverse),
                   onesided=bool(onesided))

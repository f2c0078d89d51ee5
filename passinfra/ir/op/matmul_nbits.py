"""``qnn.matmul_nbits``: a matrix product with a weight-only quantized right operand, as
onnxruntime's com.microsoft MatMulNBits stores it (what language models quantized to 4
or 8 bits per weight carry).

``qnn.matmul_nbits(data, codes, scales, zero_points, bits=4, block_size=32)``:

* ``data``: float32 ``[..., K]``, not quantized;
* ``codes``: uint8 ``[N, blocks, blob]``, the weight's ``N`` rows (output channels), each
  ``K`` codes along the contracted axis cut into ``blocks = ceil(K / block_size)`` blocks;
  a block's ``block_size`` codes of ``bits`` bits are packed low-first into ``blob =
  block_size * bits / 8`` bytes (4 bits: code ``2j`` in byte ``j``'s low nibble, code
  ``2j+1`` in its high nibble); codes past ``K`` in the last block are padding;
* ``scales``: float32 ``[N, blocks]``, one per block;
* ``zero_points``: uint8 ``[N, blocks]``, one code per block (unpacked).

The weight is ``W[n, k] = (code[n, k] - zero_point[n, k // block_size]) *
scale[n, k // block_size]`` and the result float32 ``[..., N] = data @ W.T``. The weight
stays in its codes in the library's weights (a quarter or an eighth of float32's bytes);
the compiled kernel dequantizes them in its inner loop
(:mod:`passinfra.codegen.compute.matmul_nbits`). Summation order: the interpreter
dequantizes then multiplies in float32 (NumPy's order), the kernel sums each block
before scaling it; both are the same sums within float32 rounding of the order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op._rel import expect_dtype, expect_tensor, register_tensor_op, type_text
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, Type

BITS = (4, 8)
MIN_BLOCK_SIZE = 16


def blob_bytes(block_size: int, bits: int) -> int:
    return block_size * bits // 8


def supported_layout(bits: int, block_size: int) -> bool:
    """Whether this op holds codes of ``bits`` bits in blocks of ``block_size``: blocks of
    whole 16-byte runs (32, 64, 128, ... codes at 4 bits; 16, 32, ... at 8 bits), what the
    compiled kernel reads a vector at a time and what onnxruntime's quantizer writes. An
    importer dequantizes the others (16 codes of 4 bits) into a float weight."""
    return (bits in BITS and block_size >= MIN_BLOCK_SIZE and not block_size & (block_size - 1)
            and blob_bytes(block_size, bits) % 16 == 0)


def check_layout(bits: int, block_size: int) -> None:
    """IRTypeError unless ``bits`` and ``block_size`` are a layout this op has."""
    if not supported_layout(bits, block_size):
        kinds = " or ".join(map(str, BITS))
        raise IRTypeError(f"qnn.matmul_nbits holds {kinds}-bit codes in blocks of a power of two of at least "
                          f"16 bytes, got {bits} bits in blocks of {block_size}")


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    bits, block_size = attrs["bits"], attrs["block_size"]
    check_layout(bits, block_size)
    data = expect_tensor(arg_types[0], "the data")
    expect_dtype(data, ("float32",), "the data")
    codes, scales, zero_points = (expect_tensor(t, what) for t, what in
                                  zip(arg_types[1:], ("the codes", "the scales", "the zero points")))
    expect_dtype(codes, ("uint8",), "the codes")
    expect_dtype(scales, ("float32",), "the scales")
    expect_dtype(zero_points, ("uint8",), "the zero points")
    if data.ndim < 1 or codes.ndim != 3:
        raise IRTypeError(f"expected data of rank >= 1 and codes [N, blocks, blob], got {type_text(data)} "
                          f"and {type_text(codes)}")
    k = data.shape[-1]
    n, blocks, blob = codes.shape
    if not isinstance(k, int) or blocks != -(-k // block_size) or blob != blob_bytes(block_size, bits):
        raise IRTypeError(f"codes {type_text(codes)} do not hold {k} codes of {bits} bits in blocks of "
                          f"{block_size} per row")
    for what, ty in (("the scales", scales), ("the zero points", zero_points)):
        if ty.shape != (n, blocks):
            raise IRTypeError(f"expected {what} of shape ({n}, {blocks}), got {type_text(ty)}")
    return TensorType((*data.shape[:-1], n), "float32")


def unpack_codes(codes: np.ndarray, bits: int, k: int) -> np.ndarray:
    """``codes`` ``[N, blocks, blob]`` as one code per element, ``[N, K]`` (uint8)."""
    n = codes.shape[0]
    if bits == 8:
        return codes.reshape(n, -1)[:, :k]
    low, high = codes & 15, codes >> 4
    return np.stack([low, high], axis=-1).reshape(n, -1)[:, :k]


def dequantized_weight(codes: np.ndarray, scales: np.ndarray, zero_points: np.ndarray, bits: int,
                       block_size: int, k: int) -> np.ndarray:
    """The float32 weight ``[N, K]`` the codes stand for."""
    values = unpack_codes(np.asarray(codes), bits, k).astype(np.float32)
    per_element = np.repeat(np.arange(-(-k // block_size)), block_size)[:k]
    zero = np.asarray(zero_points, np.float32)[:, per_element]
    return (values - zero) * np.asarray(scales, np.float32)[:, per_element]


def _impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data, codes, scales, zero_points = (np.asarray(a) for a in args)
    weight = dequantized_weight(codes, scales, zero_points, attrs["bits"], attrs["block_size"],
                                data.shape[-1])
    return np.ascontiguousarray(np.matmul(data.astype(np.float32), weight.T), dtype=np.float32)


register_tensor_op(
    "qnn.matmul_nbits", attrs={"bits": 4, "block_size": 32}, num_inputs=4, type_rel=_relation, impl=_impl,
    pattern=OpPattern.OPAQUE,
    doc="data @ W.T with W block-quantized to 4 or 8 bits per weight (com.microsoft MatMulNBits)",
)


def matmul_nbits(data: Any, codes: Any, scales: Any, zero_points: Any, bits: int = 4,
                 block_size: int = 32) -> Call:
    """``data @ W.T`` where ``W`` (``[N, K]``) is given by its block-quantized codes (module
    docstring)."""
    check_layout(int(bits), int(block_size))
    return call_op("qnn.matmul_nbits", data, codes, scales, zero_points, bits=int(bits),
                   block_size=int(block_size))


__all__ = ["BITS", "blob_bytes", "check_layout", "dequantized_weight", "matmul_nbits", "supported_layout",
           "unpack_codes"]

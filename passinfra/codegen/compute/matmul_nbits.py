"""``qnn.matmul_nbits``: one call of the C runtime's weight-only quantized matmul
(``c/matmul_nbits.c``, linked with the convolution microkernels' object).

The codes are read as stored, a block of them decoded into vector registers at a time
and used for up to four rows of the data before the next block: a decode step (one row)
reads each weight's 4 or 8 bits once, never a float copy. The runtime splits the output
columns over the threads; each output is one fixed sequence of float operations (16
lanes per block, scaled per block, summed pairwise at the end), the same bits on every
instruction set the runtime picks (AVX-512, AVX2, portable) and for any thread count.

The runtime reads whole 16-byte runs of a block's codes, the layouts the op holds
(:func:`passinfra.ir.op.matmul_nbits.supported_layout`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from passinfra import tir
from passinfra.codegen.compute.base import ExternOp, TensorHandle, output_shape, register_compute
from passinfra.ir.attrs import Attrs
from passinfra.ir.types import Type
from passinfra.tir.intrinsics import MATMUL_NBITS_INTRINSIC


def _first(handle: TensorHandle) -> tir.PrimExpr:
    return handle.load(*(tir.IntImm(0, tir.INDEX_DTYPE) for _ in handle.shape))


@register_compute("qnn.matmul_nbits")
def _matmul_nbits(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    data, codes, scales, zero_points = inputs
    shape = output_shape(out_type)
    k, n = int(data.shape[-1]), int(shape[-1])
    rows = math.prod(int(d) for d in shape[:-1])
    sizes = (rows, n, k, int(attrs["block_size"]), int(attrs["bits"]))

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (out,) = outputs
        out_first = out.load(*(tir.IntImm(0, tir.INDEX_DTYPE) for _ in out.shape))
        args = (_first(data), _first(codes), _first(scales), _first(zero_points), out_first,
                *(tir.IntImm(v, tir.INDEX_DTYPE) for v in sizes))
        return tir.Evaluate(tir.Intrinsic(MATMUL_NBITS_INTRINSIC, args, "int32"))

    return ExternOp("qnn.matmul_nbits", ((shape, "float32"),), build)


__all__: list[str] = []

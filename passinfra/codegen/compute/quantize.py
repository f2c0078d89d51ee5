"""Compute rules of the quantization ops (:mod:`passinfra.ir.op.quantize`).

Each rule emits, in the loop-level IR, the float32 and int32 operations of the op's
NumPy reference in the same order (the arithmetic, and why it is onnxruntime's, is
described there), so a compiled kernel's results are the interpreter's bit for bit:

* rounding is ``nearbyintf`` (round half to even in the default rounding mode, as
  ``np.rint``); the clamp to ``[qmin - zp, qmax - zp]`` is two selects whose comparisons
  send NaN to the lower bound, then the float converts to int32 (always in range by then)
  and the zero point is added in int32;
* ``qnn.quantize``, ``qnn.dequantize``, ``qnn.requantize``, ``qnn.add`` and ``qnn.mul``
  are elementwise (:class:`ComputeOp`): they fuse with each other and, as the epilogue of
  a contraction, into its loop nest (conv + bias + requantize is one loop nest);
* ``qnn.matmul`` is an int32 sum (:class:`ReduceOp`) of products of int32 differences
  ``(x - zx) * (w - zw)``: exact, no float and no saturation (``qnn.conv2d``'s rules are
  in :mod:`passinfra.codegen.compute.quantized_conv`);
* ``qnn.dynamic_quantize`` is an :class:`ExternOp`: a min/max pass over the data (in 16
  lanes, which give the same min and max as one chain), the scale and zero point as
  scalars, then the quantizing pass;
* ``qnn.matmul`` on a weight (:func:`integer_gemm_steps`) is one call of the runtime's
  integer GEMM (``passinfra/codegen/c/qgemm.c``), exact as the loop nest.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from passinfra import tir
from passinfra.codegen.compute.base import (
    ComputeOp,
    ExternOp,
    Indices,
    ReduceOp,
    TensorHandle,
    broadcast_indices,
    intrinsic,
    load_broadcast,
    local_scalar,
    loop_nest,
    output_shape,
    register_compute,
    seq,
)
from passinfra.errors import IRError
from passinfra.ir.attrs import Attrs
from passinfra.ir.dims import is_static as is_static_dim
from passinfra.ir.op.requantized import has_residual, has_table
from passinfra.ir.types import TensorType, Type
from passinfra.tir.intrinsics import QGEMM_INTRINSIC, SATURATING_PAIRS

_F32, _I32 = "float32", "int32"


def _as(dtype: str, value: tir.PrimExpr) -> tir.PrimExpr:
    """``value`` converted to ``dtype`` (an integer immediate is converted in place)."""
    if value.dtype == dtype:
        return value
    if isinstance(value, tir.IntImm) and dtype == _I32:
        return tir.IntImm(int(value.value), _I32)
    if isinstance(value, tir.IntImm) and dtype == _F32:
        return tir.FloatImm(float(value.value), _F32)
    return tir.Cast(dtype, value)


def _is_zero(value: tir.PrimExpr) -> bool:
    return isinstance(value, tir.IntImm) and value.value == 0


def _minus(value: tir.PrimExpr, zero_point: tir.PrimExpr) -> tir.PrimExpr:
    """``value - zero_point`` in int32 (a zero point known to be 0 is left out)."""
    value = _as(_I32, value)
    return value if _is_zero(zero_point) else value - _as(_I32, zero_point)


def round_saturate(value: tir.PrimExpr, dtype: str, zero_point: tir.PrimExpr | None = None) -> tir.PrimExpr:
    """``saturate(rne(value) + zero_point)`` into ``dtype`` for a float32 ``value``
    (:func:`passinfra.ir.op.quantize.round_saturate`, step by step)."""
    info = np.iinfo(dtype)
    zp = None if zero_point is None or _is_zero(zero_point) else _as(_I32, zero_point)
    if zp is None:
        low, high = tir.FloatImm(float(info.min), _F32), tir.FloatImm(float(info.max), _F32)
    else:
        low = tir.Cast(_F32, tir.IntImm(int(info.min), _I32) - zp)
        high = tir.Cast(_F32, tir.IntImm(int(info.max), _I32) - zp)
    rounded = intrinsic("nearbyint", value)
    # NaN > low is false: NaN -> low (the C compiler computes the repeated ``rounded`` once)
    clamped = tir.Select(tir.GT(rounded, low), tir.Select(tir.LT(rounded, high), rounded, high), low)
    quantized = tir.Cast(_I32, clamped)
    return tir.Cast(dtype, quantized if zp is None else quantized + zp)


def _out(out_type: Type) -> TensorType:
    assert isinstance(out_type, TensorType)
    return out_type


# --------------------------------------------------------------------------- elementwise


@register_compute("qnn.quantize")
def _quantize(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    data, scale, zero_point = inputs
    out = _out(out_type)

    def value(idx: Indices) -> tir.PrimExpr:
        ratio = _as(_F32, data.load(*idx)) / _as(_F32, load_broadcast(scale, idx, out.shape))
        return round_saturate(ratio, out.dtype, load_broadcast(zero_point, idx, out.shape))

    return ComputeOp("qnn.quantize", out.shape, out.dtype, value)


@register_compute("qnn.dequantize")
def _dequantize(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    data, scale, zero_point = inputs
    out = _out(out_type)

    def value(idx: Indices) -> tir.PrimExpr:
        x, zp = data.load(*idx), load_broadcast(zero_point, idx, out.shape)
        if data.dtype == _I32:  # as the reference: the difference of int32 values in int64
            wide = tir.Cast("int64", x)
            difference = wide if _is_zero(zp) else wide - tir.Cast("int64", zp)
        else:
            difference = _minus(x, zp)
        result = tir.Cast(_F32, difference) * _as(_F32, load_broadcast(scale, idx, out.shape))
        return _as(out.dtype, result)  # float16/bfloat16: rounded once

    return ComputeOp("qnn.dequantize", out.shape, out.dtype, value)


@register_compute("qnn.requantize")
def _requantize(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    data, multiplier, zero_point = inputs
    out = _out(out_type)

    def value(idx: Indices) -> tir.PrimExpr:
        scaled = tir.Cast(_F32, data.load(*idx)) * load_broadcast(multiplier, idx, out.shape)
        return round_saturate(scaled, out.dtype, load_broadcast(zero_point, idx, out.shape))

    return ComputeOp("qnn.requantize", out.shape, out.dtype, value)


def _binary_loads(inputs: Sequence[TensorHandle], idx: Indices, shape: tuple[int, ...]) -> list[tir.PrimExpr]:
    """The eight operands of qnn.add/qnn.mul at output index ``idx``."""
    lhs, rhs = inputs[0], inputs[3]
    values = []
    for position, handle in enumerate(inputs):
        # a scale or zero point broadcasts to its operand, which broadcasts to the output
        owner = lhs if position in (1, 2) else rhs if position in (4, 5) else None
        if owner is None:
            values.append(load_broadcast(handle, idx, shape))
        else:
            owner_idx = broadcast_indices(owner.shape, idx, shape)
            values.append(handle.load(*broadcast_indices(handle.shape, owner_idx, owner.shape)))
    return values


@register_compute("qnn.add")
def _add(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    out = _out(out_type)

    def value(idx: Indices) -> tir.PrimExpr:
        lhs, lhs_scale, lhs_zero, rhs, rhs_scale, rhs_zero, out_scale, out_zero = _binary_loads(inputs, idx,
                                                                                                 out.shape)
        ratio_lhs, ratio_rhs = lhs_scale / out_scale, rhs_scale / out_scale
        fixed = _as(_F32, out_zero) - (ratio_lhs * _as(_F32, lhs_zero) + ratio_rhs * _as(_F32, rhs_zero))
        total = (fixed + _as(_F32, lhs) * ratio_lhs) + _as(_F32, rhs) * ratio_rhs
        return round_saturate(total, out.dtype)

    return ComputeOp("qnn.add", out.shape, out.dtype, value)


@register_compute("qnn.mul")
def _mul(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    out = _out(out_type)

    def value(idx: Indices) -> tir.PrimExpr:
        lhs, lhs_scale, lhs_zero, rhs, rhs_scale, rhs_zero, out_scale, out_zero = _binary_loads(inputs, idx,
                                                                                                 out.shape)
        product = _minus(lhs, lhs_zero) * _minus(rhs, rhs_zero)
        total = tir.Cast(_F32, product) * ((lhs_scale * rhs_scale) / out_scale) + _as(_F32, out_zero)
        return round_saturate(total, out.dtype)

    return ComputeOp("qnn.mul", out.shape, out.dtype, value)


# --------------------------------------------------------------------------- integer contractions


@register_compute("qnn.matmul")
def _matmul(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ReduceOp | ExternOp:
    lhs, rhs, lhs_zero, rhs_zero = inputs
    out_shape = output_shape(out_type)
    saturate = bool(attrs.get("saturate_pairs", False))
    kernel = _integer_gemm(lhs, rhs, lhs_zero, rhs_zero, out_shape, saturate=saturate)
    if kernel is not None:
        return kernel
    if saturate:
        raise IRError("a qnn.matmul with saturate_pairs runs on the integer GEMM only (SaturatePairs marks "
                      "those: a right operand without batch axes, static k and n)")
    batch_rank = len(out_shape) - 2
    batch_shape = out_shape[:batch_rank]

    def body(out: Indices, red: Indices) -> tir.PrimExpr:
        (k,) = red
        batch, row, col = out[:batch_rank], out[batch_rank], out[batch_rank + 1]
        lhs_idx = (*broadcast_indices(lhs.shape[:-2], batch, batch_shape), row, k)
        rhs_idx = (*broadcast_indices(rhs.shape[:-2], batch, batch_shape), k, col)
        return centered(lhs, lhs_zero, lhs_idx) * centered(rhs, rhs_zero, rhs_idx)

    return ReduceOp("qnn.matmul", out_shape, _I32, (lhs.shape[-1],), "sum", body)


def _zero_point_step(zero_shape: tuple, operand_shape: tuple, per: tuple) -> int | None:
    """0 for one zero point, 1 for one per element of ``per`` (an operand's rows, or its
    columns) laid out as the operand's shape says, None otherwise."""
    if math.prod(int(d) if is_static_dim(d) else 2 for d in zero_shape) == 1:
        return 0
    padded = (1,) * (len(operand_shape) - len(zero_shape)) + tuple(zero_shape)
    return 1 if padded == per else None


def integer_gemm_steps(lhs_shape: tuple, rhs_shape: tuple, lhs_zero_shape: tuple,
                       rhs_zero_shape: tuple) -> tuple[int, int] | None:
    """Whether a qnn.matmul of these shapes runs on the C runtime's integer GEMM
    (``c/qgemm.c``): a right operand without batch axes (a layer's weight), static nonzero
    ``k`` and ``n``, zero points one per tensor or one per row (left) / column (right).
    Their steps (0: one value, 1: one per row / column) if so, else None."""
    k, n = lhs_shape[-1], rhs_shape[-1]
    if not (is_static_dim(k) and is_static_dim(n)) or int(k) == 0 or int(n) == 0:
        return None
    if any(d != 1 for d in rhs_shape[:-2]):
        return None
    lhs_step = _zero_point_step(lhs_zero_shape, lhs_shape, (*lhs_shape[:-1], 1))
    rhs_step = _zero_point_step(rhs_zero_shape, rhs_shape, (*(1,) * (len(rhs_shape) - 1), int(n)))
    return None if lhs_step is None or rhs_step is None else (lhs_step, rhs_step)


def _same_extent(a: object, b: object) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return str(tir.as_prim(a)) == str(tir.as_prim(b))


def in_memory(handle: TensorHandle, name: str) -> tuple[tir.BufferLoad, tir.Buffer | None, tir.Stmt | None]:
    """The first element of ``handle``'s values in memory, row-major in its shape: its own
    buffer when it has one, else a scratch buffer and the loop nest that fills it."""
    probe = tuple(tir.TVar(f"{name}_probe{k}") for k in range(len(handle.shape)))
    value = handle.load(*probe)
    first = tuple(tir.IntImm(0, tir.INDEX_DTYPE) for _ in handle.shape)
    if (isinstance(value, tir.BufferLoad) and len(value.indices) == len(probe)
            and all(i is p for i, p in zip(value.indices, probe))
            and all(_same_extent(a, b) for a, b in zip(value.buffer.shape, handle.shape))):
        return value.buffer.load(*first), None, None
    scratch = tir.Buffer(name, tuple(handle.shape), handle.dtype)
    fill = loop_nest(handle.shape, lambda idx: tir.BufferStore(scratch, handle.load(*idx), idx), prefix=name)
    return scratch.load(*first), scratch, fill


def weight_in_memory(weight: TensorHandle, name: str) -> tuple[tir.BufferLoad, tir.Buffer | None,
                                                               tir.Stmt | None, tir.Buffer | None]:
    """The integer GEMM's ``B``: the first element of the panels PanelWeights stored the
    weight in (and those panels), else of the weight in memory (:func:`in_memory`; no
    panels)."""
    panels = getattr(weight, "qgemm_panels", None)  # a qgemm_panels.unpack of a parameter
    if panels is not None:
        return first_element(panels), None, None, panels
    return (*in_memory(weight, name), None)


def first_element(buffer: tir.Buffer) -> tir.BufferLoad:
    return buffer.load(*(tir.IntImm(0, tir.INDEX_DTYPE) for _ in buffer.shape))


def staged(zero_point: TensorHandle, name: str, operand_shape: tuple, shape: tuple,
            columns: bool) -> tuple[tir.Buffer, tir.Stmt]:
    """A buffer of ``shape`` (``()``: one value) holding ``zero_point`` along the operand's
    rows (its leading axes) or its ``columns`` (its last axis), and the loop nest that
    fills it."""
    buffer = tir.Buffer(name, shape or (1,), zero_point.dtype)
    zero = tir.IntImm(0, tir.INDEX_DTYPE)

    def store(idx: Indices) -> tir.Stmt:
        if not shape:
            at: Indices = (zero,) * len(operand_shape)
        elif columns:
            at = (*(zero,) * (len(operand_shape) - 1), *idx)
        else:
            at = (*idx, zero)
        value = zero_point.load(*broadcast_indices(zero_point.shape, at, operand_shape))
        return tir.BufferStore(buffer, value, idx)

    return buffer, loop_nest(buffer.shape, store, prefix=name)


@dataclass(frozen=True)
class Requantization:
    """The requantize a kernel applies to its sums (qnn.requantized_conv2d/_matmul): its
    int32 bias, float32 multiplier (each one value or one per output column, along the
    output's last axis) and scalar output zero point, whose dtype is the output's."""

    bias: TensorHandle
    multiplier: TensorHandle
    zero_point: TensorHandle
    # a residual add after it (:mod:`passinfra.ir.op.requantized`): the six more inputs
    # (q_scale, residual, residual_scale, residual_zero, add_scale, add_zero) and whether
    # the residual is qnn.add's first operand
    residual: tuple[TensorHandle, ...] | None = None
    residual_first: bool = False
    # a lookup table of the outputs, last (256 values of the output's type)
    table: TensorHandle | None = None

    @staticmethod
    def of(inputs: Sequence[TensorHandle], attrs: Attrs) -> Requantization:
        """The requantization of a qnn.requantized_conv2d/_matmul's inputs (and attrs)."""
        residual = tuple(inputs[7:13]) if has_residual(len(inputs)) else None
        return Requantization(inputs[4], inputs[5], inputs[6], residual,
                              bool(residual and attrs.get("residual_first", False)),
                              inputs[-1] if has_table(len(inputs)) else None)

    def staged(self, columns: int) -> tuple[list[tir.PrimExpr], tir.Stmt, list[tir.Buffer]]:
        """The intrinsic's epilogue arguments (bias, multiplier, zero point, bias kind,
        multiplier step, output type; then, with a residual add, the residual's first
        element, qnn.add's first operand's scale and zero point, its second's, the sum's
        scale and zero point, and whether the residual is the first; then, with a table,
        its first element), the loop nests that stage the three (and a residual or a table
        not in a buffer of its own) in buffers, and those buffers."""
        buffers, fills, firsts, counts = [], [], [], []
        for name, handle in (("qgemm_bias", self.bias), ("qgemm_multiplier", self.multiplier),
                             ("qgemm_out_zero", self.zero_point)):
            size = math.prod(int(d) for d in handle.shape)
            count = columns if size > 1 else 1
            buffer = tir.Buffer(name, (count,), handle.dtype)

            def store(idx: Indices, handle: TensorHandle = handle, buffer: tir.Buffer = buffer,
                      along: bool = count > 1) -> tir.Stmt:
                zero = tir.IntImm(0, tir.INDEX_DTYPE)
                at = [zero] * len(handle.shape)
                if along:  # one value per column: the handle's last axis
                    at[-1] = idx[0]
                return tir.BufferStore(buffer, handle.load(*at), idx)

            buffers.append(buffer)
            fills.append(loop_nest((count,), store, prefix=name))
            firsts.append(first_element(buffer))
            counts.append(count)
        kinds = (2 if counts[0] > 1 else 1, 1 if counts[1] > 1 else 0,
                 1 if self.zero_point.dtype == "uint8" else 2)
        args = [*firsts, *(tir.IntImm(v, tir.INDEX_DTYPE) for v in kinds)]
        if self.residual is not None:
            q_scale, residual, residual_scale, residual_zero, add_scale, add_zero = self.residual
            residual_first, scratch, fill = in_memory(residual, "qgemm_residual")
            if scratch is not None:
                buffers.append(scratch)
                fills.append(fill)
            operands = [(q_scale, self.zero_point), (residual_scale, residual_zero)]
            if self.residual_first:
                operands.reverse()
            scalars = [handle.load() for pair in operands for handle in pair]
            scalars += [add_scale.load(), add_zero.load()]
            args += [residual_first, *scalars, tir.IntImm(int(self.residual_first), tir.INDEX_DTYPE)]
        if self.table is not None:
            table_first, scratch, fill = in_memory(self.table, "qgemm_table")
            if scratch is not None:
                buffers.append(scratch)
                fills.append(fill)
            args.append(table_first)
        return args, seq(*fills), buffers


def no_requantization(za: tir.Buffer) -> list[tir.PrimExpr]:
    """Epilogue arguments of a kernel that stores its int32 sums (``za`` stands in for the
    pointers it does not read)."""
    dummy = first_element(za)
    return [dummy, dummy, dummy, *(tir.IntImm(0, tir.INDEX_DTYPE) for _ in range(3))]


def qgemm_call(a_first: tir.PrimExpr, b_first: tir.PrimExpr, za: tir.Buffer, zb: tir.Buffer,
               out_first: tir.PrimExpr, m: tir.PrimExpr, n: int, k: int, a_signed: bool, b_signed: int,
               za_step: int, zb_step: int, b_packed: bool, groups: int = 1,
               epilogue: Sequence[tir.PrimExpr] | None = None) -> tir.Stmt:
    """One call of the runtime's integer GEMM (``rp_qgemm_i8`` of ``c/qgemm.c``): ``out[m,
    n] = sum over k of (A[m, k] - za) * (B[k, n] - zb)``, ``A`` and ``B`` (or B's panels)
    row-major from their first elements, the zero points one value or one per row /
    column (step 1); with ``groups``, that many such GEMMs of ``n`` columns each; with
    ``epilogue`` (:meth:`Requantization.staged`), the sums requantized into an 8-bit out
    (:data:`~passinfra.tir.intrinsics.QGEMM_INTRINSIC`)."""
    sizes = (m, n, k, a_signed, b_signed, za_step, zb_step, b_packed, groups)
    return tir.Evaluate(tir.Intrinsic(QGEMM_INTRINSIC, (
        a_first, b_first, first_element(za), first_element(zb), out_first,
        *(tir.as_prim(int(v), tir.INDEX_DTYPE) if not isinstance(v, tir.PrimExpr) else v for v in sizes),
        *(epilogue if epilogue is not None else no_requantization(za))), _I32))


def allocated(body: tir.Stmt, *buffers: tir.Buffer | None) -> tir.Stmt:
    """``body`` inside the allocations of the scratch ``buffers`` (None: not needed)."""
    for scratch in buffers:
        if scratch is not None:
            body = tir.Allocate(scratch, body)
    return body


def _integer_gemm(lhs: TensorHandle, rhs: TensorHandle, lhs_zero: TensorHandle, rhs_zero: TensorHandle,
                  out_shape: tuple, requantization: Requantization | None = None,
                  saturate: bool = False) -> ExternOp | None:
    """qnn.matmul as one call of the C runtime's integer GEMM where it can
    (:func:`integer_gemm_steps`); None for any other (the loop nest). ``saturate``: its
    u8 x s8 pairs saturate (``saturate_pairs``)."""
    steps = integer_gemm_steps(*(tuple(handle.shape) for handle in (lhs, rhs, lhs_zero, rhs_zero)))
    if steps is None:
        return None
    lhs_step, rhs_step = steps
    k, n = int(lhs.shape[-1]), int(rhs.shape[-1])
    rows = lhs.shape[:-1]
    m = tir.IntImm(1, tir.INDEX_DTYPE)
    for extent in rows:
        m = tir.as_prim(extent) if isinstance(m, tir.IntImm) and m.value == 1 else m * tir.as_prim(extent)

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        (out,) = outputs
        a_first, a_scratch, a_fill = in_memory(lhs, "qgemm_a")
        b_first, b_scratch, b_fill, panels = weight_in_memory(rhs, "qgemm_b")
        # the zero points as arrays (a constant zero point of the body is an immediate)
        za, za_fill = staged(lhs_zero, "qgemm_za", lhs.shape, tuple(rows) if lhs_step else (), False)
        zb, zb_fill = staged(rhs_zero, "qgemm_zb", rhs.shape, (n,) if rhs_step else (), True)
        epilogue, epilogue_fill, epilogue_buffers = (requantization.staged(n) if requantization is not None
                                                     else (None, None, []))
        b_kind = SATURATING_PAIRS if saturate else int(rhs.dtype == "int8")
        call = qgemm_call(a_first, b_first, za, zb, first_element(out), m, n, k, lhs.dtype == "int8",
                          b_kind, lhs_step, rhs_step, panels is not None, epilogue=epilogue)
        body = seq(a_fill, b_fill, za_fill, zb_fill, epilogue_fill, call)
        return allocated(body, a_scratch, b_scratch, za, zb, *epilogue_buffers)

    dtype = _I32 if requantization is None else requantization.zero_point.dtype
    return ExternOp("qnn.matmul", ((out_shape, dtype),), build)


@register_compute("qnn.requantized_matmul")
def _requantized_matmul(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    lhs, rhs, lhs_zero, rhs_zero = inputs[:4]
    kernel = _integer_gemm(lhs, rhs, lhs_zero, rhs_zero, output_shape(out_type),
                           Requantization.of(inputs, attrs), bool(attrs.get("saturate_pairs", False)))
    if kernel is None:
        raise IRError("qnn.requantized_matmul runs on the integer GEMM only (RequantizeInKernels forms it "
                      "where the GEMM applies: a weight without batch axes, static k and n)")
    return kernel


def centered(operand: TensorHandle, zero_point: TensorHandle, idx: Indices) -> tir.PrimExpr:
    """``operand - zero_point`` at ``idx`` in int32 (the zero point broadcasts to the operand)."""
    zp = zero_point.load(*broadcast_indices(zero_point.shape, idx, operand.shape))
    return _minus(operand.load(*idx), zp)


# --------------------------------------------------------------------------- dynamic_quantize


# lanes of the range pass: each takes every RANGE_LANES-th value of a row, so the pass is a
# loop GCC vectorizes, where one min/max chain is serial (qnn.dynamic_quantize of 32 x 5632
# floats, range and quantizing passes, one thread: 354 us -> 130 us)
RANGE_LANES = 16
# the most rows whose lanes a range pass keeps apart (two buffers of this many x RANGE_LANES
# floats on the stack; a 32 x 5632 quantization's range on two threads: 89 -> 59 us), more
# share one set of lanes on one thread
RANGE_MAX_ROWS = 256


def _range_in_lanes(data: TensorHandle, low: tir.Buffer, high: tir.Buffer) -> tir.Stmt:
    """``low``/``high`` lowered/raised to the data's min/max. A float min/max is the same
    value in any order (a NaN anywhere gives NaN, -0 and 0 lead to the same scale and zero
    point), so the values go to RANGE_LANES lanes, combined at the end: each row's lanes of
    its own (up to RANGE_MAX_ROWS rows), so the rows' loop has independent iterations,
    which Parallelize splits over threads."""
    *outer, inner = data.shape
    if not is_static_dim(inner) or int(inner) < RANGE_LANES or not all(is_static_dim(d) for d in outer):
        return loop_nest(data.shape, lambda idx: seq(
            tir.BufferStore(low, tir.Min(low.load(), data.load(*idx)), ()),
            tir.BufferStore(high, tir.Max(high.load(), data.load(*idx)), ()),
        ))
    inner, rows = int(inner), math.prod(int(d) for d in outer)
    parts = rows if rows <= RANGE_MAX_ROWS else 1  # lanes kept apart: one set a row, or one in all
    lows, highs = (tir.Buffer(name, (parts * RANGE_LANES,), _F32, "local")
                   for name in ("range_lows", "range_highs"))
    full = inner // RANGE_LANES * RANGE_LANES

    def loop(name: str, extent: int, body: Callable[[tir.TVar], tir.Stmt]) -> tir.For:
        var = tir.TVar(name)
        return tir.For(var, tir.IntImm(0), tir.IntImm(extent), tir.ForKind.SERIAL, body(var))

    def start(first: tir.PrimExpr) -> tir.Stmt:
        return loop("lane", RANGE_LANES, lambda lane: seq(
            tir.BufferStore(lows, low.load(), (first + lane,)),
            tir.BufferStore(highs, high.load(), (first + lane,))))

    def one_row(row: tir.TVar) -> tir.Stmt:
        idx, rest = [], rows  # the outer indices of flat row `row`
        for extent in (int(d) for d in outer):
            rest //= extent
            idx.append(tir.FloorMod(tir.FloorDiv(row, tir.IntImm(rest)), tir.IntImm(extent)))
        first = row * tir.IntImm(RANGE_LANES) if parts > 1 else tir.IntImm(0)

        def update(lane: tir.PrimExpr, at: tir.PrimExpr) -> tir.Stmt:
            value, slot = data.load(*idx, at), first + lane
            return seq(tir.BufferStore(lows, tir.Min(lows.load(slot), value), (slot,)),
                       tir.BufferStore(highs, tir.Max(highs.load(slot), value), (slot,)))

        blocks = loop("block", inner // RANGE_LANES, lambda block: loop(
            "lane", RANGE_LANES, lambda lane: update(lane, block * tir.IntImm(RANGE_LANES) + lane)))
        tail = None if full == inner else loop("rest", inner - full, lambda rest: update(
            tir.IntImm(0), tir.IntImm(full) + rest))
        return seq(start(first) if parts > 1 else None, blocks, tail)

    combine = loop("lane", parts * RANGE_LANES, lambda lane: seq(
        tir.BufferStore(low, tir.Min(low.load(), lows.load(lane)), ()),
        tir.BufferStore(high, tir.Max(high.load(), highs.load(lane)), ())))
    body = seq(None if parts > 1 else start(tir.IntImm(0)), loop("row", rows, one_row), combine)
    return tir.Allocate(lows, tir.Allocate(highs, body))


@register_compute("qnn.dynamic_quantize")
def _dynamic_quantize(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
    (data,) = inputs
    shape = data.shape

    def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
        out, scale, zero_point = outputs
        low, high = local_scalar("range_low", _F32), local_scalar("range_high", _F32)
        zero, top = tir.FloatImm(0.0, _F32), tir.FloatImm(255.0, _F32)
        # the range starts at 0, so it always includes 0 (min(0, min(x)), as the reference)
        find_range = seq(
            tir.BufferStore(low, zero, ()),
            tir.BufferStore(high, zero, ()),
            _range_in_lanes(data, low, high),
        )
        lo, hi = low.load(), high.load()
        step = tir.Select(tir.EQ(hi, lo), tir.FloatImm(1.0, _F32), (hi - lo) / top)
        initial = zero - lo / scale.load()
        upper = tir.Select(tir.LT(initial, top), initial, top)  # std::min(255, z)
        clamped = tir.Select(tir.LT(zero, upper), upper, zero)  # std::max(0, z)
        zero = tir.Cast("uint8", tir.Cast(_I32, intrinsic("nearbyint", clamped)))
        parameters = seq(tir.BufferStore(scale, step, ()), tir.BufferStore(zero_point, zero, ()))
        quantize = loop_nest(shape, lambda idx: tir.BufferStore(
            out, round_saturate(data.load(*idx) / scale.load(), "uint8", zero_point.load()), idx))
        return tir.Allocate(low, tir.Allocate(high, seq(find_range, parameters, quantize)))

    return ExternOp("qnn.dynamic_quantize", ((shape, "uint8"), ((), _F32), ((), "uint8")), build)

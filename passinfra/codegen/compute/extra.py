"""Compute rules of the ops of :mod:`passinfra.ir.op.extra` (the ONNX-driven additions):
more unary math and activations, strided_slice, pad, tile, broadcast_to, trilu, prod,
argmax and argmin.

Rules are attached only to ops that are registered (that module may grow or shrink).
The rule of ``nn.lrn`` is in :mod:`passinfra.codegen.compute.onnx_extra`; those of
``nn.conv2d_transpose`` and ``nn.max_pool2d_dilated`` are the N-d window rules of
:mod:`passinfra.codegen.compute.window`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from passinfra import tir
from passinfra.codegen.compute.base import (
    ComputeOp,
    ExternOp,
    Indices,
    TensorHandle,
    clamp,
    imm,
    in_range,
    intrinsic,
    load_broadcast,
    local_scalar,
    loop_nest,
    output_shape,
    register_compute,
    seq,
)
from passinfra.codegen.compute.reduce import reduction
from passinfra.errors import OpNotFoundError
from passinfra.ir.attrs import Attrs
from passinfra.ir.op._rel import normalize_axes, normalize_axis
from passinfra.ir.op.registry import Op
from passinfra.ir.types import Type

Scalar = tir.PrimExpr


def _registered(name: str) -> bool:
    try:
        Op.get(name)
    except OpNotFoundError:
        return False
    return True


def _register_if_present(name: str, rule: Callable) -> None:
    if _registered(name):
        register_compute(name)(rule)


def _sign(x: Scalar) -> Scalar:
    zero, one = imm(0, x.dtype), imm(1, x.dtype)
    return tir.Select(tir.GT(x, zero), one, tir.Select(tir.LT(x, zero), zero - one, zero))


def _log_of(x: Scalar) -> Scalar:
    return intrinsic("log", x)


# name -> value(x, attrs); inverse hyperbolics through log/sqrt (no C99 call needed)
_UNARY: dict[str, Callable[[Scalar, Attrs], Scalar]] = {
    "floor": lambda x, a: intrinsic("floor", x),
    "ceil": lambda x, a: intrinsic("ceil", x),
    "round": lambda x, a: intrinsic("nearbyint", x),  # half to even, as the reference
    "sign": lambda x, a: _sign(x),
    "reciprocal": lambda x, a: imm(1, x.dtype) / x,
    "sin": lambda x, a: intrinsic("sin", x),
    "cos": lambda x, a: intrinsic("cos", x),
    "tan": lambda x, a: intrinsic("tan", x),
    "asin": lambda x, a: intrinsic("asin", x),
    "acos": lambda x, a: intrinsic("acos", x),
    "atan": lambda x, a: intrinsic("atan", x),
    "sinh": lambda x, a: intrinsic("sinh", x),
    "cosh": lambda x, a: intrinsic("cosh", x),
    "asinh": lambda x, a: _log_of(x + intrinsic("sqrt", x * x + imm(1, x.dtype))),
    "acosh": lambda x, a: _log_of(x + intrinsic("sqrt", x * x - imm(1, x.dtype))),
    "atanh": lambda x, a: imm(0.5, x.dtype) * _log_of((imm(1, x.dtype) + x) / (imm(1, x.dtype) - x)),
    "nn.softplus": lambda x, a: tir.Max(x, imm(0, x.dtype))
    + intrinsic("log1p", intrinsic("exp", imm(0, x.dtype) - intrinsic("fabs", x))),
    "nn.softsign": lambda x, a: x / (imm(1, x.dtype) + intrinsic("fabs", x)),
    "nn.leaky_relu": lambda x, a: tir.Select(tir.LT(x, imm(0, x.dtype)), x * imm(a["alpha"], x.dtype), x),
    "nn.elu": lambda x, a: tir.Select(tir.LT(x, imm(0, x.dtype)),
                                      imm(a["alpha"], x.dtype) * intrinsic("expm1", x), x),
    "nn.selu": lambda x, a: imm(a["gamma"], x.dtype) * tir.Select(
        tir.LE(x, imm(0, x.dtype)), imm(a["alpha"], x.dtype) * intrinsic("expm1", x), x),
    "nn.hard_sigmoid": lambda x, a: tir.Min(tir.Max(imm(a["alpha"], x.dtype) * x + imm(a["beta"], x.dtype),
                                                    imm(0, x.dtype)), imm(1, x.dtype)),
}


def _unary_rule(name: str) -> Callable:
    apply = _UNARY[name]

    def rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
        (data,) = inputs
        return ComputeOp(name, output_shape(out_type), out_type.dtype,
                         lambda idx: apply(data.load(*idx), attrs))

    return rule


for _name in _UNARY:
    _register_if_present(_name, _unary_rule(_name))


def _strided_slice(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (data,) = inputs
    # begin/strides are normalized by the builder: source = begin + out * stride
    starts = dict(zip(attrs["axes"], zip(attrs["begin"], attrs["strides"])))

    def value(idx: Indices) -> Scalar:
        source = []
        for axis, index in enumerate(idx):
            begin, step = starts.get(axis, (0, 1))
            moved = index if step == 1 else index * tir.IntImm(step)
            source.append(moved + tir.IntImm(begin) if begin else moved)
        return data.load(*source)

    return ComputeOp("strided_slice", output_shape(out_type), data.dtype, value)


def _pad_source(index: Scalar, before: int, after: int, extent: int,
                mode: str) -> tuple[Scalar, Scalar | None]:
    """(source index along one axis, condition that it is inside, or None if always)."""
    crop_before, crop_after = max(0, -before), max(0, -after)
    kept = extent - crop_before - crop_after
    pad_before = max(0, before)
    local = index - tir.IntImm(pad_before) if pad_before else index
    if max(0, before) == 0 and max(0, after) == 0:
        mapped, inside = local, None
    elif mode == "constant":
        mapped, inside = clamp(local, 0, kept - 1), in_range(local, kept)
    elif mode == "edge":
        mapped, inside = clamp(local, 0, kept - 1), None
    elif mode == "wrap":
        mapped, inside = tir.FloorMod(local, tir.IntImm(kept)), None
    elif kept == 1:  # reflect of a single element repeats it
        mapped, inside = tir.IntImm(0), None
    else:  # reflect without repeating the edge: period 2 * (kept - 1)
        period = 2 * (kept - 1)
        folded = tir.FloorMod(local, tir.IntImm(period))
        mapped = tir.Select(tir.LT(folded, tir.IntImm(kept)), folded, tir.IntImm(period) - folded)
        inside = None
    return (mapped + tir.IntImm(crop_before) if crop_before else mapped), inside


def _pad(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (data,) = inputs
    mode, fill = attrs["mode"], imm(attrs["pad_value"], data.dtype)

    def value(idx: Indices) -> Scalar:
        source, conditions = [], []
        for index, (before, after), extent in zip(idx, attrs["pad_width"], data.shape):
            mapped, inside = _pad_source(index, before, after, extent, mode)
            source.append(mapped)
            if inside is not None:
                conditions.append(inside)
        read = data.load(*source)
        if not conditions:
            return read
        cond = conditions[0]
        for extra in conditions[1:]:
            cond = tir.And(cond, extra)
        return tir.Select(cond, read, fill)

    return ComputeOp("pad", output_shape(out_type), data.dtype, value)


def _tile(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (data,) = inputs
    return ComputeOp("tile", output_shape(out_type), data.dtype, lambda idx: data.load(*(
        index if reps == 1 else tir.FloorMod(index, tir.IntImm(extent))
        for index, reps, extent in zip(idx, attrs["reps"], data.shape))))


def _broadcast_to(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (data,) = inputs
    shape = output_shape(out_type)
    return ComputeOp("broadcast_to", shape, data.dtype, lambda idx: load_broadcast(data, idx, shape))


def _trilu(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ComputeOp:
    (data,) = inputs
    k = attrs["k"]
    compare = tir.GE if attrs["upper"] else tir.LE

    def value(idx: Indices) -> Scalar:
        row, col = idx[-2], idx[-1]
        return tir.Select(compare(col - row, tir.IntImm(k)), data.load(*idx), imm(0, data.dtype))

    return ComputeOp("trilu", output_shape(out_type), data.dtype, value)


def _prod(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type):
    (data,) = inputs
    axes = normalize_axes(attrs["axis"], len(data.shape))
    return reduction("prod", "prod", data, axes, attrs["keepdims"], output_shape(out_type))


def _arg_rule(name: str) -> Callable:
    better_than = tir.GT if name == "argmax" else tir.LT

    def rule(inputs: Sequence[TensorHandle], attrs: Attrs, out_type: Type) -> ExternOp:
        (data,) = inputs
        axis = normalize_axis(attrs["axis"], len(data.shape))
        keepdims, last = attrs["keepdims"], attrs["select_last_index"]
        extent = data.shape[axis]
        outer = [d for i, d in enumerate(data.shape) if i != axis]

        def build(outputs: Sequence[tir.Buffer]) -> tir.Stmt:
            (out,) = outputs

            def row(outer_vars: Indices) -> tir.Stmt:
                def at(k: Scalar) -> Indices:
                    return (*outer_vars[:axis], k, *outer_vars[axis:])

                best, where = local_scalar("best", data.dtype), local_scalar("best_index", "int64")
                k = tir.TVar("k")
                x = data.load(*at(k))
                # ties: the first index wins, or the last with select_last_index
                wins = tir.Or(better_than(x, best.load()), tir.EQ(x, best.load())) if last else \
                    better_than(x, best.load())
                scan = tir.For(k, tir.IntImm(1), tir.IntImm(extent - 1), tir.ForKind.SERIAL, seq(
                    tir.BufferStore(where, tir.Select(wins, k, where.load()), ()),
                    tir.BufferStore(best, tir.Select(wins, x, best.load()), ())))
                out_index = at(tir.IntImm(0)) if keepdims else tuple(outer_vars)
                body = seq(tir.BufferStore(best, data.load(*at(tir.IntImm(0))), ()),
                           tir.BufferStore(where, tir.IntImm(0), ()), scan,
                           tir.BufferStore(out, where.load(), out_index))
                return tir.Allocate(best, tir.Allocate(where, body))

            return loop_nest(outer, row)

        return ExternOp(name, ((output_shape(out_type), "int64"),), build)

    return rule


for _name, _rule in (("strided_slice", _strided_slice), ("pad", _pad), ("tile", _tile),
                     ("broadcast_to", _broadcast_to), ("trilu", _trilu), ("prod", _prod),
                     ("argmax", _arg_rule("argmax")), ("argmin", _arg_rule("argmin"))):
    _register_if_present(_name, _rule)

"""A convolution's element-wise epilogue computed by the microkernels as they store the
outputs, instead of a loop over the stored rows after the call.

The lowering hands a convolution its epilogue as a statement: a loop nest over a block
of the output that stores ``f(out[i], ...)`` back to ``out[i]``. Where ``f`` is one of the
forms the C runtime applies in registers (:class:`passinfra.tir.intrinsics.ConvEpilogue`:
a bias per output channel, a residual laid out as the output, then none, relu, clip or
hard-swish), the nest is recognized here, operation for operation, and the call carries
it; anything else (another activation, another order of the adds, a bias that is not one
value per channel) keeps its loop. The runtime computes the same float32 operations in
the same order as the loop would (its max and min keep NaN operands as the code
generator's do), so either way gives the same bits; ``codegen.conv_fuse_epilogue`` =
False keeps every loop (for A/B measurements).

The depthwise kernel has a second set of tiles that apply the epilogue (the tiles without
one stay as they were: one set for both cost ShuffleNet's 3x3 depthwise layers 5-6% where
none was applied); a depthwise convolution's bias alone keeps its loop (fused, 1.06x their
time), with an activation it is fused (MobileNetV3-like's layers 0.93-0.96x). Winograd
convolutions keep their loops: the epilogue in the output transform made resnet20 1.03x
slower.

Measured (one Zen 3 core, whole models, interleaved; ``python -m bench.conv_epilogue``,
``bench/results_conv_epilogue.md``): the bound, every epilogue loop left out, is
MobileNetV3-like 0.88 of its time and RegNetX-like 0.96; fused against the loops,
MobileNetV3-like 0.96, RegNetX-like 0.97, SqueezeNet 0.98, ResNet-50 0.99, the others level
(hard-swish and relu after 1x1 convolutions of 16-96 input channels gain most: there the
loop's extra pass over the outputs weighs most against the sums).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from passinfra import tir
from passinfra.tir.functor import iter_expr_post_order, same_expr, substitute
from passinfra.tir.intrinsics import ConvEpilogue
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext

# codegen.conv_fuse_epilogue (bool, default True): the microkernels apply the epilogues
# they can; False keeps every epilogue a loop after its call
FUSE_CONFIG = "codegen.conv_fuse_epilogue"
register_config(FUSE_CONFIG, bool)


def fuse_enabled() -> bool:
    """Config ``codegen.conv_fuse_epilogue`` (its type checked where the context is made)."""
    return bool(PassContext.current().get_config(FUSE_CONFIG, True))


def match_epilogue(nest: tir.Stmt, out: tir.Buffer) -> ConvEpilogue | None:
    """The :class:`ConvEpilogue` that computes ``nest`` (an epilogue's loops over a block of
    ``out``, innermost over its channels), its loads at the block's first element; None
    when the nest is not exactly one of its forms."""
    loops: list[tir.For] = []
    stmt = nest
    while isinstance(stmt, tir.For):
        loops.append(stmt)
        stmt = stmt.body
    if not (loops and isinstance(stmt, tir.BufferStore) and stmt.buffer is out and out.dtype == "float32"):
        return None
    channel = loops[-1].loop_var
    if not (isinstance(loops[-1].start, tir.IntImm) and loops[-1].start.value == 0
            and stmt.indices and stmt.indices[-1] is channel):
        return None
    forms = _Forms(out, tuple(stmt.indices), channel, {loop.loop_var for loop in loops})
    fused = forms.epilogue(stmt.value)
    if fused is None or (fused.activation == "none" and not fused.loads()):
        return None
    start = {loop.loop_var: loop.start for loop in loops}
    at_start = (lambda load: None if load is None else substitute(load, start))  # noqa: E731
    return ConvEpilogue(fused.activation, fused.p0, fused.p1, at_start(fused.bias), at_start(fused.residual),
                        fused.residual_first)


class _Forms:
    """The forms of :class:`ConvEpilogue` on the stored element ``out[indices]``."""

    def __init__(self, out: tir.Buffer, indices: tuple[tir.PrimExpr, ...], channel: tir.TVar,
                 loop_vars: set[tir.TVar]) -> None:
        self.out, self.indices, self.channel, self.loop_vars = out, indices, channel, loop_vars

    def epilogue(self, value: tir.PrimExpr) -> ConvEpilogue | None:
        pre = self.pre_activation(value)
        if pre is not None:
            return pre
        if isinstance(value, tir.Max):  # relu: max(x, 0)
            pre = self.pre_activation(value.a)
            if pre is not None and _constant(value.b) == 0.0:
                return _with(pre, "relu")
        if isinstance(value, tir.Min) and isinstance(value.a, tir.Max):  # clip: min(max(x, lo), hi)
            pre, low, high = self.pre_activation(value.a.a), _constant(value.a.b), _constant(value.b)
            if pre is not None and low is not None and high is not None:
                return _with(pre, "clip", low, high)
        if isinstance(value, tir.Mul):  # hard-swish: x * min(max(x * p0 + p1, 0), 1)
            for x, gate in ((value.a, value.b), (value.b, value.a)):
                pre = self.pre_activation(x)
                scale = self.hard_sigmoid(gate, x) if pre is not None else None
                if scale is not None:
                    return _with(pre, "hardswish", *scale)  # type: ignore[arg-type]
        return None

    def hard_sigmoid(self, gate: tir.PrimExpr, x: tir.PrimExpr) -> tuple[float, float] | None:
        """(p0, p1) of ``min(max(x * p0 + p1, 0), 1)``."""
        if not (isinstance(gate, tir.Min) and isinstance(gate.a, tir.Max) and _constant(gate.b) == 1.0
                and _constant(gate.a.b) == 0.0 and isinstance(gate.a.a, tir.Add)):
            return None
        for product, offset in _operand_orders(gate.a.a):
            if isinstance(product, tir.Mul) and _constant(offset) is not None:
                for term, factor in _operand_orders(product):
                    if same_expr(term, x) and _constant(factor) is not None:
                        return _constant(factor), _constant(offset)  # type: ignore[return-value]
        return None

    def pre_activation(self, value: tir.PrimExpr) -> ConvEpilogue | None:
        """The stored sum, plus a bias and a residual (either first)."""
        if self.is_out(value):
            return ConvEpilogue()
        if not isinstance(value, tir.Add):
            return None
        for inner, term in _operand_orders(value):
            if self.is_out(inner):
                bias, residual = self.bias(term), self.residual(term)
                if bias is not None or residual is not None:
                    return ConvEpilogue(bias=bias, residual=residual)
            elif isinstance(inner, tir.Add):
                for stored, added in _operand_orders(inner):
                    if not self.is_out(stored):
                        continue
                    bias, residual = self.bias(added), self.residual(term)  # (out + bias) + residual
                    if bias is not None and residual is not None:
                        return ConvEpilogue(bias=bias, residual=residual)
                    bias, residual = self.bias(term), self.residual(added)  # (out + residual) + bias
                    if bias is not None and residual is not None:
                        return ConvEpilogue(bias=bias, residual=residual, residual_first=True)
        return None

    def is_out(self, value: tir.PrimExpr) -> bool:
        return isinstance(value, tir.BufferLoad) and value.buffer is self.out and self._same_indices(value)

    def bias(self, value: tir.PrimExpr) -> tir.BufferLoad | None:
        """A float32 load of one value per output channel: its last index the channel
        itself, the others the same for the whole block (free of its loops)."""
        if not (isinstance(value, tir.BufferLoad) and value.buffer is not self.out
                and value.buffer.dtype == "float32" and value.indices and value.indices[-1] is self.channel):
            return None
        used = {node for index in value.indices[:-1] for node in iter_expr_post_order(index)}
        return None if used & self.loop_vars else value

    def residual(self, value: tir.PrimExpr) -> tir.BufferLoad | None:
        """A float32 load of another tensor laid out as the output, at the stored element."""
        if not (isinstance(value, tir.BufferLoad) and value.buffer is not self.out
                and value.buffer.dtype == "float32" and _same_shape(value.buffer.shape, self.out.shape)):
            return None
        return value if self._same_indices(value) else None

    def _same_indices(self, load: tir.BufferLoad) -> bool:
        return len(load.indices) == len(self.indices) and all(map(same_expr, load.indices, self.indices))


def _with(pre: ConvEpilogue, activation: str, p0: float = 0.0, p1: float = 0.0) -> ConvEpilogue:
    return ConvEpilogue(activation, p0, p1, pre.bias, pre.residual, pre.residual_first)


def _operand_orders(node: tir.Add | tir.Mul) -> tuple[tuple[tir.PrimExpr, tir.PrimExpr], ...]:
    """Both orders of a sum's or product's operands: float32 addition and multiplication
    give the same value either way."""
    return (node.a, node.b), (node.b, node.a)


def _constant(value: tir.PrimExpr) -> float | None:
    """A float32 constant's value, but for NaN and -0.0: the runtime's one-instruction max
    and min (c/conv_runtime.c) equal the code generator's for every other constant."""
    if not (isinstance(value, tir.FloatImm) and value.dtype == "float32"):
        return None
    number = float(value.value)
    return None if math.isnan(number) or (number == 0.0 and math.copysign(1.0, number) < 0) else number


def _same_shape(a: Sequence[tir.PrimExpr], b: Sequence[tir.PrimExpr]) -> bool:
    return len(a) == len(b) and all(x == y or (isinstance(x, tir.PrimExpr) and isinstance(y, tir.PrimExpr)
                                                and same_expr(x, y)) for x, y in zip(a, b))


__all__ = ["FUSE_CONFIG", "fuse_enabled", "match_epilogue"]

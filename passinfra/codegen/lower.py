"""The lowering: each ``Primitive`` function (a fused group from FuseOps) becomes a
loop-level :class:`~passinfra.tir.PrimFunc` (:func:`lower_primitive_function`; the
LowerToPrimFunc pass that runs it over a module is
:mod:`passinfra.codegen.passes.lower_to_prim_func`).

The body of a primitive function is a dataflow graph of op calls over its parameters.
Every call gets a description from its op's compute rule (:mod:`passinfra.codegen.compute`);
then, in evaluation order, each tensor is either

* inlined (injective ops): consumers read the producer's value expression at their own
  indices, so no intermediate buffer exists. A producer is materialized instead when it
  is used more than once and is expensive (math intrinsics or a large expression), or
  when its inlined expression would grow past ``MAX_INLINE_SIZE`` nodes (which bounds
  the size of every kernel expression, whatever the graph);
* kept pending (a reduction or contraction read by one elementwise consumer): when the
  consumer's loop nest is emitted and reads it exactly at its own loop indices, the
  reduction is fused into that nest -- per output index, accumulate into a one-element
  local, then apply the epilogue and store once (conv2d + bias_add + relu is one loop
  nest). A contraction computed by BLAS (:mod:`passinfra.codegen.gemm`) writes the
  consumer's buffer instead, and the consumer runs in place over each block of it
  right after the GEMM that produced the block. Any other read materializes it into a
  buffer first;
* materialized: group outputs (written straight into the output buffers), reductions
  that cannot fuse, and ExternOp nests (softmax, layer_norm, batch_norm). Intermediates
  live in buffers Allocate'd around the function body.

PrimFunc conventions (shared by every codegen pass): params are buffers, inputs first
(a tuple-typed parameter contributes one buffer per tensor field, depth first), then one
output buffer per tensor leaf of the result; attrs ``global_symbol`` (the GlobalVar name
with non-identifier characters as ``_``), ``num_inputs`` and ``op_names``. Buffers are
N-d (StorageFlatten flattens them); loops are serial. A kernel with specialized copies
(:mod:`passinfra.codegen.passes.specialize_kernels`) lists them in the attr
:data:`SPECIALIZATIONS_ATTR`.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from passinfra import tir
from passinfra.codegen.c_intrinsics import kernel_libraries
from passinfra.codegen.compute import (
    COMPUTE_ATTR,
    BufferHandle,
    ComputeOp,
    ExternOp,
    ReduceOp,
    missing_rule_reason,
)
from passinfra.codegen.compute.base import local_scalar, seq
from passinfra.codegen.compute.conv_plan import ConvPlan, plan_conv2d
from passinfra.codegen.gemm import Epilogue, GemmPlan, blas_library, plan_contraction
from passinfra.codegen.loop_tiling import elementwise_nest
from passinfra.codegen.transform.widen_gemm_operands import PANEL_ELEMENTS
from passinfra.errors import IRError, SymbolicSizeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.dims import DimError, DimVar
from passinfra.ir.expr import Call, Constant, Expr, Function, Tuple, TupleGetItem, Var
from passinfra.ir.functor import iter_post_order
from passinfra.ir.op.qgemm_panels import OP_NAME as UNPACK_QGEMM_PANELS
from passinfra.ir.op.registry import Op
from passinfra.ir.op.weight_panels import OP_NAME as UNPACK_PANELS
from passinfra.ir.op.winograd_weights import OP_NAME as UNPACK_WINOGRAD
from passinfra.ir.types import HALF_DTYPES, TensorType, TupleType, Type
from passinfra.tir.arith import affine_coefficient
from passinfra.tir.functor import iter_expr_post_order, iter_expr_tree
from passinfra.tir.sizes import SizeScope, is_static_extent, size_scope
from passinfra.transform.context import PassContext

# an inlined value expression bigger than this is materialized instead (nodes)
# attr of a primitive function and of its PrimFunc: ((copy name, ((dimension, size), ...)), ...)
SPECIALIZATIONS_ATTR = "Specializations"

MAX_INLINE_SIZE = 256
# a value used more than once is recomputed inline only if smaller than this (nodes)
CHEAP_SIZE = 16
# reduction loops (innermost first) whose total steps stay within this are unrolled: a
# pooling window (3x3 taps) run as a loop kept its padding tests and loop overhead per tap
# and cost several times the unrolled form; the C compiler's -O2 does not peel them
MAX_UNROLLED_REDUCTION_STEPS = 16
# a reduction over outer axes into at least this many output channels keeps one
# accumulator per channel of a block (_Lowerer._emit_channel_reduce); at most
# MAX_CHANNEL_REDUCE_BLOCK per block, so blocks split over threads and stay in registers
MIN_CHANNEL_REDUCE_BLOCK = 8
MAX_CHANNEL_REDUCE_BLOCK = 64
# at most this many inlined producers in a row: building an expression recurses through
# them, so this keeps lowering far from Python's recursion limit (nodes like dropout add
# nothing to the expression size, so the size bound alone does not limit the depth)
MAX_INLINE_DEPTH = 48


def channel_block(channels: int) -> int:
    """The accumulators per block of a channel reduction: the largest divisor of
    ``channels`` up to MAX_CHANNEL_REDUCE_BLOCK, a multiple of 8 (whole vectors) where
    one is."""
    divisors = [d for d in range(1, min(channels, MAX_CHANNEL_REDUCE_BLOCK) + 1) if channels % d == 0]
    whole = [d for d in divisors if d % 8 == 0]
    return max(whole or divisors)


# --------------------------------------------------------------------------- tensors of the graph


@dataclass(eq=False)
class _Extern:
    """One ExternOp call: its output tensors share a single loop nest."""

    desc: ExternOp
    tensors: list[_Tensor] = field(default_factory=list)
    emitted: bool = False


@dataclass(eq=False)
class _Tensor:
    """One tensor value computed in the group (a call's result or one of its fields)."""

    lowerer: _Lowerer
    name: str
    shape: tuple[int, ...]
    dtype: str
    desc: ComputeOp | ReduceOp | None  # None for ExternOp fields
    extern: _Extern | None = None
    uses: int = 0
    consumers: list[Any] = field(default_factory=list)  # descriptions of the consuming calls
    producers: list[_Tensor] = field(default_factory=list)  # tensors this one reads
    inline_depth: int = 0  # inlined producers in a row up to and including this one
    output: tir.Buffer | None = None
    state: str = "new"  # new -> inline | pending | materialized | fused
    buffer: tir.Buffer | None = None
    gemm: GemmPlan | None = None  # computed by BLAS calls instead of a loop nest
    gemm_inputs: tuple[Any, ...] = ()
    # a cast to float32 of a float16/bfloat16 parameter (ToMixedPrecision's weights): that
    # parameter, which a GEMM reads in place (WidenGemmOperands widens it panel by panel)
    widens: tir.Buffer | None = None
    # a weight_panels.unpack of a parameter (the PanelWeights pass): the panels, which a
    # kernel reading panels (a plan's ``panels``) takes in place
    panels: tir.Buffer | None = None
    # a qgemm_panels.unpack of a parameter (PanelWeights): the panels, which the integer
    # GEMM (qnn.matmul's compute rule) takes in place
    qgemm_panels: tir.Buffer | None = None
    # a winograd_weights.unpack of a parameter (PanelWeights): the weight's transform, which
    # the Winograd kernel (a ConvPlan of kind "winograd") takes in place
    winograd: tir.Buffer | None = None

    def load(self, *indices: Any) -> tir.PrimExpr:
        return self.lowerer.load(self, tuple(tir.as_prim(i) for i in indices))


@dataclass(frozen=True)
class _ScalarConstant:
    """A size-1 constant of the function body: every load is the immediate."""

    value: Any
    shape: tuple[int, ...]
    dtype: str

    def load(self, *indices: Any) -> tir.PrimExpr:
        if self.dtype == "bool":
            return tir.IntImm(int(bool(self.value)), "bool")
        return tir.as_prim(self.value.item(), self.dtype)


def _handle_type(value: Any) -> Type:
    if isinstance(value, tuple):
        return TupleType([_handle_type(v) for v in value])
    return TensorType(value.shape, value.dtype)


def flatten_tuples(value: Any) -> list[Any]:
    """The leaves of a (possibly nested tuple) value, depth first. This order is the
    calling convention of lowered kernels: a tuple parameter or result becomes one
    buffer per leaf, and the host flattens its arguments with this same function."""
    out, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            stack.extend(reversed(item))
        else:
            out.append(item)
    return out


def complete_attrs(op: Op, attrs: Attrs) -> Attrs:
    """``attrs`` with the op's defaults filled in (a hand-built call may leave some out)."""
    defaults = op.get_attr("attr_defaults")
    if not defaults or all(key in attrs for key in defaults):
        return attrs
    return Attrs({key: attrs.get(key, default) for key, default in defaults.items()})


def c_identifier(name: str) -> str:
    """``name`` with every non-identifier character as ``_`` (and no leading digit)."""
    ident = re.sub(r"[^0-9A-Za-z_]", "_", name) or "_"
    return f"_{ident}" if ident[0].isdigit() else ident


# --------------------------------------------------------------------------- expression size


def expr_cost(expr: tir.PrimExpr, limit: int) -> tuple[int, bool]:
    """(node count of ``expr`` counted as a tree, capped at ``limit``; whether it calls a
    math intrinsic). Iterative: inlined expressions can be deep."""
    count, has_intrinsic = 0, False
    for node in itertools.islice(iter_expr_tree(expr), limit):
        count += 1
        has_intrinsic = has_intrinsic or isinstance(node, tir.Intrinsic)
    return count, has_intrinsic


def _contiguous_along(expr: tir.PrimExpr, var: tir.TVar) -> bool:
    """Whether every load in ``expr`` moves by 0 or 1 elements along its last axis (and
    not at all along the others) when ``var`` grows by one."""
    for node in iter_expr_post_order(expr):
        if isinstance(node, tir.BufferLoad) and node.indices:
            *outer, last = node.indices
            if any(affine_coefficient(index, var) != 0 for index in outer):
                return False
            if affine_coefficient(last, var) not in (0, 1):
                return False
    return True


# --------------------------------------------------------------------------- the lowering


class _Lowerer:
    def __init__(self, func: Function, symbol: str, use_blas: bool = False) -> None:
        self.func = func
        self.symbol = symbol
        self.use_blas = use_blas
        self.names: dict[str, int] = {}
        self.inputs: list[tir.Buffer] = []
        self.outputs: list[tir.Buffer] = []
        self.tensors: list[_Tensor] = []
        self.allocations: list[tir.Buffer] = []
        self.stmts: list[tir.Stmt] = []
        self.op_names: list[str] = []
        # stack of "touch" records: pending reduction -> (accumulator, indices of each read)
        self.touch_stack: list[dict[_Tensor, tuple[tir.Buffer, list[tuple]]]] = []
        # symbolic sizes: the kernel's size variables, and each input's graph-level shape
        self.sizes = SizeScope()
        self.input_shapes: list[tuple] = []

    # -- naming and buffers

    def fresh_name(self, base: str) -> str:
        base = c_identifier(base)
        count = self.names.get(base, 0)
        self.names[base] = count + 1
        return base if count == 0 else f"{base}_{count}"

    def new_buffer(self, base: str, shape: Sequence[int], dtype: str) -> tir.Buffer:
        return tir.Buffer(self.fresh_name(base), tuple(shape), dtype)

    def _param_value(self, name: str, ty: Type | None) -> Any:
        if isinstance(ty, TensorType):
            buffer = self.new_buffer(name, ty.shape, ty.dtype)
            self.inputs.append(buffer)
            self.input_shapes.append(ty.shape)
            return BufferHandle(buffer, None if ty.is_static else ty.shape)
        if isinstance(ty, TupleType):
            return tuple(self._param_value(f"{name}_{i}", f) for i, f in enumerate(ty.fields))
        raise IRError(f"LowerToPrimFunc: parameter {name!r} of function {self.symbol!r} needs a tensor or "
                      f"tuple type annotation, got {ty!r}")

    # -- phase 1: the dataflow graph

    def run(self) -> tir.PrimFunc:
        values: dict[Expr, Any] = {}
        for param in self.func.params:
            values[param] = self._param_value(param.name_hint, param.type_annotation)
        for node in iter_post_order(self.func.body):
            if node in values or isinstance(node, Op):
                continue
            values[node] = self._value_of(node, values)
        result = values[self.func.body]
        self._assign_outputs(result)
        self._emit_all()
        return self._finish(result)

    def _value_of(self, node: Expr, values: dict[Expr, Any]) -> Any:
        if isinstance(node, Call):
            return self._call(node, [values[a] for a in node.args])
        if isinstance(node, Tuple):
            return tuple(values[f] for f in node.fields)
        if isinstance(node, TupleGetItem):
            tup = values[node.tuple_value]
            if not isinstance(tup, tuple) or not 0 <= node.index < len(tup):
                raise IRError(f"LowerToPrimFunc: {node.index} is not a field of the tuple read in "
                              f"function {self.symbol!r}")
            return tup[node.index]
        if isinstance(node, Constant):
            if node.data.size != 1:
                raise IRError(f"LowerToPrimFunc: function {self.symbol!r} holds a constant of shape "
                              f"{node.shape}; only scalar constants can be lowered (pass tensors as "
                              f"parameters, as FuseOps does)")
            return _ScalarConstant(node.data.reshape(()), node.shape, node.dtype)
        if isinstance(node, Var):
            raise IRError(f"LowerToPrimFunc: variable {node.name_hint!r} in function {self.symbol!r} is "
                          f"not a parameter")
        raise IRError(f"LowerToPrimFunc: function {self.symbol!r} is not a dataflow graph of op calls: "
                      f"it contains a {type(node).__name__}")

    def _call(self, call: Call, args: list[Any]) -> Any:
        op = call.op
        if not isinstance(op, Op):
            raise IRError(f"LowerToPrimFunc: function {self.symbol!r} calls {op!r}, not an op; a primitive "
                          f"function may only call ops")
        rule = op.get_attr(COMPUTE_ATTR)
        if rule is None:
            reason = missing_rule_reason(op.name)
            why = f": {reason}" if reason else ""
            raise IRError(f"op {op.name} has no compute rule{why}; cannot lower function {self.symbol!r} "
                          f"(register one with Op.get({op.name!r}).set_attr({COMPUTE_ATTR!r}, rule))")
        self.op_names.append(op.name)
        attrs = complete_attrs(op, call.attrs)
        out_type = op.infer_type([_handle_type(a) for a in args], attrs)
        desc = rule(args, attrs, out_type)
        producers = [t for a in args for t in flatten_tuples(a) if isinstance(t, _Tensor)]
        for producer in producers:
            producer.uses += 1
            producer.consumers.append(desc)
        result = self._tensors_of(op.name, desc, out_type)
        for tensor in flatten_tuples(result):
            tensor.producers = producers
        if isinstance(desc, ReduceOp):
            self._plan_gemm(result, op.name, attrs, args)
        if op.name == UNPACK_PANELS and isinstance(result, _Tensor) and isinstance(args[0], BufferHandle):
            result.panels = args[0].buffer
        if op.name == UNPACK_WINOGRAD and isinstance(result, _Tensor) and isinstance(args[0], BufferHandle):
            result.winograd = args[0].buffer
        if (op.name == UNPACK_QGEMM_PANELS and isinstance(result, _Tensor)
                and isinstance(args[0], BufferHandle)):
            result.qgemm_panels = args[0].buffer
        if op.name == "cast" and isinstance(result, _Tensor) and result.dtype == "float32":
            source = args[0]
            if isinstance(source, BufferHandle) and source.buffer.dtype in HALF_DTYPES:
                result.widens = source.buffer
        return result

    def _plan_gemm(self, tensor: _Tensor, op_name: str, attrs: Attrs, args: list[Any]) -> None:
        # BLAS and the convolution kernels read their operands from memory: only tensors
        # (never scalar constants or tuples)
        if not all(isinstance(a, (_Tensor, BufferHandle)) for a in args):
            return
        shapes = [tuple(a.shape) for a in args]
        tensor.gemm = plan_kernel(op_name, attrs, shapes, tensor.dtype, tensor.shape, self.use_blas)
        tensor.gemm_inputs = tuple(args)

    def _tensors_of(self, name: str, desc: Any, out_type: Type) -> Any:
        if isinstance(desc, ExternOp):
            group = _Extern(desc)
            for shape, dtype in desc.outputs:
                tensor = _Tensor(self, name, tuple(shape), dtype, None, group)
                group.tensors.append(tensor)
                self.tensors.append(tensor)
            return tuple(group.tensors) if isinstance(out_type, TupleType) else group.tensors[0]
        if isinstance(desc, tuple):
            return tuple(self._tensors_of(name, d, t) for d, t in zip(desc, out_type.fields))
        if not isinstance(desc, (ComputeOp, ReduceOp)):
            raise IRError(f"the compute rule of op {name} returned {type(desc).__name__}, expected a "
                          f"ComputeOp, ReduceOp, ExternOp or a tuple of them")
        tensor = _Tensor(self, name, tuple(desc.shape), desc.dtype, desc)
        self.tensors.append(tensor)
        return tensor

    def _assign_outputs(self, result: Any) -> None:
        leaves = flatten_tuples(result)
        for k, leaf in enumerate(leaves):
            buffer = self.new_buffer("out" if len(leaves) == 1 else f"out{k}", leaf.shape, leaf.dtype)
            self.outputs.append(buffer)
            if isinstance(leaf, _Tensor) and leaf.output is None:
                leaf.output = buffer
            if isinstance(leaf, _Tensor):
                leaf.uses += 1

    # -- phase 2: emission

    def _emit_all(self) -> None:
        for tensor in self.tensors:
            if tensor.extern is not None:
                if not tensor.extern.emitted and (tensor.uses or tensor.output is not None):
                    self._emit_extern(tensor.extern)
            elif tensor.uses == 0 and tensor.output is None:
                continue  # dead: nothing reads it
            elif isinstance(tensor.desc, ReduceOp):
                self._place_reduce(tensor)
            else:
                self._place_compute(tensor)

    def _place_compute(self, tensor: _Tensor) -> None:
        if tensor.output is not None:
            self._emit_compute(tensor, tensor.output)
            tensor.buffer, tensor.state = tensor.output, "materialized"
            return
        if (tensor.widens is not None and tensor.widens.size <= PANEL_ELEMENTS
                and any(isinstance(c, ReduceOp) for c in tensor.consumers)):
            # a small 16-bit weight of a contraction is widened once per call (no more
            # scratch than one panel of WidenGemmOperands), not at each of its many loads
            self._materialize(tensor)
            return
        probe = tuple(tir.TVar(f"probe{k}") for k in range(len(tensor.shape)))
        self.touch_stack.append({})  # a probe build must not fuse or materialize anything
        try:
            size, costly = expr_cost(tensor.desc.fcompute(probe), MAX_INLINE_SIZE)
        finally:
            self.touch_stack.pop()
        expensive = costly or size >= CHEAP_SIZE
        depth = 1 + max((p.inline_depth for p in tensor.producers if p.state == "inline"), default=0)
        if size >= MAX_INLINE_SIZE or depth > MAX_INLINE_DEPTH or (tensor.uses > 1 and expensive):
            self._materialize(tensor)
        else:
            tensor.state, tensor.inline_depth = "inline", depth

    def _place_reduce(self, tensor: _Tensor) -> None:
        if tensor.output is not None:
            self._emit_reduce(tensor, tensor.output)
            tensor.buffer, tensor.state = tensor.output, "materialized"
        elif tensor.uses == 1 and isinstance(tensor.consumers[0], ComputeOp):
            tensor.state = "pending"  # wait for the consumer's loop nest: fuse into it
        else:
            self._materialize(tensor)

    def _materialize(self, tensor: _Tensor) -> None:
        buffer = self.new_buffer(tensor.name.replace("nn.", ""), tensor.shape, tensor.dtype)
        self.allocations.append(buffer)
        if isinstance(tensor.desc, ReduceOp):
            self._emit_reduce(tensor, buffer)
        else:
            self._emit_compute(tensor, buffer)
        tensor.buffer, tensor.state = buffer, "materialized"

    def load(self, tensor: _Tensor, indices: tuple) -> tir.PrimExpr:
        """What a consumer's expression reads from ``tensor`` at ``indices``."""
        if tensor.state == "materialized":
            return tir.BufferLoad(tensor.buffer, indices)
        if tensor.state == "inline":
            return tensor.desc.fcompute(indices)
        if tensor.state in ("pending", "fused"):
            record = self.touch_stack[-1] if self.touch_stack else None
            if record is None:
                raise IRError(f"LowerToPrimFunc: internal error: {tensor.name} read outside a loop nest")
            acc, reads = record.setdefault(tensor, (local_scalar("acc", tensor.dtype), []))
            reads.append(indices)
            finalize = tensor.desc.finalize
            return acc.load() if finalize is None else finalize(acc.load(), indices)
        raise IRError(f"LowerToPrimFunc: internal error: {tensor.name} read before it was placed "
                      f"(state {tensor.state})")

    def _build(self, make: Callable[[], Any]) -> tuple[Any, dict]:
        self.touch_stack.append({})
        try:
            result = make()
        finally:
            touches = self.touch_stack.pop()
        return result, touches

    def _build_materialized(self, make: Callable[[], Any]) -> Any:
        """``make()`` with every pending reduction it reads materialized first."""
        result, touches = self._build(make)
        if not touches:
            return result
        for pending in touches:
            self._materialize(pending)
        result, touches = self._build(make)
        assert not touches, "a materialized reduction is still pending"
        return result

    def _emit_compute(self, tensor: _Tensor, buffer: tir.Buffer) -> None:
        loop_vars = self._loop_vars("i", len(tensor.shape))
        value, touches = self._build(lambda: tensor.desc.fcompute(loop_vars))
        fused = self._fusable(tensor, loop_vars, touches)
        if fused is not None and fused.gemm is not None and fused.dtype == buffer.dtype:
            self._emit_gemm_in_place(tensor, fused, buffer)
            return
        if fused is not None and fused.gemm is None:
            acc = touches[fused][0]
            reduce_nest = self._reduce_into(fused, acc, loop_vars)
            store = tir.BufferStore(buffer, value, loop_vars)
            fused.state = "fused"
            nest = tir.Allocate(acc, seq(*reduce_nest, store))
            self.stmts.append(self._loops(loop_vars, tensor.shape, nest))
            return
        if touches:
            for pending in touches:
                self._materialize(pending)
            value = self._build_materialized(lambda: tensor.desc.fcompute(loop_vars))
        # a layout change reads some input transposed: walk it in tiles that stay in cache
        store = tir.BufferStore(buffer, value, loop_vars)
        self.stmts.append(elementwise_nest(loop_vars, tensor.shape, store, self.new_buffer))

    def _fusable(self, tensor: _Tensor, loop_vars: tuple, touches: dict) -> _Tensor | None:
        """The one pending reduction ``tensor``'s expression reads exactly at its own loop
        indices (so the reduction can run inside this nest), or None."""
        if len(touches) != 1:
            return None
        (pending, (_, reads)), = touches.items()
        if pending.state != "pending" or pending.shape != tensor.shape:
            return None
        for indices in reads:
            for index, loop_var, extent in zip(indices, loop_vars, tensor.shape):
                zero = isinstance(index, tir.IntImm) and index.value == 0
                same = index is loop_var or (extent == 1 and zero)
                if not same:
                    return None
        return pending

    def _reduce_into(self, tensor: _Tensor, acc: tir.Buffer, out_vars: tuple) -> list[tir.Stmt]:
        """``acc = init; for r...: acc = combine(acc, body)`` for one output index."""
        desc: ReduceOp = tensor.desc
        red_vars = self._loop_vars("r", len(desc.reduce_extents))
        body = self._build_materialized(lambda: desc.fbody(out_vars, red_vars))
        update = tir.BufferStore(acc, desc.combine(acc.load(), body), ())
        loops = self._loops(red_vars, desc.reduce_extents, update, unroll_steps=MAX_UNROLLED_REDUCTION_STEPS)
        return [tir.BufferStore(acc, desc.init(), ()), loops]

    def _emit_reduce(self, tensor: _Tensor, buffer: tir.Buffer) -> None:
        if tensor.gemm is not None:
            self._emit_gemm(tensor, buffer)
            return
        desc: ReduceOp = tensor.desc
        out_vars = self._loop_vars("i", len(tensor.shape))
        combined = self._combined_taps(desc, out_vars)
        if combined is not None:
            # a small window (a pool, LRN) as one expression per output element: the store
            # is then straight-line and the loop over the output's innermost axis
            # vectorizes (the channels of an NHWC pool); same combines, same order
            final = combined if desc.finalize is None else desc.finalize(combined, out_vars)
            self.stmts.append(self._loops(out_vars, tensor.shape, tir.BufferStore(buffer, final, out_vars)))
            return
        if self._emit_channel_reduce(tensor, buffer, out_vars):
            return
        acc = local_scalar("acc", tensor.dtype)
        nest = self._reduce_into(tensor, acc, out_vars)
        final = acc.load() if desc.finalize is None else desc.finalize(acc.load(), out_vars)
        store = tir.BufferStore(buffer, final, out_vars)
        self.stmts.append(self._loops(out_vars, tensor.shape, tir.Allocate(acc, seq(*nest, store))))

    def _emit_channel_reduce(self, tensor: _Tensor, buffer: tir.Buffer, out_vars: tuple) -> bool:
        """A long reduction over outer axes of data whose innermost axis is the output's
        (a global pool or a mean over H, W of NHWC data) as a block of accumulators, one
        per output channel: the reduction loops run outside the loop over the block's
        channels, which reads contiguous input and vectorizes. Each output still combines
        its terms in the same order. One accumulator per output, with the reduction
        loops inside, read the input at a stride of the channels and waited on each add
        (EfficientNet's squeeze-excite pools: 9% of the model). False when it does not
        apply (then the caller emits that form)."""
        desc: ReduceOp = tensor.desc
        if not all(map(is_static_extent, (*tensor.shape[-1:], *desc.reduce_extents))):
            return False  # symbolic sizes: the one-accumulator form
        channels = int(tensor.shape[-1]) if tensor.shape else 0
        steps = math.prod(int(e) for e in desc.reduce_extents) if desc.reduce_extents else 0
        if channels < MIN_CHANNEL_REDUCE_BLOCK or steps <= MAX_UNROLLED_REDUCTION_STEPS:
            return False
        red_vars = self._loop_vars("r", len(desc.reduce_extents))
        probe = self._build_materialized(lambda: desc.fbody(out_vars, red_vars))
        if not _contiguous_along(probe, out_vars[-1]):
            return False
        block = channel_block(channels)
        chunk, lane = tir.TVar("cb"), tir.TVar("ci")
        channel = chunk * tir.IntImm(block) + lane if block < channels else lane
        indices = (*out_vars[:-1], channel)
        acc = tir.Buffer("acc", (block,), tensor.dtype, "local")
        body = self._build_materialized(lambda: desc.fbody(indices, red_vars))
        update = tir.BufferStore(acc, desc.combine(acc.load(lane), body), (lane,))
        final = acc.load(lane) if desc.finalize is None else desc.finalize(acc.load(lane), indices)
        lanes = functools.partial(self._loops, (lane,), (block,))
        nest = seq(lanes(tir.BufferStore(acc, desc.init(), (lane,))),
                   self._loops(red_vars, desc.reduce_extents, lanes(update)),
                   lanes(tir.BufferStore(buffer, final, indices)))
        chunks = tir.For(chunk, tir.IntImm(0), tir.IntImm(channels // block), tir.ForKind.SERIAL,
                         tir.Allocate(acc, nest))
        self.stmts.append(self._loops(out_vars[:-1], tensor.shape[:-1], chunks))
        return True

    def _combined_taps(self, desc: ReduceOp, out_vars: tuple) -> tir.PrimExpr | None:
        """``combine(...combine(init, body(r0))..., body(rk))`` over every reduction index
        in loop order, when there are at most MAX_UNROLLED_REDUCTION_STEPS of them."""
        if not all(map(is_static_extent, desc.reduce_extents)):
            return None
        extents = [int(e) for e in desc.reduce_extents]
        if not out_vars or not extents or math.prod(extents) > MAX_UNROLLED_REDUCTION_STEPS:
            return None
        value = desc.init()
        for taps in itertools.product(*(range(e) for e in extents)):
            red = tuple(tir.IntImm(t) for t in taps)
            value = desc.combine(value, self._build_materialized(lambda red=red: desc.fbody(out_vars, red)))
        # only where every load is contiguous (or constant) along the innermost output
        # axis; a contraction (dense) keeps its reduction loop reading k contiguously
        return value if _contiguous_along(value, out_vars[-1]) else None

    def _emit_gemm_in_place(self, tensor: _Tensor, contraction: _Tensor, buffer: tir.Buffer) -> None:
        """``tensor`` (elementwise over ``contraction``, read at its own indices) as an
        epilogue of the GEMMs: they write ``buffer``, and the epilogue rewrites each
        block of it in place right after its GEMM, while the block is in cache (no
        intermediate buffer, no second pass over memory)."""
        contraction.buffer, contraction.state = buffer, "materialized"

        def epilogue(box: Sequence[tuple[tir.PrimExpr, int]]) -> tir.Stmt:
            loop_vars, extents, indices = [], [], []
            for axis, (start, extent) in enumerate(box):
                if extent == 1:
                    indices.append(start)
                    continue
                loop_var = tir.TVar(f"e{axis}")
                loop_vars.append(loop_var)
                extents.append(extent)
                zero_start = isinstance(start, tir.IntImm) and start.value == 0
                indices.append(loop_var if zero_start else start + loop_var)
            value = self._build_materialized(lambda: tensor.desc.fcompute(tuple(indices)))
            return self._loops(loop_vars, extents, tir.BufferStore(buffer, value, tuple(indices)))

        self._emit_gemm(contraction, buffer, epilogue)

    def _emit_gemm(self, tensor: _Tensor, buffer: tir.Buffer, epilogue: Epilogue | None = None) -> None:
        inputs = []
        for arg in tensor.gemm_inputs:
            if isinstance(arg, BufferHandle):
                inputs.append(arg.buffer)
                continue
            if arg.widens is not None and arg.state == "inline":
                inputs.append(arg.widens)  # the 16-bit weight itself: no float32 copy of it
                continue
            winograd_plan = getattr(tensor.gemm, "kind", "") == "winograd"
            if arg.winograd is not None and arg.state == "inline" and winograd_plan:
                inputs.append(arg.winograd)  # the weight's transform itself
                continue
            if (arg.panels is not None and arg.state == "inline"
                    and (tensor.gemm.panels == arg.panels.shape[-1] or tensor.gemm.takes_panels)):
                inputs.append(arg.panels)  # the weight's panels themselves
                continue
            if arg.state != "materialized":  # BLAS needs the operand in memory
                self._materialize(arg)
            inputs.append(arg.buffer)
        stmt, scratch = tensor.gemm.emit(inputs, buffer, self.new_buffer, epilogue)
        self.allocations.extend(scratch)
        self.stmts.append(stmt)

    def _emit_extern(self, group: _Extern) -> None:
        buffers = []
        for tensor in group.tensors:
            if tensor.output is None:
                tensor.buffer = self.new_buffer(tensor.name.replace("nn.", ""), tensor.shape, tensor.dtype)
                self.allocations.append(tensor.buffer)
            else:
                tensor.buffer = tensor.output
            buffers.append(tensor.buffer)
            tensor.state = "materialized"
        self.stmts.append(self._build_materialized(lambda: group.desc.build(buffers)))
        group.emitted = True

    @staticmethod
    def _loop_vars(prefix: str, count: int) -> tuple[tir.TVar, ...]:
        return tuple(tir.TVar(f"{prefix}{k}") for k in range(count))

    @staticmethod
    def _loops(loop_vars: Sequence[tir.TVar], extents: Sequence[int], body: tir.Stmt,
               unroll_steps: int = 0) -> tir.Stmt:
        """The loop nest over ``extents`` around ``body``; the innermost loops whose total
        steps stay within ``unroll_steps`` are marked for unrolling."""
        steps = 1
        for loop_var, extent in zip(reversed(tuple(loop_vars)), reversed(tuple(extents))):
            static = is_static_extent(extent)
            steps = steps * int(extent) if static else unroll_steps + 1  # a symbolic loop: never unrolled
            kind = tir.ForKind.UNROLLED if steps <= unroll_steps else tir.ForKind.SERIAL
            unroll_steps = unroll_steps if kind is tir.ForKind.UNROLLED else 0  # only innermost ones
            body = tir.For(loop_var, tir.IntImm(0), tir.as_prim(extent), kind, body)
        return body

    # -- phase 3: the function

    def _finish(self, result: Any) -> tir.PrimFunc:
        # outputs not written by their producer's nest: parameters, constants, a tensor
        # returned twice; copied in at the end
        for leaf, buffer in zip(flatten_tuples(result), self.outputs):
            if isinstance(leaf, _Tensor) and leaf.output is buffer:
                continue
            loop_vars = self._loop_vars("i", len(buffer.shape))
            copy = tir.BufferStore(buffer, leaf.load(*loop_vars), loop_vars)
            self.stmts.append(self._loops(loop_vars, buffer.shape, copy))
        body: tir.Stmt = seq(*self.stmts) if self.stmts else tir.SeqStmt(())
        for buffer in reversed(self.allocations):
            body = tir.Allocate(buffer, body)
        attrs = {"global_symbol": self.symbol, "num_inputs": len(self.inputs),
                 "op_names": tuple(self.op_names)}
        for library in kernel_libraries(body):
            attrs[library.attr] = True  # LinkLibrary links it then (uses_blas, uses_conv_runtime)
        dims = self.sizes.dims()
        if dims:
            attrs["size_names"] = self.sizes.names()
            attrs["size_sources"] = self._size_sources()
            # the outputs' graph-level shapes (the buffers get flattened): what the host
            # types the results with, in the caller's dimensions
            attrs["output_shapes"] = tuple(tuple(leaf.shape) for leaf in flatten_tuples(result))
        return tir.PrimFunc([*self.inputs, *self.outputs], body, attrs, dims)

    def _size_sources(self) -> tuple[tuple[int, int], ...]:
        """Per size variable (in ``dims`` order): (input buffer, axis) of an input whose
        graph-level shape has the dimension bare there, or (-1, -1): where the caller
        finds the size's value."""
        found: dict[str, tuple[int, int]] = {}
        for index, shape in enumerate(self.input_shapes):
            for axis, dim in enumerate(shape):
                if isinstance(dim, DimVar):
                    found.setdefault(dim.name, (index, axis))
        return tuple(found.get(name, (-1, -1)) for name in self.sizes.names())


def plan_kernel(op_name: str, attrs: Attrs, shapes: Sequence[tuple[int, ...]], dtype: str,
                out_shape: tuple[int, ...], use_blas: bool) -> GemmPlan | ConvPlan | None:
    """The kernel that computes a call of ``op_name`` (a convolution's per shape, then a
    contraction's BLAS plan), or None for the generic loop nest. The PanelWeights pass
    asks it too, to store in panels exactly the weights the lowering's kernels read so."""
    plan = None
    if op_name == "nn.conv2d":  # the kernel per convolution shape (compute.conv_plan)
        plan = plan_conv2d(attrs, shapes, dtype, out_shape, use_blas)
    if plan is None and use_blas:
        plan = plan_contraction(op_name, attrs, shapes, dtype, out_shape)
    return plan


def uses_blas(ctx: PassContext | None = None) -> bool:
    """Whether the lowering computes contractions with BLAS: config ``codegen.blas``
    (default on) and the library installed."""
    ctx = PassContext.current() if ctx is None else ctx
    return bool(ctx.get_config("codegen.blas", True)) and blas_library() is not None


def lower_primitive_function(func: Function, name: str, use_blas: bool | None = None) -> tir.PrimFunc:
    """Lower one primitive function (a fused group) to a PrimFunc whose C name is
    ``c_identifier(name)``. ``use_blas``: compute large float32 contractions with BLAS
    calls (:mod:`passinfra.codegen.gemm`); None means config ``codegen.blas`` (default:
    on when the BLAS library is installed)."""
    if not isinstance(func, Function):
        raise IRError(f"LowerToPrimFunc: {name!r} is a {type(func).__name__}, not a graph-level Function")
    use_blas = uses_blas() if use_blas is None else use_blas and blas_library() is not None
    lowerer = _Lowerer(func, c_identifier(name), use_blas)
    with size_scope(lowerer.sizes):
        try:
            return lowerer.run()
        except (TypeError, DimError) as error:
            types = [p.type_annotation or p._checked_type for p in func.params]
            types.append(func.ret_type or func.body._checked_type)
            symbolic = [ty for ty in types if ty is not None and not ty.is_static]
            if not symbolic and not lowerer.sizes.variables:
                raise
            # a compute rule or kernel plan that still needs a static size: say which
            # function, its ops and its sizes, instead of a TypeError from deep inside
            ops = ", ".join(dict.fromkeys(lowerer.op_names)) or "no ops"
            sizes = ", ".join(sorted({v.name for ty in symbolic for v in ty.dim_vars}
                                     | {v.name for v in lowerer.sizes.variables}))
            raise SymbolicSizeError(
                f"LowerToPrimFunc: function {name!r} ({ops}) cannot be compiled for symbolic sizes ({sizes}) "
                f"yet: {error}; give static sizes (raypass compile --shapes NAME=D0,D1,...)") from error

"""Host code: the graph-level ``main`` (after FuseOps and lowering) as a C function.

After lowering, ``main`` is dataflow over kernel calls: calls of PrimFunc GlobalVars,
Tuples, TupleGetItems, Constants (weights), its parameters, and Let bindings of those.
:func:`analyze_main` turns it into a :class:`HostProgram`: numbered tensors (inputs,
weights, kernel outputs) and the kernel calls in evaluation order. Anything else (an
If, a closure, a direct op call) is rejected with an error naming it.

Two module passes build on it (:mod:`passinfra.codegen.passes.plan_memory` and
:mod:`passinfra.codegen.passes.host_codegen`; this module is the machinery they share
with the tests and the weights stream). Neither changes the IR: what they make are typed
build products, recorded in the :class:`~passinfra.codegen.artifacts.LinkProducts` of the
link step running them (see :mod:`passinfra.codegen.artifacts`).

- ``PlanMemory`` assigns every intermediate tensor an offset in one shared workspace
  (:func:`plan_memory`), reusing memory by liveness (greedy by size, first fit, 64-byte
  aligned): a :class:`~passinfra.codegen.artifacts.MemoryPlan` with the offsets, the
  planned peak (``workspace_bytes``) and the sum of all intermediates (``naive_bytes``).
- ``HostCodegen`` emits (:func:`render_host`) and compiles ``int raypass_main(void**
  inputs, void** outputs, void* weights, void* workspace)``, which calls each kernel's
  ``<sym>_packed`` entry in order (returning ``k + 1`` if kernel ``k`` fails), driven by
  constant tables of entry points and argument locations. Weights go to a binary blob
  (64-byte aligned offsets, :func:`pack_weights`), never into C. Kernel results that are
  outputs of ``main`` are written straight into the caller's output arrays. It also makes
  the runtime metadata (:func:`runtime_metadata`). Every host can also time its kernel
  calls in the model (``raypass_profile``, :mod:`passinfra.runtime.profile`).

A main with symbolic dimensions (its parameter types have :mod:`passinfra.ir.dims`
dimensions) calls kernels compiled for symbolic sizes (``PrimFunc.dims``): the analysis
gives each such call the main-level value of each kernel size (``KernelCall.sizes``), the
planner fixes the workspace's layout once and leaves the offsets to the host, which
computes them from the sizes of each call (:func:`_plan_symbolic`), and the host takes the
sizes as a fifth argument, ``const int64_t* dims``, with ``raypass_workspace_bytes(dims)``
next to it (:func:`_render_symbolic_host`). The runtime binds the sizes from the inputs.
Static mains get exactly what they always got.

Both passes start from the same analysis of ``main``. Inside one link step
(:func:`shared_host_analysis`, entered by ``passinfra.build.run_link``) it is made once
and reused while ``main`` and every kernel it calls are the very objects it was made
from (immutable IR: the same objects give the same program); outside one each pass
analyzes for itself.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from passinfra.codegen.artifacts import MemoryPlan
from passinfra.codegen.c_renderer import dtype_bytes, sanitize_identifier
from passinfra.codegen.lower import SPECIALIZATIONS_ATTR, flatten_tuples
from passinfra.codegen.object_cache import count
from passinfra.errors import IRError
from passinfra.ir.dims import (
    Dim,
    DimError,
    DimVar,
    SymDim,
    dim_text,
    dim_to_json,
    evaluate,
    exact_div,
    free_vars,
    placeholder,
    prove_equal,
    sorted_vars,
    substitute,
)
from passinfra.ir.expr import (
    BaseFunc,
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    Let,
    Tuple,
    TupleGetItem,
    Var,
)
from passinfra.ir.functor import iter_post_order
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op
from passinfra.ir.types import TensorType, TupleType, Type
from passinfra.runtime.profile import PROFILE_SYMBOL
from passinfra.runtime.weights import PackedWeights
from passinfra.scoped import pushed
from passinfra.tir import PrimFunc
from passinfra.tir.sizes import prim_to_dim

ALIGNMENT = 64
HOST_SYMBOL = "raypass_main"
# Every host can time its kernel calls inside the model, where each runs on the data and
# caches the calls before it left (a kernel timed alone runs warm). The pointer is this
# thread's, so profiling one thread's runs never counts another's; unset, a call costs
# one test of it. Its TLS model is the one a shared object may always use, whatever the
# user's codegen.cflags leave out (without -fPIC gcc picks one the linker rejects).
_PROFILE_PRELUDE = [
    "/* in-model profiling: raypass_profile(ns) makes this thread's runs add each call's time to ns */",
    "static _Thread_local int64_t* rp_profile_ns __attribute__((tls_model(\"global-dynamic\")));",
    f"void {PROFILE_SYMBOL}(int64_t* ns) {{ rp_profile_ns = ns; }}",
    "static int64_t rp_now_ns(void) {",
    "  struct timespec t;",
    "  clock_gettime(CLOCK_MONOTONIC, &t);",
    "  return (int64_t)t.tv_sec * 1000000000 + (int64_t)t.tv_nsec;",
    "}",
]
# clock_gettime is POSIX, which -std=c11 hides unless asked for
_HOST_INCLUDES = ["#define _POSIX_C_SOURCE 199309L", "#include <stdint.h>", "#include <string.h>",
                  "#include <time.h>"]

# a reference to a value of main: a tensor id, or a (nested) tuple of references
Ref = Any


@dataclass(frozen=True)
class TensorInfo:
    kind: str  # "input" | "weight" | "intermediate"
    shape: tuple[Dim, ...]  # ints, or main-level symbolic dimensions
    dtype: str
    index: int  # position among inputs / weights / intermediates
    nbytes: Dim  # an int when the shape is static


@dataclass(frozen=True)
class KernelVariant:
    """A specialized copy of a call's kernel (SpecializeKernels): called instead of it when
    each main-level size in ``when`` has its value."""

    symbol: str
    when: tuple[tuple[Dim, int], ...]
    sizes: tuple[Dim, ...]  # its own size variables' values, as ``KernelCall.sizes``


@dataclass(frozen=True)
class KernelCall:
    symbol: str
    args: tuple[int, ...]  # tensor ids read
    outputs: tuple[int, ...]  # tensor ids written
    # a kernel compiled for symbolic sizes: the main-level value of each of its size
    # variables (``func.dims``, in order), passed after the buffers; () for a static kernel
    sizes: tuple[Dim, ...] = ()
    # specialized copies tried in order before the kernel itself (none without them)
    variants: tuple[KernelVariant, ...] = ()


@dataclass
class HostProgram:
    tensors: list[TensorInfo] = field(default_factory=list)
    calls: list[KernelCall] = field(default_factory=list)
    input_names: list[str] = field(default_factory=list)
    input_ids: list[int] = field(default_factory=list)
    weights: list[np.ndarray] = field(default_factory=list)
    result: Ref = None
    # main's symbolic dimensions (those of its parameters' types), in canonical order: the
    # order of the ``dims`` array the host entry of a symbolic main takes
    dim_vars: list[DimVar] = field(default_factory=list)
    # results of kernels with symbolic sizes whose ``shape`` is their (flattened) output
    # buffers', not a graph-level shape: only their element counts mean anything
    flat: set[int] = field(default_factory=set)

    def add_tensor(self, kind: str, shape: tuple[Dim, ...], dtype: str, index: int) -> int:
        shape = tuple(d if isinstance(d, SymDim) else int(d) for d in shape)
        self.tensors.append(TensorInfo(kind, shape, dtype, index, math.prod(shape) * dtype_bytes(dtype)))
        return len(self.tensors) - 1

    @property
    def is_symbolic(self) -> bool:
        """Whether main has symbolic dimensions or calls a kernel compiled for symbolic
        sizes: its host entry then takes the sizes (:func:`render_host`)."""
        return bool(self.dim_vars) or any(call.sizes for call in self.calls)

    @property
    def output_ids(self) -> list[int]:
        return flatten_tuples(self.result)

    def output_structure(self) -> Any:
        """The result's nesting with tensors replaced by output positions."""
        counter = iter(range(len(self.output_ids)))
        return map_ref(self.result, lambda _tensor: next(counter))


def map_ref(ref: Ref, fn: Any) -> Any:
    # tuples nest as deep as the program's tuple types, which are shallow
    if isinstance(ref, tuple):
        return [map_ref(r, fn) for r in ref]
    return fn(ref)


def _tensor_type(ty: Any, what: str) -> TensorType:
    if isinstance(ty, TensorType):
        return ty
    if isinstance(ty, TupleType):
        raise IRError(f"host codegen: {what} has tuple type {ty}; only tensor parameters are supported")
    raise IRError(f"host codegen: the type of {what} is unknown; annotate it or run InferType first")


def main_weights(main: Function) -> list[np.ndarray]:
    """``main``'s weights in the order the host program lays them out: each constant
    once, by first use in evaluation order (as :func:`analyze_main` meets them)."""
    seen: set[int] = set()
    weights: list[np.ndarray] = []
    for node in iter_post_order(main.body):
        if isinstance(node, Constant) and id(node) not in seen:
            seen.add(id(node))
            weights.append(np.ascontiguousarray(node.data))
    return weights


def analyze_main(mod: IRModule) -> HostProgram:
    """The kernel-call program of ``mod["main"]`` (see the module docstring)."""
    return _analyze(mod)[0]


def _analyze(mod: IRModule) -> tuple[HostProgram, dict[GlobalVar, _KernelSignature]]:
    """The program, and the kernel signatures it was made from (keyed by callee)."""
    count("host_analyses")
    main = mod["main"]
    if not isinstance(main, Function):
        raise IRError(f"host codegen: 'main' must be a graph-level Function, got {type(main).__name__}")
    program = HostProgram()
    refs: dict[Expr, Ref] = {}
    for position, param in enumerate(main.params):
        ty = _tensor_type(param.type_annotation or param._checked_type, f"parameter {param.name_hint!r}")
        tensor = program.add_tensor("input", ty.shape, ty.dtype, position)
        refs[param] = tensor
        program.input_names.append(param.name_hint)
        program.input_ids.append(tensor)
    program.dim_vars = sorted_vars(
        var for t in program.input_ids for dim in program.tensors[t].shape for var in free_vars(dim))

    nodes = list(iter_post_order(main.body))
    let_values = {node.var: node.value for node in nodes if isinstance(node, Let)}
    weight_ids: dict[int, int] = {}
    signatures: dict[GlobalVar, _KernelSignature] = {}

    def ref_of(expr: Expr) -> Ref:
        # a chain of Let-bound variables resolves iteratively
        while isinstance(expr, Var) and expr not in refs:
            if expr not in let_values:
                raise IRError(f"host codegen: variable {expr.name_hint!r} is not bound in main")
            expr = let_values[expr]
        return refs[expr]

    intermediates = 0
    for node in nodes:
        if isinstance(node, (Var, GlobalVar, Op)):
            continue  # resolved by their users
        if isinstance(node, Constant):
            if id(node) not in weight_ids:
                weight = program.add_tensor("weight", node.shape, node.dtype, len(program.weights))
                weight_ids[id(node)] = weight
                program.weights.append(np.ascontiguousarray(node.data))
            refs[node] = weight_ids[id(node)]
        elif isinstance(node, Tuple):
            refs[node] = tuple(ref_of(f) for f in node.fields)
        elif isinstance(node, TupleGetItem):
            value = ref_of(node.tuple_value)
            if not isinstance(value, tuple) or not 0 <= node.index < len(value):
                raise IRError(f"host codegen: TupleGetItem index {node.index} on a non-tuple or short value")
            refs[node] = value[node.index]
        elif isinstance(node, Let):
            refs[node] = ref_of(node.body)
        elif isinstance(node, Call):
            refs[node], intermediates = _kernel_call(mod, node, ref_of, program, intermediates, signatures)
        else:
            raise IRError(
                f"host codegen supports straight-line dataflow in main (kernel calls, tuples, constants, "
                f"lets); it cannot handle {type(node).__name__}"
            )
    program.result = ref_of(main.body)
    _check_dims_known(program)
    return program, signatures


def _check_dims_known(program: HostProgram) -> None:
    """Every symbolic size the host computes must follow from main's inputs."""
    known = set(program.dim_vars)
    for info in program.tensors:
        for dim in info.shape:
            for var in free_vars(dim):
                if var not in known:
                    raise IRError(f"host codegen: dimension {dim_text(var)} of a {info.kind} tensor "
                                  f"{info.dtype}[{', '.join(map(dim_text, info.shape))}] is not given by any "
                                  "parameter of main")
    for call in program.calls:
        for size in call.sizes:
            for var in free_vars(size):
                if var not in known:
                    raise IRError(f"host codegen: size {dim_text(size)} of kernel {call.symbol} uses "
                                  f"dimension {dim_text(var)}, which no parameter of main gives")


@dataclass(frozen=True)
class _KernelSignature:
    symbol: str
    num_inputs: int
    input_specs: tuple[tuple[str, int], ...]  # (dtype, nbytes) per input buffer
    func: PrimFunc


def _signature(mod: IRModule, callee: Expr, cache: dict[GlobalVar, _KernelSignature]) -> _KernelSignature:
    if isinstance(callee, GlobalVar) and callee in cache:
        return cache[callee]
    if isinstance(callee, Op):
        raise IRError(f"host codegen: main calls op {callee.name!r} directly; run FuseOps and lowering first")
    if not isinstance(callee, GlobalVar):
        raise IRError(
            f"host codegen: main calls a {type(callee).__name__}; only PrimFunc GlobalVars are supported"
        )
    func = mod[callee]
    if not isinstance(func, PrimFunc):
        raise IRError(f"host codegen: main calls @{callee.name_hint}, which is not lowered to a PrimFunc")
    num_inputs = int(func.attrs.get("num_inputs", len(func.params)))
    specs = tuple((b.dtype, b.size * dtype_bytes(b.dtype)) for b in func.params[:num_inputs])
    symbol = sanitize_identifier(str(func.attrs.get("global_symbol", callee.name_hint)))
    cache[callee] = _KernelSignature(symbol, num_inputs, specs, func)
    return cache[callee]


def _kernel_call(
    mod: IRModule,
    call: Call,
    ref_of: Any,
    program: HostProgram,
    intermediates: int,
    cache: dict[GlobalVar, _KernelSignature],
) -> tuple[Ref, int]:
    sig = _signature(mod, call.op, cache)
    name = call.op.name_hint  # type: ignore[attr-defined]
    args = [t for arg in call.args for t in flatten_tuples(ref_of(arg))]
    if len(args) != sig.num_inputs:
        raise IRError(
            f"host codegen: @{name} takes {sig.num_inputs} input buffers, main passes {len(args)} tensors"
        )
    kernel_dims = tuple(getattr(sig.func, "dims", ()))
    sizes = _kernel_sizes(sig.func, name, args, program) if kernel_dims else ()
    for position, (tensor, spec) in enumerate(zip(args, sig.input_specs)):
        info = program.tensors[tensor]
        buffer = sig.func.params[position]
        matches = (
            _symbolic_input_matches(info, buffer, program, kernel_dims, sizes)
            if kernel_dims
            else (info.dtype, info.nbytes) == spec
        )
        if not matches:
            raise IRError(
                f"host codegen: argument {position} of @{name} is {info.dtype}{_shape_text(info.shape)}, "
                f"but the kernel's buffer {buffer.name!r} is {buffer.dtype}{list(buffer.shape)}"
            )
    outputs = []
    values = {id(var): size for var, size in zip(kernel_dims, sizes)}
    typed, types = _output_types(call, sig.func.params[sig.num_inputs :], name, values)
    if not typed and kernel_dims:
        recorded = _recorded_output_shapes(sig.func, sizes, [dtype for _, dtype in types])
        if recorded is not None:
            typed, types = True, recorded
    for shape, dtype in types:
        outputs.append(program.add_tensor("intermediate", shape, dtype, intermediates))
        if not typed and kernel_dims:
            program.flat.add(outputs[-1])
        intermediates += 1
    variants = _variants(mod, sig.func, name, args, program, sizes, cache) if kernel_dims else ()
    program.calls.append(KernelCall(sig.symbol, tuple(args), tuple(outputs), sizes, variants))
    ref: Ref = outputs[0] if len(outputs) == 1 else tuple(outputs)
    return ref, intermediates


def _variants(mod: IRModule, func: PrimFunc, name: str, args: list[int], program: HostProgram,
              sizes: tuple[Dim, ...], cache: dict[GlobalVar, _KernelSignature]) -> tuple[KernelVariant, ...]:
    """The specialized copies of a symbolic kernel at this call (its ``Specializations``
    attr, from SpecializeKernels): each with the condition on the call's sizes under which
    it computes what the kernel computes, and its own sizes."""
    listed = func.attrs.get(SPECIALIZATIONS_ATTR)
    if not listed:
        return ()
    names = _attr_tuple(func, "size_names") or ()
    value_of = dict(zip(names, sizes))
    found = []
    for copy_name, binding in listed:
        when = []
        for dim, size in binding:
            if dim not in value_of:
                raise IRError(f"host codegen: @{name} lists specialization @{copy_name} at {dim} = {size}, "
                              f"but has no size {dim!r}")
            when.append((value_of[dim], int(size)))
        sig = _signature(mod, mod.get_global_var(copy_name), cache)
        own = _kernel_sizes(sig.func, copy_name, args, program) if tuple(sig.func.dims) else ()
        found.append(KernelVariant(sig.symbol, tuple(when), own))
    return tuple(found)


def _recorded_output_shapes(func: PrimFunc, sizes: tuple[Dim, ...],
                            dtypes: list[str]) -> list[tuple[tuple[Dim, ...], str]] | None:
    """The outputs' graph-level shapes the lowering recorded (attr ``output_shapes``, over
    the kernel's own dimensions), in main's dimensions at this call; None without them."""
    recorded = func.attrs.get("output_shapes")
    names = _attr_tuple(func, "size_names")
    if recorded is None or names is None or len(recorded) != len(dtypes):
        return None
    by_name = dict(zip(names, sizes))
    shapes = []
    for shape, dtype in zip(recorded, dtypes):
        mapping = {var: by_name[var.name] for dim in shape for var in free_vars(dim) if var.name in by_name}
        shapes.append((tuple(substitute(dim, mapping) for dim in shape), dtype))
    return shapes


def _output_types(
    call: Call, buffers: tuple, name: str = "", sizes: dict[int, Dim] | None = None
) -> tuple[bool, list[tuple[tuple[Dim, ...], str]]]:
    """Graph-level shapes of the outputs when the call's type is known (buffers may be
    flattened), else the buffers' own shapes; and whether they are the call's type.

    A kernel compiled for symbolic sizes has buffer shapes over its own size variables:
    the call's type is in main's dimensions already; without one, the buffers' shapes are
    rewritten with each size variable replaced by its value at this call (``sizes``:
    ``id(variable)`` -> main-level dimension), which gives the right byte counts though
    the buffers may be flattened."""
    ty = call._checked_type
    fields = list(ty.fields) if isinstance(ty, TupleType) else [ty]
    symbolic = not all(type(d) is int for b in buffers for d in b.shape)
    if ty is not None and len(fields) == len(buffers) and all(isinstance(f, TensorType) for f in fields):
        typed = [(tuple(f.shape), f.dtype) for f in fields]
        if symbolic or not all(f.is_static for f in fields):
            if all(d == b.dtype for (_, d), b in zip(typed, buffers)):
                return True, typed
        else:
            sizes_match = all(math.prod(s) == b.size and d == b.dtype for (s, d), b in zip(typed, buffers))
            if sizes_match:
                return True, typed
    if not symbolic:
        return False, [(b.shape, b.dtype) for b in buffers]
    shapes = []
    for buffer in buffers:
        shape = tuple(_tir_to_dim(d, sizes or {}) for d in buffer.shape)
        if any(d is None for d in shape):
            raise IRError(f"host codegen: cannot compute the shape {list(buffer.shape)} of @{name}'s output "
                          f"buffer {buffer.name!r} from the sizes of the call")
        shapes.append((shape, buffer.dtype))
    return False, shapes


def _tir_to_dim(expr: Any, values: dict[int, Dim]) -> Dim | None:
    """A buffer extent over a kernel's size variables as a graph-level dimension, each
    variable replaced by ``values[id(variable)]`` (:func:`~passinfra.tir.sizes.prim_to_dim`)."""
    if type(expr) is int:
        return expr
    return prim_to_dim(expr, lambda var: values.get(id(var)))


def _shape_text(shape: tuple[Dim, ...]) -> str:
    if all(type(d) is int for d in shape):
        return str(list(shape))
    return f"[{', '.join(dim_text(d) for d in shape)}]"


def _attr_tuple(func: PrimFunc, key: str) -> tuple | None:
    value = func.attrs.get(key)
    if value is None:
        return None
    return tuple(tuple(v) if isinstance(v, (list, tuple)) else v for v in value)


def _kernel_sizes(func: PrimFunc, name: str, args: list[int], program: HostProgram) -> tuple[Dim, ...]:
    """The main-level value of each size variable of a kernel compiled for symbolic sizes.

    In this order: the argument's dimension its ``size_sources`` attr points at, when that
    argument's shape is graph-level (an input, a weight, a typed call's result); else
    solved from the element count of an input buffer whose size is linear in the one
    variable still unknown (kernel results in a lowered main are typed by their flattened
    buffers only); for a size no input has as a whole dimension (source ``(-1, -1)``),
    main's dimension of the name ``size_names`` gives it. A size none of these gives is an
    error naming the kernel and the size."""
    kernel_dims = tuple(func.dims)
    names = _attr_tuple(func, "size_names")
    sources = _attr_tuple(func, "size_sources")
    if names is None or len(names) != len(kernel_dims):
        raise IRError(f"host codegen: @{name} has {len(kernel_dims)} size variables but its size_names attr "
                      f"is {names!r}")
    if sources is None:
        sources = ((-1, -1),) * len(kernel_dims)
    if len(sources) != len(kernel_dims):
        raise IRError(f"host codegen: @{name} has {len(kernel_dims)} size variables but {len(sources)} "
                      "size_sources")
    resolved: dict[int, Dim] = {}
    for k, (index, axis) in enumerate(sources):
        if index < 0:
            continue
        if index >= len(args) or not 0 <= axis < len(program.tensors[args[index]].shape):
            if args[index:index + 1] and args[index] in program.flat:
                continue
            raise IRError(f"host codegen: size {names[k]!r} of @{name} comes from axis {axis} of input "
                          f"{index}, which the call does not have")
        if args[index] not in program.flat:
            resolved[k] = program.tensors[args[index]].shape[axis]
    by_name = {var.name: var for var in program.dim_vars}
    for k, (index, _) in enumerate(sources):
        if index < 0 and names[k] in by_name:
            resolved[k] = by_name[names[k]]
    _solve_sizes(func, args, program, resolved)
    guessed = [k for k, name_k in enumerate(names) if k not in resolved and name_k in by_name]
    for k in guessed:  # given by no typed input nor element count: main's dimension of that name
        resolved[k] = by_name[names[k]]
    missing = [k for k in range(len(kernel_dims)) if k not in resolved]
    if missing:
        k = missing[0]
        known = ", ".join(by_name) or "none"
        raise IRError(f"host codegen: cannot tell size {names[k]!r} ({kernel_dims[k].name}) of @{name} at "
                      f"this call: no input gives it as a whole dimension or by its size, and main's "
                      f"dimensions ({known}) have no such name")
    if guessed:
        _check_sizes(func, name, args, program, resolved, [names[k] for k in guessed])
    return tuple(resolved[k] for k in range(len(kernel_dims)))


def _check_sizes(func: PrimFunc, name: str, args: list[int], program: HostProgram, resolved: dict[int, Dim],
                 guessed: list[str]) -> None:
    """Sizes taken by name must give every input buffer exactly its argument's element
    count, as polynomials in main's dimensions (a kernel FuseOps shared between calls
    may name a size differently from this call): else an IRError, never a wrong size."""
    values = {id(var): resolved[k] for k, var in enumerate(func.dims)}
    num_inputs = int(func.attrs.get("num_inputs", len(func.params)))
    for buffer, tensor in zip(func.params[:num_inputs], args):
        count = _tir_to_dim(buffer.size, values)
        given = math.prod(program.tensors[tensor].shape)
        if count is None or not _same_dim(count, given):
            raise IRError(f"host codegen: the sizes {', '.join(guessed)} of @{name}, taken from main's "
                          f"dimensions of those names, do not fit its buffer {buffer.name!r} at this call "
                          f"({count} elements, the argument has {given})")


def _same_dim(a: Dim, b: Dim) -> bool:
    return prove_equal(a, b) is True


def _solve_sizes(func: PrimFunc, args: list[int], program: HostProgram, resolved: dict[int, Dim]) -> None:
    """Complete ``resolved`` (size variable index -> main-level dimension) from the input
    buffers' element counts: a buffer of ``rows * 64`` elements given an argument of
    ``batch * 64`` elements gives ``rows = batch``."""
    kernel_dims = tuple(func.dims)
    unknowns = {k: placeholder(k, 0, None) for k in range(len(kernel_dims))}
    progress = True
    while progress and len(resolved) < len(kernel_dims):
        progress = False
        for buffer, tensor in zip(func.params, args):
            values = {id(var): resolved.get(k, unknowns[k]) for k, var in enumerate(kernel_dims)}
            expr = _tir_to_dim(buffer.size, values)
            if expr is None:
                continue
            left = [k for k in unknowns if k not in resolved and unknowns[k] in free_vars(expr)]
            if len(left) != 1:
                continue
            u = unknowns[left[0]]
            rest = substitute(expr, {u: 0})
            coefficient = exact_div(expr - rest, u)
            if coefficient is None or coefficient == 0 or u in free_vars(coefficient):
                continue
            value = exact_div(math.prod(program.tensors[tensor].shape) - rest, coefficient)
            if value is None:
                continue
            resolved[left[0]] = value
            progress = True


def representative_binding(dim_vars: list[DimVar]) -> dict[str, int]:
    """One binding of main's dimensions the symbolic planner decides its layout at (and
    the host analysis checks buffer sizes at): each at 64, or the bound nearest it. A
    moderate size makes the tensors whose sizes grow with a dimension compare with the
    fixed ones as they do at typical batch and sequence sizes; the bounds keep it valid."""
    binding = {}
    for var in dim_vars:
        value = max(var.lo, 64)
        binding[var.name] = value if var.hi is None else min(value, var.hi)
    return binding


def _symbolic_input_matches(info: TensorInfo, buffer: Any, program: HostProgram, kernel_dims: tuple,
                            sizes: tuple[Dim, ...]) -> bool:
    """An argument of a kernel with size variables fits its buffer: the same dtype, and the
    same byte count at the representative binding (when both can be evaluated)."""
    if info.dtype != buffer.dtype:
        return False
    binding = representative_binding(program.dim_vars)
    try:
        values = {id(var): evaluate(size, binding) for var, size in zip(kernel_dims, sizes)}
        nbytes = evaluate(info.nbytes, binding)
    except DimError:
        return True
    elements = _tir_to_dim(buffer.size, values)  # an int: every value is one
    return elements is None or elements * dtype_bytes(buffer.dtype) == nbytes


# ----- one analysis per link step -----------------------------------------------------------
@dataclass
class _SharedAnalysis:
    """The last analysis made in a link step, and the objects it was made from."""

    main: BaseFunc | None = None
    callees: tuple[tuple[GlobalVar, BaseFunc], ...] = ()
    program: HostProgram | None = None

    def matches(self, mod: IRModule) -> bool:
        functions = mod.functions
        return (
            self.program is not None
            and functions.get(_MAIN) is self.main
            and all(functions.get(gv) is func for gv, func in self.callees)
        )


class _SharedAnalyses(threading.local):
    def __init__(self) -> None:
        self.stack: list[_SharedAnalysis] = []


_shared = _SharedAnalyses()
_MAIN = GlobalVar("main")


@contextmanager
def shared_host_analysis() -> Iterator[None]:
    """While the block runs, the link passes in this thread share one analysis of main
    (PlanMemory's is HostCodegen's), as long as main and the kernels it calls are the
    very objects it was made from. Nothing outlives the block."""
    with pushed(_shared.stack, _SharedAnalysis()):
        yield


def host_program(mod: IRModule) -> HostProgram:
    """:func:`analyze_main`, reused within a :func:`shared_host_analysis` block."""
    if not _shared.stack:
        return analyze_main(mod)
    shared = _shared.stack[-1]
    if not shared.matches(mod):
        program, signatures = _analyze(mod)
        shared.main = mod["main"]
        shared.callees = tuple((gv, signature.func) for gv, signature in signatures.items())
        shared.program = program
    assert shared.program is not None
    return shared.program


# ----- memory planning ----------------------------------------------------------------
def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def workspace_tensors(program: HostProgram) -> list[int]:
    """Intermediates that live in the workspace: every kernel output except those written
    straight into main's output arrays (the first occurrence of each in the result)."""
    direct = set(program.output_ids)
    return [t for t, info in enumerate(program.tensors) if info.kind == "intermediate" and t not in direct]


def tensor_lifetimes(program: HostProgram) -> tuple[dict[int, int], dict[int, int]]:
    """Per tensor, the step that first writes it and the last step that reads it."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for step, call in enumerate(program.calls):
        for t in call.outputs:
            first.setdefault(t, step)
            last.setdefault(t, step)
        for t in call.args:
            last[t] = max(last.get(t, step), step)
    return first, last


def plan_memory(program: HostProgram) -> MemoryPlan:
    """Greedy by size, first fit: the largest tensors are placed first, each at the lowest
    aligned offset that does not overlap a placed tensor whose lifetime overlaps its own.
    A lifetime is [producing call, last consuming call] (inclusive), so a kernel's output
    never shares memory with its inputs.

    The placed tensors whose lifetimes overlap a tensor's come from :class:`_Lifetimes`,
    which never looks at one once per step the two share: with many long-lived tensors
    (a concatenation of many early results) that made the planning cubic in their
    number. ``plan_memory_candidates`` counts the overlapping tensors examined.

    When a workspace tensor has a symbolic size, see :func:`_plan_symbolic`."""
    tensors = workspace_tensors(program)
    first, last = tensor_lifetimes(program)
    if any(isinstance(program.tensors[t].nbytes, SymDim) for t in tensors):
        return _plan_symbolic(program, tensors, first, last)
    slot_size = {t: _align(max(program.tensors[t].nbytes, 1)) for t in tensors}
    offsets, candidates, _ = _first_fit(tensors, first, last, len(program.calls), slot_size)
    count("plan_memory_candidates", candidates)
    peak = max((offsets[t] + slot_size[t] for t in tensors), default=0)
    naive = sum(program.tensors[t].nbytes for t in tensors)
    return MemoryPlan(offsets, peak, naive)


def _first_fit(
    tensors: list[int], first: dict[int, int], last: dict[int, int], steps: int, slot_size: dict[int, int],
    record: bool = False,
) -> tuple[dict[int, int], int, dict[int, set[int]]]:
    """The greedy of :func:`plan_memory`: offsets, the number of candidates examined and
    (``record``) the tensors placed before each one whose lifetimes overlap its own."""
    order = sorted(tensors, key=lambda t: (-slot_size[t], first[t], t))
    placed = _Lifetimes(steps)
    offsets: dict[int, int] = {}
    overlaps: dict[int, set[int]] = {}
    candidates = 0
    for t in order:
        size = slot_size[t]
        overlapping = placed.overlapping(first[t], last[t])
        candidates += len(overlapping)
        if record:
            overlaps[t] = overlapping
        conflicts = sorted({(offsets[o], slot_size[o]) for o in overlapping})
        offset = 0
        for other_offset, other_size in conflicts:
            if offset + size <= other_offset:
                break
            offset = max(offset, other_offset + other_size)
        offsets[t] = offset
        placed.add(first[t], last[t], t)
    return offsets, candidates, overlaps


def _plan_symbolic(program: HostProgram, tensors: list[int], first: dict[int, int],
                   last: dict[int, int]) -> MemoryPlan:
    """A plan for intermediates with symbolic sizes: the layout is decided once, the
    offsets are computed by the host at every call from the sizes of that call.

    The greedy of :func:`plan_memory` runs on the sizes at :func:`representative_binding`.
    Its layout fixes, for every two tensors whose lifetimes overlap, which lies below the
    other; ``order`` lists the tensors by their offset there, and ``conflicts[t]`` the
    tensors before ``t`` in it whose lifetimes overlap ``t``'s (without those implied by
    another: ``u`` below ``v`` below ``t``). At a call,
    ``offset[t] = align64(max(offset[u] + size[u] for u in conflicts[t]))`` (0 for none)
    and the workspace is ``max(offset[t] + size[t])`` (:func:`symbolic_layout`): every
    tensor lies above those it must not overlap, at every binding, and at the
    representative binding the offsets are the greedy's own (where no size there is 0)."""
    binding = representative_binding(program.dim_vars)
    sizes = {t: program.tensors[t].nbytes for t in tensors}
    slot_size = {t: _align(max(evaluate(sizes[t], binding), 1)) for t in tensors}
    steps = len(program.calls)
    offsets, candidates, overlaps = _first_fit(tensors, first, last, steps, slot_size, record=True)
    count("plan_memory_candidates", candidates)
    neighbours: dict[int, set[int]] = {t: set() for t in tensors}
    for t, overlapping in overlaps.items():
        for u in overlapping:
            neighbours[t].add(u)
            neighbours[u].add(t)
    order = sorted(tensors, key=lambda t: (offsets[t], t))
    position = {t: i for i, t in enumerate(order)}
    below = {t: {u for u in neighbours[t] if position[u] < position[t]} for t in tensors}
    conflicts: dict[int, tuple[int, ...]] = {}
    for t in order:
        direct = below[t]
        if len(direct) <= 64:  # u below v below t: v's end bounds u's (quadratic, so only when few)
            direct = {u for u in direct if not any(u in below[v] for v in direct)}
        conflicts[t] = tuple(sorted(direct, key=position.__getitem__))
    naive: Dim = sum((sizes[t] for t in tensors), 0)
    return MemoryPlan(offsets, None, naive, order=tuple(order), conflicts=conflicts, sizes=sizes,
                      binding=binding)


def symbolic_layout(plan: MemoryPlan, binding: dict[str, int]) -> tuple[dict[int, int], int]:
    """The workspace offsets and bytes of a symbolic plan at ``binding`` (what the host
    computes at a call; see :func:`_plan_symbolic`)."""
    offsets: dict[int, int] = {}
    total = 0
    for t in plan.order:
        end = max((offsets[u] + evaluate(plan.sizes[u], binding) for u in plan.conflicts[t]), default=0)
        offsets[t] = _align(end)
        total = max(total, offsets[t] + evaluate(plan.sizes[t], binding))
    return offsets, total


class _Lifetimes:
    """Lifetimes ``[first, last]`` over steps ``0 .. steps - 1``: which of them overlap a
    given one.

    Kernel outputs mostly die a few calls after they are made. A short lifetime (at most
    ``SHORT`` steps) is listed at each of its steps, and at its first step; a long one is
    kept in the nodes of a segment tree that cover it (a step's path to the root meets
    exactly the long lifetimes containing that step, each once) and in a list sorted by
    first step. A short query reads the lists of its few steps; a long one reads the
    short lifetimes starting in its range (or up to ``SHORT - 1`` steps before it), never
    the lists of every step it spans. Either way no lifetime is looked at once per step
    it shares with the query, so long lifetimes cost what they must: the tensors they
    overlap."""

    SHORT = 16

    def __init__(self, steps: int) -> None:
        self._live: list[list[int]] = [[] for _ in range(steps)]  # short lifetimes at each step
        self._starting: list[list[int]] = [[] for _ in range(steps)]  # short ones by first step
        self._last: dict[int, int] = {}
        self._leaves = 1
        while self._leaves < max(steps, 1):
            self._leaves *= 2
        self._nodes: dict[int, list[int]] = {}  # segment tree nodes holding long lifetimes
        self._long: list[tuple[int, int]] = []  # (first step, tensor) of long ones, sorted

    def add(self, first: int, last: int, tensor: int) -> None:
        self._last[tensor] = last
        if last - first < self.SHORT:
            for step in range(first, last + 1):
                self._live[step].append(tensor)
            self._starting[first].append(tensor)
            return
        bisect.insort(self._long, (first, tensor))
        low, high = first + self._leaves, last + self._leaves + 1
        while low < high:
            if low & 1:
                self._nodes.setdefault(low, []).append(tensor)
                low += 1
            if high & 1:
                high -= 1
                self._nodes.setdefault(high, []).append(tensor)
            low //= 2
            high //= 2

    def overlapping(self, first: int, last: int) -> set[int]:
        """The lifetimes overlapping ``[first, last]``."""
        found: set[int] = set()
        if last - first < self.SHORT:
            for step in range(first, last + 1):
                found.update(self._live[step])
        else:
            ends = self._last
            for step in range(max(first - self.SHORT + 1, 0), last + 1):
                found.update(t for t in self._starting[step] if ends[t] >= first)
        if self._long:
            nodes = self._nodes
            node = first + self._leaves
            while node:  # long lifetimes containing ``first``
                held = nodes.get(node)
                if held:
                    found.update(held)
                node //= 2
            # tensor ids are non-negative: (step, -1) sorts before every entry of that step
            begin = bisect.bisect_left(self._long, (first + 1, -1))
            end = bisect.bisect_left(self._long, (last + 1, -1))
            found.update(tensor for _, tensor in self._long[begin:end])
        return found


# ----- weights and host C ------------------------------------------------------------------
def pack_weights(weights: list[np.ndarray]) -> tuple[PackedWeights, list[int]]:
    """The weights blob's layout (each weight 64-byte aligned, C order, zeros between)
    and each weight's offset. The weights are not copied here: ``runtime.Module``
    streams the layout into its weights file once and maps it (a deep model has
    hundreds of megabytes of weights; see :mod:`passinfra.runtime.weights`)."""
    packed = PackedWeights.pack(weights)
    return packed, list(packed.offsets)


# how the host's argument table says where a kernel argument lives
_ARG_INPUT, _ARG_OUTPUT, _ARG_WEIGHT, _ARG_WORKSPACE = 0, 1, 2, 3


def _c_table(ctype: str, name: str, values: list[int] | list[str]) -> list[str]:
    """A static const C array, ten values per line (never empty: C forbids that)."""
    values = [str(v) for v in values] or ["0"]
    rows = [", ".join(values[i : i + 10]) for i in range(0, len(values), 10)]
    return [f"static {ctype} const {name}[{len(values)}] = {{", *(f"  {row}," for row in rows), "};"]


def render_host(program: HostProgram, plan: MemoryPlan, weight_offsets: list[int]) -> str:
    """C source of ``raypass_main`` (see the module docstring).

    The calls are data, not code: a table of kernel entry points and a table of where
    each argument lives (input, output, weight blob offset, workspace offset), walked by
    one loop. Straight-line code with one block per call made gcc -O2 spend ~0.6 s on a
    24-layer transformer's host, serially, after every kernel compiled in parallel; the
    tables compile in a few milliseconds at any model size.

    A main with symbolic dimensions gets straight-line code instead
    (:func:`_render_symbolic_host`).
    """
    if program.is_symbolic:
        return _render_symbolic_host(program, plan, weight_offsets)
    outputs = program.output_ids
    direct: dict[int, int] = {}
    for position, t in enumerate(outputs):
        if program.tensors[t].kind == "intermediate":
            direct.setdefault(t, position)

    def location(t: int) -> tuple[int, int]:
        info = program.tensors[t]
        if info.kind == "input":
            return _ARG_INPUT, info.index
        if info.kind == "weight":
            return _ARG_WEIGHT, weight_offsets[info.index]
        if t in direct:
            return _ARG_OUTPUT, direct[t]
        return _ARG_WORKSPACE, plan.offsets[t]

    def pointer(t: int) -> str:
        kind, value = location(t)
        return {
            _ARG_INPUT: f"inputs[{value}]",
            _ARG_OUTPUT: f"outputs[{value}]",
            _ARG_WEIGHT: f"(void*)(w + {value})",
            _ARG_WORKSPACE: f"(void*)(ws + {value})",
        }[kind]

    kinds: list[int] = []
    values: list[int] = []
    starts = [0]
    for call in program.calls:
        for t in (*call.args, *call.outputs):
            kind, value = location(t)
            kinds.append(kind)
            values.append(value)
        starts.append(len(kinds))
    max_args = max((b - a for a, b in zip(starts, starts[1:])), default=0)

    symbols = sorted({call.symbol for call in program.calls})
    lines = ["/* generated by raypass host codegen */", *_HOST_INCLUDES, ""]
    lines += [f"int {symbol}_packed(void** args);" for symbol in symbols]
    lines += ["", *_PROFILE_PRELUDE, "", "typedef int (*raypass_kernel)(void**);", ""]
    lines += _c_table("raypass_kernel", "kernels", [f"{call.symbol}_packed" for call in program.calls])
    lines += _c_table("uint32_t", "arg_start", starts)
    lines += _c_table("uint8_t", "arg_kind", kinds)
    lines += _c_table("int64_t", "arg_value", values)
    lines += [
        "",
        f"int {HOST_SYMBOL}(void** inputs, void** outputs, void* weights, void* workspace) {{",
        "  char* const w = (char*)weights;",
        "  char* const ws = (char*)workspace;",
        f"  void* args[{max(max_args, 1)}];",
        "  int64_t* const profile = rp_profile_ns;",
        "  (void)inputs; (void)outputs; (void)w; (void)ws; (void)args;",
        f"  for (int step = 0; step < {len(program.calls)}; ++step) {{",
        "    for (uint32_t a = arg_start[step]; a < arg_start[step + 1]; ++a) {",
        "      const int64_t v = arg_value[a];",
        "      void** slot = &args[a - arg_start[step]];",
        "      switch (arg_kind[a]) {",
        f"        case {_ARG_INPUT}: *slot = inputs[v]; break;",
        f"        case {_ARG_OUTPUT}: *slot = outputs[v]; break;",
        f"        case {_ARG_WEIGHT}: *slot = (void*)(w + v); break;",
        "        default: *slot = (void*)(ws + v); break;",
        "      }",
        "    }",
        "    const int64_t started = profile ? rp_now_ns() : 0;",
        "    if (kernels[step](args) != 0) return step + 1;",
        "    if (profile) profile[step] += rp_now_ns() - started;",
        "  }",
    ]
    for position, t in enumerate(outputs):
        if direct.get(t) != position:  # an input, a weight, or a repeated output
            lines.append(f"  memcpy(outputs[{position}], {pointer(t)}, {program.tensors[t].nbytes});")
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines)


# ----- host C for symbolic sizes ------------------------------------------------------------
WORKSPACE_SYMBOL = "raypass_workspace_bytes"

_SYMBOLIC_PRELUDE = [
    "/* floor division and modulus by a positive constant, also for negative numerators */",
    "static inline int64_t rp_floordiv(int64_t a, int64_t b) {",
    "  const int64_t q = a / b;",
    "  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;",
    "}",
    "static inline int64_t rp_floormod(int64_t a, int64_t b) {",
    "  const int64_t r = a % b;",
    "  return (r != 0 && (r < 0) != (b < 0)) ? r + b : r;",
    "}",
    "static inline int64_t rp_max(int64_t a, int64_t b) { return a > b ? a : b; }",
    "static inline int64_t rp_align(int64_t n) {",
    f"  return (n + {ALIGNMENT - 1}) / {ALIGNMENT} * {ALIGNMENT};",
    "}",
]


def _c_int(value: int) -> str:
    return str(value) if -(2**31) < value < 2**31 else f"INT64_C({value})"


def c_dim(dim: Dim, names: dict[str, str]) -> str:
    """``dim`` as a C int64 expression, each variable written as ``names[var.name]``;
    parenthesized unless it is a single name or a non-negative constant."""
    if not isinstance(dim, SymDim):
        value = int(dim)
        return _c_int(value) if value >= 0 else f"({_c_int(value)})"
    if type(dim) is DimVar:
        return names[dim.name]
    parts: list[str] = []
    for mono, coeff in dim.terms:
        factors = [_c_atom(atom, names) for atom, exp in mono for _ in range(exp)]
        magnitude = abs(coeff)
        if not factors:
            text = _c_int(magnitude)
        else:
            text = " * ".join(factors) + ("" if magnitude == 1 else f" * {_c_int(magnitude)}")
        if not parts:
            parts.append(text if coeff > 0 else f"-{text}")
        else:
            parts.append(f"{'+' if coeff > 0 else '-'} {text}")
    return f"({' '.join(parts)})"


def _c_atom(atom: Any, names: dict[str, str]) -> str:
    if type(atom) is DimVar:
        return names[atom.name]
    function = "rp_floordiv" if type(atom).__name__ == "_FloorDiv" else "rp_floormod"
    return f"{function}({c_dim(atom.num, names)}, {_c_int(atom.den)})"


def _comment(text: str) -> str:
    return text.replace("*/", "* /")


def _render_symbolic_host(program: HostProgram, plan: MemoryPlan, weight_offsets: list[int]) -> str:
    """C source of a host for a main with symbolic dimensions: ``int raypass_main(void**
    inputs, void** outputs, void* weights, void* workspace, const int64_t* dims)`` and
    ``int64_t raypass_workspace_bytes(const int64_t* dims)``, ``dims`` holding the size of
    each of main's dimensions (:attr:`HostProgram.dim_vars` order, the metadata's
    ``dims``). Straight-line code: the workspace offsets computed from the sizes
    (:func:`_plan_symbolic`), then one block per kernel call passing its buffers and then a
    pointer to each of its size values. Dynamic models are small next to the deep static
    ones the tables of :func:`render_host` are for."""
    names = {var.name: f"d{i}" for i, var in enumerate(program.dim_vars)}
    outputs = program.output_ids
    direct: dict[int, int] = {}
    for position, t in enumerate(outputs):
        if program.tensors[t].kind == "intermediate":
            direct.setdefault(t, position)
    slots = list(plan.order) if plan.is_symbolic else sorted(plan.offsets, key=lambda t: (plan.offsets[t], t))
    slot_of = {t: i for i, t in enumerate(slots)}

    def pointer(t: int) -> str:
        info = program.tensors[t]
        if info.kind == "input":
            return f"inputs[{info.index}]"
        if info.kind == "weight":
            return f"(void*)(w + {weight_offsets[info.index]})"
        if t in direct:
            return f"outputs[{direct[t]}]"
        return f"(void*)(ws + off[{slot_of[t]}])"

    def load_dims(indent: str) -> list[str]:
        lines = [f"{indent}const int64_t {names[var.name]} = dims[{i}];  /* {_comment(dim_text(var))} */"
                 for i, var in enumerate(program.dim_vars)]
        used = " ".join(f"(void){names[var.name]};" for var in program.dim_vars)
        return lines + [f"{indent}(void)dims;{' ' + used if used else ''}"]

    symbols = sorted({symbol for call in program.calls
                      for symbol in (call.symbol, *(variant.symbol for variant in call.variants))})
    lines = ["/* generated by raypass host codegen (symbolic sizes) */", *_HOST_INCLUDES, ""]
    lines += [f"int {symbol}_packed(void** args);" for symbol in symbols]
    lines += ["", *_SYMBOLIC_PRELUDE, "", *_PROFILE_PRELUDE, ""]
    # the layout: each workspace tensor's offset, and the bytes the workspace needs
    lines += ["/* the intermediates' workspace offsets at these sizes; returns the workspace's bytes */",
              "static int64_t raypass_layout(const int64_t* dims, int64_t* off) {",
              *load_dims("  "), "  (void)off;", "  int64_t end = 0, total = 0;", "  (void)end;"]
    for i, t in enumerate(slots):
        size = c_dim(program.tensors[t].nbytes, names)
        if plan.is_symbolic:
            lines.append("  end = 0;")
            lines += [f"  end = rp_max(end, off[{slot_of[u]}] + {c_dim(program.tensors[u].nbytes, names)});"
                      for u in plan.conflicts[t]]
            lines.append(f"  off[{i}] = rp_align(end);")
        else:
            lines.append(f"  off[{i}] = {plan.offsets[t]};")
        lines.append(f"  total = rp_max(total, off[{i}] + {size});")
    lines += ["  return total;", "}", ""]
    lines += [f"int64_t {WORKSPACE_SYMBOL}(const int64_t* dims) {{",
              f"  int64_t off[{max(len(slots), 1)}];",
              "  return raypass_layout(dims, off);", "}", ""]
    lines += [
        f"int {HOST_SYMBOL}(void** inputs, void** outputs, void* weights, void* workspace, "
        "const int64_t* dims) {",
        "  char* const w = (char*)weights;",
        "  char* const ws = (char*)workspace;",
        f"  int64_t off[{max(len(slots), 1)}];",
        "  raypass_layout(dims, off);",
        *load_dims("  "),
        "  int64_t* const profile = rp_profile_ns;",
        "  int64_t started = 0;",
        "  (void)inputs; (void)outputs; (void)w; (void)ws; (void)off; (void)started;",
    ]
    def invoke(step: int, symbol: str, buffers: list[str], sizes: tuple[Dim, ...], indent: str) -> list[str]:
        out = []
        if sizes:
            values = ", ".join(c_dim(size, names) for size in sizes)
            out.append(f"{indent}int64_t z[{len(sizes)}] = {{{values}}};")
            buffers = [*buffers, *(f"&z[{k}]" for k in range(len(sizes)))]
        out.append(f"{indent}void* a[{max(len(buffers), 1)}] = {{{', '.join(buffers) or '0'}}};")
        out.append(f"{indent}if (profile) started = rp_now_ns();")
        out.append(f"{indent}if ({symbol}_packed(a) != 0) return {step + 1};")
        out.append(f"{indent}if (profile) profile[{step}] += rp_now_ns() - started;")
        return out

    for step, call in enumerate(program.calls):
        buffers = [pointer(t) for t in (*call.args, *call.outputs)]
        lines.append(f"  {{  /* call {step}: {call.symbol} */")
        if not call.variants:
            lines += invoke(step, call.symbol, buffers, call.sizes, "    ")
        else:  # a specialized copy where its sizes hold, the symbolic kernel elsewhere
            keyword = "if"
            for variant in call.variants:
                test = " && ".join(f"{c_dim(dim, names)} == {_c_int(size)}" for dim, size in variant.when)
                lines.append(f"    {keyword} ({test}) {{")
                lines += invoke(step, variant.symbol, buffers, variant.sizes, "      ")
                keyword = "} else if"
            lines.append("    } else {")
            lines += invoke(step, call.symbol, buffers, call.sizes, "      ")
            lines.append("    }")
        lines.append("  }")
    for position, t in enumerate(outputs):
        if direct.get(t) != position:  # an input, a weight, or a repeated output
            nbytes = c_dim(program.tensors[t].nbytes, names)
            lines.append(f"  memcpy(outputs[{position}], {pointer(t)}, (size_t){nbytes});")
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines)


def graph_output_types(ret_type: Type) -> list[TensorType]:
    """The tensors of a graph-level return type, flattened in output order."""
    fields: list[TensorType] = []
    stack: list[Type] = [ret_type]
    while stack:  # tuple types nest shallowly, but the walk costs nothing to keep flat
        ty = stack.pop()
        if isinstance(ty, TupleType):
            stack.extend(reversed(ty.fields))
        elif isinstance(ty, TensorType):
            fields.append(ty)
    return fields


def _output_shapes(program: HostProgram, ret_type: Type | None) -> list[list[int]]:
    """Each output's shape: main's own (graph-level) shapes when its return type is known
    and has one tensor per output, since kernel buffers may have been flattened; else the
    host program's."""
    shapes = [list(program.tensors[t].shape) for t in program.output_ids]
    if ret_type is not None:
        typed = graph_output_types(ret_type)
        if len(typed) == len(shapes):
            shapes = [[d if isinstance(d, SymDim) else int(d) for d in ty.shape] for ty in typed]
    return shapes


def runtime_metadata(
    program: HostProgram, plan: MemoryPlan, weights_size: int, ret_type: Type | None = None
) -> dict[str, Any]:
    """What the runtime needs to call the library (stored as JSON next to it).
    ``ret_type``: main's graph-level return type, which gives the outputs their shapes.

    A symbolic main's metadata also has ``dims`` (each of main's dimensions: name and
    bounds, in the order the host takes their sizes); symbolic shape entries are
    :func:`~passinfra.ir.dims.dim_to_json` objects, ``workspace_bytes`` is None (the
    library's ``raypass_workspace_bytes`` says it per call) and
    ``naive_intermediate_bytes`` may be symbolic too. With specializations,
    ``specialized_kernels`` lists each copy, the kernel it stands in for and the sizes at
    which it does."""
    metadata = {
        "format": "raypass-library/1",
        "entry": HOST_SYMBOL,
        "inputs": [
            {"name": name, "shape": _json_shape(program.tensors[t].shape), "dtype": program.tensors[t].dtype}
            for name, t in zip(program.input_names, program.input_ids)
        ],
        "outputs": [
            {"shape": _json_shape(shape), "dtype": program.tensors[t].dtype}
            for t, shape in zip(program.output_ids, _output_shapes(program, ret_type))
        ],
        "output_structure": program.output_structure(),
        "workspace_bytes": plan.workspace_bytes,
        "naive_intermediate_bytes": dim_to_json(plan.naive_bytes),
        "weights_bytes": weights_size,
        "kernels": [call.symbol for call in program.calls],
    }
    specialized = {variant.symbol: {"kernel": variant.symbol, "of": call.symbol,
                                    "when": {dim_text(dim): size for dim, size in variant.when}}
                   for call in program.calls for variant in call.variants}
    if specialized:  # the static copies SpecializeKernels compiled, and when each runs
        metadata["specialized_kernels"] = list(specialized.values())
    if program.is_symbolic:
        metadata["dims"] = [{"name": var.name, "lo": var.lo, "hi": var.hi} for var in program.dim_vars]
        if not plan.is_symbolic:  # sizes of a call never change the workspace: say it
            metadata["workspace_bytes"] = plan.workspace_bytes
        else:
            metadata["workspace_bytes"] = None
    return metadata


def _json_shape(shape: Any) -> list[Any]:
    return [dim_to_json(d) if isinstance(d, SymDim) else d for d in shape]


__all__ = [
    "HostProgram",
    "KernelCall",
    "KernelVariant",
    "TensorInfo",
    "MemoryPlan",
    "analyze_main",
    "plan_memory",
    "graph_output_types",
    "pack_weights",
    "main_weights",
    "render_host",
    "runtime_metadata",
    "HOST_SYMBOL",
    "WORKSPACE_SYMBOL",
    "c_dim",
    "representative_binding",
    "symbolic_layout",
    "host_program",
    "shared_host_analysis",
]

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
  the runtime metadata (:func:`runtime_metadata`).

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
from passinfra.codegen.lower import flatten_tuples
from passinfra.codegen.object_cache import count
from passinfra.errors import IRError
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
from passinfra.runtime.weights import PackedWeights
from passinfra.scoped import pushed
from passinfra.tir import PrimFunc

ALIGNMENT = 64
HOST_SYMBOL = "raypass_main"

# a reference to a value of main: a tensor id, or a (nested) tuple of references
Ref = Any


@dataclass(frozen=True)
class TensorInfo:
    kind: str  # "input" | "weight" | "intermediate"
    shape: tuple[int, ...]
    dtype: str
    index: int  # position among inputs / weights / intermediates
    nbytes: int


@dataclass(frozen=True)
class KernelCall:
    symbol: str
    args: tuple[int, ...]  # tensor ids read
    outputs: tuple[int, ...]  # tensor ids written


@dataclass
class HostProgram:
    tensors: list[TensorInfo] = field(default_factory=list)
    calls: list[KernelCall] = field(default_factory=list)
    input_names: list[str] = field(default_factory=list)
    input_ids: list[int] = field(default_factory=list)
    weights: list[np.ndarray] = field(default_factory=list)
    result: Ref = None

    def add_tensor(self, kind: str, shape: tuple[int, ...], dtype: str, index: int) -> int:
        shape = tuple(int(d) for d in shape)
        self.tensors.append(TensorInfo(kind, shape, dtype, index, math.prod(shape) * dtype_bytes(dtype)))
        return len(self.tensors) - 1

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
    return program, signatures


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
    for position, (tensor, spec) in enumerate(zip(args, sig.input_specs)):
        info = program.tensors[tensor]
        if (info.dtype, info.nbytes) != spec:
            buffer = sig.func.params[position]
            raise IRError(
                f"host codegen: argument {position} of @{name} is {info.dtype}{list(info.shape)}, "
                f"but the kernel's buffer {buffer.name!r} is {buffer.dtype}{list(buffer.shape)}"
            )
    outputs = []
    for shape, dtype in _output_types(call, sig.func.params[sig.num_inputs :]):
        outputs.append(program.add_tensor("intermediate", shape, dtype, intermediates))
        intermediates += 1
    program.calls.append(KernelCall(sig.symbol, tuple(args), tuple(outputs)))
    ref: Ref = outputs[0] if len(outputs) == 1 else tuple(outputs)
    return ref, intermediates


def _output_types(call: Call, buffers: tuple) -> list[tuple[tuple[int, ...], str]]:
    """Graph-level shapes of the outputs when the call's type is known (buffers may be
    flattened), else the buffers' own shapes."""
    from_buffers = [(b.shape, b.dtype) for b in buffers]
    ty = call._checked_type
    fields = list(ty.fields) if isinstance(ty, TupleType) else [ty]
    if ty is not None and len(fields) == len(buffers) and all(isinstance(f, TensorType) for f in fields):
        typed = [(tuple(f.shape), f.dtype) for f in fields]
        sizes_match = all(math.prod(s) == b.size and d == b.dtype for (s, d), b in zip(typed, buffers))
        if sizes_match:
            return typed
    return from_buffers


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
    number. ``plan_memory_candidates`` counts the overlapping tensors examined."""
    tensors = workspace_tensors(program)
    first, last = tensor_lifetimes(program)
    slot_size = {t: _align(max(program.tensors[t].nbytes, 1)) for t in tensors}
    order = sorted(tensors, key=lambda t: (-slot_size[t], first[t], t))
    placed = _Lifetimes(len(program.calls))
    offsets: dict[int, int] = {}
    candidates = 0
    for t in order:
        size = slot_size[t]
        overlapping = placed.overlapping(first[t], last[t])
        candidates += len(overlapping)
        conflicts = sorted({(offsets[o], slot_size[o]) for o in overlapping})
        offset = 0
        for other_offset, other_size in conflicts:
            if offset + size <= other_offset:
                break
            offset = max(offset, other_offset + other_size)
        offsets[t] = offset
        placed.add(first[t], last[t], t)
    count("plan_memory_candidates", candidates)
    peak = max((offsets[t] + slot_size[t] for t in tensors), default=0)
    naive = sum(program.tensors[t].nbytes for t in tensors)
    return MemoryPlan(offsets, peak, naive)


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
    """
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
    lines = ["/* generated by raypass host codegen */", "#include <stdint.h>", "#include <string.h>", ""]
    lines += [f"int {symbol}_packed(void** args);" for symbol in symbols]
    lines += ["", "typedef int (*raypass_kernel)(void**);", ""]
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
        "    if (kernels[step](args) != 0) return step + 1;",
        "  }",
    ]
    for position, t in enumerate(outputs):
        if direct.get(t) != position:  # an input, a weight, or a repeated output
            lines.append(f"  memcpy(outputs[{position}], {pointer(t)}, {program.tensors[t].nbytes});")
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
            shapes = [[int(d) for d in ty.shape] for ty in typed]
    return shapes


def runtime_metadata(
    program: HostProgram, plan: MemoryPlan, weights_size: int, ret_type: Type | None = None
) -> dict[str, Any]:
    """What the runtime needs to call the library (stored as JSON next to it).
    ``ret_type``: main's graph-level return type, which gives the outputs their shapes."""
    return {
        "format": "raypass-library/1",
        "entry": HOST_SYMBOL,
        "inputs": [
            {"name": name, "shape": list(program.tensors[t].shape), "dtype": program.tensors[t].dtype}
            for name, t in zip(program.input_names, program.input_ids)
        ],
        "outputs": [
            {"shape": shape, "dtype": program.tensors[t].dtype}
            for t, shape in zip(program.output_ids, _output_shapes(program, ret_type))
        ],
        "output_structure": program.output_structure(),
        "workspace_bytes": plan.workspace_bytes,
        "naive_intermediate_bytes": plan.naive_bytes,
        "weights_bytes": weights_size,
        "kernels": [call.symbol for call in program.calls],
    }


__all__ = [
    "HostProgram",
    "KernelCall",
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
    "host_program",
    "shared_host_analysis",
]

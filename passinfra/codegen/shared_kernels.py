"""Kernels alike but for their numbers share one compiled body (``codegen.share_kernel_code``).

A network that repeats a block at several sizes (DenseNet's dense blocks, ResNet's stages)
lowers to kernels whose C is the same but for its numbers: extents, strides, offsets,
the convolution runtime's arguments. DenseNet-121's 197 kernels are 20 such classes, and
compiling one kernel of each costs the C compiler 0.2 of compiling them all
(``bench/results_kernel_classes.md``); on two cores its compile is bound by that compiler.

So each class is compiled once, as a *generic kernel*: the class's first kernel with
every int64 constant that differs within the class made a size variable (a
``PrimFunc.dims`` entry, the path kernels of symbolic sizes take: passed after the
buffers, captured by the parallel loops), under a symbol of its own. Every kernel of the
class keeps its ``<name>_packed`` entry, now a few lines that pass its own numbers to the
generic one; the host and the library's other parts do not change.

Which kernels are alike is decided on their loop IR: each kernel's body with *every* int64
constant made a variable (numbered in the walk's order, one per occurrence), in the
canonical form of :mod:`passinfra.tir.structural` (names ignored; the parameters by dtype,
not shape, which a kernel's C does not read). Kernels of one form (and of the same compiler
settings and render options) form a class: each is the class's generic body with its own
numbers substituted. A class whose generic kernel does not render (a construct that needs
a constant, such as a parallel loop split into lane blocks) stays as it is.

What a kernel's rendering decides from its numbers stays its own: CodegenC records each
parallel loop's work estimate (by which the thread pool splits the loop over threads) and
each function's AVX2-clone decision, with the kernel's class (the digest of its generic
rendering) and numbers, where it renders (on the workers); the generic kernel takes the
work estimates as numbers too, and is cloned where any kernel of its class was. So the
driver renders only one generic kernel per class.

An innermost loop of at most :data:`PINNED_EXTENT` iterations (a requantizing one: at most
:data:`PINNED_ROUNDING_EXTENT`) keeps its constant trip count (kernels differing there are
of different classes): GCC then vectorizes it whole. And an innermost loop keeps the
strides other than 1 by which it walks its buffers (:func:`inner_strides`): a layout
change such as ShuffleNet's channel shuffle reads with a stride of the group's channels,
which GCC turns into vector shuffles only while it is a constant.
The generic functions are compiled with GCC's ``cheap`` vectorizer cost model (a vector
loop and a scalar remainder): under ``-O2``'s ``very-cheap`` one a loop whose trip count
is a variable is not vectorized at all, which made the batch-norm + ReLU epilogues 5x
slower; with it they run at 1.06 of the specialized kernels, convolutions and copies at
0.99-1.03 (``python -m bench.kernel_classes --run-time 5``).

The classes depend only on the module and the config, so the library is the same for any
backend and worker count. GroupKernels runs this before it plans the compile units.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from passinfra import tir
from passinfra.codegen.artifacts import kernel_c_source, with_kernel_c_source
from passinfra.codegen.c_renderer import KERNEL_MARKER, CRenderer, RenderOptions, shared_marker
from passinfra.codegen.compile_units import split_source
from passinfra.codegen.multiversion import ROUNDING_INTRINSICS
from passinfra.tir.arith import affine_coefficient
from passinfra.tir.functor import StmtExprMutator, any_stmt, iter_exprs, iter_stmts, stmt_exprs
from passinfra.tir.schema import schema_of
from passinfra.tir.structural import flatten_prim_func
from passinfra.transform.config import register_config

SHARE_CONFIG = "codegen.share_kernel_code"  # bool: compile kernels alike but for their numbers once
# what CodegenC's rendering of a static kernel decided, which its generic kernel repeats:
# each parallel loop's work estimate per iteration (the thread pool splits a loop by it)
# and each function's AVX2-clone decision, in rendering order
PARALLEL_WORK_ATTR = "c_parallel_work"
CLONES_ATTR = "c_clones"
# and its class: the digest of its generic rendering, and its int64 constants in walk order
FORM_ATTR = "c_form"
NUMBERS_ATTR = "c_numbers"
register_config(SHARE_CONFIG, bool)
DEFAULT_SHARE = True
MIN_CLASS = 2  # kernels a class needs to get a generic kernel
# An innermost loop of at most this many iterations keeps its trip count in the generic
# kernel: with a constant one GCC vectorizes it whole, with a variable one it adds a
# scalar remainder and a trip-count check per pass, which short loops pay on every pass
# (max pools over 16 and 32 channels: 1.15-1.2x the specialized kernels' time)
PINNED_EXTENT = 32
# and one that rounds to an integer (a requantization epilogue: its AVX2 clone's ROUNDPS
# loop is long per element) at most this many: MobileNetV3-like QDQ's 1x1 convolutions
# into 72 and 88 channels took 1.35-1.4x the specialized kernels' time generic, the model
# 1.03-1.05x; DenseNet-121's kernels do not round, and keep their classes
PINNED_ROUNDING_EXTENT = 256
# around the generic functions: vectorize loops whose trip count is a variable
_CHEAP_VECTORIZER = ('#pragma GCC push_options', '#pragma GCC optimize ("vect-cost-model=cheap")')
_RESTORE = "#pragma GCC pop_options"


class _NumberLifter(StmtExprMutator):
    """Every int64 constant of a body, in the walk's order (``values``); those to which
    ``lift`` gives a position become the size variable of that position (``dims``, in
    the order they first occur), so positions that ``lift`` maps to one share a variable.

    Each occurrence of a constant is a position of its own, however the nodes share
    objects: a function sent to a worker and back shares fewer than the one the driver
    lowered, and both must give the same positions (the library's bytes are the same
    for any backend)."""

    def __init__(self, lift: Callable[[int], int | None]) -> None:
        self.values: list[int] = []
        self.dims: list[tir.TVar] = []
        self._lift = lift
        self._variables: dict[int, tir.TVar] = {}

    def visit_expr(self, expr: tir.PrimExpr) -> tir.PrimExpr:
        stack: list[tuple[tir.PrimExpr, bool]] = [(expr, False)]
        done: list[tir.PrimExpr] = []  # the rewritten children, in order, of the nodes open
        while stack:
            node, expanded = stack.pop()
            schema = schema_of(type(node))
            kids = schema.children(node)
            if kids and not expanded:
                stack.append((node, True))
                stack.extend((kid, False) for kid in reversed(kids))
                continue
            if kids:
                new_kids = done[-len(kids):]
                del done[-len(kids):]
                changed = any(new is not old for new, old in zip(new_kids, kids))
                done.append(schema.rebuild(node, new_kids) if changed else node)
            else:
                done.append(self._constant(node) if type(node) is tir.IntImm else node)
        return done[0]

    def _constant(self, node: tir.IntImm) -> tir.PrimExpr:
        if node.dtype != tir.INDEX_DTYPE:
            return node  # an int32 or unsigned constant keeps its C type: kernels differing there differ
        position = len(self.values)
        self.values.append(int(node.value))
        shared = self._lift(position)
        if shared is None:
            return node
        var = self._variables.get(shared)
        if var is None:
            var = self._variables[shared] = tir.TVar(f"rp_n{shared}", tir.INDEX_DTYPE)
            self.dims.append(var)
        return var


def with_render_decisions(func: tir.PrimFunc, renderer: CRenderer) -> tir.PrimFunc:
    """``func`` (static) with what ``renderer`` decided rendering it and its class, when it
    has one (the attrs above): CodegenC stores them where it renders, on the workers, so
    the driver only renders each class's generic kernel."""
    func = (func.with_attr(PARALLEL_WORK_ATTR, tuple(renderer.parallel_work))
            .with_attr(CLONES_ATTR, tuple(renderer.clone_decisions)))
    form = kernel_form(func, len(renderer.parallel_work), len(renderer.clone_decisions))
    if form is None:
        return func
    return func.with_attr(FORM_ATTR, form.digest).with_attr(NUMBERS_ATTR, form.numbers)


def _generic(func: tir.PrimFunc, lift: Callable[[int], int | None], symbol: str, options: RenderOptions,
             works: int, clones: Sequence[bool]) -> tuple[str, list[int]] | None:
    """``func`` rendered under ``symbol`` with the constants ``lift`` gives a position as
    size variables (one a position), then ``works`` parallel loops' work estimates as size
    variables, with the ``clones`` decisions; and every int64 constant's value. None when
    that rendering fails."""
    lifter = _NumberLifter(lift)
    body = lifter.visit_stmt(func.body)
    work_vars = [tir.TVar(f"rp_w{i}", tir.INDEX_DTYPE) for i in range(works)]
    generic = tir.PrimFunc(func.params, body, func.attrs.with_item("global_symbol", symbol),
                           [*lifter.dims, *work_vars])
    try:
        return CRenderer(options, work_vars, clones).render(generic), lifter.values
    except Exception:  # noqa: BLE001 - whatever stops it (a construct that needs its constant), not shared
        return None


@dataclass(frozen=True)
class KernelForm:
    """A kernel's class (the digest of its rendering with every int64 constant a
    variable) and its numbers."""

    digest: str
    numbers: tuple[int, ...]


def kernel_form(func: tir.PrimFunc, works: int, functions: int) -> KernelForm | None:
    """What decides ``func``'s class (its rendering decided ``works`` parallel loops' work
    estimates and ``functions`` clone decisions); None for a kernel that cannot share its
    code (one of symbolic sizes already, or without int64 constants)."""
    if func.dims:
        return None
    lifter = _NumberLifter(lambda position: position)
    body = lifter.visit_stmt(func.body)
    if not lifter.values:
        return None
    flat = flatten_prim_func(tir.PrimFunc(func.params, body, func.attrs, lifter.dims))
    # the body's structure with every int64 constant a variable (names ignored: they only
    # name things in the C); the parameters by dtype and scope, not shape, which the C of
    # a kernel does not read (but for a scalar's: whether it holds one element)
    params = set(flat.params)
    buffers = tuple((dtype, scope) + ((shape == (1,) or shape == (),) if index in params else (shape,))
                    for index, (_, shape, dtype, scope) in enumerate(flat.buffers))
    key = (tuple(flat.rows), tuple(dtype for _, dtype in flat.variables), buffers, flat.params, flat.root,
           flat.dims, func.attrs.get("num_inputs"), works, functions, short_inner_extents(func.body),
           inner_strides(func.body))
    return KernelForm(hashlib.blake2b(repr(key).encode("utf-8"), digest_size=16).hexdigest(),
                      tuple(lifter.values))


def short_inner_extents(body: tir.Stmt) -> tuple[int, ...]:
    """The trip counts of the innermost loops that run at most :data:`PINNED_EXTENT`
    times (:data:`PINNED_ROUNDING_EXTENT` for one that rounds to an integer), in program
    order: kernels differing there are different classes, so these stay constants in a
    generic kernel."""
    def innermost(stmt: tir.Stmt) -> bool:
        return isinstance(stmt, tir.For) and not any_stmt(stmt.body, lambda inner: isinstance(inner, tir.For))

    def pinned(loop: tir.For) -> bool:
        limit = PINNED_ROUNDING_EXTENT if _rounds(loop.body) else PINNED_EXTENT
        return loop.extent.value <= limit  # type: ignore[union-attr]

    loops = [stmt for stmt in iter_stmts(body) if innermost(stmt) and isinstance(stmt.extent, tir.IntImm)]
    return tuple(int(loop.extent.value) for loop in loops if pinned(loop))


def inner_strides(body: tir.Stmt) -> tuple[int, ...]:
    """The strides other than 0 and 1 by which the innermost loops step through the buffers
    they read and write (the constant factor of the loop's variable in an index), in
    program order: kernels differing there are different classes, so these stay constants
    in a generic kernel. ShuffleNet's channel shuffles (a 4 x 28 transpose of each pixel's
    channels, read with stride 28) ran 3.5-4x their specialized time with the stride a
    variable, the model 1.14x."""
    strides: list[int] = []
    for loop in iter_stmts(body):
        if not isinstance(loop, tir.For) or any_stmt(loop.body, lambda inner: isinstance(inner, tir.For)):
            continue
        # the elements the loop stores and the loads they are computed from (not the
        # addresses a runtime call is handed: a convolution call per row block)
        for store in iter_stmts(loop.body):
            if not isinstance(store, tir.BufferStore):
                continue
            loads = [node for expr in stmt_exprs(store) for node in iter_exprs(expr)
                     if isinstance(node, tir.BufferLoad)]
            for access in (store, *loads):
                for index in access.indices:
                    step = affine_coefficient(index, loop.loop_var)
                    if step is not None and step not in (0, 1):
                        strides.append(step)
    return tuple(strides)


def _rounds(stmt: tir.Stmt) -> bool:
    """Whether ``stmt`` rounds a value to an integer (a requantization)."""
    return any(isinstance(node, tir.Intrinsic) and node.name in ROUNDING_INTRINSICS
               for inner in iter_stmts(stmt) for expr in stmt_exprs(inner) for node in iter_exprs(expr))


def stored_form(func: tir.PrimFunc) -> KernelForm | None:
    """The form CodegenC stored with ``func`` (:func:`with_render_decisions`), if any."""
    digest, numbers = func.attrs.get(FORM_ATTR), func.attrs.get(NUMBERS_ATTR)
    return KernelForm(digest, tuple(numbers)) if isinstance(digest, str) and numbers is not None else None


def _decisions(func: tir.PrimFunc) -> tuple[tuple[int, ...], tuple[bool, ...]] | None:
    works, clones = func.attrs.get(PARALLEL_WORK_ATTR), func.attrs.get(CLONES_ATTR)
    return (tuple(works), tuple(clones)) if works is not None and clones is not None else None


def _int64_literal(value: int) -> str:
    if not -(2**31) < value < 2**31:
        return f"INT64_C({value})"
    return f"({value})" if value < 0 else str(value)


def _wrapper(name: str, symbol: str, buffers: int, numbers: Sequence[int]) -> str:
    """``name``'s packed entry: its buffers, then pointers to its own numbers, to ``symbol``'s."""
    return "\n".join([
        f"int {name}_packed(void** args) {{",
        f"  static const int64_t rp_numbers[{len(numbers)}] = {{{', '.join(map(_int64_literal, numbers))}}};",
        f"  void* rp_args[{buffers + len(numbers)}];",
        f"  for (int rp_i = 0; rp_i < {buffers}; ++rp_i) rp_args[rp_i] = args[rp_i];",
        f"  for (int rp_i = 0; rp_i < {len(numbers)}; ++rp_i) rp_args[{buffers} + rp_i] = "
        "(void*)&rp_numbers[rp_i];",
        f"  return {symbol}_packed(rp_args);",
        "}",
        "",
    ])


def share_class(members: Sequence[tuple[str, tir.PrimFunc, KernelForm]], options: RenderOptions,
                salt: str = "") -> dict[str, str] | None:
    """The new C sources of a class's kernels (``(name, function, form)`` in module order,
    one form): the first holds the generic kernel, each calls it with its numbers.
    None when the generic kernel does not render. ``salt`` tells apart the symbols of
    classes of one text in several groups of compiler settings."""
    numbers = [form.numbers for _, _, form in members]
    columns = list(zip(*numbers))
    varying = frozenset(i for i, column in enumerate(columns) if len(set(column)) > 1)
    # positions whose numbers are the same in every kernel of the class share one variable:
    # the C compiler then sees the same index twice and loads (and divides) once, where a
    # quantizing loop read its input by three strides of one value and divided it thrice
    first: dict[tuple[int, ...], int] = {}
    alias = {i: first.setdefault(columns[i], i) for i in sorted(varying)}
    decisions = [_decisions(func) for _, func, _ in members]
    if not varying or any(d is None for d in decisions) or len({len(d[0]) for d in decisions}) > 1 or len(
            {len(d[1]) for d in decisions}) > 1:
        return None  # the same kernel twice, or kernels rendered without their decisions
    works = [d[0] for d in decisions]  # type: ignore[index]
    clones = [any(column) for column in zip(*(d[1] for d in decisions))]  # type: ignore[index]
    digest = hashlib.blake2b((salt + members[0][2].digest).encode("utf-8"), digest_size=8).hexdigest()
    symbol = f"rp_shared_{digest}"
    rendered = _generic(members[0][1], alias.get, symbol, options, len(works[0]), clones)
    parts = split_source(rendered[0]) if rendered is not None else None
    if parts is None:
        return None
    shared = [*parts.shared, (f"kernel {symbol}", f"int {symbol}_packed(void** args);\n")]
    head = [line for role, text in shared for line in (shared_marker(role), text)]
    sources = {}
    for index, (name, func, form) in enumerate(members):
        own = [*_CHEAP_VECTORIZER, parts.own, _RESTORE] if index == 0 else []
        lifted = [value for position, value in enumerate(form.numbers) if alias.get(position) == position]
        lifted += works[index]
        sources[name] = "\n".join([
            f"/* generated by raypass CodegenC: {name}, the code of {symbol} with its own numbers */",
            *head, KERNEL_MARKER, *own, _wrapper(name, symbol, len(func.params), lifted)])
    return sources


def share_kernel_code(kernels: Sequence[tuple[str, tir.PrimFunc, RenderOptions]], salt: str = ""
                      ) -> dict[str, tir.PrimFunc]:
    """The kernels (``(name, function, the options CodegenC rendered it with)`` in module
    order, of one group of compiler settings) that share code, with their new C sources;
    the others are left out."""
    classes: dict[tuple[RenderOptions, str], list[tuple[str, tir.PrimFunc, KernelForm]]] = {}
    for name, func, options in kernels:
        form = stored_form(func)
        if form is not None and kernel_c_source(func) is not None:
            classes.setdefault((options, form.digest), []).append((name, func, form))
    changed: dict[str, tir.PrimFunc] = {}
    for (options, _), members in classes.items():
        if len(members) < MIN_CLASS:
            continue
        sources = share_class(members, options, salt)
        for name, func, _ in members if sources is not None else ():
            changed[name] = with_kernel_c_source(func, sources[name])
    return changed


__all__ = ["CLONES_ATTR", "DEFAULT_SHARE", "FORM_ATTR", "KernelForm", "MIN_CLASS", "NUMBERS_ATTR",
           "PARALLEL_WORK_ATTR", "SHARE_CONFIG", "kernel_form", "share_class", "share_kernel_code",
           "stored_form", "with_render_decisions"]

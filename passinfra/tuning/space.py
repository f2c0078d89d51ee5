"""The schedule space of a kernel: the choices the code generator's rules make, as knobs.

Each knob is a PassContext config key the code generator reads while it lowers and
schedules a kernel, with the values worth trying; a kernel's space is the product of the
knobs that apply to it (by the ops it calls), and its default point is the value each key
has in the current context: the rules' own choice. A point is a schedule
(:mod:`passinfra.transform.schedule`): the config the kernel's passes run under. Every
point compiles to correct code (each knob only picks among kernels that compute the same
thing; ``tests/tune/test_space.py`` checks sampled points against the interpreter).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from passinfra.codegen.compute.conv_microkernel import (
    BLOCK_PIXELS_CONFIG,
    CACHED_WEIGHT_BYTES,
    CACHED_WEIGHT_CONFIG,
    MIN_BLOCK_PIXELS,
)
from passinfra.codegen.compute.conv_plan import CONV_KERNEL_CONFIG, CONV_KERNELS
from passinfra.codegen.thread_pool import MIN_WORK_PER_THREAD
from passinfra.ir.expr import Call, Function
from passinfra.ir.functor import iter_post_order
from passinfra.ir.op.registry import Op
from passinfra.transform.context import PassContext

Schedule = tuple[tuple[str, Any], ...]  # (config key, value), sorted by key


@dataclass(frozen=True)
class Knob:
    key: str  # the config key the code generator reads
    values: tuple[Any, ...]  # the values tried
    default: Any  # the key's value when the config does not set it
    ops: frozenset[str] = frozenset()  # applies to kernels calling one of these (empty: every kernel)
    doc: str = ""


KNOBS: tuple[Knob, ...] = (
    Knob("codegen.matmul_microkernel", (True, False), True, frozenset({"matmul"}),
         "a matmul whose right operand is a weight on the microkernels (weight in panels), or on BLAS"),
    Knob(CONV_KERNEL_CONFIG, CONV_KERNELS, "auto", frozenset({"nn.conv2d"}),
         "the convolution kernel: the rules' pick, or one kernel wherever it applies"),
    Knob(BLOCK_PIXELS_CONFIG, (MIN_BLOCK_PIXELS, 16, 64, 256), MIN_BLOCK_PIXELS, frozenset({"nn.conv2d"}),
         "output pixels a microkernel convolution's call gets at least (rows per call)"),
    Knob(CACHED_WEIGHT_CONFIG, (64 * 1024, CACHED_WEIGHT_BYTES, 1024 * 1024, 4 * 1024 * 1024),
         CACHED_WEIGHT_BYTES, frozenset({"nn.conv2d"}),
         "a microkernel convolution's weight larger than this is one call per image (threads split it "
         "by channel blocks) instead of calls per block of rows"),
    Knob("codegen.min_parallel_work", (2_000, MIN_WORK_PER_THREAD, 32_000, 128_000), MIN_WORK_PER_THREAD,
         frozenset(), "the work a thread must get: how many threads a kernel's loops split over"),
)


def _op_names(func: Function) -> set[str]:
    return {node.op.name for node in iter_post_order(func.body)
            if isinstance(node, Call) and isinstance(node.op, Op)}


def knobs_for(func: Function) -> list[Knob]:
    """The knobs that apply to primitive ``func``."""
    ops = _op_names(func)
    return [knob for knob in KNOBS if not knob.ops or knob.ops & ops]


def default_point(func: Function, ctx: PassContext | None = None) -> Schedule:
    """The rules' choice for ``func``: each knob's value in ``ctx`` (default: current)."""
    ctx = PassContext.current() if ctx is None else ctx
    return tuple(sorted((knob.key, ctx.get_config(knob.key, knob.default)) for knob in knobs_for(func)))


def all_points(func: Function) -> list[Schedule]:
    """Every point of ``func``'s space, in a fixed order."""
    knobs = knobs_for(func)
    return [tuple(sorted(zip((k.key for k in knobs), values)))
            for values in itertools.product(*(k.values for k in knobs))]


def neighbours(func: Function, point: Schedule) -> list[Schedule]:
    """The points of ``func``'s space that differ from ``point`` in one knob, knob by knob
    in :data:`KNOBS` order (a knob's values in their declared order)."""
    values = dict(point)
    found = []
    for knob in knobs_for(func):
        for value in knob.values:
            if value != values.get(knob.key, knob.default):
                found.append(tuple(sorted({**values, knob.key: value}.items())))
    return found


def candidates(func: Function, count: int, seed: int = 0, ctx: PassContext | None = None) -> list[Schedule]:
    """Up to ``count`` distinct points: the default first, then its neighbours (one knob
    changed: the rules are a good start, and one decision off is where a kernel usually
    gains, such as another convolution kernel on this CPU), then the rest of the space in
    a seeded random order (all of it when ``count`` covers it)."""
    first = default_point(func, ctx)
    near = [point for point in neighbours(func, first) if point != first]
    seen = {first, *near}
    rest = [point for point in all_points(func) if point not in seen]
    random.Random(seed).shuffle(rest)
    return [first, *near, *rest][:max(count, 1)]


def schedule_text(schedule: Iterable[tuple[str, Any]]) -> str:
    return ", ".join(f"{key.split('.')[-1]}={value}" for key, value in schedule) or "(rules)"


__all__ = ["KNOBS", "Knob", "Schedule", "all_points", "candidates", "default_point", "knobs_for",
           "neighbours", "schedule_text"]

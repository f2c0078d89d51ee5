"""A function's schedule: PassContext config that the passes run on that function see.

The code generator decides each kernel's schedule by rules read from the config
(``codegen.matmul_microkernel``, ``codegen.conv_kernel``, ``codegen.min_parallel_work``,
...). A function whose attrs hold a ``Schedule`` (``((config key, value), ...)``, put there
by the ApplyTuningRecords pass from a tuning database, see :mod:`passinfra.tuning`) is
transformed with those keys replaced: every function pass, wherever it runs (the one
per-function loop, :mod:`passinfra.transform.function_stage`), and any module pass that
plans one function's kernel (PanelWeights) enter :func:`function_context` around it. The
schedule is part of the function, so a worker sees what the driver sees and two builds
with the same records make the same library.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from passinfra.transform.context import PassContext

SCHEDULE_ATTR = "Schedule"


def function_schedule(func: Any) -> dict[str, Any]:
    """The config ``func``'s schedule sets ({} when it has none)."""
    attrs = getattr(func, "attrs", None)
    schedule = attrs.get(SCHEDULE_ATTR) if attrs is not None else None
    return dict(schedule) if schedule else {}


@contextlib.contextmanager
def function_context(ctx: PassContext, func: Any) -> Iterator[PassContext]:
    """``ctx``, or (for a function with a schedule) a PassContext like it whose config has
    the schedule's keys, entered while the block runs; its instruments are ``ctx``'s,
    shared and not re-entered."""
    schedule = function_schedule(func)
    if not schedule:
        yield ctx
        return
    inner = PassContext(opt_level=ctx.opt_level, required_pass=ctx.required_pass,
                        disabled_pass=ctx.disabled_pass, config={**ctx.config, **schedule})
    with inner:
        inner.instruments = ctx.instruments
        try:
            yield inner
        finally:
            inner.instruments = ()


__all__ = ["SCHEDULE_ATTR", "function_context", "function_schedule"]

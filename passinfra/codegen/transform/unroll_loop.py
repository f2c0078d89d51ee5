"""UnrollLoop: unroll small loops, explicitly or by marking them for the C compiler.

Config ``tir.UnrollLoop`` (a dict, or an :class:`UnrollLoopConfig`, which is one):

* ``auto_max_step`` (int, default 0): a loop with constant bounds whose total number of
  innermost steps (its extent times the steps of the loops inside it) is at most this
  is unrolled even if it is not marked;
* ``explicit_unroll`` (bool, default True): unroll by copying the body once per
  iteration, the loop variable replaced by its value (inner binders get fresh
  variables per copy, and each copy's arithmetic is simplified); when False, loops
  are only marked ``ForKind.UNROLLED`` and the C renderer emits an unroll pragma.

Loops marked ``UNROLLED`` are always unrolled (explicitly when possible: a loop whose
bounds are not constant stays a marked loop).
"""

from __future__ import annotations

from typing import Any

from passinfra.codegen.prim_func_pass import create_prim_func_pass
from passinfra.codegen.transform.simplify import Simplifier
from passinfra.tir import For, ForKind, IntImm, PrimFunc, SeqStmt, Stmt, TVar
from passinfra.tir.arith import Range, const_int, constant_range
from passinfra.tir.functor import StmtExprMutator, StmtExprVisitor, substitute
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.errors import PassConfigTypeError
from passinfra.transform.passes import FunctionPass
from passinfra.transform.registry import register_pass

CONFIG_KEY = "tir.UnrollLoop"


class UnrollLoopConfig(dict):
    """The ``tir.UnrollLoop`` config: a dict whose fields are checked on creation."""

    FIELDS: dict[str, tuple[type, Any]] = {"auto_max_step": (int, 0), "explicit_unroll": (bool, True)}

    def __init__(self, auto_max_step: int = 0, explicit_unroll: bool = True) -> None:
        values = {"auto_max_step": auto_max_step, "explicit_unroll": explicit_unroll}
        for field, value in values.items():
            expected = self.FIELDS[field][0]
            # bool is an int in Python: keep True out of auto_max_step and 1 out of explicit_unroll
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise PassConfigTypeError(
                    f"config {CONFIG_KEY!r}: field {field!r} expects {expected.__name__}, "
                    f"got {value!r} of type {type(value).__name__}"
                )
        if auto_max_step < 0:
            raise PassConfigTypeError(f"config {CONFIG_KEY!r}: field 'auto_max_step' must be >= 0, "
                                      f"got {auto_max_step}")
        super().__init__(values)

    @property
    def auto_max_step(self) -> int:
        return self["auto_max_step"]

    @property
    def explicit_unroll(self) -> bool:
        return self["explicit_unroll"]

    @classmethod
    def from_value(cls, value: Any) -> UnrollLoopConfig:
        """The config from a dict (unknown fields are errors naming them) or None."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise PassConfigTypeError(f"config {CONFIG_KEY!r} expects a dict, got {type(value).__name__}")
        unknown = sorted(set(value) - set(cls.FIELDS))
        if unknown:
            raise PassConfigTypeError(f"config {CONFIG_KEY!r}: unknown field(s) {unknown}; "
                                      f"known fields: {sorted(cls.FIELDS)}")
        return cls(**value)


# The typed config cannot build a class from a dict, so the key holds a dict (an
# UnrollLoopConfig is one) and the pass checks its fields when it reads it.
register_config(CONFIG_KEY, dict)


class _StepCounter(StmtExprVisitor):
    """Innermost steps of a statement: the product of constant loop extents along the
    deepest nest, None if some loop's extent is not constant."""

    def __init__(self) -> None:
        self.steps: int | None = 1
        self.scale = 1

    def visit_for(self, stmt: For) -> None:
        extent = const_int(stmt.extent)
        if extent is None:
            self.steps = None
            return
        outer = self.scale
        self.scale *= max(extent, 0)
        if self.steps is not None:
            self.steps = max(self.steps, self.scale)
        self.visit_stmt(stmt.body)
        self.scale = outer


def _steps(stmt: Stmt) -> int | None:
    counter = _StepCounter()
    counter.visit_stmt(stmt)
    return counter.steps


class _Unroller(StmtExprMutator):
    def __init__(self, config: UnrollLoopConfig) -> None:
        self.config = config
        # ranges of the enclosing loops' variables: a copy's simplifier decides conditions
        # on them too (a pooling tap's `2*i - 1 >= 0` once the tap is a constant)
        self.outer_ranges: dict[TVar, Range] = {}

    def visit_for(self, stmt: For) -> Stmt:
        # decided on the loop nest as written (steps of inner loops count even when they
        # are unrolled themselves); inner loops are then unrolled first, before copying
        wanted = self._wants_unroll(stmt)
        bound = constant_range(stmt.start, stmt.extent)
        if bound is not None:
            self.outer_ranges[stmt.loop_var] = bound
        try:
            inner = super().visit_for(stmt)
        finally:
            self.outer_ranges.pop(stmt.loop_var, None)
        if not wanted:
            return inner
        start, extent = const_int(inner.start), const_int(inner.extent)
        if not self.config.explicit_unroll or start is None or extent is None:
            if inner.kind is ForKind.UNROLLED:
                return inner
            return For(inner.loop_var, inner.start, inner.extent, ForKind.UNROLLED, inner.body)
        # each copy is simplified on its own: its loop variable is now a constant
        copies = [
            Simplifier(self.outer_ranges).visit_stmt(substitute(
                inner.body, {inner.loop_var: IntImm(value, inner.loop_var.dtype)}, fresh_binders=True))
            for value in range(start, start + extent)
        ]
        return copies[0] if len(copies) == 1 else SeqStmt(tuple(copies))

    def _wants_unroll(self, loop: For) -> bool:
        if loop.kind is ForKind.UNROLLED:
            return True
        if loop.kind is not ForKind.SERIAL or self.config.auto_max_step <= 0:
            return False
        if const_int(loop.start) is None or const_int(loop.extent) is None:
            return False
        steps = _steps(loop)
        return steps is not None and steps <= self.config.auto_max_step


def unroll_prim_func(func: PrimFunc, config: UnrollLoopConfig) -> PrimFunc:
    body = _Unroller(config).visit_stmt(func.body)
    return func if body is func.body else func.with_body(body)


def _run(func: PrimFunc, mod: Any, ctx: PassContext) -> PrimFunc:
    return unroll_prim_func(func, UnrollLoopConfig.from_value(ctx.get_config(CONFIG_KEY)))


@register_pass("UnrollLoop")
def UnrollLoop() -> FunctionPass:
    """Unroll loops per the ``tir.UnrollLoop`` config (see the module docstring)."""
    return create_prim_func_pass(_run, opt_level=1, name="UnrollLoop", reads_module=False)


__all__ = ["UnrollLoop", "UnrollLoopConfig", "unroll_prim_func", "CONFIG_KEY"]

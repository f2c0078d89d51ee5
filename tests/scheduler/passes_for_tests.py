"""Function and module passes used by the scheduler tests.

They live in an importable module (not inside a test function) so Ray workers unpickle
them by reference. ``identity`` and ``chain_module`` are the benchmarks' too: they are
defined in :mod:`passinfra.testing` and re-exported here, so the tests keep reading them
as ``P.identity`` and ``P.chain_module``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from passinfra import ir
from passinfra.ir import op
from passinfra.ir.type_infer import infer_module
from passinfra.testing import chain_module as chain_module
from passinfra.testing import identity as identity
from passinfra.transform import (
    FunctionPass,
    Pass,
    PassContext,
    PassInfo,
    function_pass,
    module_pass,
    register_pass,
)
from passinfra.transform.builtin.function_types import ensure_typed


class AddToMultiply(ir.ExprMutator):
    def visit_call(self, call):
        new = super().visit_call(call)
        if isinstance(new, ir.Call) and getattr(new.op, "name", "") == "add":
            return op.multiply(*new.args)
        return new


@function_pass(opt_level=1, name="AddToMultiply", reads_module=False)
def add_to_multiply(func, mod, ctx):
    return AddToMultiply().visit(func)


@function_pass(opt_level=1, name="RecordPid", reads_module=False)
def record_pid(func, mod, ctx):
    return func.with_attr("pid", os.getpid())


@function_pass(opt_level=0, name="TagOptLevel", reads_module=False)
def tag_opt_level(func, mod, ctx):
    """Shows that workers run under an equivalent PassContext."""
    return func.with_attr("opt_level_seen", ctx.opt_level)


@function_pass(opt_level=0, name="Sleep20ms", reads_module=False)
def sleep_20ms(func, mod, ctx):
    time.sleep(0.02)
    return func


@function_pass(opt_level=0, name="CountCallers")
def count_callers(func, mod, ctx):
    """Reads the whole module (reads_module left at its default, True)."""
    total = sum(1 for f in mod.functions.values() if isinstance(f, ir.Function))
    return func.with_attr("functions_seen", total)


@module_pass(opt_level=0, name="AddHelperFunction")
def add_helper_function(mod, ctx):
    x = ir.var("x", (4,))
    mod["helper"] = ir.Function([x], op.negative(x))
    return mod


class MyPassError(Exception):
    """A custom exception type that must reach the caller unchanged."""


@register_pass("FailOnF3", override=True)
def fail_on_f3_factory():
    @function_pass(opt_level=0, name="FailOnF3", reads_module=False)
    def fail_on_f3(func, mod, ctx):
        if "tag" in func.attrs and func.attrs["tag"] == "f3":
            raise MyPassError("f3 is not welcome here")
        return func

    return fail_on_f3


def crash_once_pass(marker_dir: str, victim: str):
    """A pass that kills its worker process the first time it sees ``victim``."""

    @function_pass(opt_level=0, name="CrashOnce", reads_module=False)
    def crash_once(func, mod, ctx):
        marker = Path(marker_dir) / f"crashed-{func.attrs.get('tag')}"
        if func.attrs.get("tag") == victim and not marker.exists():
            marker.write_text("crashed")
            os._exit(17)
        return func.with_attr("survived", True)

    return crash_once


@function_pass(opt_level=0, name="RandomDelay", reads_module=False)
def random_delay(func, mod, ctx):
    """Sleeps a random 0-15 ms, so batch calls complete in a different order every run."""
    import random

    time.sleep(random.random() * 0.015)
    return func.with_attr("delayed", True)


@function_pass(opt_level=0, name="RecordArrivedTyped", reads_module=False)
def record_arrived_typed(func, mod, ctx):
    """Whether the function came with its type cached, as InferType leaves it in-process."""
    return func.with_attr("arrived_typed", func._checked_type is not None)


# A type-inference pass under a name of its own: what the scheduler does for InferType it
# must do for any pass that declares ``infers_types`` (the tests register it while they run).
DECLARED_TYPE_INFERENCE = "CacheTypesUnderAnotherName"


def _cache_types(mod: ir.IRModule, ctx: PassContext) -> ir.IRModule:
    return infer_module(mod)


def declared_type_inference() -> Pass:
    """The factory the tests register as ``DECLARED_TYPE_INFERENCE``."""
    return module_pass(_cache_types, opt_level=0, name=DECLARED_TYPE_INFERENCE, infers_types=True)


def undeclared_type_inference(name: str) -> Pass:
    """The same work under ``name``, without the declaration: nothing special to a scheduler."""
    return module_pass(_cache_types, opt_level=0, name=name)


@function_pass(opt_level=0, name="RecordBodyType", required=[DECLARED_TYPE_INFERENCE], reads_module=False)
def record_body_type(func, mod, ctx):
    """Reads the types its required pass caches; run bare on an untyped module it types its
    function itself, against the module (as SimplifyInference does without InferType)."""
    ensure_typed(func, mod)
    return func.with_attr("body_type", str(func.body.checked_type))


def calling_module(num_callers: int) -> ir.IRModule:
    """``helper`` and callers of it: typing a caller needs the helper's type, which a
    worker without the helper cannot know."""
    mod = ir.IRModule()
    x = ir.var("x", (4,))
    mod["helper"] = ir.Function([x], op.negative(x))
    for i in range(num_callers):
        y = ir.var("y", (4,))
        body = op.add(ir.Call(mod.get_global_var("helper"), [y]), ir.const(float(i)))
        mod[f"caller{i}"] = ir.Function([y], body).with_attr("tag", f"caller{i}")
    return mod


class _TagKernels(FunctionPass):
    """Works on functions with a truthy ``Primitive`` attr only, as the kernel passes do."""

    reads_module = False

    def __init__(self) -> None:
        super().__init__(lambda func, mod, ctx: func.with_attr("kernel_seen", True),
                         PassInfo(0, "TagKernels"))

    def accepts(self, func):
        return isinstance(func, ir.Function) and bool(func.attrs.get("Primitive", 0))


tag_kernels = _TagKernels()


def host_and_kernels_module(num_kernels: int, weight_bytes: int) -> ir.IRModule:
    """A ``main`` holding ``weight_bytes`` of constants and calling ``num_kernels``
    Primitive functions, the shape of a module after FuseOps."""
    import numpy as np

    mod = ir.IRModule()
    for i in range(num_kernels):
        x = ir.var("x", (4,))
        mod[f"kernel{i}"] = ir.Function([x], op.exp(op.add(x, ir.const(float(i))))).with_attr("Primitive", 1)
    weight = np.arange(weight_bytes // 4, dtype="float32")
    x = ir.var("x", (4,))
    body = op.add(x, op.sum(ir.const(weight)))
    for i in range(num_kernels):
        body = ir.Call(mod.get_global_var(f"kernel{i}"), [body])
    mod["main"] = ir.Function([x], body)
    return mod

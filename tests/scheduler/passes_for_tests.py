"""Function and module passes used by the scheduler tests.

They live in an importable module (not inside a test function) so Ray workers unpickle
them by reference.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from passinfra import ir
from passinfra.ir import op
from passinfra.transform import FunctionPass, PassInfo, function_pass, module_pass, register_pass


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


@function_pass(opt_level=0, name="Identity", reads_module=False)
def identity(func, mod, ctx):
    return func


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


def chain_module(num_functions: int, length: int = 20) -> ir.IRModule:
    mod = ir.IRModule()
    for i in range(num_functions):
        x = ir.var("x", (4,))
        body = x
        for j in range(length):
            body = op.add(body, ir.const(float(j % 7)))
        mod[f"f{i}"] = ir.Function([x], body).with_attr("tag", f"f{i}")
    return mod


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

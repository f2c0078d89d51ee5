"""Shared helpers for the pass-infrastructure tests: private test ops, small modules and
simple passes (the real ops and built-in passes are other modules' business)."""

from __future__ import annotations

import numpy as np

from passinfra import ir
from passinfra.ir.op.registry import OpPattern, register_op
from passinfra.transform import PassContext, function_pass, module_pass


def _same_type(arg_types, attrs):
    return arg_types[0]


def _register(name: str, num_inputs: int, impl) -> ir.Op:
    return register_op(
        name, num_inputs=num_inputs, type_rel=_same_type, impl=impl,
        pattern=OpPattern.ELEMWISE, override=True,
    )


ADD = _register("test_pass.add", 2, lambda args, attrs: np.add(*args))
MUL = _register("test_pass.multiply", 2, lambda args, attrs: np.multiply(*args))
LOG = _register("test_pass.log", 1, lambda args, attrs: np.log(args[0]))


def add(a: ir.Expr, b: ir.Expr) -> ir.Call:
    return ir.Call(ADD, [a, b])


def mul(a: ir.Expr, b: ir.Expr) -> ir.Call:
    return ir.Call(MUL, [a, b])


def log(x: ir.Expr) -> ir.Call:
    return ir.Call(LOG, [x])


def make_module() -> ir.IRModule:
    """``myAdd(x, y) = x + y`` and ``myLog(z) = log(z)``."""
    x, y, z = ir.var("x", (5, 10)), ir.var("y", (5, 10)), ir.var("z", (10,))
    return ir.IRModule({"myAdd": ir.Function([x, y], add(x, y)), "myLog": ir.Function([z], log(z))})


def op_names(expr: ir.Expr) -> list[str]:
    """The op names called in ``expr``, in post order."""
    return [node.op.name for node in ir.iter_post_order(expr) if isinstance(node, ir.Call)]


def fingerprint(mod: ir.IRModule) -> list[tuple[str, int]]:
    """Names and object ids of the functions: equal before and after iff the module
    object was not updated (functions are immutable, so ids pin them down)."""
    return [(gv.name_hint, id(func)) for gv, func in mod.items()]


class AddToMul(ir.ExprMutator):
    def visit_call(self, call: ir.Call) -> ir.Expr:
        new = super().visit_call(call)
        if new.op is ADD:
            return ir.Call(MUL, new.args, new.attrs)
        return new


def add_to_mul_func(func: ir.Function, mod: ir.IRModule, ctx: PassContext) -> ir.Function:
    return AddToMul().visit(func)


def make_add_to_mul(opt_level: int = 1, name: str = "AddToMul", required=None):
    return function_pass(add_to_mul_func, opt_level=opt_level, name=name, required=required)


def make_add_abs_function(opt_level: int = 1, name: str = "AddAbsFunction"):
    """A module pass adding ``myAbs(a) = log(a)`` (name kept from TVM's test)."""

    def add_function(mod: ir.IRModule, ctx: PassContext) -> ir.IRModule:
        a = ir.var("a", (5, 10))
        mod["myAbs"] = ir.Function([a], log(a))
        return mod

    return module_pass(add_function, opt_level=opt_level, name=name)


def make_tracer(log_list: list, name: str, opt_level: int = 0, required=None):
    """A module pass that appends its name to ``log_list`` and returns the module."""

    def trace(mod: ir.IRModule, ctx: PassContext) -> ir.IRModule:
        log_list.append(name)
        return mod

    return module_pass(trace, opt_level=opt_level, name=name, required=required)

"""The loop-level IR verifier: scoping, buffer access shapes and dtypes.

Checks, for a PrimFunc:

* every TVar used is bound by an enclosing For or LetStmt (and not rebound inside its
  own scope);
* every buffer used is a parameter or allocated by an enclosing Allocate;
* every access has one index per buffer dimension, or exactly one index into a 1-d
  buffer when ``flattened`` (then every buffer must be 1-d);
* dtypes agree: both operands of arithmetic and comparisons, bool conditions (If,
  Select, And/Or/Not), integer indices, loop bounds of the loop variable's dtype, a
  LetStmt value of its variable's dtype, a stored value of the buffer's dtype;
* constant indices lie inside the buffer.

All problems are collected; :class:`TIRVerifyError` lists them and prints the function.
"""

from __future__ import annotations

from typing import Any

from passinfra.errors import IRError
from passinfra.tir import nodes as n
from passinfra.tir.functor import expr_children
from passinfra.tir.nodes import Buffer, PrimExpr, PrimFunc, Stmt, TVar
from passinfra.tir.printer import tir_astext

_MAX_PROBLEMS = 20


class TIRVerifyError(IRError):
    """The loop-level verifier rejected a PrimFunc; ``problems`` lists what is wrong."""

    def __init__(self, message: str, problems: list[str]) -> None:
        super().__init__(message)
        self.problems = problems


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


class _Verifier:
    def __init__(self, flattened: bool) -> None:
        self.flattened = flattened
        self.bound_vars: set[TVar] = set()
        self.live_buffers: set[Buffer] = set()
        self.problems: list[str] = []

    def problem(self, text: str) -> None:
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(text)

    # -- statements (recursive per scope)

    def stmt(self, node: Stmt) -> None:
        kind = type(node)
        if kind is n.SeqStmt:
            for child in node.stmts:
                self.stmt(child)
        elif kind is n.For:
            self.expr(node.start)
            self.expr(node.extent)
            var = node.loop_var
            if not _is_int(var.dtype):
                self.problem(f"loop variable {var.name} has dtype {var.dtype}; loop variables are integers")
            for what, bound in (("start", node.start), ("extent", node.extent)):
                if bound.dtype != var.dtype:
                    self.problem(f"loop {var.name}: {what} has dtype {bound.dtype}, "
                                 f"the loop variable {var.dtype}")
            self.scoped_var(var, node.body)
        elif kind is n.LetStmt:
            self.expr(node.value)
            if node.value.dtype != node.var.dtype:
                self.problem(f"let {node.var.name}: value has dtype {node.value.dtype}, "
                             f"the variable {node.var.dtype}")
            self.scoped_var(node.var, node.body)
        elif kind is n.BufferStore:
            self.access("store to", node.buffer, node.indices)
            for index in node.indices:
                self.expr(index)
            self.expr(node.value)
            if node.value.dtype != node.buffer.dtype:
                self.problem(f"store to buffer {node.buffer.name}: value has dtype {node.value.dtype}, "
                             f"the buffer {node.buffer.dtype}")
        elif kind is n.Allocate:
            buf = node.buffer
            if buf in self.live_buffers:
                self.problem(f"buffer {buf.name} is allocated again inside its own scope")
                self.stmt(node.body)
            else:
                self.check_buffer_shape(buf)
                self.live_buffers.add(buf)
                self.stmt(node.body)
                self.live_buffers.discard(buf)
        elif kind is n.IfThenElse:
            self.expr(node.cond)
            self.require_bool("if condition", node.cond)
            self.stmt(node.then_case)
            if node.else_case is not None:
                self.stmt(node.else_case)
        elif kind is n.Evaluate:
            self.expr(node.value)
        else:
            self.problem(f"not a loop-level statement: {kind.__name__}")

    def scoped_var(self, var: TVar, body: Stmt) -> None:
        if var in self.bound_vars:
            self.problem(f"variable {var.name} is bound again inside its own scope")
            self.stmt(body)
            return
        self.bound_vars.add(var)
        self.stmt(body)
        self.bound_vars.discard(var)

    def check_buffer_shape(self, buf: Buffer) -> None:
        if self.flattened and len(buf.shape) != 1:
            self.problem(f"buffer {buf.name} has shape {buf.shape}; "
                         "a flattened function has 1-d buffers only")
        for extent in buf.shape:
            if type(extent) is not int:  # symbolic: over the function's size variables only
                self.expr(extent)

    def require_bool(self, what: str, expr: PrimExpr) -> None:
        if expr.dtype != "bool":
            self.problem(f"{what} must be bool, got {expr.dtype}")

    def access(self, what: str, buf: Buffer, indices: tuple) -> None:
        if buf not in self.live_buffers:
            self.problem(f"{what} buffer {buf.name}: the buffer is neither a parameter "
                         "nor allocated in scope")
        if self.flattened and len(indices) != 1:
            self.problem(f"{what} buffer {buf.name}: {len(indices)} indices, but a flattened buffer "
                         "takes exactly 1")
            return
        if not self.flattened and len(indices) != len(buf.shape):
            self.problem(f"{what} buffer {buf.name}: {len(indices)} indices for a buffer of "
                         f"{len(buf.shape)} dimensions, shape {buf.shape}")
            return
        for axis, index in enumerate(indices):
            if not _is_int(index.dtype):
                self.problem(f"{what} buffer {buf.name}: index {axis} has dtype {index.dtype}; "
                             "indices are integers")
            extent = buf.shape[axis] if axis < len(buf.shape) else 1
            if type(index) is n.IntImm and type(extent) is int and not 0 <= index.value < extent:
                self.problem(f"{what} buffer {buf.name}: constant index {index.value} is out of bounds "
                             f"for dimension {axis} of extent {extent}")

    # -- expressions (iterative)

    def expr(self, root: PrimExpr) -> None:
        stack: list[Any] = [root]
        seen: set[int] = set()
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            try:
                children = expr_children(node)
            except IRError as err:
                self.problem(str(err))
                continue
            self.expr_node(node)
            stack.extend(children)

    def expr_node(self, node: Any) -> None:
        kind = type(node)
        if kind is TVar:
            if node not in self.bound_vars:
                self.problem(f"variable {node.name} is used but not bound by an enclosing For or LetStmt")
        elif kind is n.BufferLoad:
            self.access("load from", node.buffer, node.indices)
        elif isinstance(node, (n.BinaryOp, n.CmpOp)):
            if node.a.dtype != node.b.dtype:
                self.problem(f"operands of {kind.__name__} have different dtypes: "
                             f"{node.a.dtype} vs {node.b.dtype}")
            if kind in (n.And, n.Or):
                self.require_bool(f"operand of {kind.__name__}", node.a)
        elif kind is n.Not:
            self.require_bool("operand of Not", node.a)
        elif kind is n.Select:
            self.require_bool("select condition", node.cond)
            if node.true_value.dtype != node.false_value.dtype:
                self.problem(f"select branches have different dtypes: "
                             f"{node.true_value.dtype} vs {node.false_value.dtype}")


def verify_prim_func(func: PrimFunc, flattened: bool | None = None, name: str | None = None) -> None:
    """Raise :class:`TIRVerifyError` if ``func`` is malformed (see the module docstring).

    ``flattened`` defaults to the function's ``flattened`` attr.
    """
    if not isinstance(func, PrimFunc):
        raise IRError(f"verify_prim_func checks PrimFuncs, got {type(func).__name__}")
    if flattened is None:
        flattened = bool(func.attrs.get("flattened", False))
    verifier = _Verifier(flattened)
    for var in func.dims:
        if var in verifier.bound_vars:
            verifier.problem(f"size variable {var.name} is a parameter twice")
        verifier.bound_vars.add(var)
    for param in func.params:
        if param in verifier.live_buffers:
            verifier.problem(f"buffer {param.name} is a parameter twice")
        verifier.check_buffer_shape(param)
        verifier.live_buffers.add(param)
    verifier.stmt(func.body)
    if verifier.problems:
        name = name or str(func.attrs.get("global_symbol", "<prim func>"))
        listing = "\n".join(f"  - {p}" for p in verifier.problems)
        raise TIRVerifyError(
            f"PrimFunc {name} is malformed ({len(verifier.problems)} problem(s)):\n{listing}\n"
            f"in:\n{tir_astext(func)}",
            verifier.problems,
        )


__all__ = ["TIRVerifyError", "verify_prim_func"]

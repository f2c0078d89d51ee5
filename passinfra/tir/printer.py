"""Readable text of loop-level IR, in the spirit of TVMScript::

    @prim_func(global_symbol="fused_add", num_inputs=2)
    def fused_add(A: Buffer((4, 4), float32), B: Buffer((4, 4), float32), C: Buffer((4, 4), float32)):
      for i in serial(0, 4):
        for j in vectorized(0, 4):
          C[i, j] = A[i, j] + B[i, j]

Integers of the index dtype (int64) print bare, other immediates carry their dtype
(``1.5f``, ``2i32``); operators print infix with the fewest parentheses that keep the
meaning. Distinct variables or buffers that share a name get ``_1``, ``_2``... suffixes.
Expressions are printed without recursion. Long string attrs (C source) and bytes
(object code) are summarized. The text is for people; nothing parses it back.
Importing this module registers it for PrimFuncs in ``IRModule.astext()``;
``PrimFunc.astext()`` and ``str(prim_func)`` call :func:`tir_astext` too.
"""

from __future__ import annotations

import enum
import json
from typing import Any

from passinfra.errors import IRError
from passinfra.tir import nodes as n
from passinfra.tir.functor import fold_expr
from passinfra.tir.nodes import INDEX_DTYPE, Buffer, PrimExpr, PrimFunc, Stmt, TVar
from passinfra.tir.schema import Role, schema_of

INDENT = "  "
_LONG_STRING = 60

# infix operators: (symbol, precedence); higher binds tighter (Python's ordering)
_INFIX: dict[type, tuple[str, int]] = {
    n.Or: ("or", 1), n.And: ("and", 2),
    n.EQ: ("==", 4), n.NE: ("!=", 4), n.LT: ("<", 4), n.LE: ("<=", 4), n.GT: (">", 4), n.GE: (">=", 4),
    n.Add: ("+", 6), n.Sub: ("-", 6),
    n.Mul: ("*", 7), n.Div: ("/", 7), n.FloorDiv: ("//", 7), n.FloorMod: ("%", 7),
}
_NOT_PRECEDENCE = 3
_ATOM = 10
_CALL_LIKE = {n.Min: "min", n.Max: "max"}
_FLOAT_SUFFIX = {"float32": "f", "float64": "f64", "float16": "f16"}


class _Names:
    """Printed names of variables and buffers (one namespace, unique by identity)."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.used: set[str] = set()
        self.alive: list[Any] = []

    def __call__(self, obj: TVar | Buffer) -> str:
        name = self.names.get(id(obj))
        if name is None:
            base = obj.name if obj.name.isidentifier() else json.dumps(obj.name)
            name, k = base, 1
            while name in self.used:
                name, k = f"{base}_{k}", k + 1
            self.used.add(name)
            self.names[id(obj)] = name
            self.alive.append(obj)
        return name


def _imm_text(node: n.IntImm | n.FloatImm) -> str:
    if type(node) is n.IntImm:
        if node.dtype == "bool":
            return "True" if node.value else "False"
        return str(node.value) if node.dtype == INDEX_DTYPE else f"{node.value}{_int_suffix(node.dtype)}"
    return f"{float(node.value)!r}{_FLOAT_SUFFIX.get(node.dtype, '_' + node.dtype)}"


def _int_suffix(dtype: str) -> str:
    return dtype.replace("uint", "u").replace("int", "i")


class _Printer:
    def __init__(self) -> None:
        self.name = _Names()
        self.lines: list[str] = []

    # -- expressions: post-order, each node's (text, precedence) from its children's

    def expr(self, root: PrimExpr) -> str:
        return fold_expr(root, self._expr_node)[0]

    def _expr_node(self, node: Any, kids: list[tuple[str, int]]) -> tuple[str, int]:
        kind = type(node)
        if kind is n.IntImm or kind is n.FloatImm:
            text = _imm_text(node)
            return text, (_ATOM if not text.startswith("-") else 8)
        if kind is TVar:
            return self.name(node), _ATOM
        infix = _INFIX.get(kind)
        if infix is not None:
            symbol, prec = infix
            # left-associative: the right operand needs parentheses at equal precedence,
            # comparisons chain in Python, so they need them on both sides
            left_min = prec + 1 if prec == 4 else prec
            left = _paren(kids[0], left_min)
            right = _paren(kids[1], prec + 1)
            return f"{left} {symbol} {right}", prec
        if kind in _CALL_LIKE:
            return f"{_CALL_LIKE[kind]}({kids[0][0]}, {kids[1][0]})", _ATOM
        if kind is n.Not:
            return f"not {_paren(kids[0], _NOT_PRECEDENCE)}", _NOT_PRECEDENCE
        if kind is n.Select:
            return f"select({', '.join(k[0] for k in kids)})", _ATOM
        if kind is n.Cast:
            return f"{node.dtype}({kids[0][0]})", _ATOM
        if kind is n.Intrinsic:
            args = ", ".join(k[0] for k in kids)
            return f"{node.name}({args})", _ATOM
        if kind is n.BufferLoad:
            return f"{self.name(node.buffer)}[{', '.join(k[0] for k in kids)}]", _ATOM
        return f"{self.generic_head(node, iter(k[0] for k in kids))}", _ATOM

    def generic_head(self, node: Any, operands: Any) -> str:
        """``Kind(field=..., ...)`` from a kind's declaration: how a kind with no syntax of
        its own prints (values as they are, buffers and expressions by their text; nested
        statements follow as an indented block)."""
        parts = []
        for f in schema_of(type(node)).fields:
            item = getattr(node, f.name)
            if f.role is Role.VALUE:
                shown = item.value if isinstance(item, enum.Enum) else item
                parts.append(f"{f.name}={shown!r}")
            elif f.role is Role.BUFFER or f.role is Role.BINDER:
                parts.append(f"{f.name}={self.name(item)}")
            elif f.role is Role.EXPR:
                parts.append(f"{f.name}={next(operands)}")
            elif f.role is Role.EXPR_SEQ:
                parts.append(f"{f.name}=[{', '.join(next(operands) for _ in item)}]")
        return f"{type(node).__name__}({', '.join(parts)})"

    # -- statements: recursive per scope (loop nests are shallow)

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(INDENT * depth + text)

    def stmt(self, node: Stmt, depth: int) -> None:
        kind = type(node)
        if kind is n.SeqStmt:
            if not node.stmts:
                self.emit(depth, "pass")
            for child in node.stmts:
                self.stmt(child, depth)
        elif kind is n.For:
            var = self.name(node.loop_var)
            head = f"for {var} in {node.kind.value}({self.expr(node.start)}, {self.expr(node.extent)}):"
            self.emit(depth, head)
            self.stmt(node.body, depth + 1)
        elif kind is n.BufferStore:
            indices = ", ".join(self.expr(i) for i in node.indices)
            self.emit(depth, f"{self.name(node.buffer)}[{indices}] = {self.expr(node.value)}")
        elif kind is n.Allocate:
            self.emit(depth, f"with allocate({self.buffer_decl(node.buffer)}):")
            self.stmt(node.body, depth + 1)
        elif kind is n.IfThenElse:
            self.emit(depth, f"if {self.expr(node.cond)}:")
            self.stmt(node.then_case, depth + 1)
            if node.else_case is not None:
                self.emit(depth, "else:")
                self.stmt(node.else_case, depth + 1)
        elif kind is n.LetStmt:
            self.emit(depth, f"{self.name(node.var)}: {node.var.dtype} = {self.expr(node.value)}")
            self.stmt(node.body, depth)
        elif kind is n.Evaluate:
            self.emit(depth, f"evaluate({self.expr(node.value)})")
        else:
            self.generic_stmt(node, depth)

    def generic_stmt(self, node: Stmt, depth: int) -> None:
        schema = schema_of(type(node))
        if not schema.is_stmt:
            raise IRError(f"cannot print a {type(node).__name__} as a loop-level statement")
        operands = iter([self.expr(e) for e in schema.exprs(node)])
        body = schema.stmts(node)
        self.emit(depth, self.generic_head(node, operands) + (":" if body else ""))
        for child in body:
            self.stmt(child, depth + 1)

    def buffer_decl(self, buf: Buffer) -> str:
        dims = ", ".join(str(d) if type(d) is int else self.expr(d) for d in buf.shape)
        shape = f"({dims},)" if len(buf.shape) == 1 else f"({dims})"
        scope = "" if buf.scope == "global" else f", scope={json.dumps(buf.scope)}"
        return f"{self.name(buf)}: Buffer({shape}, {buf.dtype}{scope})"

    def func(self, func: PrimFunc, name: str | None) -> None:
        attrs = ", ".join(f"{key}={_attr_text(value)}" for key, value in func.attrs.items())
        self.emit(0, f"@prim_func({attrs})" if attrs else "@prim_func")
        name = name or str(func.attrs.get("global_symbol", "func"))
        params = ", ".join([*(self.buffer_decl(p) for p in func.params),
                            *(f"{self.name(v)}: size" for v in func.dims)])
        self.emit(0, f"def {name}({params}):")
        self.stmt(func.body, 1)


def _paren(kid: tuple[str, int], minimum: int) -> str:
    text, prec = kid
    return text if prec >= minimum else f"({text})"


def _attr_text(value: Any) -> str:
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, str):
        if len(value) > _LONG_STRING or "\n" in value:
            return f"<string of {len(value)} characters>"
        return json.dumps(value)
    return repr(value)


def tir_astext(node: PrimFunc | Stmt | PrimExpr, name: str | None = None) -> str:
    """The text of a PrimFunc (named ``name``, else its global_symbol), a statement or an
    expression."""
    printer = _Printer()
    if isinstance(node, PrimFunc):
        printer.func(node, name)
    elif isinstance(node, Stmt):
        printer.stmt(node, 0)
    elif isinstance(node, PrimExpr):
        schema_of(type(node))  # IRError for an expression class that is not a declared kind
        return printer.expr(node)
    else:
        raise IRError(f"tir_astext prints PrimFuncs, statements and expressions, not {type(node).__name__}")
    return "\n".join(printer.lines) + "\n"


def _register() -> None:
    # the graph IR's module printer shows PrimFuncs through this printer (a registry in
    # passinfra.ir, so the graph IR never imports the loop IR)
    from passinfra.ir.printer import register_function_printer

    register_function_printer(PrimFunc, tir_astext)


_register()

__all__ = ["tir_astext"]

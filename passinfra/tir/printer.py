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

import json
from typing import Any

from passinfra.errors import IRError
from passinfra.tir.functor import expr_children
from passinfra.tir.nodes import (
    EQ,
    GE,
    GT,
    INDEX_DTYPE,
    LE,
    LT,
    NE,
    Add,
    Allocate,
    And,
    Buffer,
    BufferLoad,
    BufferStore,
    Cast,
    Div,
    Evaluate,
    FloatImm,
    FloorDiv,
    FloorMod,
    For,
    IfThenElse,
    IntImm,
    Intrinsic,
    LetStmt,
    Max,
    Min,
    Mul,
    Not,
    Or,
    PrimExpr,
    PrimFunc,
    Select,
    SeqStmt,
    Stmt,
    Sub,
    TVar,
)

INDENT = "  "
_LONG_STRING = 60

# infix operators: (symbol, precedence); higher binds tighter (Python's ordering)
_INFIX: dict[type, tuple[str, int]] = {
    Or: ("or", 1), And: ("and", 2),
    EQ: ("==", 4), NE: ("!=", 4), LT: ("<", 4), LE: ("<=", 4), GT: (">", 4), GE: (">=", 4),
    Add: ("+", 6), Sub: ("-", 6),
    Mul: ("*", 7), Div: ("/", 7), FloorDiv: ("//", 7), FloorMod: ("%", 7),
}
_NOT_PRECEDENCE = 3
_ATOM = 10
_CALL_LIKE = {Min: "min", Max: "max"}
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


def _imm_text(node: IntImm | FloatImm) -> str:
    if type(node) is IntImm:
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
        done: dict[int, tuple[str, int]] = {}
        stack: list[tuple[Any, bool]] = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if id(node) in done:
                continue
            kids = expr_children(node)
            if not expanded:
                stack.append((node, True))
                stack.extend((kid, False) for kid in reversed(kids) if id(kid) not in done)
                continue
            done[id(node)] = self._expr_node(node, [done[id(k)] for k in kids])
        return done[id(root)][0]

    def _expr_node(self, node: Any, kids: list[tuple[str, int]]) -> tuple[str, int]:
        kind = type(node)
        if kind in (IntImm, FloatImm):
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
        if kind is Not:
            return f"not {_paren(kids[0], _NOT_PRECEDENCE)}", _NOT_PRECEDENCE
        if kind is Select:
            return f"select({', '.join(k[0] for k in kids)})", _ATOM
        if kind is Cast:
            return f"{node.dtype}({kids[0][0]})", _ATOM
        if kind is Intrinsic:
            args = ", ".join(k[0] for k in kids)
            return f"{node.name}({args})", _ATOM
        if kind is BufferLoad:
            return f"{self.name(node.buffer)}[{', '.join(k[0] for k in kids)}]", _ATOM
        raise IRError(f"cannot print a {kind.__name__} as a loop-level expression")

    # -- statements: recursive per scope (loop nests are shallow)

    def emit(self, depth: int, text: str) -> None:
        self.lines.append(INDENT * depth + text)

    def stmt(self, node: Stmt, depth: int) -> None:
        kind = type(node)
        if kind is SeqStmt:
            if not node.stmts:
                self.emit(depth, "pass")
            for child in node.stmts:
                self.stmt(child, depth)
        elif kind is For:
            var = self.name(node.loop_var)
            head = f"for {var} in {node.kind.value}({self.expr(node.start)}, {self.expr(node.extent)}):"
            self.emit(depth, head)
            self.stmt(node.body, depth + 1)
        elif kind is BufferStore:
            indices = ", ".join(self.expr(i) for i in node.indices)
            self.emit(depth, f"{self.name(node.buffer)}[{indices}] = {self.expr(node.value)}")
        elif kind is Allocate:
            self.emit(depth, f"with allocate({self.buffer_decl(node.buffer)}):")
            self.stmt(node.body, depth + 1)
        elif kind is IfThenElse:
            self.emit(depth, f"if {self.expr(node.cond)}:")
            self.stmt(node.then_case, depth + 1)
            if node.else_case is not None:
                self.emit(depth, "else:")
                self.stmt(node.else_case, depth + 1)
        elif kind is LetStmt:
            self.emit(depth, f"{self.name(node.var)}: {node.var.dtype} = {self.expr(node.value)}")
            self.stmt(node.body, depth)
        elif kind is Evaluate:
            self.emit(depth, f"evaluate({self.expr(node.value)})")
        else:
            raise IRError(f"cannot print a {kind.__name__} as a loop-level statement")

    def buffer_decl(self, buf: Buffer) -> str:
        dims = ", ".join(str(d) for d in buf.shape)
        shape = f"({dims},)" if len(buf.shape) == 1 else f"({dims})"
        scope = "" if buf.scope == "global" else f", scope={json.dumps(buf.scope)}"
        return f"{self.name(buf)}: Buffer({shape}, {buf.dtype}{scope})"

    def func(self, func: PrimFunc, name: str | None) -> None:
        attrs = ", ".join(f"{key}={_attr_text(value)}" for key, value in func.attrs.items())
        self.emit(0, f"@prim_func({attrs})" if attrs else "@prim_func")
        name = name or str(func.attrs.get("global_symbol", "func"))
        params = ", ".join(self.buffer_decl(p) for p in func.params)
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

"""Text printer: modules, expressions and types in a Relay-like text format.

The format (the parser in :mod:`passinfra.ir.parser` reads it back exactly)::

    def @main(%x: Tensor[(1, 3), float32], Primitive=1) -> Tensor[(1, 3), float32] {
      %0 = add(%x, 1f);
      let %y: Tensor[(1, 3), float32] = multiply(%0, %0);
      if (%c) {
        %y
      } else {
        %0.1
      }
    }

Every Call, Tuple and TupleGetItem is bound to a temporary ``%N = ...;`` whose operands
are atoms (vars, temporaries, ``@globals``, op names, constants), so a node used several
times is printed once. A node whose only use is the tail of a block or the value of a
``let`` is printed in place instead. A temporary lives in the innermost block (function
body, ``if`` branch, ``{ let ... }`` block) that encloses all its uses.

Constants of at most INLINE_CONSTANT_LIMIT elements print inline as literals (``1f``,
``[1i64, 2i64]``) when the literal gives back their exact bits. Any other constant prints
as ``meta[Constant][i]`` and the text ends with a ``metadata { ... }`` section holding
each one as base64 of its raw bytes on one line. ``str(mod)`` and ``mod.astext()`` carry
that section, so they parse back to the module; the body stays as readable as without
it, and the text grows by 4/3 of the weights' bytes (a decimal literal per element would
be several times that). ``show_meta_data=False`` leaves the section out, for reading.

Symbolic dimensions print as their expressions (``Tensor[(batch, seq * 64), float32]``;
floor division and modulus as ``floordiv(n, 2)`` / ``floormod(n, 4)``, since ``//`` starts
a comment here). A ``def`` whose types mention dimension variables declares them once,
with their bounds, before its parameters::

    def @main[batch: 1..64, seq: 1.., n](%x: Tensor[(batch, seq, n), float32]) -> ...

(``n`` alone: the default bounds 0..unbounded). A free-standing expression declares them
on a first line ``dims [...];``, and ``astext`` of a type as a ``[...]`` prefix when some
bound is not the default; ``str`` of a type leaves the bounds out, for messages.

Printing runs three linear passes over a function (counting uses, placing nodes in
blocks, emitting lines), all iterative, so program size never meets the recursion limit.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from passinfra.errors import IRError
from passinfra.ir.dims import DimVar, SymDim, bounds_text, dim_text, free_vars, sorted_vars
from passinfra.ir.expr import (
    BaseFunc,
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    Tuple,
    TupleGetItem,
    Var,
)
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op
from passinfra.ir.schema import KindTable
from passinfra.ir.types import FuncType, TensorType, TupleType, Type, is_float_dtype, is_int_dtype

# Names printed without quotes; anything else is printed as %"..." / @"...". Dots are
# allowed only before a letter so that ``%x.0`` stays a tuple projection.
PLAIN_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", re.ASCII)

# Constants with at most this many elements are printed inline; larger ones go to the
# metadata section.
INLINE_CONSTANT_LIMIT = 8

# the smallest magnitude that rounds to infinity in float32: float32 max plus half an ulp
FLOAT32_OVERFLOW = 2.0**128 - 2.0**103

DTYPE_SUFFIX = {
    "float16": "f16", "bfloat16": "bf16", "float32": "f", "float64": "f64",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
}
SUFFIX_DTYPE = {"f32": "float32", **{suffix: dtype for dtype, suffix in DTYPE_SUFFIX.items()}}


# ---------------------------------------------------------------------------- literals


def scalar_from_text(number: str, dtype: str) -> Any:
    """The NumPy scalar a literal spells: ``number`` is the digits (with an optional
    leading ``-``) or ``nan``/``inf``. Shared with the parser so both sides agree."""
    if is_float_dtype(dtype):
        value = float(number)
        # a finite literal too big for the dtype is an error, as an int out of range is
        literal_inf = "inf" in number
        if (math.isinf(value) and not literal_inf) or (
            dtype == "float32" and not literal_inf and abs(value) >= FLOAT32_OVERFLOW
        ):
            raise OverflowError(f"{number} is out of range for {dtype}")
        if dtype in ("float32", "float64"):
            return np.float32(value) if dtype == "float32" else np.float64(value)
        with np.errstate(over="ignore"):
            rounded = np.asarray(value).astype(dtype)  # float16/bfloat16: round to nearest-even
        if np.isinf(rounded) and not literal_inf:
            raise OverflowError(f"{number} is out of range for {dtype}")
        return rounded[()]
    if len(number.lstrip("-")) > 20:  # beyond any int64; int() refuses thousands of digits
        raise OverflowError(f"{number[:24]}... is out of range for {dtype}")
    value = int(number)
    info = np.iinfo(dtype)
    if not info.min <= value <= info.max:
        raise OverflowError(f"{number} is out of range for {dtype}")
    return np.dtype(dtype).type(value)


def _scalar_text(value: Any, dtype: str) -> str | None:
    """The literal for one element, or None when no literal reproduces its exact bits
    (e.g. a NaN with a payload); such constants go to the metadata section."""
    if dtype == "bool":
        return "true" if value else "false"
    suffix = DTYPE_SUFFIX[dtype]
    if is_int_dtype(dtype):
        return f"{int(value)}{suffix}"
    # the shortest text first; the float64 repr of the value is exact when that fails
    candidates = [str(value)] if dtype != "float64" else []
    candidates.append(repr(float(value)))
    for number in candidates:
        if scalar_from_text(number, dtype).tobytes() == np.asarray(value, dtype).tobytes():
            return f"{number}{suffix}"
    return None


def constant_literal(data: np.ndarray) -> str | None:
    """Inline text of a small constant (``1f``, ``[[1i32, 2i32], [3i32, 4i32]]``), or
    None if it must go to the metadata section (too big, empty, or not exact as text)."""
    if data.size == 0 or data.size > INLINE_CONSTANT_LIMIT:
        return None
    items = []
    for value in data.reshape(-1):
        text = _scalar_text(value, data.dtype.name)
        if text is None:
            return None
        items.append(text)
    # group innermost dimension first: [a, b, c, d] with shape (2, 2) -> [[a, b], [c, d]]
    for dim in reversed(data.shape):
        items = ["[" + ", ".join(items[i : i + dim]) + "]" for i in range(0, len(items), dim)]
    return items[0]


def constant_payload(data: np.ndarray) -> str:
    """Base64 of the raw little-endian bytes of ``data`` (metadata section)."""
    little = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("<"))
    return base64.b64encode(little.tobytes()).decode("ascii")


def name_text(sigil: str, name: str) -> str:
    """``%name`` / ``@name``, quoted when the name is not a plain identifier."""
    if PLAIN_NAME.fullmatch(name):
        return sigil + name
    return sigil + json.dumps(name)


def attr_value_text(value: Any) -> str:
    """An attribute value as text; the parser gives back the same Python type."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # always has '.', 'e', 'inf' or 'nan': stays a float
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bytes):  # object code and the like: base64, read back by the parser
        return f'bytes("{base64.b64encode(value).decode("ascii")}")'
    if isinstance(value, tuple):
        inner = ", ".join(attr_value_text(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, Type):
        return f"type({type_to_text(value)})"
    if isinstance(value, SymDim):  # dim(...): a bare name would read as an unknown word
        return f"dim({dim_text(value)})"
    raise IRError(f"attribute value {value!r} of type {type(value).__name__} cannot be printed")


def attrs_text(attrs: Any) -> list[str]:
    """``key=value`` items in the attrs' own order."""
    if not attrs:
        return []
    return [
        f"{key if PLAIN_NAME.fullmatch(key) else json.dumps(key)}={attr_value_text(v)}"
        for key, v in attrs.items()
    ]


def type_to_text(ty: Type) -> str:
    """``Tensor[(2, 3), float32]``, ``(T1, T2)``, ``fn (T1) -> T2``."""
    if isinstance(ty, TensorType):
        dims = ", ".join(str(d) for d in ty.shape)  # a symbolic dim's str is its expression
        return f"Tensor[({dims}), {ty.dtype}]"
    if isinstance(ty, TupleType):
        inner = ", ".join(type_to_text(f) for f in ty.fields)
        return f"({inner},)" if len(ty.fields) == 1 else f"({inner})"
    if isinstance(ty, FuncType):
        args = ", ".join(type_to_text(a) for a in ty.arg_types)
        return f"fn ({args}) -> {type_to_text(ty.ret_type)}"
    raise IRError(f"cannot print type {ty!r}")


def dims_declaration(dim_vars: dict[str, DimVar]) -> str:
    """``[batch: 1..64, seq]``: the declaration of dimension variables, in name order."""
    return "[" + ", ".join(bounds_text(var) for var in sorted_vars(dim_vars.values())) + "]"


def note_dims(table: dict[str, DimVar], value: Any) -> None:
    """Record the dimension variables of a type (or of types inside an attribute value)
    in ``table``; two different variables of one name in one function cannot be told
    apart in the text, so that is an error."""
    if isinstance(value, (Type, SymDim)):
        for var in value.dim_vars if isinstance(value, Type) else free_vars(value):
            known = table.setdefault(var.name, var)
            if known != var:
                raise IRError(f"two dimension variables named {var.name!r} with different bounds "
                              f"({bounds_text(known)} and {bounds_text(var)}) cannot be printed "
                              "in one function")
    elif isinstance(value, tuple):
        for item in value:
            note_dims(table, item)


# ---------------------------------------------------------------------- block placement

# The role of an edge from a node to one of its children decides where the child may be
# printed: operands must be atoms; the other roles accept a node printed in place.
OPERAND, IF_TRUE, IF_FALSE, FN_BODY, LET_VALUE, LET_BODY, ROOT = range(7)
TAIL_ROLES = (IF_TRUE, IF_FALSE, FN_BODY, LET_BODY, ROOT)

# How a non-atom node is printed: bound to a temporary, in place at its only use, or (a
# Let in tail position) flattened into the enclosing block as `let` lines.
TEMP, INLINE, FLAT = range(3)

ATOM_TYPES = (Var, GlobalVar, Constant, Op)

# Nodes printed as one line of operands (``%1 = add(%0, 1f)``, ``(%0, %1)``, ``%0.1``):
# every child, in declaration order (their schemas), is an operand.
OPERAND_TYPES = (Call, Tuple, TupleGetItem)
_CHILDREN = KindTable(lambda schema: schema.children)


def _edges(node: Expr) -> list[tuple[Expr, int]]:
    """(child, role) pairs of a node's non-atom children, in printing order (binders
    and atoms left out: they are printed where they are used)."""
    kind = type(node)
    if kind in OPERAND_TYPES:
        return [(child, OPERAND) for child in _CHILDREN[kind](node) if not isinstance(child, ATOM_TYPES)]
    if kind is Let:
        pairs = [(node.value, LET_VALUE), (node.body, LET_BODY)]
    elif kind is If:
        pairs = [(node.cond, OPERAND), (node.true_branch, IF_TRUE), (node.false_branch, IF_FALSE)]
    elif isinstance(node, Function):
        pairs = [(node.body, FN_BODY)]
    else:
        return []
    return [pair for pair in pairs if not isinstance(pair[0], ATOM_TYPES)]


class _Block:
    """A brace-delimited scope of the output; ``items`` holds (depth, text) lines and
    nested item lists (flattened once at the end, so nesting costs no copying)."""

    __slots__ = ("parent", "depth", "items")

    def __init__(self, parent: _Block | None) -> None:
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.items: list = []


def _common_block(a: _Block, b: _Block) -> _Block:
    while a.depth > b.depth:
        a = a.parent
    while b.depth > a.depth:
        b = b.parent
    while a is not b:
        a, b = a.parent, b.parent
    return a


def _flatten(items: list) -> list[str]:
    lines: list[str] = []
    stack = [iter(items)]
    while stack:
        for item in stack[-1]:
            if type(item) is list:
                stack.append(iter(item))
                break
            depth, text = item
            lines.append("  " * depth + text)
        else:
            stack.pop()
    return lines


# ---------------------------------------------------------------------- printer proper


class _MetaTable:
    """Constants too big to inline, numbered in order of first appearance."""

    def __init__(self) -> None:
        self.index: dict[Constant, int] = {}
        self.constants: list[Constant] = []
        self.literals: dict[tuple, str] = {}

    def constant_text(self, const: Constant) -> str:
        """A literal for a small constant, else a meta reference. Literals are cached by
        value: programs repeat the same few small constants many times."""
        data = const.data
        if data.size > INLINE_CONSTANT_LIMIT:
            return self.ref(const)
        key = (data.dtype.char, data.shape, data.tobytes())
        text = self.literals.get(key)
        if text is None:
            text = self.literals[key] = constant_literal(data) or ""
        return text or self.ref(const)

    def ref(self, const: Constant) -> str:
        i = self.index.get(const)
        if i is None:
            i = self.index[const] = len(self.constants)
            self.constants.append(const)
        return f"meta[Constant][{i}]"

    def section(self, show: bool) -> list[str]:
        if not self.constants:
            return []
        if not show:
            return [f"// metadata omitted: {len(self.constants)} constant(s) (show_meta_data=False)"]
        lines = ["metadata {"]
        for i, const in enumerate(self.constants):
            ty = type_to_text(TensorType(const.shape, const.dtype))
            lines.append(f'  meta[Constant][{i}]: {ty} = "{constant_payload(const.data)}";')
        lines.append("}")
        return lines


class _FunctionPrinter:
    """Prints one top-level function (or one free-standing expression)."""

    def __init__(self, meta: _MetaTable) -> None:
        self.meta = meta
        self.var_names: dict[Var, str] = {}
        self.used_names: set[str] = set()
        self.next_suffix: dict[str, int] = {}
        self.temp_count = 0
        self.dims: dict[str, DimVar] = {}  # dimension variables met so far, by name

    # -- names and atoms

    def bind_name(self, var: Var) -> str:
        """A printed name for ``var``: its hint, or hint_1, hint_2... on a clash."""
        name = self.var_names.get(var)
        if name is not None:
            return name
        hint = var.name_hint
        if hint in self.used_names:
            k = self.next_suffix.get(hint, 1)
            while f"{hint}_{k}" in self.used_names:
                k += 1
            self.next_suffix[hint] = k + 1
            hint = f"{hint}_{k}"
        self.used_names.add(hint)
        name = self.var_names[var] = name_text("%", hint)
        return name

    def binder_text(self, var: Var) -> str:
        name = self.bind_name(var)
        if var.type_annotation is None:
            return name
        return f"{name}: {self.type_text(var.type_annotation)}"

    def type_text(self, ty: Type) -> str:
        if ty._dim_vars:
            note_dims(self.dims, ty)
        return type_to_text(ty)

    def attrs_text(self, attrs: Any) -> list[str]:
        if attrs:
            for value in attrs.values():
                note_dims(self.dims, value)
        return attrs_text(attrs)

    def atom_text(self, node: Expr) -> str:
        kind = type(node)
        if kind is Var:
            return self.bind_name(node)
        if kind is GlobalVar:
            return name_text("@", node.name_hint)
        if kind is Constant:
            return self.meta.constant_text(node)
        if isinstance(node, Op):
            return node.name
        raise IRError(f"cannot print a {kind.__name__} as an atom")

    # -- the three passes

    def print_root(self, root: Expr, root_block: _Block, as_def: str | None = None) -> None:
        """Append the text of ``root`` to ``root_block`` (as its tail, or as a ``def``
        named ``as_def`` when the root is a module function)."""
        order, edges, uses, last_role = self._count_uses(root)
        mode, block_of, own_blocks = self._place(order, edges, root, root_block, uses, last_role)
        self._emit(root, root_block, edges, mode, block_of, own_blocks, as_def)

    @staticmethod
    def _count_uses(root: Expr) -> tuple[list, dict, dict, dict]:
        """The non-atom nodes in post-order, their non-atom edges, how often each is
        used, and the role of its last use (its only one when it is used once)."""
        uses: dict[Expr, int] = {root: 1}
        last_role: dict[Expr, int] = {root: ROOT}
        edges_of: dict[Expr, list] = {}
        order: list[Expr] = []
        stack = [(root, False)]
        while stack:
            node, finished = stack.pop()
            if finished:
                order.append(node)
                continue
            if node in edges_of:  # reached again before its first visit popped
                continue
            stack.append((node, True))
            edges = edges_of[node] = _edges(node)
            for child, role in edges:
                uses[child] = uses.get(child, 0) + 1
                last_role[child] = role
            # a child already expanded is finished too (it cannot be an ancestor in a DAG)
            stack.extend([(child, False) for child, _ in reversed(edges) if child not in edges_of])
        return order, edges_of, uses, last_role

    @staticmethod
    def _place(order: list, edges_of: dict, root: Expr, root_block: _Block, uses: dict,
               last_role: dict) -> tuple:
        """Decide for each node how it is printed and in which block (parents first, so
        a node's block is the common ancestor of the blocks of all its uses)."""
        mode: dict[Expr, int] = {}
        block_of: dict[Expr, _Block] = {root: root_block}
        own_blocks: dict[Expr, tuple] = {}
        for node in reversed(order):
            inline = uses[node] == 1 and last_role[node] != OPERAND
            kind = type(node)
            if kind is Let and inline and last_role[node] in TAIL_ROLES:
                mode[node] = FLAT
            else:
                mode[node] = INLINE if inline else TEMP
            here = block_of[node]
            if kind is If:
                blocks = own_blocks[node] = (_Block(here), _Block(here))
            elif kind is Let:
                inner = here if mode[node] == FLAT else _Block(here)
                blocks = own_blocks[node] = (inner,)
            elif isinstance(node, Function):
                blocks = own_blocks[node] = (_Block(here),)
            else:
                blocks = ()
            for child, role in edges_of[node]:
                if role == OPERAND:
                    ref_block = here
                elif role == IF_FALSE:
                    ref_block = blocks[1]
                else:
                    ref_block = blocks[0]
                prev = block_of.get(child)
                block_of[child] = ref_block if prev is None or prev is ref_block else _common_block(
                    prev, ref_block
                )
        return mode, block_of, own_blocks

    def _emit(self, root: Expr, root_block: _Block, edges_of: dict, mode: dict, block_of: dict,
              own_blocks: dict, as_def: str | None) -> None:
        ref: dict[Expr, Any] = {}  # node -> its text where used (str, or a multi-line fragment)
        done: set = set()

        def text_of(node: Expr) -> Any:
            text = ref.get(node)
            return self.atom_text(node) if text is None else text

        def place(block: _Block, prefix: str, value: Any, suffix: str) -> None:
            if type(value) is str:
                block.items.append((block.depth, prefix + value + suffix))
            else:
                head, middle, last = value
                block.items.extend(((block.depth, prefix + head), middle, (block.depth, last + suffix)))

        def finish(node: Expr, value: Any) -> None:
            how = mode.get(node, INLINE)
            if how == TEMP:
                name = f"%{self.temp_count}"
                self.temp_count += 1
                place(block_of[node], name + " = ", value, ";")
                ref[node] = name
            else:
                ref[node] = value

        # tasks: (action, node, extra); actions run in stack order
        VISIT, TAIL, LET_LINE, FINISH = range(4)
        stack: list[tuple] = [(TAIL, root, root_block), (VISIT, root, None)]
        while stack:
            action, node, extra = stack.pop()
            kind = type(node)
            if action == VISIT:
                if node in done or isinstance(node, ATOM_TYPES):
                    continue
                done.add(node)
                if kind is Let:
                    self.bind_name(node.var)
                    inner = own_blocks[node][0]
                    stack += [(FINISH, node, None), (TAIL, node.body, inner), (VISIT, node.body, None),
                              (LET_LINE, node, inner), (VISIT, node.value, None)]
                elif kind is If:
                    true_block, false_block = own_blocks[node]
                    stack += [(FINISH, node, None), (TAIL, node.false_branch, false_block),
                              (VISIT, node.false_branch, None), (TAIL, node.true_branch, true_block),
                              (VISIT, node.true_branch, None), (VISIT, node.cond, None)]
                elif isinstance(node, Function):
                    for param in node.params:
                        self.bind_name(param)
                    stack += [(FINISH, node, None), (TAIL, node.body, own_blocks[node][0]),
                              (VISIT, node.body, None)]
                elif kind in OPERAND_TYPES:
                    stack.append((FINISH, node, None))
                    stack.extend([(VISIT, child, None) for child, _ in reversed(edges_of[node])])
                else:
                    raise IRError(f"cannot print a {kind.__name__} node")
            elif action == TAIL:
                if mode.get(node) != FLAT:  # a flattened Let already wrote its lines here
                    place(extra, "", text_of(node), "")
            elif action == LET_LINE:
                var = node.var
                place(extra, f"let {self.binder_text(var)} = ", text_of(node.value), ";")
            elif kind is Call:
                args = [text_of(a) for a in node.args] + self.attrs_text(node.attrs)
                finish(node, f"{text_of(node.op)}({', '.join(args)})")
            elif kind is Tuple:
                fields = [text_of(f) for f in node.fields]
                finish(node, f"({fields[0]},)" if len(fields) == 1 else f"({', '.join(fields)})")
            elif kind is TupleGetItem:
                finish(node, f"{text_of(node.tuple_value)}.{node.index}")
            elif kind is If:
                true_block, false_block = own_blocks[node]
                middle = [true_block.items, (block_of[node].depth, "} else {"), false_block.items]
                finish(node, (f"if ({text_of(node.cond)}) {{", middle, "}"))
            elif kind is Let:
                if mode[node] != FLAT:
                    finish(node, ("{", own_blocks[node][0].items, "}"))
            else:  # Function
                body_items = own_blocks[node][0].items
                if node is root and as_def is not None:
                    signature = self._signature(node)  # first: it may meet more dimension variables
                    declared = dims_declaration(self.dims) if self.dims else ""
                    finish(node, (f"def {name_text('@', as_def)}{declared}{signature} {{", body_items, "}"))
                else:
                    finish(node, (f"fn {self._signature(node)} {{", body_items, "}"))

    def _signature(self, func: Function) -> str:
        items = [self.binder_text(p) for p in func.params] + self.attrs_text(func.attrs)
        text = f"({', '.join(items)})"
        if func.ret_type is not None:
            text += f" -> {self.type_text(func.ret_type)}"
        return text


# Printers for functions other than graph-level Functions (e.g. lowered PrimFuncs),
# registered by the packages that define them; their text is shown as comments.
_FUNC_PRINTERS: dict[type, Callable[[BaseFunc], str]] = {}


def register_function_printer(func_class: type, printer: Callable[[BaseFunc], str]) -> None:
    """Show module functions of ``func_class`` with ``printer`` (as comment lines: the
    graph-level text format cannot express them, so the parser skips them)."""
    _FUNC_PRINTERS[func_class] = printer


def _module_text(mod: IRModule, show_meta_data: bool) -> str:
    meta = _MetaTable()
    lines: list[str] = []
    if len(mod.attrs):
        lines.append(f"module_attrs({', '.join(attrs_text(mod.attrs))})")
    for gv, func in mod.functions.items():
        if lines:
            lines.append("")
        if isinstance(func, Function):
            top = _Block(None)
            _FunctionPrinter(meta).print_root(func, top, as_def=gv.name_hint)
            lines.extend(_flatten(top.items))
        else:
            render = _FUNC_PRINTERS.get(type(func))
            body = render(func) if render else repr(func)
            kind = type(func).__name__
            lines.append(f"// {name_text('@', gv.name_hint)}: a {kind}, not in the text format")
            lines.extend("// " + line for line in body.splitlines())
    section = meta.section(show_meta_data)
    if section:
        lines += ["", *section]
    return "\n".join(lines) + "\n"


def _expr_text(expr: Expr, show_meta_data: bool) -> str:
    from passinfra.ir.analysis import free_vars

    meta = _MetaTable()
    printer = _FunctionPrinter(meta)
    top = _Block(None)
    for var in free_vars(expr):  # declared first so their annotations survive
        top.items.append((0, f"free_var {printer.binder_text(var)};"))
    printer.print_root(expr, top)
    if printer.dims:
        top.items.insert(0, (0, f"dims {dims_declaration(printer.dims)};"))
    lines = _flatten(top.items)
    section = meta.section(show_meta_data)
    if section:
        lines += ["", *section]
    return "\n".join(lines) + "\n"


def astext(node: Any, show_meta_data: bool = True) -> str:
    """The text of an IRModule, an expression or a type.

    Large constants print as ``meta[Constant][i]``; with ``show_meta_data`` the text
    ends with a ``metadata { ... }`` section holding them, so that
    :func:`passinfra.ir.parse` (or ``parse_expr``) gives the program back.
    """
    if isinstance(node, IRModule):
        return _module_text(node, show_meta_data)
    if isinstance(node, Type):
        if any(var.lo != 0 or var.hi is not None for var in node.dim_vars):
            table: dict[str, DimVar] = {}
            note_dims(table, node)
            return f"{dims_declaration(table)} {type_to_text(node)}"
        return type_to_text(node)
    if isinstance(node, Expr):
        return _expr_text(node, show_meta_data)
    raise IRError(f"astext prints modules, expressions and types, not {type(node).__name__}")


__all__ = ["astext", "type_to_text", "register_function_printer"]

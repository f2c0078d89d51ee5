"""Text parser: reads what :mod:`passinfra.ir.printer` writes (and hand-written text).

A regular-expression lexer turns the text into a token list in one pass; a hand-written
recursive-descent parser reads it. Statements of a block are read in a loop, so long
programs (100,000 temporaries or ``let`` lines) parse at the default recursion limit;
the parser only recurses into genuinely nested text (``if`` branches, ``fn`` literals,
``{ ... }`` blocks, types, nested operands in hand-written text).

Every error is a :class:`ParseError` carrying the line and column of the offending token.

Symbolic dimensions: a shape entry is an int or a dimension expression (``batch``,
``seq * 64 + 1``, ``floordiv(n + 1, 2)``, ``floormod(n, 4)``, a quoted name for one that
is not an identifier). A ``def`` (or ``fn``) may declare its dimension variables and their
bounds before its parameters, ``def @main[batch: 1..64, seq: 1.., n](...)``; a name that
is not declared is a variable with the default bounds (0, unbounded). An expression's
text declares them with a leading ``dims [...];`` and a type's with a leading ``[...]``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from bisect import bisect_right
from typing import Any

import numpy as np

from passinfra.errors import DimError, IRError, OpNotFoundError, ParseError
from passinfra.ir.dims import Dim, DimVar, SymDim, floordiv, floormod
from passinfra.ir.expr import Call, Constant, Expr, Function, GlobalVar, If, Let, Tuple, TupleGetItem, Var
from passinfra.ir.module import IRModule
from passinfra.ir.op._rel import REQUIRED
from passinfra.ir.op.registry import Op
from passinfra.ir.printer import DTYPE_SUFFIX, SUFFIX_DTYPE, scalar_from_text
from passinfra.ir.types import DTYPES, FuncType, TensorType, TupleType, Type, is_int_dtype

# a quoted string, as the "unrolled loop" (runs of plain characters matched in one step):
# megabytes of base64 in a metadata section lex in milliseconds, not seconds
_STRING = r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
_NAME = rf'(?:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*|{_STRING})'
# Whitespace and comments are swallowed in front of each token, so one match is one token.
_TOKEN = re.compile(
    rf"""
    (?:\s+|//[^\n]*)*
    (?:
     (?P<punct>->|\.\.|[(){{}}\[\],;:=.\-+*])
    |(?P<temp>%\d+)
    |(?P<var>%{_NAME})
    |(?P<ident>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)
    |(?P<number>\d+(?:\.(?!\.)\d*)?(?:[eE][+-]?\d+)?(?:[A-Za-z]\w*)?)
    |(?P<global>@{_NAME})
    |(?P<string>{_STRING})
    |(?P<badstring>"[^\n]*)
    |(?P<eof>\Z)
    |(?P<error>.)
    )
    """,
    re.VERBOSE | re.ASCII,
)
_NUMBER_PARTS = re.compile(r"(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)([A-Za-z]\w*)?", re.ASCII)
_SPECIAL_FLOAT = re.compile(r"(nan|inf)(f|f16|bf16|f32|f64)")
# the suffixes as error messages list them: f (float32), f16, bf16, f64, i8, ..., u64
_SUFFIX_LIST = ", ".join(
    f"{suffix} (float32)" if suffix == "f" else suffix for suffix in DTYPE_SUFFIX.values()
)

# words that can never name an op where an expression is expected
_KEYWORDS = frozenset(
    ("let", "if", "else", "fn", "def", "free_var", "meta", "metadata", "module_attrs", "type", "Tensor",
     "dims")
)
_ATTR_WORDS = {
    "True": True, "true": True, "False": False, "false": False, "None": None,
    "inf": float("inf"), "nan": float("nan"),
}
_MISSING = object()
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

Token = tuple  # (kind, text, offset); kind is the punctuation itself for punctuation


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _same_kind(default: Any, value: Any) -> bool:
    """Whether ``value`` has the kind of an op attribute whose default is ``default``
    (None and REQUIRED defaults say nothing about the kind: the relation checks those)."""
    if default is None or default is REQUIRED:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):  # a dim is an int known at run time (arange's start=dim(past))
        return _is_int(value) or isinstance(value, SymDim)
    if isinstance(default, float):
        return isinstance(value, float)
    if isinstance(default, tuple):
        item_default = default[0] if default else None
        return isinstance(value, tuple) and all(_same_kind(item_default, v) for v in value)
    return isinstance(value, type(default))


_KIND_NAMES = {bool: ("a bool", "bools"), int: ("an int", "ints"), float: ("a float", "floats"),
               str: ("a string", "strings")}


def _kind_text(default: Any) -> str:
    if isinstance(default, tuple):
        return f"a tuple of {_KIND_NAMES.get(type(default[0]), ('', 'values'))[1]}" if default else "a tuple"
    return _KIND_NAMES.get(type(default), ("a value", ""))[0]


def _tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    append = tokens.append
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        value = match.group(kind)
        append((value if kind == "punct" else kind, value, match.start(kind)))
        if kind == "eof":
            break
    return tokens


def _describe(token: Token) -> str:
    kind, text, _ = token
    return "the end of the text" if kind == "eof" else repr(text)


class _Parser:
    def __init__(self, text: str, allow_free_vars: bool) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.pos = 0
        self.allow_free_vars = allow_free_vars
        self.free_vars: dict[str, Var] = {}
        self.vars: dict[str, Var] = {}
        self.temps: dict[str, Expr] = {}
        self.undo: list[list] = []  # per open scope: (table, name, previous value)
        self.global_vars: dict[str, GlobalVar] = {}
        self.dims: dict[str, DimVar] = {}  # the dimension variables of the current def
        self.meta: list[Constant] | None = None
        self.meta_count = 0
        self._line_starts: list[int] | None = None
        for token in self.tokens:
            if token[0] in ("error", "badstring"):
                if token[0] == "badstring":
                    raise self.error("unterminated string", token)
                raise self.error(f"unexpected character {token[1]!r}", token)

    # -- tokens and errors

    def error(self, message: str, token: Token | None = None) -> ParseError:
        offset = (token or self.tokens[self.pos])[2]
        if self._line_starts is None:
            self._line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        line = bisect_right(self._line_starts, offset)
        return ParseError(message, line, offset - self._line_starts[line - 1] + 1)

    def peek(self) -> Token:
        return self.tokens[self.pos]

    def advance(self) -> Token:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def expect(self, kind: str, what: str | None = None) -> Token:
        token = self.tokens[self.pos]
        if token[0] != kind:
            raise self.error(f"expected {what or repr(kind)}, found {_describe(token)}", token)
        self.pos += 1
        return token

    def at_word(self, word: str) -> bool:
        token = self.tokens[self.pos]
        return token[0] == "ident" and token[1] == word

    def expect_end(self) -> None:
        if self.peek()[0] != "eof":
            raise self.error(f"expected the end of the text, found {_describe(self.peek())}")

    # -- scopes

    def enter_scope(self) -> None:
        self.undo.append([])

    def exit_scope(self) -> None:
        for table, name, previous in reversed(self.undo.pop()):
            if previous is _MISSING:
                del table[name]
            else:
                table[name] = previous

    def define(self, table: dict, name: str, value: Any) -> None:
        self.undo[-1].append((table, name, table.get(name, _MISSING)))
        table[name] = value

    # -- metadata

    def split_metadata(self) -> None:
        """Read the ``metadata { ... }`` section first (the body refers to it before it
        appears) and cut it off the token list."""
        tokens = self.tokens
        for i, (kind, text, _) in enumerate(tokens):
            if kind == "ident" and text == "metadata" and tokens[i + 1][0] == "{":
                break
        else:
            return
        self.pos = i + 2
        entries: dict[int, Constant] = {}
        while self.peek()[0] != "}":
            start = self.peek()
            index = self._meta_index()
            if index in entries:
                raise self.error(f"meta[Constant][{index}] is defined twice", start)
            self.expect(":")
            type_token = self.peek()
            ty = self.parse_type()
            if not isinstance(ty, TensorType) or not ty.is_static:
                raise self.error(f"meta[Constant][{index}] needs a static Tensor type, got {ty}", type_token)
            self.expect("=")
            entries[index] = self._decode_constant(self.expect("string", "a base64 string"), ty, index)
            self.expect(";")
        self.advance()
        self.expect_end()
        self.meta = [entries.get(i) for i in range(max(entries, default=-1) + 1)]
        self.tokens = tokens[:i] + [("eof", "", tokens[i][2])]
        self.pos = 0

    def _decode_constant(self, token: Token, ty: TensorType, index: int) -> Constant:
        try:
            raw = base64.b64decode(json.loads(token[1]), validate=True)
        except (binascii.Error, ValueError):
            raise self.error(f"meta[Constant][{index}] holds invalid base64", token) from None
        little = np.dtype(ty.dtype).newbyteorder("<")
        if len(raw) != ty.size * little.itemsize:
            raise self.error(
                f"meta[Constant][{index}] holds {len(raw)} bytes, but {ty} needs {ty.size * little.itemsize}",
                token,
            )
        data = np.frombuffer(raw, dtype=little).astype(ty.dtype).reshape(ty.shape)
        return Constant(data)

    def _meta_index(self) -> int:
        # meta[Constant][i]
        if not self.at_word("meta"):
            raise self.error(f"expected meta[Constant][i], found {_describe(self.peek())}")
        self.advance()
        self.expect("[")
        kind = self.expect("ident", "Constant")
        if kind[1] != "Constant":
            raise self.error(f"unknown metadata kind {kind[1]!r}; only Constant exists", kind)
        self.expect("]")
        self.expect("[")
        index = self.plain_int()
        self.expect("]")
        return index

    def meta_constant(self) -> Constant:
        start = self.peek()
        index = self._meta_index()
        if self.meta is None:
            raise self.error(
                f"meta[Constant][{index}] is not defined: the text has no metadata section "
                "(was it printed with show_meta_data=False?)",
                start,
            )
        if index >= len(self.meta) or self.meta[index] is None:
            raise self.error(f"meta[Constant][{index}] is not in the metadata section", start)
        return self.meta[index]

    # -- literals

    def plain_int(self) -> int:
        token = self.expect("number", "an integer")
        if not token[1].isdigit():
            raise self.error(f"expected an integer, found {token[1]!r}", token)
        return self._bounded_int(token[1], token)

    def _bounded_int(self, digits: str, token: Token) -> int:
        """Integers in the text (dimensions, indices, attributes) are int64: a longer
        one is a mistake, and Python refuses to convert thousands of digits anyway."""
        value = int(digits) if len(digits.lstrip("-")) <= 19 else None
        if value is None or not INT64_MIN <= value <= INT64_MAX:
            shown = digits if len(digits) <= 24 else digits[:24] + "..."
            raise self.error(f"integer {shown} is out of the int64 range", token)
        return value

    def scalar_literal(self) -> tuple[Any, str]:
        """One element of a constant: ``1f``, ``-2i64``, ``true``, ``nanf``."""
        token = self.advance()
        sign = ""
        if token[0] == "-":
            sign, token = "-", self.advance()
        kind, text, _ = token
        if kind == "ident" and not sign and text in ("true", "false"):
            return np.bool_(text == "true"), "bool"
        special = _SPECIAL_FLOAT.fullmatch(text) if kind == "ident" else None
        if special:
            number, suffix = special.group(1), special.group(2)
        elif kind == "number":
            number, suffix = _NUMBER_PARTS.fullmatch(text).groups()
            if suffix is None:
                raise self.error(
                    f"constant {sign}{text} needs a dtype suffix: {_SUFFIX_LIST}", token
                )
        else:
            raise self.error(f"expected a constant, found {_describe(token)}", token)
        dtype = SUFFIX_DTYPE.get(suffix)
        if dtype is None:
            raise self.error(f"unknown constant suffix {suffix!r} in {text!r}; use {_SUFFIX_LIST}", token)
        if is_int_dtype(dtype) and not number.isdigit():
            raise self.error(f"{dtype} constant {text!r} must be a whole number", token)
        try:
            return scalar_from_text(sign + number, dtype), dtype
        except OverflowError as err:
            raise self.error(str(err), token) from None

    def tensor_literal(self) -> Constant:
        """``[[1f, 2f], [3f, 4f]]``: nested brackets give the shape (read with a loop)."""
        start = self.expect("[")
        values: list[Any] = []
        dtypes: set[str] = set()
        dims: dict[int, int] = {}  # depth -> length seen at that depth
        counts = [0]
        leaf_depth: int | None = None
        while counts:
            token = self.peek()
            if token[0] == "]":
                self.advance()
                depth = len(counts)
                length = counts.pop()
                if dims.setdefault(depth, length) != length:
                    raise self.error("ragged tensor literal: rows have different lengths", token)
                if counts:
                    counts[-1] += 1
            else:
                if counts[-1]:
                    self.expect(",", "',' or ']'")
                if self.peek()[0] == "[":
                    self.advance()
                    counts.append(0)
                    continue
                if leaf_depth not in (None, len(counts)):
                    raise self.error("ragged tensor literal: elements at different depths", self.peek())
                leaf_depth = len(counts)
                value, dtype = self.scalar_literal()
                values.append(value)
                dtypes.add(dtype)
                counts[-1] += 1
        if not values:
            raise self.error("an empty tensor literal has no dtype; use a meta constant", start)
        if len(dtypes) > 1:
            raise self.error(f"tensor literal mixes dtypes {sorted(dtypes)}", start)
        shape = tuple(dims[d] for d in range(1, leaf_depth + 1))
        return Constant(np.array(values, dtype=dtypes.pop()).reshape(shape))

    def attr_value(self) -> Any:
        """An attribute value: int, float, bool, string, None, tuple, ``type(T)``, ``bytes("b64")``
        or ``dim(expr)`` (a symbolic dimension of the enclosing def)."""
        token = self.advance()
        kind, text, _ = token
        if kind == "-":
            inner = self.advance()
            if inner[0] == "number" and _NUMBER_PARTS.fullmatch(inner[1]).group(2) is None:
                return self._plain_number("-" + inner[1], inner)
            if inner[0] == "ident" and inner[1] == "inf":
                return float("-inf")
            raise self.error(f"expected a number after '-', found {_describe(inner)}", inner)
        if kind == "number":
            if _NUMBER_PARTS.fullmatch(text).group(2) is not None:
                raise self.error(f"attribute values take no dtype suffix: {text!r}", token)
            return self._plain_number(text, token)
        if kind == "string":
            return self.string_value(token)
        if kind == "(":
            items = []
            while self.peek()[0] != ")":
                items.append(self.attr_value())
                if self.peek()[0] != ")":
                    self.expect(",", "',' or ')'")
            self.advance()
            return tuple(items)
        if kind == "ident":
            if text in _ATTR_WORDS:
                return _ATTR_WORDS[text]
            if text == "type":
                self.expect("(")
                ty = self.parse_type()
                self.expect(")")
                return ty
            if text == "bytes":
                return self._bytes_value()
            if text == "dim":  # a symbolic dimension, as the printer writes one: dim(seq + 1)
                self.expect("(")
                dim = self.dim_value()
                self.expect(")")
                return dim
        raise self.error(f"expected an attribute value, found {_describe(token)}", token)

    def _bytes_value(self) -> bytes:
        """``bytes("<base64>")``, as the printer writes bytes attribute values."""
        self.expect("(")
        token = self.advance()
        if token[0] != "string":
            raise self.error(f"bytes(...) takes a base64 string, found {_describe(token)}", token)
        try:
            value = base64.b64decode(json.loads(token[1]), validate=True)
        except (ValueError, binascii.Error) as err:
            raise self.error(f"bytes(...) holds invalid base64: {err}", token) from None
        self.expect(")")
        return value

    def _plain_number(self, text: str, token: Token) -> int | float:
        return float(text) if any(c in text for c in ".eE") else self._bounded_int(text, token)

    def attr_key(self) -> str | None:
        """The key if the next tokens are ``key =``, else None (nothing consumed)."""
        kind, text, _ = self.peek()
        if kind in ("ident", "string") and self.tokens[self.pos + 1][0] == "=":
            self.pos += 2
            return self.string_value(self.tokens[self.pos - 2]) if kind == "string" else text
        return None

    # -- types

    def parse_type(self) -> Type:
        token = self.advance()
        kind, text, _ = token
        if kind == "ident" and text == "Tensor":
            self.expect("[")
            self.expect("(")
            dims: list[Dim] = []
            while self.peek()[0] != ")":
                dims.append(self.dim_value())
                if self.peek()[0] != ")":
                    self.expect(",", "',' or ')'")
            self.advance()
            self.expect(",")
            dtype = self.dtype()
            self.expect("]")
            return TensorType(dims, dtype)
        if kind == "ident" and text in DTYPES:
            return TensorType((), text)
        if kind == "(":
            fields, trailing_comma = self._type_list()
            return fields[0] if len(fields) == 1 and not trailing_comma else TupleType(fields)
        if kind == "ident" and text == "fn":
            self.expect("(")
            args, _ = self._type_list()
            self.expect("->")
            return FuncType(args, self.parse_type())
        raise self.error(f"expected a type, found {_describe(token)}", token)

    # -- symbolic dimensions

    def dim_value(self) -> Dim:
        """One shape entry: an int, or a dimension expression."""
        token = self.peek()
        if token[0] == "number" and self.tokens[self.pos + 1][0] in (",", ")"):
            return self.plain_int()  # a static dim reads (and fails) exactly as it always did
        try:
            return self._dim_sum()
        except DimError as err:
            raise self.error(str(err), token) from None

    def _dim_sum(self) -> Dim:
        total = self._dim_product()
        while self.peek()[0] in ("+", "-"):
            sign = self.advance()[0]
            term = self._dim_product()
            total = total + term if sign == "+" else total - term
        return total

    def _dim_product(self) -> Dim:
        product = self._dim_factor()
        while self.peek()[0] == "*":
            self.advance()
            product = product * self._dim_factor()
        return product

    def _dim_factor(self) -> Dim:
        token = self.advance()
        kind, text, _ = token
        if kind == "-":
            return -self._dim_factor()
        if kind == "number":
            self.pos -= 1
            return self.plain_int()
        if kind == "(":
            value = self._dim_sum()
            self.expect(")", "')'")
            return value
        if kind == "ident" and text in ("floordiv", "floormod") and self.peek()[0] == "(":
            self.advance()
            num = self._dim_sum()
            self.expect(",", "','")
            den = self._dim_sum()
            self.expect(")", "')'")
            return floordiv(num, den) if text == "floordiv" else floormod(num, den)
        if kind == "ident" and text not in ("inf", "dims") or kind == "string":
            return self.dim_var(token)
        raise self.error(f"expected a dimension (an int or a name), found {_describe(token)}", token)

    def dim_var(self, token: Token) -> DimVar:
        """The variable a name token stands for: declared in this def, else a new one
        with the default bounds (kept, so the name means one variable throughout)."""
        name = self.string_value(token) if token[0] == "string" else token[1]
        var = self.dims.get(name)
        if var is None:
            var = self.dims[name] = DimVar(name)
        return var

    def dim_decls(self) -> None:
        """``[name, name: lo..hi, name: lo..]``: declare dimension variables (the ``[``
        is next); a name declared twice is an error."""
        self.expect("[")
        while self.peek()[0] != "]":
            token = self.advance()
            if token[0] not in ("ident", "string"):
                raise self.error(f"expected a dimension name, found {_describe(token)}", token)
            name = self.string_value(token) if token[0] == "string" else token[1]
            lo, hi = 0, None
            if self.peek()[0] == ":":
                self.advance()
                lo = self.plain_int()
                self.expect("..", "'..'")
                if self.peek()[0] == "number":
                    hi = self.plain_int()
            if name in self.dims:
                raise self.error(f"dimension {name} is declared twice", token)
            try:
                self.dims[name] = DimVar(name, lo, hi)
            except DimError as err:
                raise self.error(str(err), token) from None
            if self.peek()[0] != "]":
                self.expect(",", "',' or ']'")
        self.advance()

    def _type_list(self) -> tuple[list[Type], bool]:
        """Types up to the closing ')' (the '(' is already read)."""
        types: list[Type] = []
        trailing_comma = False
        while self.peek()[0] != ")":
            types.append(self.parse_type())
            trailing_comma = False
            if self.peek()[0] != ")":
                self.expect(",", "',' or ')'")
                trailing_comma = True
        self.advance()
        return types, trailing_comma

    def dtype(self) -> str:
        token = self.expect("ident", "a dtype")
        if token[1] not in DTYPES:
            raise self.error(f"unknown dtype {token[1]!r}; supported: {', '.join(DTYPES)}", token)
        return token[1]

    # -- expressions

    def parse_block(self) -> Expr:
        """Statements then a result, up to (not including) the closing '}' or the end.
        ``let`` lines nest their Lets around the rest of the block."""
        tokens = self.tokens
        bindings: list[tuple[Var, Expr]] = []
        self.enter_scope()
        while True:
            kind, text, _ = token = tokens[self.pos]
            if kind == "temp" and tokens[self.pos + 1][0] == "=":
                self.pos += 2
                value = self.parse_value()
                self.expect(";", "';'")
                if text in self.temps:
                    raise self.error(f"temporary {text} is already defined", token)
                self.define(self.temps, text, value)
            elif kind == "ident" and text == "let":
                self.pos += 1
                var = self.binder()
                self.expect("=", "'='")
                value = self.parse_value()
                self.expect(";", "';'")
                self.define(self.vars, var.name_hint, var)
                bindings.append((var, value))
            else:
                break
        result = self.parse_value()
        self.exit_scope()
        for var, value in reversed(bindings):
            result = Let(var, value, result)
        return result

    def binder(self) -> Var:
        """``%x`` or ``%x: Type`` where a variable is bound (not yet in scope)."""
        token = self.expect("var", "a variable like %x")
        annotation = None
        if self.peek()[0] == ":":
            self.advance()
            annotation = self.parse_type()
        return Var(self._token_name(token), annotation)

    def _token_name(self, token: Token) -> str:
        text = token[1][1:]
        return self.string_value(token, text) if text.startswith('"') else text

    def string_value(self, token: Token, text: str | None = None) -> str:
        """A quoted string (JSON syntax) as text; ``text``: the quoted part of ``token``."""
        quoted = token[1] if text is None else text
        try:
            value = json.loads(quoted)
            value.encode("utf-8")  # a lone surrogate (\ud800) is no text either
        except ValueError as err:  # JSONDecodeError and UnicodeEncodeError are ValueErrors
            raise self.error(f"invalid string {quoted[:40]!r}: {getattr(err, 'msg', err)}", token) from None
        return value

    def parse_value(self) -> Expr:
        kind, text, _ = self.tokens[self.pos]
        if kind == "ident" and text == "if":
            return self.parse_if()
        if kind == "ident" and text == "fn":
            return self.parse_fn()
        if kind == "{":
            self.pos += 1
            value = self.parse_block()
            self.expect("}", "'}'")
            return value
        if kind == "(":
            return self.parse_tuple()
        atom = self.parse_atom()
        kind = self.tokens[self.pos][0]
        if kind == "(":
            return self.parse_call(atom)
        if kind == ".":
            self.pos += 1
            return TupleGetItem(atom, self.plain_int())
        return atom

    def parse_tuple(self) -> Expr:
        self.expect("(")
        fields: list[Expr] = []
        trailing_comma = False
        while self.peek()[0] != ")":
            fields.append(self.parse_value())
            trailing_comma = False
            if self.peek()[0] != ")":
                self.expect(",", "',' or ')'")
                trailing_comma = True
        self.advance()
        if len(fields) == 1 and not trailing_comma:
            return fields[0]  # (e) is e; a 1-tuple is written (e,)
        return Tuple(fields)

    def parse_call(self, callee: Expr) -> Call:
        self.expect("(")
        args: list[Expr] = []
        key_tokens: dict[str, Token] = {}
        attrs = self.items_then_attrs(
            lambda: args.append(self.parse_value()), "a positional argument", key_tokens
        )
        if attrs and isinstance(callee, Op):
            self.check_op_attrs(callee, attrs, key_tokens)
        return Call(callee, args, attrs)

    def check_op_attrs(self, op: Op, attrs: dict[str, Any], key_tokens: dict[str, Token]) -> None:
        """Hold attribute values to the kind of the op's schema defaults (a float for
        ``epsilon=1e-5``, a tuple of ints for ``strides=(1, 1)``...): op builders convert
        their arguments, text reaches the ops unconverted. An int where a float is
        expected is taken as that float."""
        schema = op.get_attr("attr_defaults") or {}
        for key, value in attrs.items():
            default = schema.get(key)  # unknown keys are the type relation's to name
            if isinstance(default, float) and _is_int(value):
                attrs[key] = float(value)
            elif not _same_kind(default, value):
                raise self.error(
                    f"attribute {key} of op {op.name} must be {_kind_text(default)}, got {value!r}",
                    key_tokens[key],
                )

    def items_then_attrs(self, parse_item: Any, item_kind: str,
                         key_tokens: dict[str, Token] | None = None) -> dict[str, Any]:
        """Up to the closing ``)`` (consumed): comma-separated items, each read by
        ``parse_item``, then ``key=value`` attributes (returned; ``key_tokens`` gets each
        key's token); an item after an attribute or a repeated key is an error."""
        attrs: dict[str, Any] = {}
        while self.peek()[0] != ")":
            key_token = self.peek()
            key = self.attr_key()
            if key is not None:
                if key in attrs:
                    raise self.error(f"attribute {key!r} is given twice", key_token)
                attrs[key] = self.attr_value()
                if key_tokens is not None:
                    key_tokens[key] = key_token
            elif attrs:
                raise self.error(f"{item_kind} cannot follow attributes", key_token)
            else:
                parse_item()
            if self.peek()[0] != ")":
                self.expect(",", "',' or ')'")
        self.advance()
        return attrs

    def parse_if(self) -> If:
        self.advance()
        self.expect("(", "'(' after if")
        cond = self.parse_value()
        self.expect(")", "')'")
        self.expect("{", "'{'")
        true_branch = self.parse_block()
        self.expect("}", "'}'")
        if not self.at_word("else"):
            raise self.error(f"expected 'else', found {_describe(self.peek())}")
        self.advance()
        self.expect("{", "'{'")
        false_branch = self.parse_block()
        self.expect("}", "'}'")
        return If(cond, true_branch, false_branch)

    def parse_fn(self) -> Function:
        self.advance()
        if self.peek()[0] == "[":
            self.dim_decls()
        return self.function_rest()

    def function_rest(self) -> Function:
        """``(params, attrs) -> RetType { body }``; params are in scope in the body."""
        self.expect("(", "'('")
        self.enter_scope()
        params: list[Var] = []

        def parameter() -> None:
            param = self.binder()
            self.define(self.vars, param.name_hint, param)
            params.append(param)

        attrs = self.items_then_attrs(parameter, "a parameter")
        ret_type = None
        if self.peek()[0] == "->":
            self.advance()
            ret_type = self.parse_type()
        self.expect("{", "'{'")
        body = self.parse_block()
        self.expect("}", "'}'")
        self.exit_scope()
        return Function(params, body, ret_type, attrs)

    def parse_atom(self) -> Expr:
        token = self.tokens[self.pos]
        kind, text, _ = token
        if kind == "temp":
            self.pos += 1
            value = self.temps.get(text)
            if value is None:
                raise self.error(f"undefined temporary {text}", token)
            return value
        if kind == "var":
            self.pos += 1
            name = self._token_name(token)
            var = self.vars.get(name)
            if var is None:
                var = self.free_vars.get(name)
            if var is None:
                if not self.allow_free_vars:
                    raise self.error(f"undefined variable {text}", token)
                var = self.free_vars[name] = Var(name)
            return var
        if kind == "global":
            self.pos += 1
            name = self._token_name(token)
            gv = self.global_vars.get(name)
            if gv is None:
                gv = self.global_vars[name] = GlobalVar(name)
            return gv
        if kind == "[":
            return self.tensor_literal()
        if kind in ("number", "-"):
            value, dtype = self.scalar_literal()
            return Constant(np.array(value, dtype=dtype))
        if kind == "ident":
            if text == "meta":
                return self.meta_constant()
            if text in ("true", "false") or _SPECIAL_FLOAT.fullmatch(text):
                value, dtype = self.scalar_literal()
                return Constant(np.array(value, dtype=dtype))
            if text in _KEYWORDS:
                raise self.error(f"expected an expression, found {text!r}", token)
            self.pos += 1
            try:
                return Op.get(text)
            except OpNotFoundError:
                raise self.error(f"unknown op {text!r}", token) from None
        raise self.error(f"expected an expression, found {_describe(token)}", token)

    # -- top level

    def module(self) -> IRModule:
        mod = IRModule()
        if self.at_word("module_attrs"):
            self.advance()
            self.expect("(")
            module_attrs: dict[str, Any] = {}
            while self.peek()[0] != ")":
                key = self.attr_key()
                if key is None:
                    raise self.error(f"expected key=value, found {_describe(self.peek())}")
                module_attrs[key] = self.attr_value()
                if self.peek()[0] != ")":
                    self.expect(",", "',' or ')'")
            self.advance()
            mod = IRModule(attrs=module_attrs)
        while self.peek()[0] != "eof":
            if not self.at_word("def"):
                raise self.error(f"expected 'def', found {_describe(self.peek())}")
            self.advance()
            name_token = self.expect("global", "a function name like @main")
            name = self._token_name(name_token)
            if name in mod:
                raise self.error(f"function @{name} is defined twice", name_token)
            self.dims = {}  # each def binds its own dimension variables
            if self.peek()[0] == "[":
                self.dim_decls()
            mod[name] = self.function_rest()
        return mod

    def expression(self) -> Expr:
        self.enter_scope()
        if self.at_word("dims") and self.tokens[self.pos + 1][0] == "[":
            self.advance()
            self.dim_decls()
            self.expect(";", "';'")
        while self.at_word("free_var"):
            self.advance()
            var = self.binder()
            self.expect(";", "';'")
            self.free_vars[var.name_hint] = var
        expr = self.parse_block()
        self.expect_end()
        self.exit_scope()
        return expr


def _run(text: str, allow_free_vars: bool, read: Any) -> Any:
    if not isinstance(text, str):
        raise ParseError(f"parse needs a str, got {type(text).__name__}")
    parser = None
    try:
        parser = _Parser(text, allow_free_vars)
        parser.split_metadata()
        return read(parser)
    except RecursionError:
        if parser is None:
            raise
        raise parser.error("the text is nested too deeply") from None
    except IRError as err:  # a node constructor rejected what the text says
        if parser is None:
            raise
        raise parser.error(str(err)) from None


def parse(text: str) -> IRModule:
    """Parse module text (``def @name(...) { ... }`` functions) into an IRModule."""
    return _run(text, False, _Parser.module)


def parse_expr(text: str) -> Expr:
    """Parse the text of one expression as printed by ``astext(expr)``; free variables
    (declared by ``free_var`` or just used) become fresh Vars, one per name."""
    return _run(text, True, _Parser.expression)


def parse_type(text: str) -> Type:
    """Parse a type: ``Tensor[(2, 3), float32]``, ``(T1, T2)``, ``fn (T1) -> T2``; with
    symbolic dimensions, ``[n: 1..64] Tensor[(n, 4), float32]`` declares their bounds."""
    def read(parser: _Parser) -> Type:
        if parser.peek()[0] == "[":
            parser.dim_decls()
        ty = parser.parse_type()
        parser.expect_end()
        return ty

    return _run(text, False, read)


__all__ = ["parse", "parse_expr", "parse_type"]

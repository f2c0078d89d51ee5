"""Symbolic dimensions: named sizes and integer expressions over them, in canonical form.

A tensor dimension (a :data:`Dim`) is a plain ``int`` or a symbolic one:

* :class:`DimVar` ``(name, lo=0, hi=None)``: a named size with inclusive bounds (``hi``
  None: unbounded). Two DimVars with the same name and bounds are the same variable, so
  text and pickles give back equal dimensions.
* :class:`DimExpr`: an integer expression over DimVars, kept as a polynomial: integer
  coefficients over monomials (products of powers of *atoms*). An atom is a DimVar, or
  the floor division / floor modulus of an expression by a constant > 1.

Arithmetic (``+ - *`` with ints and dims, ``//`` and ``%`` by positive ints, exact
division by dims) always returns the canonical form, and the canonical form is what
``==`` and ``hash`` see: ``batch * 16 + 0 == 16 * batch``, ``(seq + past) - past == seq``.
Whatever reduces to a constant is a plain ``int`` and whatever reduces to one variable is
that :class:`DimVar`, so an ``int`` dimension stays an ``int`` everywhere and static shapes
are what they always were. Ordering (``<``) and truth value are deliberately not defined:
whether ``n < 4`` depends on the binding, so code must ask :func:`prove_equal`,
:func:`bounds` or :func:`exact_div`, which say when they do not know.

Why a polynomial: it is the smallest normal form that makes the shape algebra of a
transformer (products in reshape, sums in concat, the difference of a sum) decide
equality by comparison, and that divides exactly when the element count of a reshape
does. Floor division and modulus stay atoms: their algebra is not a ring, so only the
safe rewrites are done (multiples of the divisor move out, nested divisions merge,
bounds that fix the result fold it).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Union

import numpy as np

from passinfra.errors import DimError

# monomial: ((atom, exponent), ...) sorted by atom order; the constant monomial is ()
Monomial = tuple
Poly = dict  # Monomial -> nonzero int coefficient

_PLAIN = re.compile(r"[A-Za-z_]\w*", re.ASCII)
# words the text format gives a meaning inside a shape; a dim named so is quoted
RESERVED_NAMES = frozenset(("floordiv", "floormod", "inf", "dims"))
# placeholder names (structural equality's canonical renaming) start with this; user
# names cannot, so a placeholder never captures a user's variable
_PLACEHOLDER = "\x00"


class SymDim:
    """Base of the symbolic dimensions (:class:`DimVar`, :class:`DimExpr`): arithmetic,
    evaluation and text. Immutable, compared and hashed by canonical form."""

    __slots__ = ()

    is_static = False
    # NumPy defers to the methods here (np.int64(2) * n is a dimension, not an object array)
    __array_ufunc__ = None

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    # -- arithmetic: every result is canonical (see the module docstring)

    def __add__(self, other: Any) -> Dim:
        other = _operand(other)
        return NotImplemented if other is None else _from_poly(_add_polys(_poly(self), _poly(other)))

    __radd__ = __add__

    def __sub__(self, other: Any) -> Dim:
        other = _operand(other)
        return NotImplemented if other is None else _from_poly(_add_polys(_poly(self), _poly(other), -1))

    def __rsub__(self, other: Any) -> Dim:
        other = _operand(other)
        return NotImplemented if other is None else _from_poly(_add_polys(_poly(other), _poly(self), -1))

    def __neg__(self) -> Dim:
        return _from_poly({m: -c for m, c in _poly(self).items()})

    def __pos__(self) -> Dim:
        return self

    def __mul__(self, other: Any) -> Dim:
        other = _operand(other)
        return NotImplemented if other is None else _from_poly(_mul_polys(_poly(self), _poly(other)))

    __rmul__ = __mul__

    def __floordiv__(self, other: Any) -> Dim:
        other = _operand(other)
        return NotImplemented if other is None else floordiv(self, other)

    def __rfloordiv__(self, other: Any) -> Dim:
        other = _operand(other)
        return NotImplemented if other is None else floordiv(other, self)

    def __mod__(self, other: Any) -> Dim:
        other = _operand(other)
        return NotImplemented if other is None else floormod(self, other)

    def __rmod__(self, other: Any) -> Dim:
        other = _operand(other)
        return NotImplemented if other is None else floormod(other, self)

    def __bool__(self) -> bool:
        # `if dim:` would silently treat a size that may be 0 as nonzero
        raise DimError(f"the truth value of the symbolic dimension {self} is not known; "
                       "use prove_equal or bounds")

    def __str__(self) -> str:
        return dim_text(self)

    # -- queries (module-level functions take ints too)

    @property
    def free_vars(self) -> tuple[DimVar, ...]:
        """The variables this dimension depends on, in canonical order."""
        return free_vars(self)

    def evaluate(self, binding: Mapping[str, int]) -> int:
        """The value under ``binding`` (variable name -> int)."""
        return evaluate(self, binding)


class DimVar(SymDim):
    """A named symbolic size with inclusive bounds ``lo <= value <= hi`` (``hi`` None:
    no upper bound). Equal to any DimVar of the same name and bounds."""

    __slots__ = ("name", "lo", "hi", "_hash", "_order")

    def __init__(self, name: str, lo: int = 0, hi: int | None = None) -> None:
        if not isinstance(name, str) or not name or name.startswith(_PLACEHOLDER):
            raise DimError(f"a dimension variable needs a non-empty name, got {name!r}")
        lo = _bound(lo, "lo", name)
        if lo < 0:
            raise DimError(f"dimension {name}: a size cannot be negative, got lo={lo}")
        if hi is not None:
            hi = _bound(hi, "hi", name)
            if hi < lo:
                raise DimError(f"dimension {name}: empty range lo={lo} > hi={hi}")
        _init_var(self, name, lo, hi)

    @property
    def bounds(self) -> tuple[int, int | None]:
        """``(lo, hi)``, inclusive; ``hi`` None when unbounded."""
        return (self.lo, self.hi)

    def contains(self, value: int) -> bool:
        """Whether ``value`` lies within this variable's bounds."""
        return self.lo <= value and (self.hi is None or value <= self.hi)

    def __eq__(self, other: object) -> bool:
        return type(other) is DimVar and self._order == other._order

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:
        return (_make_var, (self.name, self.lo, self.hi))

    def __repr__(self) -> str:
        extra = "" if self.lo == 0 else f", lo={self.lo}"
        extra += "" if self.hi is None else f", hi={self.hi}"
        return f"DimVar({self.name!r}{extra})"


def _init_var(var: DimVar, name: str, lo: int, hi: int | None) -> None:
    set_ = object.__setattr__
    set_(var, "name", name)
    set_(var, "lo", lo)
    set_(var, "hi", hi)
    # -1 stands for "unbounded" in the order key, so keys stay comparable tuples of ints
    set_(var, "_order", (0, name, lo, -1 if hi is None else hi))
    set_(var, "_hash", hash(var._order))


def _make_var(name: str, lo: int, hi: int | None) -> DimVar:
    """A DimVar without the checks (unpickling, placeholders)."""
    var = object.__new__(DimVar)
    _init_var(var, name, lo, hi)
    return var


def placeholder(index: int, lo: int, hi: int | None) -> DimVar:
    """The ``index``-th bound variable of structural equality's canonical renaming: a
    name no user variable can have, with the bounds of the variable it stands for."""
    return _make_var(f"{_PLACEHOLDER}{index}", lo, hi)


def _bound(value: Any, what: str, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise DimError(f"dimension {name}: bound {what} must be an int, got {value!r}")
    return int(value)


class _Atom:
    """Floor division or modulus of a non-constant dimension by a constant > 1."""

    __slots__ = ("num", "den", "_hash", "_order")

    kind = 0

    def __init__(self, num: SymDim, den: int) -> None:
        object.__setattr__(self, "num", num)
        object.__setattr__(self, "den", den)
        object.__setattr__(self, "_order", (self.kind, _expr_order(num), den))
        object.__setattr__(self, "_hash", hash(self._order))

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.num == other.num and self.den == other.den

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:
        return (type(self), (self.num, self.den))


class _FloorDiv(_Atom):
    __slots__ = ()
    kind = 1


class _FloorMod(_Atom):
    __slots__ = ()
    kind = 2


class DimExpr(SymDim):
    """A symbolic dimension that is neither a constant nor a single variable, in canonical
    polynomial form: ``terms`` is ``((monomial, coefficient), ...)`` in canonical order.
    Build one with arithmetic on DimVars, never directly."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: tuple) -> None:
        object.__setattr__(self, "terms", terms)
        object.__setattr__(self, "_hash", hash(terms))

    def __eq__(self, other: object) -> bool:
        return type(other) is DimExpr and self._hash == other._hash and self.terms == other.terms

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:
        return (DimExpr, (self.terms,))

    def __repr__(self) -> str:
        return f"DimExpr({dim_text(self)!r})"


Dim = Union[int, SymDim]  # noqa: UP007  (a runtime alias; `int | SymDim` reads the same)


# --------------------------------------------------------------------------- polynomials


def _operand(value: Any) -> Dim | None:
    """An int or symbolic dimension, or None for anything arithmetic should refuse."""
    if type(value) is int or isinstance(value, SymDim):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    return None


def _norm(dim: Any) -> Dim:
    """A dimension given to a public function: a NumPy int becomes an int."""
    if type(dim) is int or isinstance(dim, SymDim):
        return dim
    operand = _operand(dim)
    if operand is None:
        raise DimError(f"expected an int or a symbolic dimension, got {dim!r}")
    return operand


def _poly(dim: Dim) -> Poly:
    if type(dim) is int:
        return {(): dim} if dim else {}
    if type(dim) is DimVar:
        return {((dim, 1),): 1}
    return dict(dim.terms)


def _add_polys(a: Poly, b: Poly, sign: int = 1) -> Poly:
    out = dict(a)
    for mono, coeff in b.items():
        out[mono] = out.get(mono, 0) + sign * coeff
    return out


def _mono_mul(a: Monomial, b: Monomial) -> Monomial:
    if not a:
        return b
    if not b:
        return a
    powers: dict[Any, int] = dict(a)
    for atom, exp in b:
        powers[atom] = powers.get(atom, 0) + exp
    return tuple(sorted(powers.items(), key=lambda item: item[0]._order))


def _mul_polys(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for mono_a, coeff_a in a.items():
        for mono_b, coeff_b in b.items():
            mono = _mono_mul(mono_a, mono_b)
            out[mono] = out.get(mono, 0) + coeff_a * coeff_b
    return out


def _mono_key(mono: Monomial) -> tuple:
    # higher degree first, then by atoms: the order terms are printed in
    return (-sum(exp for _, exp in mono), tuple((atom._order, exp) for atom, exp in mono))


def _expr_order(dim: SymDim) -> tuple:
    return tuple((_mono_key(mono), coeff) for mono, coeff in _poly(dim).items())


def _from_poly(poly: Poly) -> Dim:
    """The canonical dimension of a polynomial: an int, a DimVar, or a DimExpr."""
    terms = [(mono, coeff) for mono, coeff in poly.items() if coeff]
    if not terms:
        return 0
    if len(terms) == 1:
        mono, coeff = terms[0]
        if not mono:
            return coeff
        if coeff == 1 and len(mono) == 1 and mono[0][1] == 1 and type(mono[0][0]) is DimVar:
            return mono[0][0]
    terms.sort(key=lambda term: _mono_key(term[0]))
    return DimExpr(tuple(terms))


def _atom_dim(atom: _Atom) -> DimExpr:
    mono = ((atom, 1),)
    return DimExpr(((mono, 1),))


# --------------------------------------------------------------------------- division


def floordiv(a: Dim, b: Dim) -> Dim:
    """``a // b`` (floor division). ``b`` must be a positive int, or a dimension that
    divides ``a`` exactly (:func:`exact_div`); anything else is a DimError."""
    a, b = _norm(a), _norm(b)
    if isinstance(b, SymDim):
        quotient = exact_div(a, b)
        if quotient is None:
            raise DimError(f"cannot divide {dim_text(a)} by the symbolic dimension {b}: "
                           "the division is not provably exact")
        return quotient
    if b <= 0:
        raise DimError(f"a dimension can only be divided by a positive int, got {dim_text(a)} // {b}")
    if type(a) is int:
        return a // b
    if b == 1:
        return a
    whole: Poly = {}
    rest: Poly = {}
    for mono, coeff in _poly(a).items():
        # floor((b*q + r) / b) == q + floor(r / b) when q is an integer expression
        quotient, remainder = divmod(coeff, b)
        whole[mono] = quotient
        rest[mono] = remainder
    return _from_poly(_add_polys(whole, _poly(_floordiv_atom(_from_poly(rest), b))))


def _floordiv_atom(rest: Dim, den: int) -> Dim:
    """floor(rest / den) for ``rest`` whose coefficients lie in [0, den)."""
    if type(rest) is int:
        return rest // den
    lo, hi = bounds(rest)
    if lo is not None and hi is not None and lo // den == hi // den:
        return lo // den  # the bounds fix the quotient
    inner = _single_atom(rest)
    if type(inner) is _FloorDiv:
        # floor(floor(x / a) / b) == floor(x / (a * b)) for positive a, b
        return floordiv(inner.num, inner.den * den)
    return _atom_dim(_FloorDiv(rest, den))


def floormod(a: Dim, b: Dim) -> Dim:
    """``a % b`` (floor modulus, in [0, b) for positive ``b``); ``b`` must be a positive
    int, or a dimension that divides ``a`` exactly (giving 0)."""
    a, b = _norm(a), _norm(b)
    if isinstance(b, SymDim):
        if exact_div(a, b) is None:
            raise DimError(f"cannot take {dim_text(a)} modulo the symbolic dimension {b}")
        return 0
    if b <= 0:
        raise DimError(f"a dimension's modulus needs a positive int, got {dim_text(a)} % {b}")
    if type(a) is int:
        return a % b
    # (b*q + r) mod b == r mod b: reduce every coefficient first
    rest = _from_poly({mono: coeff % b for mono, coeff in _poly(a).items()})
    if type(rest) is int:
        return rest % b
    lo, hi = bounds(rest)
    if lo is not None and hi is not None and 0 <= lo and hi < b:
        return rest  # already in [0, b)
    inner = _single_atom(rest)
    if type(inner) is _FloorMod and inner.den % b == 0:
        return floormod(inner.num, b)  # (x mod (k*b)) mod b == x mod b
    return _atom_dim(_FloorMod(rest, b))


def _single_atom(dim: SymDim) -> _Atom | None:
    """The atom when ``dim`` is exactly one floordiv/floormod atom, else None."""
    if type(dim) is DimExpr and len(dim.terms) == 1:
        mono, coeff = dim.terms[0]
        if coeff == 1 and len(mono) == 1 and mono[0][1] == 1 and isinstance(mono[0][0], _Atom):
            return mono[0][0]
    return None


def exact_div(a: Dim, b: Dim) -> Dim | None:
    """``a / b`` when ``b`` provably divides ``a`` (as polynomials with integer
    coefficients: for every binding), else None. ``b`` equal to 0 gives None."""
    a, b = _norm(a), _norm(b)
    if type(b) is int:
        if b == 0:
            return None
        if all(coeff % b == 0 for coeff in _poly(a).values()):
            return _from_poly({mono: coeff // b for mono, coeff in _poly(a).items()})
        return None
    if a == b:
        return 1
    return _poly_exact_div(_poly(a), _poly(b))


def _poly_exact_div(num: Poly, den: Poly) -> Dim | None:
    """Multivariate long division in graded lexicographic order (atoms as variables);
    the quotient when the remainder is zero. For an exact division the leading term of
    what is left is always a multiple of the divisor's leading term, so the first one
    that is not proves the division inexact."""
    atoms = sorted({atom for poly in (num, den) for mono in poly for atom, _ in mono},
                   key=lambda atom: atom._order)
    index = {atom: i for i, atom in enumerate(atoms)}

    def vector(mono: Monomial) -> tuple[int, ...]:
        exps = [0] * len(atoms)
        for atom, exp in mono:
            exps[index[atom]] = exp
        return tuple(exps)

    def grlex(exps: tuple[int, ...]) -> tuple:
        return (sum(exps), exps)

    rest = {vector(mono): coeff for mono, coeff in num.items() if coeff}
    divisor = {vector(mono): coeff for mono, coeff in den.items() if coeff}
    lead = max(divisor, key=grlex)
    lead_coeff = divisor[lead]
    quotient: dict[tuple[int, ...], int] = {}
    while rest:
        top = max(rest, key=grlex)
        step = tuple(x - y for x, y in zip(top, lead))
        if min(step) < 0 or rest[top] % lead_coeff:
            return None
        factor = rest[top] // lead_coeff
        quotient[step] = quotient.get(step, 0) + factor
        for exps, coeff in divisor.items():
            target = tuple(x + y for x, y in zip(exps, step))
            value = rest.get(target, 0) - factor * coeff
            if value:
                rest[target] = value
            else:
                rest.pop(target, None)

    def monomial(exps: tuple[int, ...]) -> Monomial:
        return tuple((atoms[i], exp) for i, exp in enumerate(exps) if exp)

    return _from_poly({monomial(exps): coeff for exps, coeff in quotient.items()})


# --------------------------------------------------------------------------- queries


def is_static(dim: Dim) -> bool:
    """Whether ``dim`` is static (an int, not a symbolic dimension)."""
    return not isinstance(dim, SymDim)


def as_dim(value: Any, what: str = "dimension") -> Dim:
    """``value`` as a Dim (NumPy ints become ints); a DimError for anything else."""
    dim = _operand(value)
    if dim is None:
        raise DimError(f"{what} must be an int or a symbolic dimension, got {value!r}")
    return dim


def free_vars(dim: Dim) -> tuple[DimVar, ...]:
    """The DimVars ``dim`` depends on (inside floordiv/floormod too), in canonical order."""
    if not isinstance(dim, SymDim):
        return ()
    if type(dim) is DimVar:
        return (dim,)
    found: dict[DimVar, None] = {}
    stack: list[SymDim] = [dim]
    while stack:
        for mono, _ in _poly(stack.pop()).items():
            for atom, _ in mono:
                if type(atom) is DimVar:
                    found[atom] = None
                else:
                    stack.append(atom.num)
    return tuple(sorted(found, key=lambda var: var._order))


def evaluate(dim: Dim, binding: Mapping[str, int]) -> int:
    """The value of ``dim`` with each variable replaced by ``binding[name]`` (bounds are
    not checked here); a variable missing from the binding is a DimError naming it."""
    if not isinstance(dim, SymDim):
        return int(dim)
    if type(dim) is DimVar:
        try:
            return int(binding[dim.name])
        except KeyError:
            raise DimError(f"no value for the dimension {dim_text(dim)} in the binding "
                           f"{dict(binding)!r}") from None
    total = 0
    for mono, coeff in dim.terms:
        value = coeff
        for atom, exp in mono:
            value *= _atom_value(atom, binding) ** exp
        total += value
    return total


def _atom_value(atom: Any, binding: Mapping[str, int]) -> int:
    if type(atom) is DimVar:
        return evaluate(atom, binding)
    num = evaluate(atom.num, binding)
    return num // atom.den if type(atom) is _FloorDiv else num % atom.den


def substitute(dim: Dim, mapping: Mapping[DimVar, Dim]) -> Dim:
    """``dim`` with each variable in ``mapping`` replaced (and the result canonical)."""
    dim = _norm(dim)
    if type(dim) is int or not mapping:
        return dim
    if type(dim) is DimVar:
        return mapping.get(dim, dim)
    total: Dim = 0
    for mono, coeff in dim.terms:
        term: Dim = coeff
        for atom, exp in mono:
            if type(atom) is DimVar:
                value = mapping.get(atom, atom)
            else:
                num = substitute(atom.num, mapping)
                value = floordiv(num, atom.den) if type(atom) is _FloorDiv else floormod(num, atom.den)
            for _ in range(exp):
                term = term * value
        total = total + term
    return total


# bounds work on extended integers: -inf / +inf for "unbounded", None at the surface
_INF = math.inf


def _mul_ext(a: float, b: float) -> float:
    return 0 if a == 0 or b == 0 else a * b  # 0 * inf is 0 here: a zero size stays zero


def _interval_mul(a: tuple, b: tuple) -> tuple:
    products = [_mul_ext(x, y) for x in a for y in b]
    return (min(products), max(products))


def _atom_bounds(atom: Any) -> tuple:
    if type(atom) is DimVar:
        return (atom.lo, _INF if atom.hi is None else atom.hi)
    if type(atom) is _FloorMod:
        return (0, atom.den - 1)
    lo, hi = _ext_bounds(atom.num)
    return (lo if lo == -_INF else lo // atom.den, hi if hi == _INF else hi // atom.den)


def _ext_bounds(dim: Dim) -> tuple:
    if not isinstance(dim, SymDim):
        return (int(dim), int(dim))
    total = (0, 0)
    for mono, coeff in _poly(dim).items():
        term: tuple = (coeff, coeff)
        for atom, exp in mono:
            for _ in range(exp):
                term = _interval_mul(term, _atom_bounds(atom))
        total = (total[0] + term[0], total[1] + term[1])
    return total


def bounds(dim: Dim) -> tuple[int | None, int | None]:
    """Inclusive (lo, hi) of ``dim`` over every binding within its variables' bounds
    (None: unbounded on that side). Interval arithmetic: sound, not always tight."""
    lo, hi = _ext_bounds(dim)
    return (None if lo == -_INF else int(lo), None if hi == _INF else int(hi))


def prove_equal(a: Dim, b: Dim) -> bool | None:
    """Three-valued equality: True if ``a == b`` for every binding within bounds, False
    if they differ for every such binding, None if it depends on the binding."""
    diff = _norm(a) - _norm(b)
    if type(diff) is int:
        return diff == 0
    lo, hi = bounds(diff)
    if lo == 0 and hi == 0:
        return True
    if (lo is not None and lo > 0) or (hi is not None and hi < 0):
        return False
    return None


def prove_le(a: Dim, b: Dim) -> bool | None:
    """Three-valued ``a <= b`` (see :func:`prove_equal`)."""
    lo, hi = bounds(_norm(b) - _norm(a))
    if lo is not None and lo >= 0:
        return True
    if hi is not None and hi < 0:
        return False
    return None


def relax_floordivs(dim: Dim) -> Dim:
    """A dimension no greater than ``dim`` for any binding, without the floor divisions
    that appear linearly in it with a coefficient ``a`` that their divisor ``c`` divides:
    ``a * (x // c)`` becomes ``(a / c) * x`` when ``a < 0`` (as ``c * (x // c) <= x``) and
    ``(a / c) * (x - c + 1)`` when ``a > 0``. What interval bounds cannot see:
    ``x - 16 * (x // 16) >= 0`` (a loop's whole blocks of 16 never pass its end)."""
    dim = _norm(dim)
    if type(dim) is int or type(dim) is DimVar:
        return dim
    relaxed: Dim = 0
    for mono, coeff in dim.terms:
        atom = mono[0][0] if len(mono) == 1 and mono[0][1] == 1 else None
        if type(atom) is _FloorDiv and coeff % atom.den == 0:
            scale = coeff // atom.den
            relaxed = relaxed + scale * (atom.num if coeff < 0 else atom.num - atom.den + 1)
        else:
            relaxed = relaxed + _from_poly({mono: coeff})
    return relaxed


# --------------------------------------------------------------------------- text


def name_text(name: str) -> str:
    """A variable's name as the text format writes it: bare, or quoted (JSON) when it is
    not a plain identifier or is a word the format reserves."""
    if _PLAIN.fullmatch(name) and name not in RESERVED_NAMES:
        return name
    return json.dumps(name)


def _atom_text(atom: Any) -> str:
    if type(atom) is DimVar:
        return name_text(atom.name)
    word = "floordiv" if type(atom) is _FloorDiv else "floormod"
    return f"{word}({dim_text(atom.num)}, {atom.den})"


def dim_text(dim: Dim) -> str:
    """``dim`` as text: ``batch``, ``seq * 64 + 1``, ``floordiv(n + 1, 2)``; what the
    parser reads back into an equal dimension."""
    if not isinstance(dim, SymDim):
        return str(int(dim))
    if type(dim) is DimVar:
        return name_text(dim.name)
    parts: list[str] = []
    for mono, coeff in dim.terms:
        factors = [_atom_text(atom) for atom, exp in mono for _ in range(exp)]
        magnitude = abs(coeff)
        if not factors:
            text = str(magnitude)
        else:
            text = " * ".join(factors) + ("" if magnitude == 1 else f" * {magnitude}")
        if not parts:
            parts.append(text if coeff > 0 else f"-{text}")
        else:
            parts.append(f"{'+' if coeff > 0 else '-'} {text}")
    return " ".join(parts)


def bounds_text(var: DimVar) -> str:
    """A variable's declaration: ``batch`` (the default 0..unbounded), ``batch: 1..64``,
    ``seq: 1..`` (no upper bound)."""
    name = name_text(var.name)
    if var.lo == 0 and var.hi is None:
        return name
    return f"{name}: {var.lo}..{'' if var.hi is None else var.hi}"


def canon_key(dim: SymDim) -> tuple:
    """A nested tuple of plain values (str, int, None) equal for equal dimensions; what
    structural hashing encodes."""
    if type(dim) is DimVar:
        return ("v", dim.name, dim.lo, dim.hi)
    return ("e", tuple((tuple((_atom_key(atom), exp) for atom, exp in mono), coeff)
                       for mono, coeff in dim.terms))


def _atom_key(atom: Any) -> tuple:
    if type(atom) is DimVar:
        return canon_key(atom)
    return ("q" if type(atom) is _FloorDiv else "m", canon_key(atom.num), atom.den)


def sorted_vars(dims: Iterable[DimVar]) -> list[DimVar]:
    """DimVars in canonical order (by name, then bounds)."""
    return sorted(set(dims), key=lambda var: var._order)


def linear_unknown(dim: Dim, known: Iterable[DimVar]) -> tuple[DimVar, int, Dim] | None:
    """``(u, sign, rest)`` when ``dim`` is ``sign * u + rest`` with ``sign`` = +-1, ``u``
    its one variable not in ``known`` and ``rest`` free of ``u``: then the size of ``dim``
    gives ``u = sign * (size - rest)``. ``past + seq`` with ``seq`` known gives ``past``.
    None for anything else (no unknown, several, or ``u`` not linear)."""
    known = set(known)
    unknown = [var for var in free_vars(dim) if var not in known]
    if len(unknown) != 1:
        return None
    u = unknown[0]
    rest = substitute(dim, {u: 0})
    linear = _norm(dim) - rest
    if u in free_vars(rest):
        return None
    if linear == u:
        return u, 1, rest
    if _norm(linear) + u == 0:
        return u, -1, rest
    return None


# --------------------------------------------------------------------------- JSON


def dim_to_json(dim: Dim) -> Any:
    """``dim`` as a JSON value: an int stays an int, a variable is ``{"var": name}`` and
    any other dimension its canonical polynomial, ``{"poly": [[monomial, coeff], ...]}``
    with a monomial a list of ``[atom, exponent]`` and an atom a variable's name or
    ``{"floordiv": <dim>, "den": d}`` / ``{"floormod": <dim>, "den": d}``. Variables go by
    name only: their bounds are declared once, elsewhere (:func:`dim_from_json` takes
    them). ``dim_from_json(dim_to_json(d), vars) == d``."""
    dim = _norm(dim)
    if type(dim) is int:
        return dim
    if type(dim) is DimVar:
        return {"var": dim.name}
    return {"poly": [[[[_atom_to_json(atom), exp] for atom, exp in mono], coeff]
                     for mono, coeff in dim.terms]}


def _atom_to_json(atom: Any) -> Any:
    if type(atom) is DimVar:
        return atom.name
    word = "floordiv" if type(atom) is _FloorDiv else "floormod"
    return {word: dim_to_json(atom.num), "den": atom.den}


def dim_from_json(obj: Any, vars_by_name: Mapping[str, DimVar]) -> Dim:
    """The dimension :func:`dim_to_json` wrote, its variables looked up by name in
    ``vars_by_name``; a DimError for an unknown name or a malformed value."""
    if type(obj) is int:
        return obj
    try:
        if isinstance(obj, dict) and set(obj) == {"var"}:
            return _var_named(obj["var"], vars_by_name)
        if isinstance(obj, dict) and set(obj) == {"poly"}:
            poly: Poly = {}
            for mono_json, coeff in obj["poly"]:
                powers = [(_atom_from_json(atom, vars_by_name), exp) for atom, exp in mono_json]
                if type(coeff) is not int or any(type(exp) is not int or exp < 1 for _, exp in powers):
                    raise ValueError("coefficients and exponents must be ints")
                mono = tuple(sorted(powers, key=lambda item: item[0]._order))
                poly[mono] = poly.get(mono, 0) + coeff
            return _from_poly(poly)
    except (TypeError, ValueError, KeyError) as error:
        raise DimError(f"malformed dimension in JSON {obj!r}: {error}") from None
    raise DimError(f"malformed dimension in JSON {obj!r}")


def _var_named(name: Any, vars_by_name: Mapping[str, DimVar]) -> DimVar:
    var = vars_by_name.get(name) if isinstance(name, str) else None
    if var is None:
        known = ", ".join(sorted(vars_by_name)) or "none"
        raise DimError(f"dimension {name!r} in JSON is not declared (declared: {known})")
    return var


def _atom_from_json(obj: Any, vars_by_name: Mapping[str, DimVar]) -> Any:
    if isinstance(obj, str):
        return _var_named(obj, vars_by_name)
    if isinstance(obj, dict) and len(obj) == 2 and "den" in obj:
        den = obj["den"]
        if type(den) is not int or den < 2:
            raise ValueError(f"a floordiv/floormod divisor must be an int > 1, got {den!r}")
        for word, kind in (("floordiv", _FloorDiv), ("floormod", _FloorMod)):
            if word in obj:
                num = dim_from_json(obj[word], vars_by_name)
                if not isinstance(num, SymDim):
                    raise ValueError(f"the numerator of {word} must be symbolic, got {num!r}")
                return kind(num, den)
    raise ValueError(f"unknown atom {obj!r}")


__all__ = [
    "Dim", "SymDim", "DimVar", "DimExpr", "floordiv", "floormod", "exact_div", "is_static", "as_dim",
    "free_vars", "linear_unknown", "evaluate", "substitute", "bounds", "prove_equal", "prove_le", "dim_text",
    "bounds_text", "name_text", "canon_key", "sorted_vars", "placeholder", "RESERVED_NAMES",
    "dim_to_json", "dim_from_json", "relax_floordivs",
]

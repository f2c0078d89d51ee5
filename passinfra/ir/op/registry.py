"""The operator registry: one entry per op, holding everything the compiler knows of it.

An :class:`Op` is itself an expression (the callee of a ``Call``) and a singleton per
name, so ``Op.get("add") is Op.get("add")``. Each op carries its type relation, its NumPy
reference implementation (shared by the interpreter and FoldConstant: one semantics),
its fusion pattern kind and whether it is stateful. Later issues attach more (lowering)
through :meth:`Op.set_attr`; ``op.set_attr(SYMBOLIC_SHAPES, True)`` (``symbolic=True`` of
``register_tensor_op``) says the type relation handles symbolic dimensions, in its
inputs' types and in its attribute values (a slice end, a range stop or a target shape
that is a run-time size); ``op.set_attr(DIM_ATTR_CHECK, check)`` gives the run-time
check of what such a relation had to assume (see :data:`DIM_ATTR_CHECK`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

from passinfra.errors import DimError, IRError, IRTypeError, OpNotFoundError, RaypassError
from passinfra.ir.attrs import Attrs, holds_dims
from passinfra.ir.dims import SymDim
from passinfra.ir.expr import Expr
from passinfra.ir.types import TensorType, TupleType, Type


class OpPattern(enum.IntEnum):
    """Fusion pattern kinds, numbered as in TVM (lower is easier to fuse)."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_EWISE_FUSABLE = 4
    TUPLE = 7
    OPAQUE = 8


# type_rel(arg_types, attrs) -> output type; raises IRTypeError on a mismatch
TypeRelation = Callable[[Sequence[Type], Attrs], Type]
# impl(args, attrs) -> output array (or tuple of arrays); args are NumPy arrays or tuples
NumpyImpl = Callable[[Sequence[Any], Attrs], Any]

_REGISTRY: dict[str, Op] = {}

# op attr: the op's type relation handles symbolic dimensions (see Op.infer_type)
SYMBOLIC_SHAPES = "symbolic_shapes"
# op attr: check(args, attrs, bound_attrs) -> None, raising ValueError with the reason.
# A relation over attrs that hold dims may have to assume what no bound proves (a slice
# end within its axis, a range stop not before its start); the interpreter substitutes
# the call's sizes into the attrs (bound_attrs) and calls this first, so a size that
# breaks the assumption is a clear error, not a result that disagrees with its type.
DIM_ATTR_CHECK = "dim_attr_check"


def _types_text(arg_types: Sequence[Type]) -> str:
    return ", ".join(str(ty) for ty in arg_types)


def _symbolic_input(arg_types: Sequence[Type]) -> str:
    """Which input holds a symbolic dimension, where, and which: for an error message."""
    for index, ty in enumerate(arg_types):
        found = _first_symbolic(ty)
        if found is not None:
            where, dim = found
            return f"input {index} ({ty}) has the symbolic dimension {dim}{where}"
    return "an input has a symbolic dimension"


def _first_symbolic(ty: Type) -> tuple[str, SymDim] | None:
    if isinstance(ty, TensorType):
        for axis, dim in enumerate(ty.shape):
            if isinstance(dim, SymDim):
                return (f" at axis {axis}", dim)
    elif isinstance(ty, TupleType):
        for index, field in enumerate(ty.fields):
            found = _first_symbolic(field)
            if found is not None:
                return (f" in field {index}{found[0]}", found[1])
    return None


class Op(Expr):
    """A registered primitive operator."""

    __slots__ = ("name", "num_inputs", "type_rel", "impl", "pattern", "stateful", "doc", "_extra")

    def __init__(
        self,
        name: str,
        num_inputs: int,
        type_rel: TypeRelation,
        impl: NumpyImpl,
        pattern: OpPattern,
        stateful: bool = False,
        doc: str = "",
    ) -> None:
        super().__init__()
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "num_inputs", num_inputs)  # -1: any number
        object.__setattr__(self, "type_rel", type_rel)
        object.__setattr__(self, "impl", impl)
        object.__setattr__(self, "pattern", OpPattern(pattern))
        object.__setattr__(self, "stateful", bool(stateful))
        object.__setattr__(self, "doc", doc)
        object.__setattr__(self, "_extra", {})

    @staticmethod
    def get(name: str) -> Op:
        """The registered op called ``name``; raises OpNotFoundError naming it."""
        try:
            return _REGISTRY[name]
        except KeyError:
            raise OpNotFoundError(f"unknown op {name!r}; see `raypass ops` for the registered ones") from None

    @staticmethod
    def list_names() -> list[str]:
        return sorted(_REGISTRY)

    def infer_type(self, arg_types: Sequence[Type], attrs: Attrs) -> Type:
        """Run the type relation; errors are re-raised naming this op.

        An input with symbolic dimensions reaches only a relation that says it handles
        them (the op attr ``SYMBOLIC_SHAPES``); for any other op it is an IRTypeError
        naming the op, the input and the dimension, so no relation written for static
        shapes ever computes with a symbol.
        """
        if self.num_inputs >= 0 and len(arg_types) != self.num_inputs:
            raise IRTypeError(f"op {self.name} expects {self.num_inputs} arguments, got {len(arg_types)}")
        symbolic = any(not ty.is_static for ty in arg_types if isinstance(ty, Type))
        if symbolic and not self._extra.get(SYMBOLIC_SHAPES):
            raise IRTypeError(f"op {self.name}: {_symbolic_input(arg_types)}; {self.name} supports "
                              "static shapes only")
        if getattr(attrs, "has_dims", False):
            symbolic = True
            if not self._extra.get(SYMBOLIC_SHAPES):
                from passinfra.ir.printer import attr_value_text  # the printer imports this module

                key = next(k for k, v in attrs.items() if holds_dims(v))
                raise IRTypeError(f"op {self.name}: attribute {key} holds a symbolic dimension "
                                  f"({attr_value_text(attrs[key])}); {self.name} supports static "
                                  "attributes only")
        try:
            return self.type_rel(arg_types, attrs)
        except IRTypeError as err:
            if str(err).startswith(f"op {self.name}:"):
                raise
            raise IRTypeError(f"op {self.name}: {err}") from None
        except DimError as err:  # symbolic arithmetic without an answer (a division, ...)
            raise IRTypeError(f"op {self.name}: {err}") from None
        except (TypeError, ValueError, ArithmeticError) as err:
            if not symbolic or isinstance(err, RaypassError):
                raise
            # a relation that handles symbolic dims met a case it did not foresee: still
            # an error of ours, naming the op and its inputs, not a Python one from inside
            raise IRTypeError(f"op {self.name}: cannot infer the type for symbolic inputs "
                              f"{_types_text(arg_types)} ({type(err).__name__}: {err})") from err

    def compute(self, args: Sequence[Any], attrs: Attrs) -> Any:
        """Evaluate with the NumPy reference implementation."""
        return self.impl(args, attrs)

    def set_attr(self, key: str, value: Any) -> None:
        """Attach an extra per-op property (e.g. a lowering rule) under ``key``."""
        self._extra[key] = value

    def get_attr(self, key: str, default: Any = None) -> Any:
        return self._extra.get(key, default)

    def __reduce_ex__(self, protocol: int):
        return (Op.get, (self.name,))

    def __repr__(self) -> str:
        return f"Op({self.name})"


def register_op(
    name: str,
    *,
    num_inputs: int,
    type_rel: TypeRelation,
    impl: NumpyImpl,
    pattern: OpPattern,
    stateful: bool = False,
    doc: str = "",
    override: bool = False,
) -> Op:
    """Register an op; a duplicate name raises unless ``override=True``."""
    if name in _REGISTRY and not override:
        raise IRError(f"op {name!r} is already registered (pass override=True to replace it)")
    op = Op(name, num_inputs, type_rel, impl, pattern, stateful, doc)
    _REGISTRY[name] = op
    return op


def list_ops() -> list[Op]:
    """Every registered op, sorted by name."""
    return [_REGISTRY[name] for name in sorted(_REGISTRY)]

"""The operator registry: one entry per op, holding everything the compiler knows of it.

An :class:`Op` is itself an expression (the callee of a ``Call``) and a singleton per
name, so ``Op.get("add") is Op.get("add")``. Each op carries its type relation, its NumPy
reference implementation (shared by the interpreter and FoldConstant: one semantics),
its fusion pattern kind and whether it is stateful. Later issues attach more (lowering)
through :meth:`Op.set_attr`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

from passinfra.errors import IRError, IRTypeError, OpNotFoundError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Expr
from passinfra.ir.types import Type


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
        """Run the type relation; errors are re-raised naming this op."""
        if self.num_inputs >= 0 and len(arg_types) != self.num_inputs:
            raise IRTypeError(f"op {self.name} expects {self.num_inputs} arguments, got {len(arg_types)}")
        try:
            return self.type_rel(arg_types, attrs)
        except IRTypeError as err:
            if str(err).startswith(f"op {self.name}:"):
                raise
            raise IRTypeError(f"op {self.name}: {err}") from None

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

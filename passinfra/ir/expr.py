"""Expression nodes of the graph-level IR.

Nodes are immutable: every field is set once in ``__init__`` and assignment afterwards
raises. Two caches live on a node and never change what it means: ``_shash`` (its
structural hash as a root, filled by :func:`structural_hash`) and ``_checked_type``
(filled by type inference). ``==`` on expressions is identity, as in TVM; structural
comparison is :func:`passinfra.ir.structural_equal`. ``GlobalVar`` is the exception: it
is a name, so two GlobalVars with one name are equal (this is what lets modules move
between processes).

Each node kind declares its fields once, as its class attribute ``schema`` (a
:class:`~passinfra.ir.schema.NodeSchema`, fields in constructor order), and is declared
when its class is created (``__init_subclass__``); the slots (``schema.slots()``), the
functors' child iteration and rebuilds, structural equality/hash, the wire format and
the other tables of the IR are derived from it (see :mod:`passinfra.ir.schema`). Adding
a node kind is: its class here with its schema, plus whatever is really new about it
(syntax in the printer and parser, a type rule, an evaluation rule). ``Op``, defined with
the op registry, declares its schema in :mod:`passinfra.ir.functor`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from passinfra.errors import IRError
from passinfra.ir.attrs import EMPTY_ATTRS, Attrs, as_attrs
from passinfra.ir.schema import (
    NodeSchema,
    array,
    attrs_field,
    binder,
    binder_seq,
    child,
    child_seq,
    declare,
    type_field,
    value,
)
from passinfra.ir.types import Type, normalize_dtype

_UNSET = object()


class Expr:
    """Base of every expression node."""

    __slots__ = ("_shash", "_checked_type", "__weakref__")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        schema = cls.__dict__.get("schema")
        if isinstance(schema, NodeSchema):
            declare(cls, schema)

    def __init__(self) -> None:
        object.__setattr__(self, "_shash", None)
        object.__setattr__(self, "_checked_type", None)

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; build a new node instead")

    def __delattr__(self, key: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    @property
    def checked_type(self) -> Type:
        """The type found by type inference; raises if inference has not run."""
        if self._checked_type is None:
            raise IRError(
                f"the type of this {type(self).__name__} has not been inferred; run InferType first"
            )
        return self._checked_type

    def astext(self, show_meta_data: bool = True) -> str:
        from passinfra.ir.printer import astext

        return astext(self, show_meta_data=show_meta_data)

    def __str__(self) -> str:
        return self.astext(show_meta_data=False)

    def __reduce_ex__(self, protocol: int):
        from passinfra.ir.serialize import reduce_node

        return reduce_node(self, protocol)

    def __copy__(self) -> Expr:
        return self  # immutable: a copy is the node itself

    def __deepcopy__(self, memo: dict) -> Expr:
        return self


class Var(Expr):
    """A local variable, compared by identity (two ``Var("x")`` are different)."""

    schema = NodeSchema(value("name_hint"), type_field("type_annotation"), method="visit_var")
    __slots__ = schema.slots()

    def __init__(self, name_hint: str, type_annotation: Type | None = None) -> None:
        super().__init__()
        if not isinstance(name_hint, str) or not name_hint:
            raise IRError(f"Var name_hint must be a non-empty string, got {name_hint!r}")
        if type_annotation is not None and not isinstance(type_annotation, Type):
            raise IRError(f"Var type_annotation must be a Type, got {type_annotation!r}")
        object.__setattr__(self, "name_hint", name_hint)
        object.__setattr__(self, "type_annotation", type_annotation)

    def __repr__(self) -> str:
        return f"Var({self.name_hint!r}, {self.type_annotation!r})"


class GlobalVar(Expr):
    """The name of a function in an IRModule; equal by name."""

    schema = NodeSchema(value("name_hint", label="global var"), method="visit_global_var")
    __slots__ = schema.slots()

    def __init__(self, name_hint: str) -> None:
        super().__init__()
        if not isinstance(name_hint, str) or not name_hint:
            raise IRError(f"GlobalVar name_hint must be a non-empty string, got {name_hint!r}")
        object.__setattr__(self, "name_hint", name_hint)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GlobalVar) and other.name_hint == self.name_hint

    def __hash__(self) -> int:
        return hash(("GlobalVar", self.name_hint))

    def __repr__(self) -> str:
        return f"GlobalVar({self.name_hint!r})"


class Constant(Expr):
    """A constant tensor. The array is read-only; a writeable input is copied first."""

    schema = NodeSchema(array("data", label="constant"), method="visit_constant")
    __slots__ = schema.slots()

    def __init__(self, data: Any) -> None:
        super().__init__()
        array = np.asarray(data)
        normalize_dtype(array.dtype)  # rejects dtypes the IR does not support
        if array.flags.writeable or not array.flags.c_contiguous or not array.dtype.isnative:
            # native byte order: a float32 is one value however it arrived (text, pickle, numpy)
            array = np.array(array, dtype=array.dtype.newbyteorder("="), copy=True, order="C")
            array.flags.writeable = False
        object.__setattr__(self, "data", array)

    @classmethod
    def owning(cls, data: Any) -> Constant:
        """A Constant of an array handed over by its maker (a folded result, an imported
        tensor: computed for this constant, to be written by no one): made read-only in
        place instead of copied. The plain constructor copies a writeable array, since
        its caller may still write to it; for a deep model's weights that copy is
        hundreds of megabytes."""
        array = np.asarray(data)
        if array.flags.c_contiguous and array.dtype.isnative:
            array.flags.writeable = False
        return cls(array)

    @property
    def dtype(self) -> str:
        return self.data.dtype.name

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    def __repr__(self) -> str:
        return f"Constant(shape={self.shape}, dtype={self.dtype})"


class Call(Expr):
    """A call of an operator (``Op``) or a function (GlobalVar, Var, Function)."""

    schema = NodeSchema(
        child("op"),
        child_seq("args"),
        attrs_field("attrs", label="call attrs"),
        method="visit_call",
        dataflow=True,
    )
    __slots__ = schema.slots()

    def __init__(self, op: Expr, args: Iterable[Expr] = (), attrs: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        if not isinstance(op, Expr):
            raise IRError(f"Call op must be an expression (Op, GlobalVar, Var, Function), got {op!r}")
        args = tuple(args)
        for i, arg in enumerate(args):
            if not isinstance(arg, Expr):
                raise IRError(f"Call argument {i} must be an expression, got {type(arg).__name__}")
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "attrs", as_attrs(attrs))

    def __repr__(self) -> str:
        name = getattr(self.op, "name", None) or getattr(self.op, "name_hint", type(self.op).__name__)
        return f"Call({name}, {len(self.args)} args)"


class Tuple(Expr):
    """A tuple of expressions."""

    schema = NodeSchema(child_seq("fields", label="tuple fields"), method="visit_tuple", dataflow=True)
    __slots__ = schema.slots()

    def __init__(self, fields: Iterable[Expr]) -> None:
        super().__init__()
        fields = tuple(fields)
        for i, field in enumerate(fields):
            if not isinstance(field, Expr):
                raise IRError(f"Tuple field {i} must be an expression, got {type(field).__name__}")
        object.__setattr__(self, "fields", fields)

    def __len__(self) -> int:
        return len(self.fields)

    def __getitem__(self, index: int) -> Expr:
        return self.fields[index]

    def __repr__(self) -> str:
        return f"Tuple({len(self.fields)} fields)"


class TupleGetItem(Expr):
    """Field ``index`` of a tuple-valued expression."""

    schema = NodeSchema(
        child("tuple_value"), value("index", label="tuple index"), method="visit_tuple_getitem", dataflow=True
    )
    __slots__ = schema.slots()

    def __init__(self, tuple_value: Expr, index: int) -> None:
        super().__init__()
        if not isinstance(tuple_value, Expr):
            raise IRError(f"TupleGetItem needs an expression, got {type(tuple_value).__name__}")
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or index < 0:
            raise IRError(f"TupleGetItem index must be a non-negative int, got {index!r}")
        object.__setattr__(self, "tuple_value", tuple_value)
        object.__setattr__(self, "index", int(index))

    def __repr__(self) -> str:
        return f"TupleGetItem(.., {self.index})"


class Let(Expr):
    """``let var = value; body``."""

    schema = NodeSchema(binder("var"), child("value"), child("body"), method="visit_let")
    __slots__ = schema.slots()

    def __init__(self, var: Var, value: Expr, body: Expr) -> None:
        super().__init__()
        if not isinstance(var, Var):
            raise IRError(f"Let binds a Var, got {type(var).__name__}")
        for name, node in (("value", value), ("body", body)):
            if not isinstance(node, Expr):
                raise IRError(f"Let {name} must be an expression, got {type(node).__name__}")
        object.__setattr__(self, "var", var)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "body", body)

    def __repr__(self) -> str:
        return f"Let({self.var.name_hint}, ..)"


class If(Expr):
    """``if (cond) { true_branch } else { false_branch }``; cond is a bool scalar."""

    schema = NodeSchema(child("cond"), child("true_branch"), child("false_branch"), method="visit_if")
    __slots__ = schema.slots()

    def __init__(self, cond: Expr, true_branch: Expr, false_branch: Expr) -> None:
        super().__init__()
        for name, node in (("cond", cond), ("true_branch", true_branch), ("false_branch", false_branch)):
            if not isinstance(node, Expr):
                raise IRError(f"If {name} must be an expression, got {type(node).__name__}")
        object.__setattr__(self, "cond", cond)
        object.__setattr__(self, "true_branch", true_branch)
        object.__setattr__(self, "false_branch", false_branch)

    def __repr__(self) -> str:
        return "If(..)"


class BaseFunc(Expr):
    """What an IRModule maps a GlobalVar to: a graph-level Function or (later) a PrimFunc."""

    __slots__ = ("attrs",)

    def with_attr(self, key: str, value: Any) -> BaseFunc:
        raise NotImplementedError


class Function(BaseFunc):
    """``fn (params) -> ret_type { body }`` with read-only ``attrs``."""

    schema = NodeSchema(
        binder_seq("params"),
        child("body"),
        type_field("ret_type"),
        attrs_field("attrs", label="function attrs"),
        method="visit_function",
    )
    __slots__ = schema.slots(BaseFunc)

    def __init__(
        self,
        params: Iterable[Var],
        body: Expr,
        ret_type: Type | None = None,
        attrs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        params = tuple(params)
        for i, param in enumerate(params):
            if not isinstance(param, Var):
                raise IRError(f"Function parameter {i} must be a Var, got {type(param).__name__}")
        if not isinstance(body, Expr):
            raise IRError(f"Function body must be an expression, got {type(body).__name__}")
        if ret_type is not None and not isinstance(ret_type, Type):
            raise IRError(f"Function ret_type must be a Type, got {ret_type!r}")
        object.__setattr__(self, "params", params)
        object.__setattr__(self, "body", body)
        object.__setattr__(self, "ret_type", ret_type)
        object.__setattr__(self, "attrs", as_attrs(attrs))

    def with_attr(self, key: str, value: Any) -> Function:
        """A new Function equal to this one with ``attrs[key] = value``."""
        return Function(self.params, self.body, self.ret_type, self.attrs.with_item(key, value))

    def with_attrs(self, attrs: Mapping[str, Any]) -> Function:
        return Function(self.params, self.body, self.ret_type, Attrs({**self.attrs, **attrs}))

    def __repr__(self) -> str:
        return f"Function({len(self.params)} params)"


def var(name: str, shape: Any = None, dtype: Any = "float32") -> Var:
    """A Var; ``shape`` (a tuple, or a Type) gives its annotation, None leaves it open."""
    if shape is None:
        return Var(name)
    if isinstance(shape, Type):
        return Var(name, shape)
    from passinfra.ir.types import TensorType

    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    return Var(name, TensorType(shape, dtype))


_PY_DEFAULT_DTYPES = {"float64": "float32", "int64": "int32"}


def const(value: Any, dtype: Any = None) -> Constant:
    """A Constant. Python scalars and lists default to float32 / int32 (Relay's rule);
    NumPy arrays keep their dtype unless ``dtype`` is given."""
    if isinstance(value, Constant):
        return value if dtype is None else Constant(value.data.astype(normalize_dtype(dtype)))
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        array = np.asarray(value)
    else:
        array = np.array(value)
        if dtype is None:
            dtype = _PY_DEFAULT_DTYPES.get(array.dtype.name)
    if dtype is not None:
        array = array.astype(normalize_dtype(dtype))
    return Constant(array)


__all__ = [
    "EMPTY_ATTRS", "Expr", "Var", "GlobalVar", "Constant", "Call", "Tuple", "TupleGetItem",
    "Let", "If", "BaseFunc", "Function", "var", "const", "_UNSET",
]

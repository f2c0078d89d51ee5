"""Declared parameters of the zoo's model builders, checked in one place, and their tables.

Each builder states its parameters once, as a table of :class:`Param` (name, kind,
range), and is wrapped by :func:`checked_builder`, which rejects unknown names, wrong
types and values out of range with one error naming the parameter, before the builder
runs. The tables of every builder live at the end of this module: the ONNX builders
(``onnx_models.py``, whose parameters also arrive from ``zoo:`` specs) and the IR
builders (``ir_models.py``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from passinfra.errors import RaypassError

Builder = TypeVar("Builder", bound=Callable[..., Any])

INT = "int"
INTS = "ints"  # a sequence of ints (e.g. the hidden widths of an MLP)
_LOWER_BOUND_WORDS = {0: "a non-negative int", 1: "a positive int"}


@dataclass(frozen=True)
class Param:
    """One builder parameter: an int (or a sequence of ints) in ``[minimum, maximum]``.

    ``optional``: None is accepted too (the builder picks a value). ``label`` names the
    parameter in errors (default: ``parameter 'name'``); ``item_label(i)`` names item ``i``
    of a sequence.
    """

    name: str
    minimum: int
    maximum: int | None = None
    kind: str = INT
    optional: bool = False
    label: str | None = None
    item_label: Callable[[int], str] | None = None

    def requirement(self) -> str:
        if self.maximum is not None:
            text = f"an int from {self.minimum} to {self.maximum}"
        else:
            text = _LOWER_BOUND_WORDS.get(self.minimum, f"an int >= {self.minimum}")
        return f"{text} or None" if self.optional else text


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_value(param: Param, value: Any) -> str | None:
    """What is wrong with ``value`` for ``param``, or None if nothing."""
    subject = param.label or f"parameter {param.name!r}"
    if value is None and param.optional:
        return None
    if param.kind == INTS:
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            return f"{subject} must be a sequence of ints, got {value!r}"
        for i, item in enumerate(value):
            item_subject = param.item_label(i) if param.item_label else f"{subject}[{i}]"
            problem = _check_value(Param(param.name, param.minimum, param.maximum, label=item_subject), item)
            if problem:
                return problem
        return None
    in_range = _is_int(value) and value >= param.minimum and (param.maximum is None or value <= param.maximum)
    return None if in_range else f"{subject} must be {param.requirement()}, got {value!r}"


def _unknown(owner: str, name: str, params: Sequence[Param]) -> str:
    return f"{owner}(): unknown parameter {name!r}; it takes {', '.join(p.name for p in params)}"


def check_arguments(owner: str, params: Sequence[Param], arguments: dict[str, Any],
                    error: type[Exception]) -> None:
    """Raise ``error`` naming the first unknown, mistyped or out-of-range argument."""
    table = {param.name: param for param in params}
    for name, value in arguments.items():
        if name not in table:
            raise error(_unknown(owner, name, params))
        problem = _check_value(table[name], value)
        if problem:
            raise error(f"{owner}(): {problem}")


def checked_builder(params: Sequence[Param], error: type[Exception]) -> Callable[[Builder], Builder]:
    """Decorate a builder whose parameters are ``params`` (the same names, in order, as its
    signature: checked at import, so the table cannot drift from the function)."""

    def decorate(func: Builder) -> Builder:
        signature = inspect.signature(func)
        names = [param.name for param in params]
        if names != list(signature.parameters):
            raise TypeError(f"{func.__name__}: parameters {names} do not match {signature}")

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for name in kwargs:  # before binding, whose TypeError would not list the known ones
                if name not in names:
                    raise error(_unknown(func.__name__, name, params))
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as err:  # too many positional arguments, or one given twice
                raise error(f"{func.__name__}(): {err}") from None
            check_arguments(func.__name__, params, bound.arguments, error)
            return func(*args, **kwargs)

        wrapper.params = tuple(params)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


class ZooSpecError(RaypassError, ValueError):
    """A zoo spec string that names no model, or bad parameters for an ONNX zoo builder."""


# -- the ONNX builders (onnx_models.py; the ``zoo:`` specs) -------------------------------
# The upper bounds are far beyond what the zoo is for; they turn a slip (an extra digit)
# into an error instead of an hour of building; the weights' total size is bounded
# separately (onnx_models.MAX_WEIGHT_BYTES).
_MAX_SIZE = 2**20
_MAX_LAYERS = 1024


def _onnx_size(name: str) -> Param:
    return Param(name, 1, _MAX_SIZE)


_ONNX_SEED = Param("seed", 0)
_LAYERS = Param("layers", 1, _MAX_LAYERS)
MLP_PARAMS = (_onnx_size("batch"), _onnx_size("in_features"), _onnx_size("hidden"), _LAYERS,
              _onnx_size("classes"), _ONNX_SEED)
RESNET_PARAMS = (Param("depth", 8, 6 * 200 + 2), _onnx_size("batch"), _onnx_size("image"),
                 _onnx_size("width"), _onnx_size("classes"), _ONNX_SEED)
TRANSFORMER_PARAMS = (_LAYERS, _onnx_size("hidden"), _onnx_size("heads"), _onnx_size("seq"),
                      _onnx_size("batch"), _onnx_size("vocab"), _ONNX_SEED)


# -- the IR builders (ir_models.py) ------------------------------------------------------
# Sizes are positive ints, seeds non-negative; errors call them "model size NAME".
def _ir_size(name: str, optional: bool = False) -> Param:
    return Param(name, 1, optional=optional, label=f"model size {name}")


_IR_SEED = Param("seed", 0)
# hidden[i] is the width of layer i + 1 (layer 0 is the input)
_HIDDEN_WIDTHS = Param("hidden", 1, kind=INTS, label="model size hidden",
                       item_label=lambda i: f"model size layer {i + 1} width")
_CNN_SIZES = (_ir_size("channels"), _ir_size("size"), _ir_size("conv_channels"), _ir_size("classes"))
DEMO_CNN_WEIGHTS_PARAMS = (*_CNN_SIZES, _IR_SEED)
DEMO_CNN_PARAMS = (_ir_size("batch"), *_CNN_SIZES, _IR_SEED)
IR_MLP_WEIGHTS_PARAMS = (_ir_size("in_features"), _HIDDEN_WIDTHS, _ir_size("classes"), _IR_SEED)
IR_MLP_PARAMS = (_ir_size("batch"), *IR_MLP_WEIGHTS_PARAMS)
TRANSFORMER_BLOCK_WEIGHTS_PARAMS = (_ir_size("hidden"), _ir_size("ffn", optional=True), _IR_SEED)
TRANSFORMER_BLOCK_PARAMS = (_ir_size("seq"), _ir_size("hidden"), _ir_size("heads"),
                            _ir_size("ffn", optional=True), _IR_SEED)


__all__ = [
    "Param", "INT", "INTS", "ZooSpecError", "check_arguments", "checked_builder",
    "MLP_PARAMS", "RESNET_PARAMS", "TRANSFORMER_PARAMS",
    "DEMO_CNN_PARAMS", "DEMO_CNN_WEIGHTS_PARAMS", "IR_MLP_PARAMS", "IR_MLP_WEIGHTS_PARAMS",
    "TRANSFORMER_BLOCK_PARAMS", "TRANSFORMER_BLOCK_WEIGHTS_PARAMS",
]

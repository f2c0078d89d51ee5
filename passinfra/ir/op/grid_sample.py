"""``grid_sample``: ONNX GridSample on any number of spatial axes.

``data`` (N, C, D1..Dr) is sampled at the locations of ``grid`` (N, O1..Or, r), normalized
to [-1, 1] with x (the last axis) first; the output is (N, C, O1..Or) of the data's dtype.
``mode`` is linear, nearest or cubic, ``padding_mode`` zeros, border or reflection;
``align_corners`` as in the ONNX spec. The formulas (onnxruntime's) are in
:mod:`passinfra.ir.op._grid_sample`, shared with the compute rule.

Where the spec is silent: data and grid must be floats (onnxruntime's CPU kernel takes
float and double only; float16 and bfloat16 compute in float32 and round on store);
the grid may be of another float dtype than the data and is converted to the data's
working dtype; cubic is accepted on any number of spatial axes (the ONNX reference
implements it so), not only on 2-D data.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op import _grid_sample
from passinfra.ir.op._rel import FLOAT_DTYPES, expect_dtype, expect_tensor, register_tensor_op, type_text
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, Type

__all__ = ["grid_sample", "method_of"]


def method_of(attrs: Attrs) -> _grid_sample.Method:
    for name, allowed in (("mode", _grid_sample.MODES), ("padding_mode", _grid_sample.PADDING_MODES)):
        if attrs[name] not in allowed:
            raise IRTypeError(f"unknown {name} {attrs[name]!r}; use one of {', '.join(allowed)}")
    return _grid_sample.Method(attrs["mode"], attrs["padding_mode"], bool(attrs["align_corners"]))


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    data = expect_tensor(arg_types[0], "the data")
    grid = expect_tensor(arg_types[1], "the grid")
    method_of(attrs)
    expect_dtype(data, FLOAT_DTYPES, "the data")
    expect_dtype(grid, FLOAT_DTYPES, "the grid")
    if data.ndim < 3:
        raise IRTypeError(f"expected data of rank >= 3 (N, C, spatial axes...), got {type_text(data)}")
    rank = data.ndim - 2
    if grid.ndim != data.ndim or grid.shape[0] != data.shape[0] or grid.shape[-1] != rank:
        raise IRTypeError(
            f"expected a grid of shape (N, O1..O{rank}, {rank}) with N = {data.shape[0]} for data "
            f"{type_text(data)}, got {type_text(grid)}")
    return TensorType((*data.shape[:2], *grid.shape[1:-1]), data.dtype)


def _impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    data, grid = np.asarray(args[0]), np.asarray(args[1])
    return _grid_sample.numpy_grid_sample(data, grid, method_of(attrs))


register_tensor_op(
    "grid_sample", attrs={"mode": "linear", "padding_mode": "zeros", "align_corners": False},
    num_inputs=2, type_rel=_relation, impl=_impl, pattern=OpPattern.OPAQUE,
    doc="ONNX GridSample: sample data at normalized grid locations (linear/nearest/cubic)",
)


def grid_sample(data: Any, grid: Any, mode: str = "linear", padding_mode: str = "zeros",
                align_corners: bool = False) -> Call:
    """Sample ``data`` (N, C, *spatial) at the normalized locations of ``grid``."""
    return call_op("grid_sample", data, grid, mode=str(mode), padding_mode=str(padding_mode),
                   align_corners=bool(align_corners))

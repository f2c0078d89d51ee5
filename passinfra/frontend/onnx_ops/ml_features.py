"""Two ops of the ``ai.onnx.ml`` domain that are plain tensor math, as graph ops:

* Binarizer: ``1`` where ``x > threshold``, else ``0``, in x's dtype (NaN gives 0, as in
  the ONNX reference). Integer x is compared with the float threshold in float64, as
  the reference's NumPy comparison does.
* ArrayFeatureExtractor: ``x[..., indices]`` with the indices flattened (negative ones
  count from the end); a 1-D x gives one row ``[1, n]``, as onnxruntime does.
"""

from __future__ import annotations

import numpy as np

from passinfra.frontend.onnx_ops.context import NodeContext
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.ir import op
from passinfra.ir.expr import Expr

ML = "ai.onnx.ml."  # the converter table's prefix for the domain


@converter(ML + "Binarizer")
def _binarizer(node: NodeContext) -> Expr:
    data = node.arg(0)
    dtype = node.dtype(data)
    threshold = float(node.attr("threshold", 0.0))
    if dtype not in ("float32", "float64", "int32", "int64"):
        raise node.fail(f"the input must be float32, float64, int32 or int64, got {dtype}")
    # integers are compared in float64, as NumPy compares an integer array with a float
    compared = op.cast(data, "float64") if dtype.startswith("int") else data
    above = op.greater(compared, np.asarray(threshold, "float64" if dtype.startswith("int") else dtype))
    return op.cast(above, dtype)


@converter(ML + "ArrayFeatureExtractor")
def _array_feature_extractor(node: NodeContext) -> Expr:
    data, indices = node.arg(0), node.arg(1)
    shape = node.shape(data)
    if node.dtype(indices) != "int64":
        raise node.fail(f"the indices must be int64, got {node.dtype(indices)}")
    count = int(np.prod(node.shape(indices), dtype=np.int64))
    flat = op.reshape(indices, (count,))
    picked = op.take(data, flat, axis=len(shape) - 1)
    return op.reshape(picked, (1, count)) if len(shape) == 1 else picked

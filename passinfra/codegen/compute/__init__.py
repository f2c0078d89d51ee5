"""Compute rules: per op, what it computes at one output index (see :mod:`.base`).

Importing this package attaches the rules of every built-in op to the op registry
(``Op.get(name).get_attr("compute")``); one module per op family.
"""

from passinfra.codegen.compute import (  # noqa: F401  (registers rules)
    bitcast,
    bitwise,
    col2im,
    deform_conv,
    elemwise,
    extra,
    grid_sample,
    indexing,
    linalg,
    lp_pool,
    matmul_nbits,
    max_pool_indices,
    nn,
    onnx_extra,
    qgemm_panels,
    quantize,
    quantized_conv,
    random,
    reduce,
    resize,
    roi_align,
    signal,
    tfidf,
    transform,
    tree_ensemble,
    weight_panels,
    window,
    winograd_weights,
)
from passinfra.codegen.compute.base import (
    COMPUTE_ATTR,
    BufferHandle,
    ComputeOp,
    ComputeRule,
    Description,
    ExternOp,
    ReduceOp,
    TensorHandle,
    register_compute,
)
from passinfra.codegen.compute.random import missing_rule_reason

__all__ = [
    "COMPUTE_ATTR", "BufferHandle", "ComputeOp", "ComputeRule", "Description", "ExternOp", "ReduceOp",
    "TensorHandle", "register_compute", "missing_rule_reason",
]

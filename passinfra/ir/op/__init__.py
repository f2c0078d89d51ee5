"""Operator builders and the op registry.

``from passinfra.ir import op``; ``op.add(a, b)``, ``op.nn.conv2d(...)``,
``op.random.uniform(...)``. Registered names follow the builder paths.
"""

from passinfra.ir.op import nn, random  # noqa: F401  (sub-namespaces of builders)
from passinfra.ir.op.registry import Op, OpPattern, list_ops, register_op
from passinfra.ir.op.tensor import *  # noqa: F401,F403  (the tensor-level builders)
from passinfra.ir.op.tensor import __all__ as _tensor_all

__all__ = ["Op", "OpPattern", "list_ops", "register_op", "nn", "random", *_tensor_all]
from passinfra.ir.op import (  # noqa: E402,F401  (ops for model importers)
    bitcast,  # ONNX BitCast: bits read as another type
    bitwise,  # bitwise and/or/xor/not of integers
    col2im,  # ONNX Col2Im
    deform_conv,  # ONNX DeformConv
    extra,
    grid_sample,  # ONNX GridSample
    indexing,  # gather/scatter, topk, scans, mod, shifts
    linalg,  # det (ONNX Det)
    lp_pool,  # nn.lp_pool2d/3d (ONNX LpPool)
    matmul_nbits,  # qnn.matmul_nbits: weight-only quantized matmul (com.microsoft MatMulNBits)
    max_pool_indices,  # nn.max_pool_indices (ONNX MaxPool's Indices output)
    qgemm_panels,  # 8-bit matmul weights stored in the integer GEMM's panels (PanelWeights)
    requantized,  # noqa: E402,F401  (qnn.requantized_*: a contraction + its requantize)
    resize,  # ONNX Resize
    roi_align,  # ONNX RoiAlign
    signal,  # dft (ONNX DFT, STFT)
    tfidf,  # ONNX TfIdfVectorizer
    tree_ensemble,  # ONNX ai.onnx.ml TreeEnsemble
    weight_panels,  # weights stored in panels of output channels (PanelWeights)
    winograd_weights,  # 3x3 weights stored as their Winograd transform (PanelWeights)
)
from passinfra.ir.op import quantize as qnn  # noqa: E402,F401  (qnn.*: quantization, integer kernels)

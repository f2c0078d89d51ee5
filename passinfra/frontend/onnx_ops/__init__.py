"""ONNX op converters, table-driven: ``op_type -> [(since_version, converter)]``.

Each op family lives in its own module and registers its converters with
:func:`converter`; :func:`lookup` picks, for a model's opset, the converter registered
for the newest ``since`` version not above it (how ONNX itself versions ops).
"""

# importing the families fills the table
from passinfra.frontend.onnx_ops import (  # noqa: E402,F401  (registration side effects)
    bits,  # BitCast
    control_flow,  # If, Loop, Scan: subgraphs unrolled (onnx_subgraph)
    deform_conv,  # DeformConv
    elementwise,
    indexing,
    linalg,  # Det
    ml_features,  # ai.onnx.ml Binarizer, ArrayFeatureExtractor
    nn,
    quantize,  # incl. the com.microsoft ops of onnxruntime's quantizer
    recurrent,
    reduce,
    resize,
    sampling,  # GridSample, RoiAlign, Col2Im
    signal,  # DFT, STFT
    tensor,
    tfidf,  # TfIdfVectorizer
    training,  # ai.onnx.preview.training Adagrad, Adam, Momentum
    tree_ensemble,  # ai.onnx.ml TreeEnsemble
)
from passinfra.frontend.onnx_ops.registry import converter, lookup, supported_op_types

__all__ = ["converter", "lookup", "supported_op_types"]

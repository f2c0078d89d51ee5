"""Frontends: the ONNX importer (``from_onnx``) and the ONNX model zoo."""

from passinfra.frontend.onnx import (
    OnnxImportError,
    OnnxImportWarning,
    UnsupportedDtypesError,
    UnsupportedOpsError,
    from_onnx,
)

__all__ = [
    "from_onnx", "UnsupportedOpsError", "UnsupportedDtypesError", "OnnxImportError", "OnnxImportWarning",
]

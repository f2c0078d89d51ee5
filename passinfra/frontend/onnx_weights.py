"""Initializer tensors as NumPy arrays without copying their bytes.

A model's weights are most of its bytes (hundreds of megabytes for a deep model, over
2 GB for one saved with external data), so the importer must not copy them more than
the file format forces:

- ``raw_data`` (what every exporter writes): the array is a read-only view of the
  model file's bytes, mapped by :mod:`.onnx_reader` (no copy), or of the bytes
  protobuf hands out for a model given in memory (one copy, protobuf's own). ``onnx.numpy_helper.to_array``
  copies again, ``onnx.checker.check_tensor`` serializes the tensor once more, and
  ``Constant`` would copy a writeable array a third time; here the size is checked
  against the declared type and shape directly.
- external data (``data_location == EXTERNAL``, the file loaded with
  ``load_external_data=False``): the array is a read-only memory map of the data file
  at the tensor's offset; pages are read when a pass or the weights writer touches them.
- anything else (``float_data``, ``int64_data``, ... ; small tensors written by hand):
  validated by ``onnx.checker.check_tensor`` and decoded by ``numpy_helper``.

Every array returned is read-only, so ``Constant`` keeps it as it is.
"""

from __future__ import annotations

import math
import os

import numpy as np
import onnx
from onnx import numpy_helper

from passinfra.frontend.onnx_ops.context import OnnxImportError


def initializer_array(
    init: onnx.TensorProto, checker: object, base_dir: str | None, raw: memoryview | None = None
) -> np.ndarray:
    """The array of initializer ``init``; ``base_dir``: the model file's directory, where
    external data lives (None for a model given in memory); ``raw``: its raw_data when
    the reader left it in the mapped file (:mod:`.onnx_reader`). A tensor whose bytes
    disagree with its declared type and shape is an OnnxImportError naming it."""
    if init.data_location == onnx.TensorProto.EXTERNAL:
        return _external_array(init, base_dir)
    if init.data_type == onnx.TensorProto.STRING:
        raw = None
    elif raw is None and init.HasField("raw_data"):
        raw = memoryview(init.raw_data)  # protobuf makes one bytes object; the array views it
    if raw is not None:
        return _raw_array(init, raw)
    try:
        onnx.checker.check_tensor(init, checker)
        array = numpy_helper.to_array(init)
    except (onnx.checker.ValidationError, ValueError, TypeError, KeyError) as err:  # all from decoding
        detail = f"unknown element type {init.data_type}" if isinstance(err, KeyError) else err
        raise OnnxImportError(f"initializer {init.name!r} is malformed: {detail}") from None
    array.flags.writeable = False
    return array


def _declared(init: onnx.TensorProto) -> tuple[np.dtype, tuple[int, ...]]:
    """The numpy dtype (little-endian, as ONNX stores it) and shape ``init`` declares."""
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(init.data_type)).newbyteorder("<")
    except (KeyError, TypeError, ValueError):
        message = f"initializer {init.name!r} is malformed: unknown element type {init.data_type}"
        raise OnnxImportError(message) from None
    dims = tuple(int(d) for d in init.dims)
    if any(d < 0 for d in dims):
        raise OnnxImportError(f"initializer {init.name!r} is malformed: negative dimension in {list(dims)}")
    return dtype, dims


def _raw_array(init: onnx.TensorProto, raw: memoryview) -> np.ndarray:
    dtype, dims = _declared(init)
    expected = math.prod(dims) * dtype.itemsize
    if len(raw) != expected:
        raise OnnxImportError(
            f"initializer {init.name!r} is malformed: raw_data holds {len(raw)} bytes, "
            f"its type {dtype.name}{list(dims)} needs {expected}"
        )
    return np.frombuffer(raw, dtype=dtype).reshape(dims)


def _external_fields(init: onnx.TensorProto) -> dict[str, str]:
    return {entry.key: entry.value for entry in init.external_data}


def _external_array(init: onnx.TensorProto, base_dir: str | None) -> np.ndarray:
    dtype, dims = _declared(init)
    fields = _external_fields(init)
    where = f"initializer {init.name!r}"
    if base_dir is None:
        raise OnnxImportError(
            f"{where} is stored in external data, and the model was given in memory: "
            "load it with onnx.load(path) (which reads external data) or pass the file's path"
        )
    location = fields.get("location", "")
    path = _data_path(base_dir, location, where)
    try:
        offset = int(fields.get("offset", "0"))
        length = int(fields["length"]) if "length" in fields else None
    except ValueError:
        raise OnnxImportError(f"{where}: external data offset/length are not integers: {fields}") from None
    nbytes = math.prod(dims) * dtype.itemsize
    if length is not None and length != nbytes:
        raise OnnxImportError(
            f"{where}: external data length {length} bytes, its type {dtype.name}{list(dims)} needs {nbytes}"
        )
    size = os.path.getsize(path)
    if offset < 0 or offset + nbytes > size:
        raise OnnxImportError(
            f"{where}: external data {location!r} has {size} bytes; "
            f"the tensor needs {nbytes} at offset {offset}"
        )
    if nbytes == 0:  # mmap cannot map nothing
        return np.zeros(dims, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=dims)


def _data_path(base_dir: str, location: str, where: str) -> str:
    """The external data file, which must lie inside the model's directory (as ONNX
    requires: a model file must not make its reader open arbitrary files)."""
    if not location or os.path.isabs(location):
        raise OnnxImportError(
            f"{where}: external data location {location!r} must be a path relative to the model"
        )
    base = os.path.realpath(base_dir)
    path = os.path.realpath(os.path.join(base, location))
    if os.path.commonpath([base, path]) != base:
        raise OnnxImportError(
            f"{where}: external data location {location!r} points outside the model's directory"
        )
    if not os.path.isfile(path):
        raise OnnxImportError(f"{where}: external data file {location!r} not found next to the model")
    return path


__all__ = ["initializer_array"]

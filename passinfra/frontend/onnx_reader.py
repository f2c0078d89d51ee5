"""Reading an ONNX file without copying its weights.

``onnx.load`` reads the whole file into one bytes object and protobuf then copies every
initializer's ``raw_data`` into its own message: a model of 250 MB of weights costs
three copies of them before the importer sees the first one, and most of the load time.
This reader maps the file instead, walks the protobuf wire format just deep enough to
find each initializer's ``raw_data`` (``ModelProto.graph`` -> ``GraphProto.initializer``
-> ``TensorProto.raw_data``), and has protobuf parse a copy of the file with those
fields cut out (every other byte unchanged, so protobuf decides everything else, merging
repeated fields included). The importer then views each tensor's bytes in the map.

Anything the walk does not expect (a truncated or corrupt file, groups, a field in an
unexpected wire type) makes it give up and fall back to ``onnx.load``, which reports
the problem as it always did: this is an optimization, never a second parser to trust.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field

import onnx

# field numbers and wire types of the protobuf messages walked (onnx.proto)
_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_RAW_DATA = 9
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


class _Unexpected(Exception):
    """The bytes are not what the walk understands: fall back to onnx.load."""


@dataclass
class MappedModel:
    """A model whose initializers' ``raw_data`` stayed in the mapped file: ``raw[i]`` is
    a view of the bytes of the i-th initializer of ``model.graph`` (None when it has no
    raw_data), and ``model``'s initializers carry everything but those bytes."""

    model: onnx.ModelProto
    raw: list[memoryview | None] = field(default_factory=list)


def read_mapped(path: str) -> MappedModel | None:
    """The model in ``path`` with its raw weights left in a read-only map of the file,
    or None when the file is not one the walk understands (then use ``onnx.load``)."""
    with open(path, "rb") as handle:
        try:
            mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except (ValueError, OSError):  # empty file, or not mappable
            return None
    data = memoryview(mapped)
    try:
        stripped, ranges = _strip_raw_data(data)
        model = onnx.ModelProto.FromString(stripped)
    except Exception:  # noqa: BLE001  (any surprise, _Unexpected or protobuf's: the plain path)
        return None
    if len(ranges) != len(model.graph.initializer):
        return None
    return MappedModel(model, [None if r is None else data[r[0]:r[1]] for r in ranges])


def _varint(data: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Unexpected("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(data: memoryview, start: int, end: int):
    """``(number, wire type, field start, value start, field end)`` of each field in
    ``data[start:end]``; for a length-delimited field the value is its payload."""
    pos = start
    while pos < end:
        begin = pos
        key, pos = _varint(data, pos, end)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            _, after = _varint(data, pos, end)
            value = pos
        elif wire == _FIXED64:
            value, after = pos, pos + 8
        elif wire == _FIXED32:
            value, after = pos, pos + 4
        elif wire == _LENGTH:
            length, value = _varint(data, pos, end)
            after = value + length
        else:  # groups (deprecated) never appear in ONNX files
            raise _Unexpected(f"wire type {wire}")
        if after > end:
            raise _Unexpected("field past the end of its message")
        yield number, wire, begin, value, after
        pos = after


def _strip_raw_data(data: memoryview) -> tuple[bytes, list[tuple[int, int] | None]]:
    """The model's bytes without any initializer's raw_data, and each initializer's
    raw_data range in ``data`` (in the order protobuf will list the initializers)."""
    pieces: list[bytes | memoryview] = []
    ranges: list[tuple[int, int] | None] = []
    for number, wire, begin, value, after in _fields(data, 0, len(data)):
        if number == _MODEL_GRAPH and wire == _LENGTH:
            graph = _strip_graph(data, value, after, ranges)
            pieces += [data[begin:_key_end(data, begin, value)], _encode_varint(len(graph)), graph]
        else:
            pieces.append(data[begin:after])
    return b"".join(pieces), ranges


def _key_end(data: memoryview, begin: int, value: int) -> int:
    """Where the key of the field starting at ``begin`` ends (its length prefix follows,
    re-encoded by the caller for the shortened payload)."""
    return _varint(data, begin, value)[1]


def _strip_graph(data: memoryview, start: int, end: int, ranges: list[tuple[int, int] | None]) -> bytes:
    pieces: list[bytes | memoryview] = []
    for number, wire, begin, value, after in _fields(data, start, end):
        if number == _GRAPH_INITIALIZER and wire == _LENGTH:
            tensor, raw = _strip_tensor(data, value, after)
            ranges.append(raw)
            pieces += [data[begin:_key_end(data, begin, value)], _encode_varint(len(tensor)), tensor]
        else:
            pieces.append(data[begin:after])
    return b"".join(pieces)


def _strip_tensor(data: memoryview, start: int, end: int) -> tuple[bytes, tuple[int, int] | None]:
    pieces: list[memoryview] = []
    raw: tuple[int, int] | None = None
    for number, wire, begin, value, after in _fields(data, start, end):
        if number == _TENSOR_RAW_DATA and wire == _LENGTH:
            raw = (value, after)  # a repeated bytes field: the last one wins, as in protobuf
        else:
            pieces.append(data[begin:after])
    return b"".join(pieces), raw


__all__ = ["MappedModel", "read_mapped"]

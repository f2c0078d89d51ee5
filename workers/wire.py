"""Packing functions for the trip between driver and workers.

Functions travel as one IRModule in the flat wire format (passinfra.ir.serialize):
a small payload (the node table) plus the constants' bytes as out-of-band buffers, which
Ray moves without copying when they are NumPy arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from passinfra.ir.expr import BaseFunc
from passinfra.ir.module import IRModule
from passinfra.ir.serialize import from_wire, to_wire

Packed = tuple[bytes, list[np.ndarray]]


def pack_functions(functions: Mapping[str, BaseFunc]) -> Packed:
    """``{name: function}`` -> (payload, buffers), in the mapping's order."""
    payload, buffers = to_wire(IRModule(dict(functions)))
    return payload, [np.frombuffer(buf.raw(), dtype=np.uint8) for buf in buffers]


def unpack_functions(packed: Packed) -> dict[str, BaseFunc]:
    payload, buffers = packed
    mod = from_wire(payload, buffers)
    return {gv.name_hint: func for gv, func in mod.items()}


def packed_size(packed: Packed | None) -> int:
    if packed is None:
        return 0
    payload, buffers = packed
    return len(payload) + sum(int(b.nbytes) for b in buffers)


def pack_module(mod: IRModule) -> Packed:
    payload, buffers = to_wire(mod)
    return payload, [np.frombuffer(buf.raw(), dtype=np.uint8) for buf in buffers]


def unpack_module(packed: Packed) -> Any:
    payload, buffers = packed
    return from_wire(payload, buffers)

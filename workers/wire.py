"""Packing functions for the trip between driver and workers.

Functions travel as one IRModule in the flat wire format (passinfra.ir.serialize): the
node table, plus the constants' bytes. Small constants are written into the payload;
only large ones travel as out-of-band buffers (NumPy arrays, which Ray moves without
copying). Ray handles every out-of-band array of a call's arguments separately, at some
tens of microseconds each, so a batch of a few hundred functions with a few scalar
constants each would otherwise spend more time on its buffers than on its bytes.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np

from passinfra.ir.expr import BaseFunc
from passinfra.ir.module import IRModule
from passinfra.ir.serialize import from_wire

Packed = tuple[bytes, list[np.ndarray]]

# constants at least this large travel out-of-band, without a copy into the payload
OUT_OF_BAND_BYTES = 64 * 1024


def pack_functions(functions: Mapping[str, BaseFunc]) -> Packed:
    """``{name: function}`` -> (payload, large buffers), in the mapping's order."""
    return pack_module(IRModule(dict(functions)))


def unpack_functions(packed: Packed) -> dict[str, BaseFunc]:
    mod = unpack_module(packed)
    return {gv.name_hint: func for gv, func in mod.items()}


def packed_size(packed: Packed | None) -> int:
    if packed is None:
        return 0
    payload, buffers = packed
    return len(payload) + sum(int(b.nbytes) for b in buffers)


def pack_module(mod: IRModule) -> Packed:
    large: list[np.ndarray] = []

    def keep_small_in_band(buffer: pickle.PickleBuffer) -> bool:
        view = buffer.raw()
        if view.nbytes < OUT_OF_BAND_BYTES:
            return True  # pickle writes it into the payload
        large.append(np.frombuffer(view, dtype=np.uint8))
        return False

    payload = pickle.dumps(mod, protocol=5, buffer_callback=keep_small_in_band)
    return payload, large


def dumps(value: Any) -> bytes:
    """``value`` as bytes ``pickle.loads`` restores, with functions and classes of the
    caller's own scripts by value (a pass defined in ``__main__`` or by a decorator)."""
    import cloudpickle

    return cloudpickle.dumps(value, protocol=5)


def unpack_module(packed: Packed) -> Any:
    payload, buffers = packed
    return from_wire(payload, buffers)

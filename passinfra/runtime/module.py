"""runtime.Module: a compiled library loaded with ctypes, called with NumPy arrays.

On disk a module is three files (written by ``export_library(path)``, read by
:func:`load_module`):

- ``path``: the shared library (``raypass_main`` plus every kernel);
- ``path + ".raypass.json"``: the metadata (inputs' names, shapes and dtypes, outputs,
  workspace size; see :func:`passinfra.codegen.host.runtime_metadata`);
- ``path + ".weights.bin"``: the weights blob the library reads at the offsets baked into
  its host code.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from passinfra.atomic_io import atomic_write
from passinfra.errors import EvaluationError, RaypassError

METADATA_SUFFIX = ".raypass.json"
WEIGHTS_SUFFIX = ".weights.bin"
_ALIGNMENT = 64


def _aligned_empty(nbytes: int) -> np.ndarray:
    """A uint8 array of ``nbytes`` whose data starts on a 64-byte boundary."""
    raw = np.empty(nbytes + _ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % _ALIGNMENT
    return raw[start:start + nbytes]


class Module:
    """A loaded library. ``lib(*arrays)`` runs main; ``lib["main"]`` is the same entry."""

    def __init__(self, library: bytes, metadata: Mapping[str, Any], weights: bytes | memoryview) -> None:
        self.metadata = dict(metadata)
        self._library = bytes(library)
        self._weights = _aligned_empty(len(weights))
        self._weights[:] = np.frombuffer(weights, dtype=np.uint8)
        # ctypes loads from a file; it lives in a private temp dir removed with the module
        self._dir = tempfile.mkdtemp(prefix="raypass-lib-")
        path = os.path.join(self._dir, "library.so")
        Path(path).write_bytes(self._library)
        try:
            self._cdll = ctypes.CDLL(path)
            self._entry = getattr(self._cdll, self.metadata["entry"])
        except (OSError, AttributeError, KeyError) as error:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise RaypassError(f"cannot load the compiled library: {error}") from error
        self._entry.restype = ctypes.c_int
        self._entry.argtypes = [ctypes.c_void_p] * 4
        self._finalizer = weakref.finalize(self, shutil.rmtree, self._dir, True)
        self._scratch = threading.local()

    # ----- entry ----------------------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        return [spec["name"] for spec in self.metadata["inputs"]]

    def __getitem__(self, name: str) -> Callable[..., Any]:
        if name == "main":
            return self.__call__
        raise KeyError(f"no entry named {name!r} in the compiled module (entries: main)")

    def __call__(self, *arrays: Any) -> Any:
        specs = self.metadata["inputs"]
        if len(arrays) != len(specs):
            names = ", ".join(self.input_names) or "none"
            raise EvaluationError(f"main takes {len(specs)} inputs ({names}), got {len(arrays)}")
        inputs = [self._checked_input(array, spec) for array, spec in zip(arrays, specs)]
        outputs = [np.empty(tuple(s["shape"]), dtype=s["dtype"]) for s in self.metadata["outputs"]]
        workspace = self._workspace()
        input_ptrs = (ctypes.c_void_p * max(len(inputs), 1))(*[a.ctypes.data for a in inputs])
        output_ptrs = (ctypes.c_void_p * max(len(outputs), 1))(*[a.ctypes.data for a in outputs])
        status = self._entry(input_ptrs, output_ptrs, self._weights.ctypes.data, workspace.ctypes.data)
        if status != 0:
            kernels = self.metadata.get("kernels", [])
            name = kernels[status - 1] if 0 < status <= len(kernels) else f"#{status}"
            raise EvaluationError(f"compiled kernel {name} failed (out of memory?)")
        return _restructure(self.metadata["output_structure"], outputs)

    def _workspace(self) -> np.ndarray:
        """This thread's scratch memory for the planned intermediates, kept between calls
        (a fresh one per call page-faults it in every time: 3% of resnet20's latency);
        one per thread, since a call runs without the GIL and two threads may call."""
        workspace = getattr(self._scratch, "workspace", None)
        if workspace is None:
            workspace = _aligned_empty(int(self.metadata["workspace_bytes"]))
            self._scratch.workspace = workspace
        return workspace

    @staticmethod
    def _checked_input(array: Any, spec: Mapping[str, Any]) -> np.ndarray:
        name, shape, dtype = spec["name"], tuple(spec["shape"]), np.dtype(spec["dtype"])
        value = np.asarray(array)
        if value.dtype != dtype:
            raise EvaluationError(f"input {name!r}: expected dtype {dtype.name}, got {value.dtype.name}")
        if value.shape != shape:
            raise EvaluationError(f"input {name!r}: expected shape {shape}, got {value.shape}")
        return np.ascontiguousarray(value)

    # ----- files ----------------------------------------------------------------------
    def export_library(self, path: str | os.PathLike[str]) -> None:
        """Write the library to ``path`` and its metadata and weights next to it."""
        path = os.fspath(path)
        _atomic_write(path, self._library)
        _atomic_write(path + METADATA_SUFFIX, json.dumps(self.metadata, indent=1, sort_keys=True).encode())
        _atomic_write(path + WEIGHTS_SUFFIX, self._weights.tobytes())

    @property
    def library_bytes(self) -> bytes:
        return self._library

    def __repr__(self) -> str:
        return f"runtime.Module(inputs={self.input_names}, kernels={len(self.metadata.get('kernels', []))})"


def _restructure(structure: Any, outputs: list[np.ndarray]) -> Any:
    if isinstance(structure, list):
        return tuple(_restructure(s, outputs) for s in structure)
    return outputs[structure]


def _atomic_write(path: str, data: bytes) -> None:
    # ordinary file permissions (not mkstemp's owner-only ones) and no temporary file
    # left behind on a failure: parallel CI jobs may write and read the same outputs
    atomic_write(path, data)


def load_module(path: str | os.PathLike[str]) -> Module:
    """Load a module written by :meth:`Module.export_library`."""
    path = os.fspath(path)
    try:
        library = Path(path).read_bytes()
        metadata = json.loads(Path(path + METADATA_SUFFIX).read_text())
        weights = Path(path + WEIGHTS_SUFFIX).read_bytes()
    except FileNotFoundError as error:
        raise RaypassError(f"cannot load compiled module {path!r}: missing file {error.filename}") from error
    if metadata.get("format") != "raypass-library/1":
        raise RaypassError(f"{path + METADATA_SUFFIX} is not raypass library metadata")
    return Module(library, metadata, weights)


__all__ = ["Module", "load_module", "METADATA_SUFFIX", "WEIGHTS_SUFFIX"]

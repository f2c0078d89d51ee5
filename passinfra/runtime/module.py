"""runtime.Module: a compiled library loaded with ctypes, called with NumPy arrays.

On disk a module is three files (written by ``export_library(path)``, read by
:func:`load_module`):

- ``path``: the shared library (``raypass_main`` plus every kernel);
- ``path + ".raypass.json"``: the metadata (inputs' names, shapes and dtypes, outputs,
  workspace size; see :func:`passinfra.codegen.host.runtime_metadata`);
- ``path + ".weights.bin"``: the weights blob the library reads at the offsets baked into
  its host code; ``load_module`` maps it rather than reading it (:mod:`.weights`).

A library of a main with symbolic dimensions (metadata ``dims``) runs at every size its
bounds allow: a call binds the sizes from the inputs
(:func:`~passinfra.runtime.shape_binding.bind_dims`, whose one error names the input and
the dimension, raised before anything runs), makes the outputs at their sizes, grows this
thread's workspace to what ``raypass_workspace_bytes`` says the sizes need, and passes the
sizes to the host as a fifth argument.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import ml_dtypes  # noqa: F401  (registers bfloat16: np.dtype("bfloat16") for inputs and outputs)
import numpy as np

from passinfra.atomic_io import atomic_copy, atomic_write
from passinfra.errors import DimError, EvaluationError, RaypassError
from passinfra.ir.dims import DimVar, dim_from_json
from passinfra.ir.types import TensorType
from passinfra.runtime.profile import PROFILE_SYMBOL, KernelProfile
from passinfra.runtime.shape_binding import bind_dims, bound_shape
from passinfra.runtime.threads import LibraryThreads
from passinfra.runtime.weights import PackedWeights, WrittenWeights, aligned_empty, as_blob, map_file

# the convolution microkernels' instruction sets, by the level the C runtime numbers them
# (passinfra.codegen.conv_runtime)
CONV_ISA_LEVELS = ("portable", "avx2", "avx512")
# An environment variable naming the highest of those levels any library may pick, read by
# the C runtime when it first looks at the CPU: ``avx2`` runs an AVX-512 machine's
# libraries as a CPU without AVX-512 would (the suite's AVX2-only mode, `make test-avx2`)
MAX_ISA_ENV = "RAYPASS_MAX_ISA"


def max_isa() -> str | None:
    """The cap ``RAYPASS_MAX_ISA`` sets (None: none); an unknown value is an error, since
    the C runtime would ignore it and run what the CPU has, unlike what was asked."""
    value = os.environ.get(MAX_ISA_ENV)
    if value is None or value == "":
        return None
    if value not in CONV_ISA_LEVELS:
        known = ", ".join(CONV_ISA_LEVELS)
        raise RaypassError(f"{MAX_ISA_ENV}={value!r} is not an instruction set; expected one of {known}")
    return value


@functools.lru_cache(maxsize=1)
def _cpu_isa() -> str:
    """The best of :data:`CONV_ISA_LEVELS` this CPU has, from ``/proc/cpuinfo`` (read once:
    a many-core machine's is hundreds of KiB, and the convolution rule asks per kernel)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    line = next((line for line in text.splitlines() if line.startswith("flags")), "")
    flags = set(line.split(":", 1)[-1].split())
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return "portable"


def host_isa() -> str:
    """The instruction set this machine's libraries run their kernels with: the best of
    :data:`CONV_ISA_LEVELS` the CPU has, capped by ``RAYPASS_MAX_ISA`` (read per call).
    The tuning database's target and the convolution rules' default target (config
    ``codegen.target_isa``) are this."""
    best = _cpu_isa()
    cap = max_isa()
    if cap is not None and CONV_ISA_LEVELS.index(cap) < CONV_ISA_LEVELS.index(best):
        return cap
    return best


METADATA_SUFFIX = ".raypass.json"
WEIGHTS_SUFFIX = ".weights.bin"


class Module:
    """A loaded library. ``lib(*arrays)`` runs main; ``lib["main"]`` is the same entry."""

    def __init__(
        self,
        library: bytes,
        metadata: Mapping[str, Any],
        weights: bytes | memoryview | np.ndarray | PackedWeights | WrittenWeights,
    ) -> None:
        self.metadata = dict(metadata)
        self._library = bytes(library)
        max_isa()  # a misspelt cap fails here, before the library runs without it
        # ctypes loads from a file; it lives in a private temp dir removed with the module,
        # next to the weights file when the module writes one
        self._dir = tempfile.mkdtemp(prefix="raypass-lib-")
        path = os.path.join(self._dir, "library.so")
        try:
            self._weights, self._weights_file = self._hold_weights(weights)
            Path(path).write_bytes(self._library)
            self._cdll = ctypes.CDLL(path)
            self._entry = getattr(self._cdll, self.metadata["entry"])
        except (OSError, AttributeError, KeyError) as error:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise RaypassError(f"cannot load the compiled library: {error}") from error
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self._entry.restype = ctypes.c_int
        self._entry.argtypes = [ctypes.c_void_p] * 4
        self._symbolic: _SymbolicSignature | None = None
        if "dims" in self.metadata:  # a main with symbolic dimensions: the sizes are a 5th argument
            try:
                self._symbolic = _SymbolicSignature(self.metadata, self._cdll)
            except (AttributeError, KeyError, TypeError, ValueError, DimError) as error:
                shutil.rmtree(self._dir, ignore_errors=True)
                message = f"cannot load the compiled library: bad symbolic metadata: {error}"
                raise RaypassError(message) from error
            self._entry.argtypes = [ctypes.c_void_p] * 4 + [ctypes.POINTER(ctypes.c_int64)]
        self._finalizer = weakref.finalize(self, shutil.rmtree, self._dir, True)
        self._scratch = threading.local()
        # what every call of a static main needs, read from the metadata once: a small
        # model's call was 15 us of Python around 8 us of kernels
        self._weights_address = self._weights.ctypes.data
        self._input_specs = [(spec["name"], tuple(spec["shape"]), np.dtype(spec["dtype"]))
                             for spec in self.metadata["inputs"]]
        self._output_specs = [(tuple(spec["shape"]), np.dtype(spec["dtype"]))
                              for spec in self.metadata["outputs"]]
        self._threads = LibraryThreads(self._cdll)  # starts at its default thread count

    def _hold_weights(self, weights: Any) -> tuple[np.ndarray, str | None]:
        """The blob the library reads, and the file it maps (None: held in memory). A
        layout from the link step is streamed into this module's own file once and
        mapped; a mapped weights file (``load_module``) is kept; bytes are copied once
        into aligned memory."""
        path = os.path.join(self._dir, "weights.bin")
        try:
            if isinstance(weights, WrittenWeights):  # written while the kernels compiled: adopt it
                os.replace(weights.wait(), path)
                return map_file(path), path
            if isinstance(weights, PackedWeights):
                with open(path, "wb") as handle:
                    weights.write(handle)
                return map_file(path), path
        except OSError as error:  # a full disk, a quota: say which file, not "cannot load"
            message = f"cannot write the library's weights file ({weights.nbytes} bytes): {error}"
            raise RaypassError(message) from error
        if isinstance(weights, np.memmap) and weights.filename is not None:
            return weights, weights.filename
        return as_blob(weights), None

    @property
    def weights_path(self) -> str | None:
        """The file the weights blob maps (this module's own, or the one it was loaded
        from), or None when the blob is held in memory."""
        return self._weights_file

    @property
    def weights(self) -> np.ndarray:
        """The weights blob the library reads (read-only uint8; a memory map of a file
        when the module was built or loaded from one)."""
        view = self._weights.view(np.ndarray)
        view.flags.writeable = False
        return view

    # ----- threads --------------------------------------------------------------------
    @property
    def num_threads(self) -> int:
        """Threads the library's parallel loops may use (at load: config
        ``codegen.num_threads``, or every CPU the process may use when that is 0)."""
        return self._threads.get()

    def set_num_threads(self, n: int) -> None:
        """Use up to ``n`` threads (1 to 256) from the next call on, in every Python
        thread calling this library; results are the same for any ``n``."""
        self._threads.set(n)

    def thread_stats(self) -> dict[str, int]:
        """Counters of the library's thread pool since it was loaded: loops run on
        several threads, loops run serially (too little work or one thread), loops run
        serially because another call held the pool, chunks run by worker threads, chunks
        the calling thread took from the workers' ranges (a worker late, asleep or
        slowed), and times a worker blocked after its spin
        (``passinfra.runtime.threads.STATS_FIELDS``)."""
        return self._threads.stats()

    def conv_isa(self, level: str | None = None) -> str | None:
        """The instruction set the convolution microkernels run with (``"avx512"``,
        ``"avx2"`` or ``"portable"``; :mod:`passinfra.codegen.conv_runtime`), picked from
        the CPU at the first call; None when no kernel of this library uses them.
        ``level`` forces one for every later call (capped at what the CPU supports, and at
        ``RAYPASS_MAX_ISA``), for tests and measurements. The AVX-512 and AVX2 kernels give identical bits."""
        try:
            entry = self._cdll.raypass_conv_isa
        except AttributeError:
            return None
        entry.restype, entry.argtypes = ctypes.c_int, [ctypes.c_int]
        if level is not None and level not in CONV_ISA_LEVELS:
            known = ", ".join(CONV_ISA_LEVELS)
            raise RaypassError(f"unknown instruction set {level!r}; expected one of {known}")
        return CONV_ISA_LEVELS[entry(-1 if level is None else CONV_ISA_LEVELS.index(level))]

    # ----- profiling ------------------------------------------------------------------
    def profile(self, *arrays: Any, runs: int = 10) -> KernelProfile:
        """Time every kernel call inside the model (:mod:`passinfra.runtime.profile`): one
        warm-up call, then ``runs`` calls of main on ``arrays`` with the host timing each
        kernel it calls. Only this thread's calls are timed; the outputs are those of an
        ordinary call and are dropped."""
        if not isinstance(runs, int) or isinstance(runs, bool) or runs < 1:
            raise RaypassError(f"runs must be a positive integer, got {runs!r}")
        try:
            hook = getattr(self._cdll, PROFILE_SYMBOL)
        except AttributeError:
            raise RaypassError("this library cannot time its kernels (it was compiled before "
                               "raypass could); compile it again to profile it") from None
        hook.restype, hook.argtypes = None, [ctypes.c_void_p]
        kernels = tuple(self.metadata.get("kernels", []))
        call_ns = np.zeros((runs, max(len(kernels), 1)), dtype=np.int64)
        run_seconds = []
        self(*arrays)  # warm-up: the first call maps the weights and binds the sizes
        try:
            for row in call_ns:
                hook(row.ctypes.data)
                started = time.perf_counter()
                self(*arrays)
                run_seconds.append(time.perf_counter() - started)
        finally:
            hook(None)
        return KernelProfile(kernels, call_ns[:, :len(kernels)], tuple(run_seconds))

    # ----- entry ----------------------------------------------------------------------
    @property
    def input_names(self) -> list[str]:
        return [spec["name"] for spec in self.metadata["inputs"]]

    @property
    def dim_vars(self) -> list[DimVar]:
        """main's symbolic dimensions, in the order the library takes their sizes ([] for a
        static main)."""
        return list(self._symbolic.variables) if self._symbolic is not None else []

    def input_shapes(self, sizes: Mapping[str, int] | None = None) -> list[tuple[int, ...]]:
        """Each input's shape, with every symbolic dimension at ``sizes[name]`` (by default
        the smallest size its bounds allow that is at least 1): shapes to make inputs of."""
        if self._symbolic is None:
            return [tuple(spec["shape"]) for spec in self.metadata["inputs"]]
        binding = {var.name: min(max(var.lo, 1), var.hi if var.hi is not None else max(var.lo, 1))
                   for var in self._symbolic.variables}
        binding.update(sizes or {})
        return [bound_shape(ty, binding) for ty in self._symbolic.input_types]

    def workspace_bytes(self, sizes: Mapping[str, int] | None = None) -> int:
        """Bytes of scratch memory a call takes for its intermediates: the planned peak of
        a static library, or what a library of symbolic sizes needs at ``sizes`` (each
        dimension by name; by default the smallest size its bounds allow, at least 1)."""
        if self._symbolic is None:
            return int(self.metadata["workspace_bytes"])
        binding = {var.name: min(max(var.lo, 1), var.hi if var.hi is not None else max(var.lo, 1))
                   for var in self._symbolic.variables}
        binding.update(sizes or {})
        values = [int(binding[name]) for name in self._symbolic.names]
        return int(self._symbolic.workspace_bytes((ctypes.c_int64 * max(len(values), 1))(*values)))

    def __getitem__(self, name: str) -> Callable[..., Any]:
        if name == "main":
            return self.__call__
        raise KeyError(f"no entry named {name!r} in the compiled module (entries: main)")

    def __call__(self, *arrays: Any) -> Any:
        specs = self.metadata["inputs"]
        if len(arrays) != len(specs):
            names = ", ".join(self.input_names) or "none"
            raise EvaluationError(f"main takes {len(specs)} inputs ({names}), got {len(arrays)}")
        if self._symbolic is not None:
            return self._call_symbolic(self._symbolic, arrays)
        inputs = [_checked(array, *spec) for array, spec in zip(arrays, self._input_specs)]
        outputs = [np.empty(shape, dtype=dtype) for shape, dtype in self._output_specs]
        input_ptrs = (ctypes.c_void_p * max(len(inputs), 1))(*[a.ctypes.data for a in inputs])
        output_ptrs = (ctypes.c_void_p * max(len(outputs), 1))(*[a.ctypes.data for a in outputs])
        status = self._entry(input_ptrs, output_ptrs, self._weights_address, self._workspace_address())
        if status != 0:
            kernels = self.metadata.get("kernels", [])
            name = kernels[status - 1] if 0 < status <= len(kernels) else f"#{status}"
            raise EvaluationError(f"compiled kernel {name} failed (out of memory?)")
        return _restructure(self.metadata["output_structure"], outputs)

    def _call_symbolic(self, signature: _SymbolicSignature, arrays: tuple[Any, ...]) -> Any:
        """A call of a main with symbolic dimensions: the sizes are bound from the inputs
        (one :class:`DimBindingError` naming the input and the dimension, before anything
        runs), the outputs allocated at their sizes, the workspace grown to what the
        library says these sizes need, and the sizes passed to the host."""
        specs = self.metadata["inputs"]
        values = [self._checked_dtype(array, spec) for array, spec in zip(arrays, specs)]
        shapes = tuple(np.shape(value) for value in values)
        bound = signature.bound.get(shapes)
        if bound is None:  # sizes not seen yet: bind (and check) them once
            binding = bind_dims([(f"input {spec['name']!r}", ty, value)
                                 for spec, ty, value in zip(specs, signature.input_types, values)])
            sizes = tuple(binding[name] for name in signature.names)
            out_shapes = tuple(bound_shape(ty, binding) for ty in signature.output_types)
            nbytes = int(signature.workspace_bytes((ctypes.c_int64 * max(len(sizes), 1))(*sizes)))
            bound = signature.remember(shapes, (sizes, out_shapes, nbytes))
        sizes, out_shapes, nbytes = bound
        inputs = [np.ascontiguousarray(value) for value in values]
        dims = (ctypes.c_int64 * max(len(sizes), 1))(*sizes)
        outputs = [np.empty(shape, dtype=ty.dtype) for shape, ty in zip(out_shapes, signature.output_types)]
        workspace = self._workspace(nbytes)
        input_ptrs = (ctypes.c_void_p * max(len(inputs), 1))(*[a.ctypes.data for a in inputs])
        output_ptrs = (ctypes.c_void_p * max(len(outputs), 1))(*[a.ctypes.data for a in outputs])
        status = self._entry(input_ptrs, output_ptrs, self._weights_address, workspace.ctypes.data, dims)
        if status != 0:
            kernels = self.metadata.get("kernels", [])
            name = kernels[status - 1] if 0 < status <= len(kernels) else f"#{status}"
            raise EvaluationError(f"compiled kernel {name} failed (out of memory?)")
        return _restructure(self.metadata["output_structure"], outputs)

    def _workspace(self, nbytes: int | None = None) -> np.ndarray:
        """This thread's scratch memory for the planned intermediates, kept between calls
        (a fresh one per call page-faults it in every time: 3% of resnet20's latency);
        one per thread, since a call runs without the GIL and two threads may call."""
        workspace = getattr(self._scratch, "workspace", None)
        if nbytes is not None:  # symbolic sizes: grown to the largest call so far, never shrunk
            if workspace is None or workspace.nbytes < nbytes:
                workspace = aligned_empty(nbytes)
                self._scratch.workspace = workspace
            return workspace
        if workspace is None:
            workspace = aligned_empty(int(self.metadata["workspace_bytes"]))
            self._scratch.workspace = workspace
        return workspace

    def _workspace_address(self) -> int:
        """The address of this thread's workspace for a static main (kept with it)."""
        address = getattr(self._scratch, "workspace_address", None)
        if address is None:
            address = self._scratch.workspace_address = self._workspace().ctypes.data
        return address

    @staticmethod
    def _checked_dtype(array: Any, spec: Mapping[str, Any]) -> np.ndarray:
        name, dtype = spec["name"], np.dtype(spec["dtype"])
        value = np.asarray(array)
        if value.dtype != dtype:
            hint = " (make one with x.astype(ml_dtypes.bfloat16))" if dtype.name == "bfloat16" else ""
            got = value.dtype.name
            raise EvaluationError(f"input {name!r}: expected dtype {dtype.name}, got {got}{hint}")
        return value

    # ----- files ----------------------------------------------------------------------
    def export_library(self, path: str | os.PathLike[str]) -> None:
        """Write the library to ``path`` and its metadata and weights next to it."""
        path = os.fspath(path)
        _atomic_write(path, self._library)
        _atomic_write(path + METADATA_SUFFIX, json.dumps(self.metadata, indent=1, sort_keys=True).encode())
        if self._weights_file is not None:  # the bytes are in a file already: link or copy it
            atomic_copy(self._weights_file, path + WEIGHTS_SUFFIX)
        else:
            _atomic_write(path + WEIGHTS_SUFFIX, memoryview(self._weights))

    @property
    def library_bytes(self) -> bytes:
        return self._library

    def __repr__(self) -> str:
        return f"runtime.Module(inputs={self.input_names}, kernels={len(self.metadata.get('kernels', []))})"


# how many shapes of inputs a library of a symbolic main keeps the bindings of
BOUND_SHAPES_KEPT = 64


class _SymbolicSignature:
    """What calling a library of a symbolic main needs, read once from its metadata: the
    dimensions (in the order the host takes their sizes), the inputs' and outputs' types
    with those dimensions, and the library's ``raypass_workspace_bytes``."""

    def __init__(self, metadata: Mapping[str, Any], cdll: ctypes.CDLL) -> None:
        variables = [DimVar(d["name"], int(d["lo"]), None if d["hi"] is None else int(d["hi"]))
                     for d in metadata["dims"]]
        by_name = {var.name: var for var in variables}
        self.variables = variables
        self.names = [var.name for var in variables]

        def tensor_type(spec: Mapping[str, Any]) -> TensorType:
            return TensorType(tuple(dim_from_json(d, by_name) for d in spec["shape"]), spec["dtype"])

        self.input_types = [tensor_type(spec) for spec in metadata["inputs"]]
        self.output_types = [tensor_type(spec) for spec in metadata["outputs"]]
        self.workspace_bytes = cdll.raypass_workspace_bytes
        self.workspace_bytes.restype = ctypes.c_int64
        self.workspace_bytes.argtypes = [ctypes.POINTER(ctypes.c_int64)]
        # the inputs' shapes of recent calls -> (sizes, output shapes, workspace bytes):
        # a decode loop calls at the same few shapes again and again, and binding them in
        # Python each time cost a tenth of a small model's call
        self.bound: dict[tuple, tuple] = {}

    def remember(self, shapes: tuple, bound: tuple) -> tuple:
        if len(self.bound) >= BOUND_SHAPES_KEPT:
            self.bound.pop(next(iter(self.bound)))  # the oldest
        self.bound[shapes] = bound
        return bound


def _checked(array: Any, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``array`` as the contiguous input ``name`` of ``shape`` and ``dtype``; one
    EvaluationError naming the input otherwise."""
    value = np.asarray(array)
    if value.dtype != dtype:
        # float16 inputs are numpy.float16 arrays, bfloat16 ones ml_dtypes.bfloat16 arrays
        hint = " (make one with x.astype(ml_dtypes.bfloat16))" if dtype.name == "bfloat16" else ""
        raise EvaluationError(f"input {name!r}: expected dtype {dtype.name}, got {value.dtype.name}{hint}")
    if value.shape != shape:
        raise EvaluationError(f"input {name!r}: expected shape {shape}, got {value.shape}")
    return np.ascontiguousarray(value)


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
        weights = map_file(path + WEIGHTS_SUFFIX)
    except FileNotFoundError as error:
        raise RaypassError(f"cannot load compiled module {path!r}: missing file {error.filename}") from error
    if metadata.get("format") != "raypass-library/1":
        raise RaypassError(f"{path + METADATA_SUFFIX} is not raypass library metadata")
    return Module(library, metadata, weights)


__all__ = ["Module", "load_module", "METADATA_SUFFIX", "WEIGHTS_SUFFIX"]

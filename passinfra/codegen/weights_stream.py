"""Writing a build's weights file while its kernels compile.

A deep model's weights are most of its bytes, and writing them (hundreds of megabytes,
gigabytes for a large model) was the longest serial step left in a build, after the
kernels and before the library could load. But the weights are known long before: once
FuseOps has run, ``main``'s constants are the weights, and no later pass changes them
(lowering and code generation work on the fused functions). So ``build`` opens a
:func:`streaming_weights` block around its pipelines; the :func:`StreamWeights` pass,
right after the last graph pass, starts a thread that lays out ``main``'s constants the
way the host code will (:func:`passinfra.codegen.host.main_weights`,
:class:`~passinfra.runtime.weights.PackedWeights`) and writes them to a temporary file;
HostCodegen then *claims* that file if its own weights are exactly those arrays in that
order (else it lays them out itself, as without a stream), and ``runtime.Module`` adopts
the file once the writer is done. A file nobody claimed is removed when the block ends.

The write runs in the driver process next to the scheduler (the GIL is released while
the bytes go to the file), so it overlaps the kernel stage on any backend.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import contextmanager

import numpy as np

from passinfra.runtime.weights import PackedWeights, WrittenWeights
from passinfra.scoped import pushed


class WeightsStream:
    """One build's weights writer: started once, claimed at most once."""

    def __init__(self) -> None:
        self._dir: str | None = None
        self._written: WrittenWeights | None = None
        self._claimed = False

    def start(self, weights: list[np.ndarray]) -> None:
        """Write ``weights``' layout to a new file in a background thread (a second call
        in the same build replaces nothing: the first layout is the one written)."""
        if self._written is not None:
            return
        packed = PackedWeights.pack(weights)
        self._dir = tempfile.mkdtemp(prefix="raypass-weights-")
        path = os.path.join(self._dir, "weights.bin")
        done: Future = Future()

        def write() -> None:
            try:
                with open(path, "wb") as handle:
                    packed.write(handle)
            except BaseException as error:  # noqa: BLE001  (handed to whoever waits)
                done.set_exception(error)
            else:
                done.set_result(path)

        threading.Thread(target=write, name="raypass-weights-writer", daemon=True).start()
        self._written = WrittenWeights(packed, path, done)

    def claim(self, weights: list[np.ndarray]) -> WrittenWeights | None:
        """The file being written, if it holds exactly ``weights`` (the same arrays in the
        same order); None otherwise (the caller lays them out itself)."""
        written = self._written
        if written is None or self._claimed or len(written.packed.arrays) != len(weights):
            return None
        if not all(_same_array(a, b) for a, b in zip(written.packed.arrays, weights)):
            return None
        self._claimed = True
        return written

    def close(self) -> None:
        """Wait for the writer; remove its directory unless a module adopted the file
        (the module moves it into its own directory, and the directory left is empty).
        The directory goes even when ``start`` was interrupted (a Ctrl-C) between making
        it and handing over the writer, which left it behind in /tmp."""
        try:
            if self._written is not None:
                self._written.done.exception()  # waits; an error was (or is) reported by the claimer
        finally:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    """The same bytes for sure: the same memory, size and dtype (constants are immutable)."""
    return a is b or (a.ctypes.data == b.ctypes.data and a.nbytes == b.nbytes and a.dtype == b.dtype)


class _Streams(threading.local):
    def __init__(self) -> None:
        self.stack: list[WeightsStream] = []


_streams = _Streams()


@contextmanager
def streaming_weights() -> Iterator[WeightsStream]:
    """A weights stream for the build running in this thread while the block runs."""
    stream = WeightsStream()
    try:
        with pushed(_streams.stack, stream):
            yield stream
    finally:
        stream.close()


def current_stream() -> WeightsStream | None:
    """The stream of the build running in this thread; None outside one (then
    StreamWeights does nothing and HostCodegen lays the weights out itself)."""
    return _streams.stack[-1] if _streams.stack else None


__all__ = ["WeightsStream", "current_stream", "streaming_weights"]

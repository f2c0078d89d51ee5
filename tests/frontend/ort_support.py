"""onnxruntime as the tests of dynamic models run it: one thread, no graph optimizations
(the graph runs as written, with the same kernels every time), any run(feed) -> outputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
import pytest

ort = pytest.importorskip("onnxruntime")

Run = Callable[[dict[str, np.ndarray]], Sequence[np.ndarray]]


def ort_runner(model: onnx.ModelProto) -> Run:
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda feed: session.run(None, feed)

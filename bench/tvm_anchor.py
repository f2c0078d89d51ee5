"""Apache TVM as an anchor: build the same ONNX model with TVM's Relax flow, run it.

Used by :mod:`bench.anchors` when ``import tvm`` works (the optional extra
``pip install -e '.[tvm]'``, apache-tvm from PyPI). TVM's flow, out of the box, with no
tuning: ``relax.frontend.onnx.from_onnx`` (weights as constants), ``FoldConstant`` (folds
the shape subgraphs, which the VM cannot run as data-dependent shapes),
``DecomposeOpsForInference``, then ``relax.build(target="llvm")`` and the Relax VM on the
CPU. Inputs are converted to TVM tensors once, outside the timed calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np


def tvm_version() -> str | None:
    """TVM's version, or None when it cannot be imported here."""
    try:
        import tvm
    except Exception:  # any import failure means: no TVM here
        return None
    return str(tvm.__version__)


def tvm_build(model: Any) -> tuple[Any, float]:
    """(Relax VM executable, seconds for import + build) of an ONNX ``model``."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    started = time.perf_counter()
    mod = from_onnx(model, keep_params_in_input=False)
    mod = relax.transform.FoldConstant()(mod)
    mod = relax.transform.DecomposeOpsForInference()(mod)
    build = getattr(relax, "build", None) or tvm.compile
    executable = build(mod, target="llvm")
    return executable, time.perf_counter() - started


def tvm_runner(executable: Any, arrays: list[np.ndarray]) -> tuple[Callable[[], Any], np.ndarray]:
    """A no-argument call of the model on ``arrays``, and its first output as NumPy."""
    import tvm
    from tvm import relax

    machine = relax.VirtualMachine(executable, tvm.cpu())
    to_tensor = getattr(tvm.runtime, "tensor", None) or tvm.nd.array
    inputs = [to_tensor(a) for a in arrays]
    main = machine["main"]

    def call() -> Any:
        return main(*inputs)

    result = call()
    first = result if hasattr(result, "numpy") else result[0]  # one tensor, or a tuple of them
    return call, np.asarray(first.numpy())


__all__ = ["tvm_version", "tvm_build", "tvm_runner"]

"""raypass as an ``onnx.backend.base.Backend``, so ONNX's own backend test suite can judge it.

``prepare`` imports the model, runs the pipeline over it and binds an executor; ``run``
feeds the inputs in graph order. Both the pipeline and the executor are pluggable: the
executor is the reference interpreter until the compiled path (``passinfra.build``)
lands, and a caller may pass any ``executor(mod) -> callable(*arrays)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from passinfra.frontend.onnx import from_onnx
from passinfra.ir.module import IRModule
from passinfra.runtime import evaluate

__all__ = [
    "RaypassBackend",
    "RaypassBackendRep",
    "interpreter_executor",
    "standard_pipeline",
    "prepare",
    "run_model",
    "supports_device",
]

Executor = Callable[[IRModule], Callable[..., Any]]
# the graph-level passes the backend runs when they are registered (they land over time)
STANDARD_PASSES = ("InferType", "SimplifyInference", "FoldConstant", "DeadCodeElimination")


def interpreter_executor(mod: IRModule) -> Callable[..., Any]:
    """Run ``main`` of ``mod`` with the reference interpreter."""
    return lambda *arrays: evaluate(mod, *arrays)


def standard_pipeline() -> Callable[[IRModule], IRModule] | None:
    """A Sequential of the standard graph passes that are registered, or None."""
    from passinfra import transform

    passes = []
    for name in STANDARD_PASSES:
        try:
            passes.append(transform.get_pass(name))
        except Exception:  # not registered yet: the pass lands with its own issue
            continue
    return transform.Sequential(passes, name="onnx_backend") if passes else None


class RaypassBackendRep(BackendRep):
    """A prepared model: the imported (and optimized) module and a bound executor."""

    def __init__(
        self, mod: IRModule, input_names: Sequence[str], num_outputs: int, executor: Executor
    ) -> None:
        super().__init__()
        self.mod = mod
        self.input_names = list(input_names)
        self.num_outputs = num_outputs
        self._run = executor(mod)

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            arrays = [inputs[name] for name in self.input_names]
        elif isinstance(inputs, np.ndarray):
            arrays = [inputs]
        else:
            arrays = list(inputs)
        result = self._run(*(np.asarray(a) for a in arrays))
        outputs = result if self.num_outputs > 1 else (result,)
        return tuple(np.asarray(o) for o in outputs)


class RaypassBackend(Backend):
    """The ONNX backend interface over raypass (CPU only)."""

    executor: Executor = staticmethod(interpreter_executor)  # type: ignore[assignment]

    @classmethod
    def prepare(
        cls,
        model: onnx.ModelProto,
        device: str = "CPU",
        shapes: dict | None = None,
        pipeline: Callable[[IRModule], IRModule] | None = None,
        executor: Executor | None = None,
        **kwargs: Any,
    ) -> RaypassBackendRep:
        super().prepare(model, device, **kwargs)
        mod = from_onnx(model, shapes=shapes)
        pipeline = pipeline if pipeline is not None else standard_pipeline()
        if pipeline is not None:
            mod = pipeline(mod)
        initializers = {init.name for init in model.graph.initializer}
        input_names = [i.name for i in model.graph.input if i.name not in initializers]
        return RaypassBackendRep(mod, input_names, len(model.graph.output), executor or cls.executor)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper() == "CPU"


prepare = RaypassBackend.prepare
run_model = RaypassBackend.run_model
supports_device = RaypassBackend.supports_device

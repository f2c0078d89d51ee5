"""The worker: holds a shard of the module's functions and runs function passes on them.

``FunctionWorker`` is a plain class (testable without Ray); ``workers.pool`` turns it
into a Ray actor. Functions stay resident between stages: the driver sends a function
once and afterwards only names it. A batch call runs a stage's passes one function at a
time (all passes for a function, then the next function), measuring each (pass,
function), and returns per function either nothing (unchanged) or the new function.
An exception stops that function's batch and is returned, not raised, so the driver can
pick the same error an in-process run would have raised first.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from passinfra.ir.expr import BaseFunc
from passinfra.ir.module import IRModule
from passinfra.transform import FunctionPass, PassContext, register_config
from passinfra.transform.passes import ReadOnlyModule
from workers.wire import Packed, pack_functions, unpack_functions, unpack_module

# a stage's passes are unpickled once per worker and kept for its batch calls
_STAGE_CACHE_SIZE = 4


@dataclass
class StageSpec:
    """What a batch call needs besides the function names (sent once per stage)."""

    stage_id: int
    passes: list[tuple[int, FunctionPass]]  # (leaf index, pass)
    ctx_spec: dict[str, Any]
    snapshot: Packed | None = None  # the whole module, for a pass that reads it
    # the registered types of the context's config keys: a key registered only by the
    # driver's code (a user module, the scheduler) is registered here too
    config_types: dict[str, type] = field(default_factory=dict)


@dataclass
class BatchError:
    leaf: int
    function: str
    error: BaseException
    traceback: str


@dataclass
class BatchResult:
    slot: int
    pid: int
    changed: Packed | None
    # (leaf index, function, wall-clock start (time.time()), seconds)
    timings: list[tuple[int, str, float, float]] = field(default_factory=list)
    error: BatchError | None = None
    busy_seconds: float = 0.0


class RemotePassError(RuntimeError):
    """Stands in for an exception that could not be sent back from a worker."""


class FunctionWorker:
    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.functions: dict[str, BaseFunc] = {}
        self._stages: OrderedDict[int, tuple[StageSpec, IRModule | None]] = OrderedDict()

    # ----- identity and residency ---------------------------------------------------
    def describe(self) -> dict[str, Any]:
        node = None
        try:
            import ray

            node = ray.get_runtime_context().get_node_id()
        except Exception:  # outside Ray: no node id
            pass
        return {"slot": self.slot, "pid": os.getpid(), "host": socket.gethostname(), "node_id": node}

    def load(self, packed: Packed) -> int:
        """Make the packed functions resident (replacing older versions)."""
        self.functions.update(unpack_functions(packed))
        return len(self.functions)

    def drop(self, names: list[str]) -> int:
        for name in names:
            self.functions.pop(name, None)
        return len(self.functions)

    def resident(self) -> list[str]:
        return list(self.functions)

    # ----- work -------------------------------------------------------------------------
    def run_batch(self, stage_box: list[Any], names: list[str]) -> BatchResult:
        """Run the stage in ``stage_box`` (a one-element list holding a StageSpec or a Ray
        ObjectRef to one: boxed so Ray does not resolve it on every call) on ``names``."""
        spec, snapshot = self._stage(stage_box)
        for key, value_type in spec.config_types.items():
            register_config(key, value_type)
        ctx = PassContext.from_spec(spec.ctx_spec)
        started = time.perf_counter()
        result = BatchResult(self.slot, os.getpid(), None)
        changed: dict[str, BaseFunc] = {}
        with ctx:
            view = snapshot if snapshot is not None else ReadOnlyModule(IRModule(self.functions), "<batch>")
            for name in names:
                func = self.functions[name]
                original = func
                for leaf, pass_ in spec.passes:
                    if not pass_.accepts(func):
                        continue
                    wall, t0 = time.time(), time.perf_counter()
                    try:
                        func = pass_.transform_function(func, view, ctx, name)
                    except Exception as error:  # returned to the driver, which re-raises it
                        result.timings.append((leaf, name, wall, time.perf_counter() - t0))
                        result.error = _batch_error(leaf, name, error, self.slot)
                        break
                    result.timings.append((leaf, name, wall, time.perf_counter() - t0))
                if result.error is not None and result.error.function == name:
                    break
                if func is not original:
                    self.functions[name] = func
                    changed[name] = func
        result.changed = pack_functions(changed) if changed else None
        result.busy_seconds = time.perf_counter() - started
        return result

    def _stage(self, stage_box: list[Any]) -> tuple[StageSpec, IRModule | None]:
        item = stage_box[0]
        if isinstance(item, StageSpec):
            spec = item
        else:
            key = getattr(item, "hex", lambda: None)()
            cached = self._stages.get(key) if key else None
            if cached is not None:
                return cached
            import ray

            spec = ray.get(item)
        snapshot = unpack_module(spec.snapshot) if spec.snapshot is not None else None
        entry = (spec, ReadOnlyModule(snapshot, "<snapshot>") if snapshot is not None else None)
        if not isinstance(item, StageSpec):
            self._stages[item.hex()] = entry
            while len(self._stages) > _STAGE_CACHE_SIZE:
                self._stages.popitem(last=False)
        return entry


def _batch_error(leaf: int, name: str, error: Exception, slot: int) -> BatchError:
    text = "".join(traceback.format_exception(error))
    try:  # the driver must be able to unpickle it: custom types are kept when they can be
        from ray import cloudpickle

        cloudpickle.loads(cloudpickle.dumps(error))
    except Exception:
        error = RemotePassError(f"{type(error).__name__}: {error}")
    return BatchError(leaf, name, error, text)

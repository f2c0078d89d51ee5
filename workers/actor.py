"""The worker: holds a shard of the module's functions and runs function passes on them.

``FunctionWorker`` is a plain class (testable without Ray); ``workers.pool`` turns it
into a Ray actor. Functions stay resident between stages: the driver sends a function
once (with the first batch call that needs it, so the worker starts on the first batch
while the driver still packs the next) and afterwards only names it. A batch call runs a
stage's passes through the kernel every executor shares
(``passinfra.transform.function_stage``: all passes for a function, then the next
function, each (pass, function) run measured, with the facts the passes reported about
it, never in the IR), and returns per function either nothing (unchanged) or the new
function. An exception is returned, not raised, so the driver can pick the same error an
in-process run would have raised first (the kernel's first-error rule). Each pass sees
the module through the same view as in-process: the stage's snapshot for a pass that
reads the module, its own function alone for one that promised not to.

When the stage is followed by InferType (``StageSpec.types_wanted``), the worker infers
the types of the batch's functions before returning them: types are caches on the nodes
and travel with them, so the driver's InferType finds them done, and the worker's own
copies, which the next stage's passes read, have them too.
"""

from __future__ import annotations

import gc
import os
import socket
import time
import traceback
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from passinfra.ir.expr import BaseFunc, Function
from passinfra.ir.module import IRModule
from passinfra.ir.type_infer import infer_module
from passinfra.transform import FunctionPass, PassContext, register_config
from passinfra.transform.function_stage import PassRun, run_stage_over
from workers.wire import Packed, pack_functions, unpack_module

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
    types_wanted: bool = False  # infer the types of the results (InferType comes next)


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
    runs: list[PassRun] = field(default_factory=list)  # keyed by leaf index, with their facts
    error: BatchError | None = None
    busy_seconds: float = 0.0
    typing_seconds: float = 0.0  # part of busy_seconds spent inferring result types
    untyped: list[str] = field(default_factory=list)  # types were wanted but not inferred


class RemotePassError(RuntimeError):
    """Stands in for an exception that could not be sent back from a worker."""


class FunctionWorker:
    def __init__(self, slot: int) -> None:
        self.slot = slot
        # the resident functions (a shard: a pass never sees this module, see module_view)
        self.module = IRModule()
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
        self.module.update(unpack_module(packed))
        return len(self.module)

    def drop(self, names: list[str]) -> int:
        for name in names:
            if name in self.module:
                del self.module[name]
        return len(self.module)

    def resident(self) -> list[str]:
        return [gv.name_hint for gv in self.module.functions]

    # ----- work -------------------------------------------------------------------------
    def run_batch(
        self,
        stage_box: list[Any],
        names: list[str],
        load: Packed | None = None,
        drop: list[str] | None = None,
    ) -> BatchResult:
        """Run the stage in ``stage_box`` (a one-element list holding a StageSpec or a Ray
        ObjectRef to one: boxed so Ray does not resolve it on every call) on ``names``,
        after making the functions in ``load`` resident and forgetting those in ``drop``."""
        with _cyclic_gc_paused():
            return self._run_batch(stage_box, names, load, drop)

    def _run_batch(
        self, stage_box: list[Any], names: list[str], load: Packed | None, drop: list[str] | None
    ) -> BatchResult:
        started = time.perf_counter()
        if drop:
            self.drop(drop)
        if load is not None:
            self.load(load)
        spec, snapshot = self._stage(stage_box)
        for key, value_type in spec.config_types.items():
            register_config(key, value_type)
        ctx = PassContext.from_spec(spec.ctx_spec)
        with ctx:
            run = run_stage_over(spec.passes, ((name, self.module[name]) for name in names), snapshot, ctx)
        changed = run.changed
        for name, func in changed.items():
            self.module[name] = func
        result = BatchResult(self.slot, os.getpid(), None, run.runs)
        if run.error is not None:  # returned to the driver, which re-raises it
            result.error = _batch_error(run.error.key, run.error.function, run.error.error)
        if spec.types_wanted and result.error is None:
            typing_start = time.perf_counter()
            result.untyped = self._infer_types(names)
            result.typing_seconds = time.perf_counter() - typing_start
        result.changed = pack_functions(changed) if changed else None
        result.busy_seconds = time.perf_counter() - started
        return result

    def _infer_types(self, names: list[str]) -> list[str]:
        """Cache types on the functions ``names`` (see the module docstring). Only an
        optimization: when it fails (a call of a function another worker holds, a type
        error) the driver's InferType does the work and reports any error in its place;
        the types cached before the failure are the ones it would compute anyway.
        Returns the functions left untyped (the driver re-sends them once it typed them)."""
        untyped = {name for name in names if _needs_types(self.module[name])}
        if untyped:
            # the untyped functions of the batch, and the typed residents they may call
            scope = self.module.copy()
            for gv, func in self.module.items():
                if gv.name_hint not in untyped and _needs_types(func):
                    del scope[gv]
            try:
                infer_module(scope)
            except Exception:  # noqa: BLE001  (the driver's InferType raises it, in order)
                pass
        return [name for name in names if _needs_types(self.module[name])]

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
        entry = (spec, unpack_module(spec.snapshot) if spec.snapshot is not None else None)
        if not isinstance(item, StageSpec):
            self._stages[item.hex()] = entry
            while len(self._stages) > _STAGE_CACHE_SIZE:
                self._stages.popitem(last=False)
        return entry


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """A batch allocates tens of thousands of IR nodes that outlive it (unpacked and
    rewritten functions); every collection the allocations trigger would scan them, and
    the whole resident module, for cycles that immutable IR does not make. Reference
    counting still frees everything else at once; the collector catches up afterwards."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _needs_types(func: BaseFunc) -> bool:
    return isinstance(func, Function) and func._checked_type is None


def _batch_error(leaf: int, name: str, error: Exception) -> BatchError:
    text = "".join(traceback.format_exception(error))
    try:  # the driver must be able to unpickle it: custom types are kept when they can be
        from ray import cloudpickle

        cloudpickle.loads(cloudpickle.dumps(error))
    except Exception:
        error = RemotePassError(f"{type(error).__name__}: {error}")
    return BatchError(leaf, name, error, text)

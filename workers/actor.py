"""The worker: holds a shard of the module's functions and runs function passes on them.

``FunctionWorker`` is a plain class (testable without Ray); ``scheduler.pool.slots`` turns it
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

When the stage is followed by a type-inference pass (one that declares
``PassInfo.infers_types``, such as InferType; ``StageSpec.types_wanted``), the worker
infers the types of the batch's functions before returning them: types are caches on the
nodes and travel with them, so that pass in the driver finds them done, and the worker's
own copies, which the next stage's passes read, have them too.

One worker serves several runs at once (a warm pool serves several drivers): everything
a run leaves on it (resident functions, stages) is kept per *run id* and evicted by
``end_run``, so runs never see each other's functions. ``run_batch_wire`` is the same
call with its request and result as pickled bytes, for the pool's gateway, which
forwards them without unpickling (it need not import the passes a driver sends).
"""

from __future__ import annotations

import gc
import os
import pickle
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
from workers.wire import Packed, dumps, pack_functions, unpack_module

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
    types_wanted: bool = False  # infer the types of the results (type inference comes next)


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


@dataclass
class _RunState:
    """What one run (one driver's build) keeps on a worker."""

    # the resident functions (a shard: a pass never sees this module, see module_view)
    module: IRModule = field(default_factory=IRModule)
    last_used: float = field(default_factory=time.monotonic)


def _inside_ray_actor() -> bool:
    """Whether this process is a Ray actor's (a worker), not a driver's."""
    try:
        import ray

        return ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None
    except Exception:  # no Ray, or no runtime context
        return False


def _slow_start(slot: int) -> float:
    """Seconds ``RAYPASS_SLOW_START`` adds to ``slot``'s warm-up (see ``warm_up``)."""
    for item in os.environ.get("RAYPASS_SLOW_START", "").split(","):
        index, _, seconds = item.partition("=")
        if index.strip() == str(slot):
            return float(seconds)
    return 0.0


class FunctionWorker:
    def __init__(self, slot: int) -> None:
        if _inside_ray_actor():
            from passinfra.codegen.conv_runtime import disable_prefetch
            from workers.kernel_store import install_if_multinode

            # the driver links and compiles the convolution runtime; a worker killed at
            # shutdown in the middle of that compile would leave its directory behind
            disable_prefetch()
            # on a cluster of several nodes, kernels one node compiled serve the others
            install_if_multinode()
        self.slot = slot
        self._runs: dict[str, _RunState] = {}
        # stages by object-store key, shared by the runs (keys are unique per stage)
        self._stages: OrderedDict[str, tuple[StageSpec, IRModule | None]] = OrderedDict()
        self.batches_served = 0

    # ----- identity, warm-up and runs ---------------------------------------------------
    def describe(self) -> dict[str, Any]:
        node = None
        try:
            import ray

            node = ray.get_runtime_context().get_node_id()
        except Exception:  # outside Ray: no node id
            pass
        return {"slot": self.slot, "pid": os.getpid(), "host": socket.gethostname(), "node_id": node}

    def warm_up(self) -> dict[str, Any]:
        """Import what a build's stages use (the passes, lowering, C rendering, the
        compiler driver) and make the kernel cache directory, so a warm pool's first run
        pays none of it. Returns ``describe()`` plus the seconds it took.

        ``RAYPASS_SLOW_START="SLOT=SECONDS,..."`` in the environment makes these slots
        take that much longer, as a worker on a loaded node does: how the tests of
        workers that join a run late get one."""
        started = time.perf_counter()
        time.sleep(_slow_start(self.slot))
        import passinfra.build  # noqa: F401  (imports every built-in pass and the codegen)
        from passinfra.codegen.object_cache import default_cache_dir

        os.makedirs(default_cache_dir(), exist_ok=True)
        return dict(self.describe(), warm_up_seconds=time.perf_counter() - started)

    def runs(self) -> list[str]:
        """The ids of the runs with state here."""
        return list(self._runs)

    def end_run(self, run_id: str) -> int:
        """Forget everything of ``run_id``; returns how many functions were evicted."""
        state = self._runs.pop(run_id, None)
        return len(state.module) if state is not None else 0

    def _run(self, run_id: str) -> _RunState:
        state = self._runs.get(run_id)
        if state is None:
            state = self._runs[run_id] = _RunState()
        state.last_used = time.monotonic()
        return state

    # ----- residency ----------------------------------------------------------------------
    def load(self, run_id: str, packed: Packed) -> int:
        """Make the packed functions resident for ``run_id`` (replacing older versions)."""
        module = self._run(run_id).module
        module.update(unpack_module(packed))
        return len(module)

    def drop(self, run_id: str, names: list[str]) -> int:
        module = self._run(run_id).module
        for name in names:
            if name in module:
                del module[name]
        return len(module)

    def resident(self, run_id: str) -> list[str]:
        return [gv.name_hint for gv in self._run(run_id).module.functions]

    # ----- work -------------------------------------------------------------------------
    def run_batch(
        self,
        run_id: str,
        stage_box: list[Any],
        names: list[str],
        load: Packed | None = None,
        drop: list[str] | None = None,
    ) -> BatchResult:
        """Run the stage in ``stage_box`` (a one-element list holding a StageSpec or a Ray
        ObjectRef to one, or to its pickled bytes: boxed so Ray does not resolve it on
        every call) on ``names`` of run ``run_id``, after making the functions in
        ``load`` resident and forgetting those in ``drop``."""
        with _cyclic_gc_paused():
            self.batches_served += 1
            return self._run_batch(run_id, stage_box, names, load, drop)

    def run_batch_wire(self, run_id: str, stage_box: list[Any], request: bytes) -> bytes:
        """``run_batch`` with ``(names, load, drop)`` and the result as pickled bytes."""
        names, load, drop = pickle.loads(request)
        return dumps(self.run_batch(run_id, stage_box, names, load, drop))

    def load_wire(self, run_id: str, packed: bytes) -> int:
        return self.load(run_id, pickle.loads(packed))

    def _run_batch(
        self, run_id: str, stage_box: list[Any], names: list[str], load: Packed | None,
        drop: list[str] | None,
    ) -> BatchResult:
        started = time.perf_counter()
        if drop:
            self.drop(run_id, drop)
        if load is not None:
            self.load(run_id, load)
        module = self._run(run_id).module
        spec, snapshot = self._stage(stage_box)
        for key, value_type in spec.config_types.items():
            register_config(key, value_type)
        ctx = PassContext.from_spec(spec.ctx_spec)
        with ctx:
            run = run_stage_over(spec.passes, ((name, module[name]) for name in names), snapshot, ctx)
        changed = run.changed
        for name, func in changed.items():
            module[name] = func
        result = BatchResult(self.slot, os.getpid(), None, run.runs)
        if run.error is not None:  # returned to the driver, which re-raises it
            result.error = _batch_error(run.error.key, run.error.function, run.error.error)
        if spec.types_wanted and result.error is None:
            typing_start = time.perf_counter()
            result.untyped = _infer_types(module, names)
            result.typing_seconds = time.perf_counter() - typing_start
        result.changed = pack_functions(changed) if changed else None
        result.busy_seconds = time.perf_counter() - started
        return result

    def _stage(self, stage_box: list[Any]) -> tuple[StageSpec, IRModule | None]:
        item = stage_box[0]
        if isinstance(item, StageSpec):
            return item, _snapshot(item)
        key = item.hex()
        cached = self._stages.get(key)
        if cached is not None:
            return cached
        import ray

        spec = ray.get(item)
        if isinstance(spec, bytes):  # sent through the pool's gateway
            spec = pickle.loads(spec)
        entry = self._stages[key] = (spec, _snapshot(spec))
        while len(self._stages) > _STAGE_CACHE_SIZE:
            self._stages.popitem(last=False)
        return entry


def _snapshot(spec: StageSpec) -> IRModule | None:
    return unpack_module(spec.snapshot) if spec.snapshot is not None else None


def _infer_types(module: IRModule, names: list[str]) -> list[str]:
    """Cache types on the functions ``names`` of ``module`` (see the module docstring).
    Only an optimization: when it fails (a call of a function another worker holds, a
    type error) the driver's type-inference pass does the work and reports any error in its place;
    the types cached before the failure are the ones it would compute anyway. Returns
    the functions left untyped (the driver re-sends them once it typed them)."""
    untyped = {name for name in names if _needs_types(module[name])}
    if untyped:
        # the untyped functions of the batch, and the typed residents they may call
        scope = module.copy()
        for gv, func in module.items():
            if gv.name_hint not in untyped and _needs_types(func):
                del scope[gv]
        try:
            infer_module(scope)
        except Exception:  # noqa: BLE001  (the driver's type-inference pass raises it, in order)
            pass
    return [name for name in names if _needs_types(module[name])]


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

"""``Scheduler``: run a pipeline in-process or with function passes on Ray workers.

    with Scheduler(backend="ray", num_workers=2) as sched:
        out = sched.run(pipeline, mod)      # prints identically to pipeline(mod)
        sched.last_run                      # counters of that run

Backends: ``"local"`` runs ``pipeline(mod)`` in this process (the reference); ``"ray"``
plans the pipeline, runs module passes here and function-pass stages on worker actors;
``"auto"`` picks local when the work is too small to pay for Ray (the reason is in
``last_run.backend_reason``). The worker pool is created on first use and kept across
runs (functions stay resident between stages of one run); a failed run tears it down so
no actor outlives the error.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from passinfra.ir.module import IRModule
from passinfra.transform import Pass, PassContext, register_config
from passinfra.transform.errors import PassArgumentError
from passinfra.transform.run_facts import collect_facts
from scheduler.assign import estimated_cost
from scheduler.executor import ErrorHook, PlanExecutor
from scheduler.plan import FunctionStage, Plan, build_plan
from scheduler.reproducer import write_reproducer
from scheduler.stats import DriverEvent, RunStats

if TYPE_CHECKING:  # Ray is imported only when a Ray backend is used
    from scheduler import ray_runtime
    from scheduler.ray_runner import StageOutcome

register_config("scheduler.reproducer_dir", str)
register_config("scheduler.batch_size", int)
register_config("scheduler.auto_min_work", int)

BACKENDS = ("local", "ray", "auto")
# node-visits (nodes x function passes) below which "auto" stays in-process: a Ray
# round trip costs about a millisecond, a pass visits a node in about a microsecond
AUTO_MIN_WORK = 200_000


class Scheduler:
    def __init__(
        self,
        backend: str = "auto",
        num_workers: int | None = None,
        address: str | None = None,
        **options: Any,
    ) -> None:
        if backend not in BACKENDS:
            raise PassArgumentError(
                f"unknown scheduler backend {backend!r}; choose one of {', '.join(BACKENDS)}"
            )
        if num_workers is not None and (not isinstance(num_workers, int) or num_workers < 1):
            raise PassArgumentError(f"num_workers must be a positive int, got {num_workers!r}")
        unknown = set(options) - {"cpus_per_worker", "batch_size", "num_cpus"}
        if unknown:
            raise PassArgumentError(f"unknown Scheduler options: {', '.join(sorted(unknown))}")
        self.backend = backend
        self.num_workers = num_workers
        self.address = address
        self.options = options
        self.last_run = RunStats()
        self._ray: ray_runtime.RayHandle | None = None
        self._pool: Any = None

    # ----- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        """Stop the workers, and Ray too if this scheduler started it. On a Ray this
        scheduler did not start, it returns once Ray reports the workers' CPUs free: the
        cluster is left as the scheduler found it, and a scheduler made next can start."""
        self._stop_pool()
        if self._ray is not None:
            from scheduler import ray_runtime

            ray_runtime.disconnect(self._ray)
            self._ray = None

    def _stop_pool(self) -> None:
        if self._pool is not None:
            # a private instance is stopped right after: waiting for its CPUs is pointless
            self._pool.shutdown(wait=not (self._ray is not None and self._ray.private))
            self._pool = None

    def _ensure_pool(self) -> Any:
        if self._pool is None:
            from scheduler import ray_runtime
            from workers.pool import WorkerPool

            if self._ray is None:
                self._ray = ray_runtime.connect(self.address, self.options.get("num_cpus"))
            cpus = ray_runtime.cluster_cpus()
            workers = self.num_workers or max(1, int(cpus))
            per_worker = self.options.get("cpus_per_worker") or min(1.0, cpus / workers)
            self._pool = WorkerPool(workers, per_worker)
        return self._pool

    @property
    def worker_pids(self) -> list[int]:
        return self._pool.pids() if self._pool is not None else []

    # ----- running ----------------------------------------------------------------------
    def run(self, pipeline: Pass, mod: IRModule) -> IRModule:
        """What ``pipeline(mod)`` returns, honouring the current PassContext."""
        if not isinstance(pipeline, Pass):
            raise PassArgumentError(f"Scheduler.run needs a Pass, got {type(pipeline).__name__}")
        if not isinstance(mod, IRModule):
            raise PassArgumentError(f"Scheduler.run needs an IRModule, got {type(mod).__name__}")
        ctx = PassContext.current()
        started = time.perf_counter()
        backend, reason = self._choose_backend(pipeline, mod, ctx)
        self.last_run = RunStats(backend=backend, backend_reason=reason)
        try:
            if backend == "local":
                # what the passes report about their runs is collected into last_run
                with collect_facts() as self.last_run.facts:
                    return pipeline(mod)
            return self._run_ray(pipeline, mod, ctx)
        finally:
            self.last_run.wall_seconds = time.perf_counter() - started

    def _choose_backend(self, pipeline: Pass, mod: IRModule, ctx: PassContext) -> tuple[str, str]:
        if self.backend == "local":
            return "local", "asked for the local backend"
        if self.backend == "ray":
            return "ray", "asked for the ray backend"
        plan = build_plan(pipeline, ctx)
        function_passes = sum(len(stage.leaves) for stage in plan.stages if isinstance(stage, FunctionStage))
        nodes = sum(estimated_cost(func) for func in mod.functions.values())
        work = int(nodes * function_passes)
        threshold = ctx.get_config("scheduler.auto_min_work", AUTO_MIN_WORK)
        if function_passes == 0:
            return "local", "no function passes to distribute"
        if len(mod) < 2:
            return "local", "a single function gives no parallelism"
        if work < threshold:
            return "local", f"estimated work {work} node-visits < {threshold}: too small to pay for Ray"
        return "ray", f"estimated work {work} node-visits over {len(mod)} functions"

    def _run_ray(self, pipeline: Pass, mod: IRModule, ctx: PassContext) -> IRModule:
        from scheduler.ray_runner import RayStageRunner

        pool = self._ensure_pool()
        stats = self.last_run
        stats.num_workers = len(pool)
        stats.worker_pids = {slot.index: slot.info["pid"] for slot in pool.slots}
        batch_size = ctx.get_config("scheduler.batch_size", None) or self.options.get("batch_size")
        runner = RayStageRunner(pool, stats, batch_size)
        executor = PlanExecutor(
            runner.run_stage,
            ctx,
            on_error=self._error_hook(ctx),
            on_module_pass=lambda name, start, seconds: stats.driver_events.append(
                DriverEvent(name, start, seconds)
            ),
        )
        try:
            return executor.run(pipeline, mod)
        except BaseException:
            # a failed run leaves no actor behind (the next run starts a fresh pool)
            self._stop_pool()
            raise

    @staticmethod
    def _error_hook(ctx: PassContext) -> ErrorHook:
        """What a failed stage does besides raising: with config
        ``scheduler.reproducer_dir``, write a reproducer (the stage's input and the passes
        from the stage on) and name it in a note on the error."""
        directory = ctx.get_config("scheduler.reproducer_dir", None)

        def on_error(plan: Plan, stage: FunctionStage, outcome: StageOutcome, stage_input: IRModule) -> None:
            if not directory or outcome.error is None:
                return
            start = stage.leaves[0].leaf_index
            failing = next(leaf for leaf in stage.leaves if leaf.leaf_index == outcome.error.leaf)
            path = write_reproducer(
                directory,
                stage_input,
                outcome.error.function,
                failing.name,
                [leaf.pass_ for leaf in plan.leaves[start:]],  # with their options
                ctx,
                outcome.error.error,
            )
            outcome.error.error.add_note(
                f"reproducer written to {path}; replay it with `raypass replay {path}`"
            )

        return on_error


def default_workers() -> int:
    return os.cpu_count() or 1

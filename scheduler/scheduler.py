"""``Scheduler``: run a pipeline in-process or with function passes on Ray workers.

    with Scheduler(backend="ray", num_workers=2) as sched:
        out = sched.run(pipeline, mod)      # prints identically to pipeline(mod)
        sched.last_run                      # counters of that run

Backends: ``"local"`` runs ``pipeline(mod)`` in this process (the reference); ``"ray"``
plans the pipeline, runs module passes here and function-pass stages on worker actors;
``"auto"`` estimates both and picks the faster (``scheduler.auto``; the numbers are in
``last_run.backend_reason``).

Workers (``scheduler.pool.startup``): a warm pool (``scheduler.pool``, ``raypass pool
start``) when one runs on this machine or is registered at ``address``; otherwise the
``ray`` backend starts Ray and its actors in the background as soon as the scheduler is
made, and only the first function stage waits for them. Those actors are kept across
runs (each run's functions stay resident between its stages and are evicted when it
ends); a failed run stops them so no actor outlives the error. A warm pool is never
stopped by a scheduler.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from passinfra.ir.module import IRModule
from passinfra.transform import Pass, PassContext, register_config
from passinfra.transform.errors import PassArgumentError
from passinfra.transform.run_facts import collect_facts
from scheduler import auto, kernel_costs
from scheduler.executor import ErrorHook, PlanExecutor, announce_plan
from scheduler.plan import FunctionStage, Plan, build_plan
from scheduler.pool.startup import WorkerSource
from scheduler.reproducer import write_reproducer
from scheduler.stats import DriverEvent, RunStats

if TYPE_CHECKING:  # Ray is imported only when a Ray backend is used
    from scheduler.pool.transport import Transport
    from scheduler.ray_runner import StageOutcome

register_config("scheduler.reproducer_dir", str)
register_config("scheduler.batch_size", int)
# registered here, not where they are read (scheduler.ray_runner, imported once a run
# ships), so that a command line's --config knows them
register_config("scheduler.min_stage_functions", int)
# the driver runs a stage's functions itself while the workers start (ray_runner._head_start)
register_config("scheduler.head_start", bool)
# functions no worker holds are handed out from a queue as workers finish (scheduler.chunking);
# False: placed ahead of the stage by estimated cost (LPT)
register_config("scheduler.work_queue", bool)

BACKENDS = ("local", "ray", "auto")


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
        self._workers: WorkerSource | None = None
        if backend != "local":
            self._workers = WorkerSource(num_workers, address, options)
            if backend == "ray":  # start-up runs while the driver does the serial part
                self._workers.start_in_background()

    # ----- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def shutdown(self, wait: bool = True) -> None:
        """Stop the workers, and Ray too if this scheduler started it (a warm pool is
        left running). On a Ray this scheduler did not start, it returns once Ray reports
        the workers' CPUs free: the cluster is left as the scheduler found it, and a
        scheduler made next can start. ``wait=False`` (a command about to exit): a
        private pool is asked to stop and finishes stopping on its own."""
        if self._workers is not None:
            self._workers.shutdown(wait)

    def start_workers(self) -> None:
        """Start the workers now and return once they are ready (a benchmark's untimed
        set-up; runs do this by themselves). Nothing to do on a warm pool."""
        if self._workers is not None:
            self._workers.wait_ready()

    @property
    def worker_pool(self) -> Any:
        """The ``scheduler.pool.slots.WorkerPool`` this scheduler started (None: none, or a warm pool)."""
        return self._workers.pool if self._workers is not None else None

    @property
    def ray_handle(self) -> Any:
        """How this scheduler holds Ray (``scheduler.pool.ray_runtime.RayHandle``), if it connected."""
        return self._workers.ray_handle if self._workers is not None else None

    @property
    def worker_pids(self) -> list[int]:
        pool = self.worker_pool
        return pool.pids() if pool is not None else []

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
        if backend == "ray" and self._workers is not None:
            # auto chose Ray: a private pool starts now, while the serial passes run
            self._workers.start_in_background()
        try:
            if backend == "local":
                # in-process, the pipeline runs as its plan says: a display gets the plan
                # as it would from the executor
                announce_plan(pipeline, ctx)
                # what the passes report about their runs is collected into last_run
                with collect_facts() as self.last_run.facts:
                    return pipeline(mod)
            result = self._run_ray(pipeline, mod, ctx)
            kernel_costs.record_run(self.last_run, mod)  # what auto weighs next time
            return result
        finally:
            self.last_run.wall_seconds = time.perf_counter() - started

    def _choose_backend(self, pipeline: Pass, mod: IRModule, ctx: PassContext) -> tuple[str, str]:
        if self.backend == "local":
            return "local", "asked for the local backend"
        if self.backend == "ray":
            return "ray", "asked for the ray backend"
        assert self._workers is not None
        warm = self._workers.has_warm_pool
        workers = self.num_workers or (self._workers.warm.record.workers if warm else default_workers())
        return auto.choose(build_plan(pipeline, ctx), mod, workers, warm, ctx)

    def _run_ray(self, pipeline: Pass, mod: IRModule, ctx: PassContext) -> IRModule:
        from scheduler.ray_runner import RayStageRunner

        assert self._workers is not None
        workers = self._workers
        stats = self.last_run

        def open_transport() -> Transport:
            opened, workers_are = workers.open_run()
            if workers.unused_pool_note:
                stats.notes.append(workers.unused_pool_note)
            transport = opened.transport
            stats.backend_reason += f"; workers: {workers_are}"
            stats.workers = transport.description
            stats.startup_seconds = opened.startup_seconds
            stats.startup_waited_seconds = opened.waited_seconds
            stats.num_workers = len(transport)
            # a slot whose worker still starts has no process yet
            stats.worker_pids = {slot.index: slot.info["pid"] for slot in transport.slots
                                 if "pid" in slot.info}
            return transport

        batch_size = ctx.get_config("scheduler.batch_size", None) or self.options.get("batch_size")
        runner = RayStageRunner(open_transport, stats, batch_size, workers.ready_now)
        executor = PlanExecutor(
            runner.run_stage,
            ctx,
            on_error=self._error_hook(ctx),
            on_module_pass=lambda name, start, seconds: stats.driver_events.append(
                DriverEvent(name, start, seconds)
            ),
        )
        failed = False
        try:
            result = executor.run(pipeline, mod)
            runner.costs.save()  # what the next build's placement reads
            return result
        except BaseException:
            failed = True
            raise
        finally:
            runner.close()  # the workers forget the run's functions
            if failed:  # no actor of ours outlives the error (a warm pool's stay)
                workers.stop_workers()

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

"""``backend="auto"``: local or Ray, whichever is estimated faster end to end.

The estimate compares what differs between the two: the function stages' work, done
here in sequence (but for the kernels' compiler processes, ``codegen.compile_jobs`` at a
time: ``CompileC`` compiles ahead in-process) or spread over the workers, against what
spreading costs (starting Ray and its actors when no warm pool runs, a round trip per
batch call, the stage's bytes).
The serial part of a run (module passes, stages too small to ship) is the same either
way and left out.

The work of a stage is estimated from the module before the run:

* graph-level function passes over a module of several functions: nodes x passes x
  ``seconds_per_node_pass``; a single function runs in the driver either way;
* a pipeline that lowers and compiles kernels (``KERNEL_PASSES``): the kernels it will
  compile x ``seconds_per_kernel``, the kernels predicted as the distinct fusion anchors
  of the graph (an operator that is not elementwise/broadcast/injective, keyed by operator,
  attributes and argument types: identical layers share kernels after FuseOps).

Without a warm pool, the workers start while the driver works: the driver runs the
first shipped stage itself until they are up (``ray_runner._head_start``), so start-up
holds the build only as long as the work it replaces. A run on a private pool is then
estimated as the work the driver does alone during start-up, plus the rest spread over
the workers and what spreading costs; when start-up is longer than the work, the driver
does it all and Ray gains nothing. How long start-up takes is the machine's own
measurement for that worker count (``scheduler.pool.startup_times``).

The constants were measured on this project's reference machine (2-core EPYC, gcc -O2)
by ``python -m bench.auto_costs``, which fits them from instrumented builds; the seconds
per kernel is this machine's own once a build on workers measured it
(``scheduler.kernel_costs``); config keys ``scheduler.auto_*`` override them.
``last_run.backend_reason`` shows the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from passinfra.ir.expr import Call, Function
from passinfra.ir.functor import iter_post_order
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op, OpPattern
from passinfra.transform import PassContext, register_config
from scheduler.plan import FunctionStage, Plan

# passes whose work is per compiled kernel rather than per graph node
KERNEL_PASSES = frozenset({"LowerToPrimFunc", "CodegenC", "CompileC"})

register_config("scheduler.auto_seconds_per_kernel", float)
register_config("scheduler.auto_startup_seconds", float)
register_config("scheduler.auto_call_seconds", float)


@dataclass(frozen=True)
class CostModel:
    # measured by bench/auto_costs.py (see the module docstring)
    seconds_per_node_pass: float = 1.0e-6
    seconds_per_kernel: float = 0.04  # lower, loop passes, render C, gcc -O2, one kernel
    call_seconds: float = 0.0008  # one batch call's round trip and packing
    # what a run on workers costs beyond the stage's calls: the gateway, packing and
    # unpacking the functions, the driver's merging (bench/end_to_end.py: zoo:mlp on a
    # warm pool over local, whole processes)
    warm_run_seconds: float = 0.35
    # of a worker's time, what it spends on the stage (the driver shares the cores)
    efficiency: float = 0.85
    # of a kernel's seconds, the C compiler's process: in-process, CompileC runs
    # codegen.compile_jobs of them at once (DenseNet-121's kernel stage on 2 workers:
    # CompileC 10.9 of 12.4 s); this machine's own once builds on workers measured it
    compile_share: float = 0.85

    @classmethod
    def from_context(cls, ctx: PassContext) -> CostModel:
        """The constants, with the config's overrides and, for the seconds per kernel, this
        machine's own measurements (``scheduler.kernel_costs``) when there are any."""
        return cls._with_source(ctx)[0]

    @classmethod
    def _with_source(cls, ctx: PassContext) -> tuple[CostModel, str]:
        base = cls()
        configured = ctx.get_config("scheduler.auto_seconds_per_kernel", None)
        if configured is not None:
            per_kernel, source = configured, "config"
        else:
            from scheduler import kernel_costs

            per_kernel, source = kernel_costs.expected(base.seconds_per_kernel)
        from scheduler import kernel_costs

        model = cls(seconds_per_kernel=per_kernel,
                    call_seconds=ctx.get_config("scheduler.auto_call_seconds", base.call_seconds),
                    compile_share=kernel_costs.expected_compile_share(base.compile_share))
        return model, source


@dataclass(frozen=True)
class Estimate:
    work_seconds: float  # of the function stages, in sequence
    kernels: int
    calls: int  # batch calls over the workers
    workers: int
    startup_seconds: float  # before the workers are up (0: a warm pool)
    head_start: bool = True  # the driver works while they start (config scheduler.head_start)
    kernel_seconds: float = 0.0  # of work_seconds, the kernels'
    local_jobs: int = 1  # compiler processes at once in-process (codegen.compile_jobs)
    compile_share: float = 0.0  # of kernel_seconds, the compiler's

    def local_seconds(self) -> float:
        """In-process: every pass in sequence, but the kernels' compilers ``local_jobs``
        at a time."""
        compiling = self.kernel_seconds * self.compile_share
        return self.work_seconds - compiling + compiling / max(1, self.local_jobs)

    def ray_seconds(self, model: CostModel) -> float:
        alone = min(self.startup_seconds, self.work_seconds) if self.head_start else self.startup_seconds
        left = self.work_seconds - alone if self.head_start else self.work_seconds
        spread = left / (self.workers * model.efficiency)
        return alone + spread + self.calls * model.call_seconds + model.warm_run_seconds


def predicted_kernels(mod: IRModule) -> int:
    """The distinct kernels a build of ``mod`` will compile (see the module docstring)."""
    anchors: set[tuple[object, ...]] = set()
    for func in mod.functions.values():
        if not isinstance(func, Function):
            continue
        for node in iter_post_order(func):
            if not (isinstance(node, Call) and isinstance(node.op, Op)):
                continue
            if OpPattern.COMM_REDUCE <= node.op.pattern and node.op.pattern != OpPattern.TUPLE:
                types = tuple(repr(arg._checked_type) for arg in node.args)
                anchors.add((node.op.name, repr(node.attrs), types))
    return max(1, len(anchors))


def estimate(plan: Plan, mod: IRModule, workers: int, startup_seconds: float, model: CostModel,
             head_start: bool = True) -> Estimate:
    stages = [stage for stage in plan.stages if isinstance(stage, FunctionStage)]
    names = {leaf.name for stage in stages for leaf in stage.leaves}
    kernels = predicted_kernels(mod) if names & KERNEL_PASSES else 0
    work = kernels * model.seconds_per_kernel
    if len(mod) >= 2:  # a single function's graph passes run in the driver either way
        from scheduler.assign import estimated_cost

        nodes = sum(estimated_cost(func) for func in mod.functions.values())
        graph_passes = sum(1 for stage in stages for leaf in stage.leaves if leaf.name not in KERNEL_PASSES)
        work += nodes * graph_passes * model.seconds_per_node_pass
    functions = max(kernels, len(mod))
    # each stage that ships cuts each worker's share into a few calls (scheduler.chunking);
    # a single function's graph stages run in the driver, only the kernel stage ships
    shipped = stages if len(mod) >= 2 else [
        stage for stage in stages if any(leaf.name in KERNEL_PASSES for leaf in stage.leaves)]
    calls = len(shipped) * min(functions, workers * 8)
    from passinfra.codegen.passes.compile_c import compile_jobs

    jobs = compile_jobs(PassContext.current()) if "CompileC" in names else 1
    return Estimate(work, kernels, calls, workers, startup_seconds, head_start,
                    kernel_seconds=kernels * model.seconds_per_kernel, local_jobs=jobs,
                    compile_share=model.compile_share)


def choose(
    plan: Plan, mod: IRModule, workers: int, warm_pool: bool, ctx: PassContext
) -> tuple[str, str]:
    """``(backend, reason)`` for ``backend="auto"``."""
    if not any(isinstance(stage, FunctionStage) for stage in plan.stages):
        return "local", "auto: no function passes to distribute"
    model, kernel_source = CostModel._with_source(ctx)
    startup, source = startup_seconds(workers, warm_pool, ctx)
    est = estimate(plan, mod, workers, startup, model, ctx.get_config("scheduler.head_start", True))
    local, ray = est.local_seconds(), est.ray_seconds(model)
    compiling = f" ({est.local_jobs} compiles at once)" if est.kernels and est.local_jobs > 1 else ""
    backend = "ray" if ray < local else "local"
    start_note = "warm pool, no start-up" if warm_pool else f"start-up {startup:.1f}s, {source}"
    # one clause, no semicolon: the CLI's summary shows it up to the first one
    verdict = "Ray pays for itself" if backend == "ray" else "too small to pay for Ray"
    return backend, (
        f"auto: {verdict}: estimated {local:.2f}s local{compiling} vs {ray:.2f}s on {workers} Ray workers "
        f"({start_note}, {est.kernels} kernels at {model.seconds_per_kernel:.3f}s ({kernel_source}), "
        f"{est.calls} calls, work {est.work_seconds:.2f}s)"
    )


def startup_seconds(workers: int, warm_pool: bool, ctx: PassContext) -> tuple[float, str]:
    """Seconds until ``workers`` are up, and where the number comes from."""
    if warm_pool:
        return 0.0, "warm pool"
    configured = ctx.get_config("scheduler.auto_startup_seconds", None)
    if configured is not None:
        return configured, "config"
    from scheduler.pool import startup_times

    return startup_times.expected(workers)


__all__ = ["KERNEL_PASSES", "CostModel", "Estimate", "choose", "estimate", "predicted_kernels"]

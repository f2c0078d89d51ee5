"""``backend="auto"``: the cost model's choice, with and without a warm pool (no Ray here)."""

from __future__ import annotations

import pytest

from passinfra.build import compile_pipeline
from passinfra.frontend.zoo.ir_models import mlp, transformer_block
from passinfra.ir import IRModule
from passinfra.ir.type_infer import infer_module
from passinfra.transform import PassContext, Sequential
from scheduler.auto import KERNEL_PASSES, CostModel, Estimate, choose, predicted_kernels
from scheduler.plan import build_plan
from scheduler.pool import startup_times
from tests.scheduler import passes_for_tests as P


@pytest.fixture(autouse=True)
def _no_startup_measurements(tmp_path, monkeypatch):
    """Each test sees a machine with no private pool start recorded (the prior)."""
    monkeypatch.setenv("RAYPASS_POOL_DIR", str(tmp_path))


def _typed(mod: IRModule) -> IRModule:
    infer_module(mod)
    return mod


def _decide(pipeline, mod, warm: bool, **config) -> tuple[str, str]:
    """The choice for 2 workers; in-process, one compile at a time unless ``config`` says
    otherwise (``codegen.compile_jobs``: by default the CPUs of the machine the tests run on)."""
    config = {"codegen.compile_jobs": 1, **config}
    with PassContext(opt_level=3, config=config) as ctx:
        return choose(build_plan(pipeline, ctx), mod, 2, warm, ctx)


def test_identical_layers_predict_shared_kernels():
    one = _typed(transformer_block(seq=8, hidden=32)).copy()
    wider = _typed(transformer_block(seq=8, hidden=64))
    both = IRModule({"a": one["main"], "b": one["main"]})
    assert predicted_kernels(both) == predicted_kernels(one)  # the same anchors: no new kernels
    assert predicted_kernels(IRModule({"a": one["main"], "b": wider["main"]})) > predicted_kernels(one)


def test_a_tiny_graph_pipeline_stays_local_with_or_without_a_pool():
    pipeline = Sequential([P.add_to_multiply], opt_level=0)
    for warm in (False, True):
        backend, reason = _decide(pipeline, P.chain_module(3), warm)
        assert backend == "local" and "too small to pay for Ray" in reason


def _many_kernels() -> IRModule:
    """Blocks of six widths: their kernels all differ."""
    blocks = {f"block{h}": _typed(transformer_block(seq=8, hidden=h))["main"] for h in range(32, 128, 16)}
    return IRModule(blocks)


def test_a_small_build_stays_local_even_on_a_warm_pool():
    backend, reason = _decide(compile_pipeline(), _typed(mlp(hidden=(32, 48, 64))), warm=True)
    assert backend == "local" and "too small to pay for Ray" in reason and "warm pool" in reason


def test_a_large_build_goes_to_a_warm_pool_and_stays_local_when_ray_must_start():
    mod = _many_kernels()
    assert predicted_kernels(mod) > 30
    with_pool, reason = _decide(compile_pipeline(), mod, warm=True)
    assert with_pool == "ray" and "warm pool, no start-up" in reason
    without, reason = _decide(compile_pipeline(), mod, warm=False)
    # nothing measured on this machine: the prior for two workers, shown
    assert without == "local" and f"start-up {startup_times.prior(2):.1f}s, prior" in reason


def test_local_compiles_as_many_kernels_at_once_as_the_pool_has_workers():
    """In-process, CompileC runs codegen.compile_jobs compilers at once: with as many as
    the pool has workers, the pool has nothing left to win but the lowering's share."""
    mod = _many_kernels()
    one_at_a_time, _ = _decide(compile_pipeline(), mod, warm=True)
    backend, reason = _decide(compile_pipeline(), mod, warm=True, **{"codegen.compile_jobs": 2})
    assert one_at_a_time == "ray" and backend == "local" and "(2 compiles at once)" in reason


def test_enough_kernels_pay_for_starting_ray():
    mod = _typed(mlp(hidden=(32, 48, 64)))
    kernels = predicted_kernels(mod)
    # at a second per kernel, the kernels' work outweighs a 1 s start-up
    config = {"scheduler.auto_seconds_per_kernel": 1.0, "scheduler.auto_startup_seconds": 1.0}
    backend, reason = _decide(compile_pipeline(), mod, warm=False, **config)
    assert kernels >= 3 and backend == "ray" and f"{kernels} kernels" in reason


def test_no_function_stage_means_local():
    backend, reason = _decide(Sequential([], opt_level=0), P.chain_module(4), warm=True)
    assert backend == "local" and "no function passes" in reason


def test_calls_are_counted_for_the_stages_that_ship():
    """A single function's graph stages run in the driver: of a build of one function
    only the kernel stage ships, so only its calls cost anything."""
    from scheduler.auto import estimate

    single = _typed(transformer_block(seq=8, hidden=32))
    with PassContext(opt_level=3) as ctx:
        plan = build_plan(compile_pipeline(), ctx)
        one = estimate(plan, single, 2, 0.0, CostModel())
        two = estimate(plan, IRModule({"a": single["main"], "b": single["main"]}), 2, 0.0, CostModel())
    function_stages = sum(1 for stage in plan.stages if stage.kind == "function")
    kernel_stages = sum(1 for stage in plan.stages if stage.kind == "function"
                        and any(leaf.name in KERNEL_PASSES for leaf in stage.leaves))
    assert function_stages > kernel_stages == 2  # lowering to C, then compiling it (GroupKernels between)
    assert one.calls == kernel_stages * min(one.kernels, 2 * 8)  # the kernel stages alone
    assert two.calls == function_stages * min(max(two.kernels, 2), 2 * 8)


def test_start_up_comes_from_this_machines_measurements():
    assert startup_times.expected(4) == (startup_times.prior(4), "prior")
    for seconds in (9.0, 3.0, 4.0):
        startup_times.record(2, seconds)
    assert startup_times.expected(2) == (4.0, "measured here, 3 starts")  # the median
    # another count: the nearest measured one, moved along the prior's slope
    seconds, source = startup_times.expected(4)
    assert seconds == 4.0 + 2 * startup_times.PRIOR_SECONDS_PER_WORKER and "from 2 workers" in source
    for seconds in range(10):
        startup_times.record(2, 1.0 + seconds)
    assert startup_times.measured()[2] == [6.0, 7.0, 8.0, 9.0, 10.0]  # the newest few


def test_a_damaged_measurement_file_falls_back_to_the_prior(tmp_path):
    (tmp_path / startup_times.FILE_NAME).write_text("{not json")
    assert startup_times.expected(2) == (startup_times.prior(2), "prior")
    startup_times.record(2, 5.0)  # and is replaced by the next measurement
    assert startup_times.measured() == {2: [5.0]}


def test_a_measured_fast_start_up_sends_a_large_build_to_ray():
    """Start-up shorter than the work: the driver works while the workers start, and
    they share the rest."""
    mod = _many_kernels()
    config = {"scheduler.auto_seconds_per_kernel": 0.2}  # ~7 s of kernel work
    startup_times.record(2, 20.0)
    backend, reason = _decide(compile_pipeline(), mod, warm=False, **config)
    assert backend == "local" and "start-up 20.0s, measured here" in reason
    for _ in range(2):
        startup_times.record(2, 0.5)  # the median of three starts is now 0.5 s
    backend, reason = _decide(compile_pipeline(), mod, warm=False, **config)
    assert backend == "ray" and "start-up 0.5s, measured here, 3 starts" in reason


def test_the_head_start_bounds_what_start_up_costs():
    """With the head start a run on a starting pool costs the work it replaces, not the
    start-up on top of it; without it, the whole start-up is waited for."""
    model = CostModel()
    short = Estimate(work_seconds=10.0, kernels=100, calls=16, workers=2, startup_seconds=4.0)
    overheads = 16 * model.call_seconds + model.warm_run_seconds
    assert short.ray_seconds(model) == pytest.approx(4.0 + 6.0 / (2 * model.efficiency) + overheads)
    waiting = Estimate(10.0, 100, 16, 2, 4.0, head_start=False)
    assert waiting.ray_seconds(model) == pytest.approx(4.0 + 10.0 / (2 * model.efficiency) + overheads)
    # start-up longer than the work: the driver does it all; Ray adds only its overheads
    long = Estimate(work_seconds=3.0, kernels=30, calls=16, workers=2, startup_seconds=5.0)
    assert long.ray_seconds(model) == pytest.approx(3.0 + overheads)
    assert long.ray_seconds(model) > long.local_seconds()


def test_when_auto_chooses_ray_the_private_pool_starts_before_the_serial_passes(monkeypatch):
    """auto decides when the run begins; the pool it chose starts then, not when the
    first stage ships, so its start-up overlaps the driver's serial passes."""
    from scheduler import Scheduler
    from scheduler.pool.startup import WorkerSource

    events: list[str] = []
    monkeypatch.setattr(WorkerSource, "start_in_background", lambda self: events.append("pool starts"))
    monkeypatch.setattr(Scheduler, "_run_ray", lambda self, pipeline, mod, ctx: events.append("run") or mod)
    mod = _typed(mlp(hidden=(32, 48, 64)))
    config = {"scheduler.auto_seconds_per_kernel": 1.0, "scheduler.auto_startup_seconds": 1.0,
              "codegen.compile_jobs": 1}
    with Scheduler(backend="auto", num_workers=2) as sched, PassContext(opt_level=3, config=config):
        assert events == []  # made, nothing started: auto has not chosen yet
        sched.run(compile_pipeline(), mod)
    assert sched.last_run.backend == "ray" and events == ["pool starts", "run"]


def _kernel_run(kernels: int, worker_seconds: float, hits: int = 0):
    """The statistics of a run on workers whose kernel stage compiled ``kernels`` kernels
    (``hits`` of them from the cache) in ``worker_seconds`` of worker time."""
    from passinfra.transform.run_facts import RunFact
    from scheduler.stats import RunStats, StageStats

    stats = RunStats(backend="ray")
    stats.stages = [StageStats(0, "function", ["FoldConstant"], worker_seconds=5.0),
                    StageStats(1, "function", ["LowerToPrimFunc", "CodegenC", "CompileC"],
                               worker_seconds=worker_seconds)]
    stats.facts = [RunFact("CompileC", f"k{i}", 1, "cache_hit", i < hits) for i in range(kernels)]
    return stats


def test_kernels_built_on_workers_calibrate_the_seconds_per_kernel():
    """A machine whose kernels take longer than the constant (the transformer's here, a
    16-core Xeon's) gets its own number: a build the constant kept local goes to a warm
    pool once the machine has measured what its kernels cost."""
    from scheduler import kernel_costs

    mod = _typed(transformer_block(seq=8, hidden=64))
    kernels = predicted_kernels(mod)
    backend, reason = _decide(compile_pipeline(), mod, warm=True)
    assert backend == "local" and f"at {CostModel().seconds_per_kernel:.3f}s (prior)" in reason
    # what says nothing about a kernel's cost is not recorded: objects from the cache, a
    # handful of kernels
    assert kernel_costs.record_run(_kernel_run(20, 3.0, hits=1), mod) is None
    assert kernel_costs.record_run(_kernel_run(3, 3.0), mod) is None
    assert kernel_costs.measured() == []
    # measurements of another kind (each kernel its own compiler call, before files said) are none
    kernel_costs._path().write_text("[2.0, 2.0, 2.0]")
    assert kernel_costs.measured() == []
    assert kernel_costs.record_run(_kernel_run(20, kernels * 0.5), mod) == pytest.approx(0.5)
    backend, reason = _decide(compile_pipeline(), mod, warm=True)
    assert backend == "ray" and "at 0.500s (measured here, 1 builds)" in reason
    constant = {"scheduler.auto_seconds_per_kernel": 0.04}
    configured, reason = _decide(compile_pipeline(), mod, warm=True, **constant)
    assert configured == "local" and "(config)" in reason


def test_builds_on_workers_measure_the_compilers_share_of_a_kernel():
    """What an in-process build runs codegen.compile_jobs at a time is the compiler's share
    of the kernel stage, as this machine's runs on workers measured it."""
    from scheduler import kernel_costs
    from scheduler.stats import WorkEvent

    mod = _typed(transformer_block(seq=8, hidden=64))
    stats = _kernel_run(20, 10.0)
    stats.events = [WorkEvent(0, "FoldConstant", "main", 0, 0.0, 5.0, stage=0),
                    *(WorkEvent(1, name, f"k{i}", 0, 0.0, seconds, stage=1) for i in range(20)
                      for name, seconds in (("LowerToPrimFunc", 0.1), ("CompileC", 0.4)))]
    assert kernel_costs.expected_compile_share(0.85) == 0.85  # nothing measured: the constant
    kernel_costs.record_run(stats, mod)
    assert kernel_costs.compile_shares() == [pytest.approx(0.8)]
    with PassContext(opt_level=3) as ctx:
        assert CostModel.from_context(ctx).compile_share == pytest.approx(0.8)

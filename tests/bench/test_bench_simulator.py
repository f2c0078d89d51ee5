"""The scaling simulator of bench/simulator.py: policy, overheads, bound, validation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.simulator import (
    Overheads,
    Workload,
    amdahl_bound,
    batch_calls,
    bound,
    contention,
    curve,
    fit_overheads,
    makespan,
    plan_leaf_stages,
    predict,
    profile_from_trace,
    relative_error,
    stage_seconds,
    workload_from_run,
)
from scheduler.stats import DriverEvent, RunStats, StageStats, WorkEvent


def equal_costs(functions: int, cost: float) -> dict[str, float]:
    return {f"f{i}": cost for i in range(functions)}


@pytest.mark.parametrize("functions, workers", [(10, 1), (10, 3), (7, 7), (3, 8), (100, 16)])
def test_equal_costs_without_overheads_give_ceil_f_over_n(functions, workers):
    workload = Workload([equal_costs(functions, 0.5)])
    assert makespan(workload, workers) == pytest.approx(math.ceil(functions / workers) * 0.5)


def test_serial_time_is_added_once_and_does_not_scale():
    workload = Workload([equal_costs(8, 1.0), equal_costs(8, 1.0)], serial_seconds=3.0)
    assert makespan(workload, 4) == pytest.approx(3.0 + 2 + 2)
    assert workload.local_seconds() == pytest.approx(19.0)


def test_largest_function_limits_both_lpt_and_the_bound():
    costs = {"big": 10.0, **equal_costs(10, 1.0)}
    workload = Workload([costs])
    assert bound(workload, 64) == pytest.approx(10.0)
    assert makespan(workload, 64) == pytest.approx(10.0)
    assert bound(workload, 2) == pytest.approx(10.0)  # 20 / 2 == the big function


@settings(max_examples=40, deadline=None)
@given(
    costs=st.lists(st.floats(0.001, 5.0), min_size=1, max_size=40),
    workers=st.integers(1, 16),
)
def test_lpt_is_never_below_the_bound_and_within_four_thirds_of_it(costs, workers):
    workload = Workload([{f"f{i}": c for i, c in enumerate(costs)}])
    simulated = makespan(workload, workers)
    ideal = bound(workload, workers)
    assert simulated >= ideal - 1e-9
    # Graham: LPT is within 4/3 of the optimum, which is at least the bound
    assert simulated <= 4 / 3 * ideal + max(costs) + 1e-9


def test_batching_cuts_each_worker_into_calls_per_worker_chunks():
    assert batch_calls(0) == 0
    assert batch_calls(3, calls_per_worker=4) == 3
    assert batch_calls(100, calls_per_worker=4) == 4
    assert batch_calls(10, batch_size=3) == 4


def test_per_call_overheads_count_calls_per_worker():
    overheads = Overheads(call_latency=0.01, worker_per_call=0.1, driver_per_call=0.001)
    # 8 functions on 2 workers: 4 each, cut into 4 calls of one function each
    seconds = stage_seconds(equal_costs(8, 1.0), 2, overheads, calls_per_worker=4)
    assert seconds == pytest.approx(0.01 + 8 * 0.001 + 4 * 1.0 + 4 * 0.1)


def test_transfer_and_driver_per_function_are_paid_once_per_stage():
    overheads = Overheads(driver_per_function=0.002, bytes_per_function=1000.0, bandwidth=1e6)
    seconds = stage_seconds(equal_costs(10, 0.0), 5, overheads)
    assert seconds == pytest.approx(10 * 0.002 + 10 * 1000 / 1e6)


def test_overheads_push_the_simulated_curve_away_from_the_bound():
    workload = Workload([equal_costs(256, 0.01)], serial_seconds=0.1)
    free = curve(workload, Overheads(), [1, 16])
    costly = curve(workload, Overheads(call_latency=0.05, driver_per_call=0.001), [1, 16])
    assert free.efficiency_vs_bound(16) == pytest.approx(1.0)
    assert costly.efficiency_vs_bound(16) < 0.8
    assert costly.speedup()[1] < free.speedup()[1]
    assert free.bound_speedup()[0] == pytest.approx(1.0)


def synthetic_run(workers: int, costs: dict[str, float], latency: float, per_call: float) -> RunStats:
    """What the scheduler would record for one stage (leaves 1 and 2) run with the given
    overheads, placing functions round-robin as LPT does for equal costs."""
    run = RunStats(backend="ray", num_workers=workers)
    names = list(costs)
    loads = [0.0] * workers
    for i, name in enumerate(names):
        slot = i % workers
        for leaf in (1, 2):  # two passes, half the cost each
            run.events.append(WorkEvent(leaf, f"P{leaf}", name, slot, 0.0, costs[name] / 2))
        loads[slot] += costs[name]
    calls = [batch_calls(names[w::workers].__len__()) for w in range(workers)]
    for w in range(workers):
        run.worker_busy_seconds[w] = loads[w] + calls[w] * per_call
    run.remote_calls = sum(calls)
    stage_wall = latency + max(run.worker_busy_seconds.values())
    run.stages.append(StageStats(0, "function", ["P1", "P2"], len(names), run.remote_calls, 0, 0, stage_wall))
    run.driver_events.append(DriverEvent("FuseOps", 0.0, 0.25))
    run.wall_seconds = stage_wall + 0.25
    return run


def test_validation_against_a_synthetic_measured_run():
    costs = {f"f{i}": 0.01 * (1 + i % 5) for i in range(40)}
    measured = {n: synthetic_run(n, costs, latency=0.002, per_call=0.003) for n in (1, 2)}
    leaf_stage = {1: 0, 2: 0}
    workload = workload_from_run(measured[1], leaf_stage)
    assert workload.serial_seconds == pytest.approx(0.25)
    assert workload.stages[0] == pytest.approx(costs)
    overheads = fit_overheads(measured[1], call_latency=0.002, driver_per_call=0.0, bandwidth=math.inf)
    assert overheads.worker_per_call == pytest.approx(0.003)
    for workers, run in measured.items():
        error = relative_error(makespan(workload, workers, overheads), run.wall_seconds)
        assert abs(error) < 0.05, (workers, error)


def test_functions_without_events_still_count_for_batching():
    run = synthetic_run(1, {"a": 1.0}, 0.0, 0.0)
    run.stages[0].functions = 3  # two functions no pass of the stage accepted
    workload = workload_from_run(run, {1: 0, 2: 0})
    assert len(workload.stages[0]) == 3
    assert workload.work_seconds == pytest.approx(1.0)


def test_plan_leaf_stages_maps_function_leaves_of_a_real_plan():
    from passinfra import transform
    from scheduler import build_plan

    pipeline = transform.Sequential(
        [transform.InferType(), transform.SimplifyInference(), transform.FoldConstant(), transform.FuseOps()],
        opt_level=0,
    )
    with transform.PassContext(opt_level=3):
        plan = build_plan(pipeline)
    mapping = plan_leaf_stages(plan)
    function_leaves = [leaf for stage in plan.stages if stage.kind == "function" for leaf in stage.leaves]
    assert sorted(mapping) == sorted(leaf.leaf_index for leaf in function_leaves)
    assert len(set(mapping.values())) == 1  # SimplifyInference and FoldConstant share a stage


def _slice(name: str, cat: str, start: float, seconds: float, tid: int, **args) -> dict:
    return {"name": name, "cat": cat, "ph": "X", "pid": 1, "tid": tid, "ts": start * 1e6,
            "dur": seconds * 1e6, "args": args}


def _traced_run(cpus: int = 8) -> dict:
    """A 10 s process on 2 workers: 2 s before its shipped stage, the stage (4 functions of
    1 s, two per worker, with 0.5 s of shipping and merging in the driver), a stage run in
    the driver, and 3 s after."""
    events = [
        _slice("start-up", "process", 0.0, 1.0, 0),
        _slice("stage 1: A", "stage", 1.0, 1.0, 10_000, stage=1, ran_in_driver=True),
        _slice("A", "function", 1.0, 1.0, 0, stage=1, function="main"),
        _slice("stage 3: B", "stage", 2.0, 3.0, 10_000, stage=3, ran_in_driver=False),
        _slice("send functions (stage 3)", "driver", 2.0, 0.3, 0),
        _slice("merge results (stage 3)", "driver", 4.8, 0.2, 0),
    ]
    for i in range(4):
        events.append(_slice("B", "function", 2.3 + (i // 2), 1.0, 1 + i % 2, stage=3, function=f"f{i}"))
    events.append(_slice("write the outputs", "process", 5.0, 5.0, 0))
    return {"traceEvents": events, "otherData": {"raypass_run": {"num_workers": 2, "cpus": cpus}}}


def test_a_trace_gives_the_serial_path_the_costs_and_the_shipping():
    profile = profile_from_trace(_traced_run())
    assert profile.workers == 2 and profile.process_seconds == pytest.approx(10.0)
    assert profile.serial_seconds == pytest.approx(7.0)  # all but the shipped stage
    (stage,) = profile.stages
    assert stage.costs == pytest.approx({f"f{i}": 1.0 for i in range(4)})
    assert stage.overhead == pytest.approx(1.0)  # 3 s of stage, 2 s on the busiest worker
    assert stage.driver_share == pytest.approx(0.5 / 3.0)
    # the traced worker count is predicted as measured; one worker runs the four in turn
    assert predict(profile, 2) == pytest.approx(10.0)
    assert predict(profile, 1) == pytest.approx(7.0 + 1.0 + 4.0)
    assert predict(profile, 4) == pytest.approx(7.0 + 1.0 + 1.0)
    assert amdahl_bound(profile, 4) == pytest.approx(8.0)  # no shipping, one function per worker
    # measured from outside, the process took longer than its trace: the rest is serial
    assert profile_from_trace(_traced_run(), process_seconds=10.5).serial_seconds == pytest.approx(7.5)


def test_costs_measured_on_crowded_cpus_are_normalized_and_crowd_again():
    """Traced on 2 CPUs, the two workers and the driver shared them: the functions'
    uncontended cost is lower, and more workers than CPUs slow each other down."""
    profile = profile_from_trace(_traced_run(cpus=2))
    share = 0.5 / 3.0
    slowdown = contention(2, share, 2)
    assert slowdown == pytest.approx((2 + share) / 2) and contention(1, share, 2) == 1.0
    assert profile.stages[0].costs["f0"] == pytest.approx(1.0 / slowdown)
    assert predict(profile, 2) == pytest.approx(10.0)  # the traced run, reproduced
    assert predict(profile, 1) == pytest.approx(8.0 + 4.0 / slowdown)

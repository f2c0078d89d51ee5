"""The Ray scheduler: parallel equals sequential, workers do the work, counters, faults."""

from __future__ import annotations

import itertools
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from passinfra import ir
from passinfra.instrument import PassInstrument, PassTimingInstrument
from passinfra.transform import (
    PassContext,
    Sequential,
    function_pass,
    get_pass,
    register_pass,
    unregister_pass,
)
from scheduler import Scheduler, build_plan, replay
from tests.scheduler import passes_for_tests as P
from tests.strategies import modules_with_many_functions


def _pipeline():
    return Sequential([P.add_to_multiply, P.identity, P.tag_opt_level], opt_level=0)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_ray_output_prints_identically_to_local(ray_scheduler, workers):
    mod = P.chain_module(24)
    with PassContext(opt_level=3):
        expected = _pipeline()(mod).astext()
        out = ray_scheduler(workers).run(_pipeline(), mod)
    assert out.astext() == expected
    assert out["f0"].attrs["opt_level_seen"] == 3  # the worker's context matches the driver's


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(mod=modules_with_many_functions(min_functions=5, max_functions=20))
def test_random_modules_identical_across_worker_counts(ray_scheduler, mod):
    pipeline = _pipeline()
    expected = pipeline(mod).astext()
    for workers in (1, 3):
        assert ray_scheduler(workers).run(pipeline, mod).astext() == expected


def test_input_module_is_not_mutated(ray_scheduler):
    mod = P.chain_module(6)
    before = ir.structural_hash(mod)
    text = mod.astext()
    ray_scheduler(2).run(_pipeline(), mod)
    assert ir.structural_hash(mod) == before and mod.astext() == text


def test_function_passes_run_on_workers_module_passes_in_driver(ray_scheduler):
    sched = ray_scheduler(2)
    pipeline = Sequential([P.record_pid, P.add_helper_function, P.record_pid], opt_level=0)
    out = sched.run(pipeline, P.chain_module(8))
    pids = {func.attrs["pid"] for func in out.functions.values()}
    assert os.getpid() not in pids
    assert pids <= set(sched.last_run.worker_pids.values())
    assert len(pids) == 2
    assert "helper" in out  # the module pass ran (in the driver) between the two stages


def test_a_pass_reading_the_module_sees_every_function(ray_scheduler):
    pipeline = Sequential([P.add_helper_function, P.count_callers], opt_level=0)
    mod = P.chain_module(7)
    out = ray_scheduler(2).run(pipeline, mod)
    assert out.astext() == pipeline(mod).astext()
    assert {f.attrs["functions_seen"] for f in out.functions.values()} == {8}


def test_batching_one_round_trip_per_chunk_not_per_pass(ray_scheduler):
    sched = ray_scheduler(2, batch_size=25)
    passes = [P.identity, P.add_to_multiply, P.identity, P.tag_opt_level, P.identity]
    pipeline = Sequential(passes, opt_level=0)
    mod = P.chain_module(200, length=3)
    plan = build_plan(pipeline)
    assert [stage.kind for stage in plan.stages] == ["function"]
    with PassContext(instruments=[PassTimingInstrument()]):
        sched.run(pipeline, mod)
    assert sched.last_run.remote_calls <= math.ceil(200 / 25)
    assert sched.last_run.remote_calls_per_stage() == [sched.last_run.remote_calls]


def test_a_stage_that_changes_nothing_receives_almost_nothing(ray_scheduler):
    sched = ray_scheduler(2)
    mod = P.chain_module(50)
    sched.run(Sequential([P.identity, P.identity], opt_level=0), mod)
    assert sched.last_run.bytes_received == 0
    assert sched.last_run.bytes_sent > 10_000  # the functions went out once


def test_functions_no_pass_of_the_stage_works_on_stay_in_the_driver(ray_scheduler):
    """After FuseOps the host ``main`` holds every weight; the kernel passes skip it, so
    it must not travel: the stage ships the kernels and nothing else."""
    weights = 2_000_000
    mod = P.host_and_kernels_module(6, weights)
    pipeline = Sequential([P.tag_kernels], opt_level=0)
    sched = ray_scheduler(2)
    out = sched.run(pipeline, mod)
    assert out.astext() == pipeline(mod).astext()
    (stage,) = sched.last_run.stages
    assert not stage.ran_in_driver and stage.remote_calls >= 1
    assert 0 < sched.last_run.bytes_sent < weights // 10  # the kernels' bytes, not main's
    assert all(out[f"kernel{i}"].attrs["kernel_seen"] for i in range(6))


def test_no_function_travels_twice_to_a_worker_in_one_run(ray_scheduler):
    """Stage 1 sends every function once; after a module pass adds one function, stage 2
    sends that one, and only those rebalancing moves to another worker: the workers kept
    what they returned in stage 1."""
    from workers.wire import pack_functions, packed_size

    mod = P.chain_module(12)
    pipeline = Sequential([P.add_to_multiply, P.add_helper_function, P.tag_opt_level], opt_level=0)
    sched = ray_scheduler(2)
    out = sched.run(pipeline, mod)
    assert out.astext() == pipeline(mod).astext()
    first, second = [stage for stage in sched.last_run.stages if stage.kind == "function"]
    one = packed_size(pack_functions({"f0": mod["f0"]}))
    each = [packed_size(pack_functions({gv.name_hint: func})) for gv, func in mod.items()]
    loads = [call.bytes_sent for call in sched.last_run.calls
             if call.kind.value == "answered" and call.stage == first.index]
    assert sum(each) * 0.8 <= sum(loads) <= sum(each)  # each function once, batched
    helper = packed_size(pack_functions({"helper": out["helper"]}))
    sent_second = [call.bytes_sent for call in sched.last_run.calls
                   if call.kind.value == "answered" and call.stage == second.index]
    # the new helper, and a function again only when rebalancing moved it to another slot
    assert helper < one and sum(sent_second) <= helper + second.functions_moved * max(each)


def test_timing_merges_worker_time(ray_scheduler):
    timing = PassTimingInstrument()
    mod = P.chain_module(40, length=2)
    with PassContext(instruments=[timing]):
        ray_scheduler(4, cpus_per_worker=0.25).run(Sequential([P.sleep_20ms], opt_level=0), mod)
        entry = timing.timings()[0]["children"][0]
        rendered = timing.render()
    assert entry["name"] == "Sleep20ms"
    assert entry["workers"]["functions"] == 40
    assert entry["workers"]["cpu_us"] >= 800_000
    assert "40 functions" in rendered


class Recorder(PassInstrument):
    def __init__(self, events):
        self.events = events

    def enter_pass_ctx(self):
        self.events.append(("enter",))

    def exit_pass_ctx(self):
        self.events.append(("exit",))

    def should_run(self, mod, info):
        self.events.append(("should_run", info.name, len(mod)))
        return True

    def run_before_pass(self, mod, info):
        self.events.append(("before", info.name, len(mod)))

    def run_after_pass(self, mod, info):
        self.events.append(("after", info.name, len(mod), "f0" in mod and "pid" in mod["f0"].attrs))


def test_hook_sequence_identical_to_in_process(ray_scheduler):
    inner = Sequential([P.add_to_multiply, P.add_helper_function], opt_level=0, name="inner")
    pipeline = Sequential([P.identity, inner, P.tag_opt_level], opt_level=0, name="outer")
    mod = P.chain_module(5)
    local_events: list = []
    with PassContext(instruments=[Recorder(local_events)]):
        expected = pipeline(mod)
    ray_events: list = []
    with PassContext(instruments=[Recorder(ray_events)]):
        out = ray_scheduler(2).run(pipeline, mod)
    assert ray_events == local_events
    assert out.astext() == expected.astext()


def test_custom_exception_reaches_the_caller_with_notes(ray_scheduler, tmp_path):
    sched = ray_scheduler(2)
    pipeline = Sequential([P.add_to_multiply, P.fail_on_f3_factory()], opt_level=0)
    events: list = []
    with pytest.raises(P.MyPassError, match="not welcome") as info:
        with PassContext(instruments=[Recorder(events)], config={"scheduler.reproducer_dir": str(tmp_path)}):
            sched.run(pipeline, P.chain_module(6))
    notes = "\n".join(info.value.__notes__)
    assert "FailOnF3" in notes and "'f3'" in notes and "worker" in notes and "pid" in notes
    assert events[-1] == ("exit",)  # the context's exit hooks ran
    assert sched.worker_pool is None  # no actor left behind
    repro = next(tmp_path.glob("repro-*.txt"))
    with pytest.raises(P.MyPassError, match="not welcome"):
        replay(repro)


def _late_workers(sched, monkeypatch, polls_before_ready: int) -> None:
    """The scheduler's workers report themselves ready only from the given poll on, as a
    private pool does once it has started (here they start when the first stage ships)."""
    polls = itertools.count()
    monkeypatch.setattr(sched._workers, "ready_now", lambda: next(polls) >= polls_before_ready)


def test_the_driver_works_while_the_workers_start_and_they_get_the_rest(ray_scheduler, monkeypatch):
    sched = ray_scheduler(2)
    _late_workers(sched, monkeypatch, 4)  # the driver polls before each function
    pipeline = Sequential([P.add_to_multiply, P.tag_opt_level], opt_level=0)
    mod = P.chain_module(30)
    with PassContext(opt_level=3):
        expected = pipeline(mod).astext()
        out = sched.run(pipeline, mod)
    assert out.astext() == expected
    stats = sched.last_run
    (driver,) = [call for call in stats.calls if call.kind.value == "driver"]
    assert driver.functions == 4  # until the workers were up...
    assert sum(stats.worker_functions.values()) == 26 and len(stats.worker_functions) == 2  # ...then they
    assert stats.bytes_sent > 0 and not stats.stages[0].ran_in_driver
    # what the driver ran is on no worker: a later stage ships it, once
    again = sched.run(Sequential([P.identity], opt_level=0), out)
    assert again.astext() == out.astext()
    assert sum(sched.last_run.worker_functions.values()) == 30


def test_no_head_start_when_config_says_so(ray_scheduler, monkeypatch):
    sched = ray_scheduler(2)
    _late_workers(sched, monkeypatch, 10**9)
    with PassContext(config={"scheduler.head_start": False}):
        sched.run(Sequential([P.identity], opt_level=0), P.chain_module(8))
    assert not [call for call in sched.last_run.calls if call.kind.value == "driver"]
    assert sum(sched.last_run.worker_functions.values()) == 8


def test_an_error_in_the_head_start_is_the_in_process_error(ray_scheduler, monkeypatch):
    sched = ray_scheduler(2)
    _late_workers(sched, monkeypatch, 5)  # the driver runs f0..f4, f3 fails there
    pipeline = Sequential([P.add_to_multiply, P.fail_on_f3_factory()], opt_level=0)
    with pytest.raises(P.MyPassError, match="not welcome") as info:
        sched.run(pipeline, P.chain_module(12))
    notes = "\n".join(info.value.__notes__)
    assert "FailOnF3" in notes and "'f3'" in notes and "driver" in notes


def test_worker_death_loses_nothing(ray_scheduler, tmp_path):
    sched = ray_scheduler(2)
    pipeline = Sequential([P.add_to_multiply, P.crash_once_pass(str(tmp_path), "f5")], opt_level=0)
    mod = P.chain_module(12)
    out = sched.run(pipeline, mod)
    assert (tmp_path / "crashed-f5").exists()
    assert sched.last_run.retries >= 1 and sched.last_run.worker_restarts >= 1
    expected = Sequential([P.add_to_multiply, P.crash_once_pass(str(tmp_path), "none")], opt_level=0)(mod)
    assert out.astext() == expected.astext()


def test_results_evaluate_like_the_local_ones(ray_scheduler):
    from passinfra import evaluate

    mod = P.chain_module(4)
    out = ray_scheduler(2).run(_pipeline(), mod)
    local = _pipeline()(mod)
    x = np.arange(4, dtype="float32")
    for name in ("f0", "f3"):
        np.testing.assert_array_equal(evaluate(out, x, entry=name), evaluate(local, x, entry=name))


def test_auto_backend_says_why_it_stays_local():
    sched = Scheduler(backend="auto")
    mod = P.chain_module(3)
    out = sched.run(_pipeline(), mod)
    assert sched.last_run.backend == "local"
    assert "too small" in sched.last_run.backend_reason
    assert out.astext() == _pipeline()(mod).astext()


def test_bad_arguments_are_named():
    from passinfra.transform import PassError

    with pytest.raises(PassError, match="backend 'gpu'"):
        Scheduler(backend="gpu")
    with pytest.raises(PassError, match="num_workers"):
        Scheduler(backend="ray", num_workers=0)


# --------------------------------------------------------------------------- types after InferType


def _typed_pipeline(type_inference: str = "InferType"):
    return Sequential([P.add_to_multiply, get_pass(type_inference), P.record_arrived_typed], opt_level=0)


@pytest.fixture
def declared_type_inference():
    """A type-inference pass registered under a name of its own, for the test's duration."""
    register_pass(P.DECLARED_TYPE_INFERENCE)(P.declared_type_inference)
    yield P.DECLARED_TYPE_INFERENCE
    unregister_pass(P.DECLARED_TYPE_INFERENCE)


# InferType, and any pass that declares infers_types as InferType does, whatever its name
TYPE_INFERENCE_PASSES = ["InferType", P.DECLARED_TYPE_INFERENCE]


@pytest.mark.parametrize("type_inference", TYPE_INFERENCE_PASSES)
def test_a_stage_before_type_inference_asks_the_workers_for_types(declared_type_inference, type_inference):
    assert get_pass(type_inference).info.infers_types
    plan = build_plan(_typed_pipeline(type_inference))
    function_stages = [stage for stage in plan.stages if stage.kind == "function"]
    assert [stage.types_wanted for stage in function_stages] == [True, False]


def test_the_declaration_not_the_name_makes_a_type_inference_pass():
    """The same work without the declaration, even under InferType's name, is an ordinary
    module pass: the stage before it returns its functions as they are."""
    plan = build_plan(
        Sequential([P.add_to_multiply, P.undeclared_type_inference("InferType"), P.record_arrived_typed])
    )
    function_stages = [stage for stage in plan.stages if stage.kind == "function"]
    assert [stage.types_wanted for stage in function_stages] == [False, False]


def test_a_pass_needs_types_when_it_requires_a_declared_type_inference_pass(declared_type_inference):
    from passinfra.transform import FoldScaleAxis, SimplifyInference
    from scheduler.plan import needs_types

    assert needs_types(P.record_body_type)  # requires the pass declared under another name
    assert needs_types(SimplifyInference())  # requires InferType
    assert not needs_types(P.add_to_multiply)  # requires nothing
    assert not needs_types(FoldScaleAxis())  # a Sequential: its own passes require InferType
    register_pass("PlainModulePass")(lambda: P.undeclared_type_inference("PlainModulePass"))
    try:
        assert not needs_types(_requiring("PlainModulePass"))  # registered, but declares nothing
    finally:
        unregister_pass("PlainModulePass")
    assert not needs_types(_requiring("NoSuchPass"))  # Sequential reports the unknown name, not this


def _requiring(name: str):
    return function_pass(lambda func, mod, ctx: func, opt_level=0, name=f"Requires{name}", required=[name])


@pytest.mark.parametrize("type_inference", TYPE_INFERENCE_PASSES)
@pytest.mark.parametrize("make_module", [lambda: P.chain_module(12), lambda: P.calling_module(11)])
def test_functions_reach_the_pass_after_type_inference_typed(
    ray_scheduler, declared_type_inference, make_module, type_inference
):
    """In-process, InferType caches a type on every function before the next pass; a
    worker's copy must have it too (a caller of a function another worker holds cannot
    be typed there, so it is re-sent once the driver typed it). The same for any pass
    that declares itself type inference."""
    mod = make_module()
    expected = _typed_pipeline(type_inference)(mod).astext()
    sched = ray_scheduler(2)
    out = sched.run(_typed_pipeline(type_inference), mod)
    assert out.astext() == expected
    assert all(func.attrs["arrived_typed"] for func in out.functions.values())
    assert sched.last_run.worker_typing_seconds > 0.0  # the workers did the typing


def test_a_pass_requiring_declared_type_inference_runs_in_the_driver_on_untyped_functions(
    ray_scheduler, declared_type_inference
):
    """As SimplifyInference without InferType (tests/transform/test_module_view.py): run
    bare on an untyped module, a pass that requires a type-inference pass types its own
    function against the whole module, which a worker holding a shard cannot see."""
    expected = P.record_body_type(P.calling_module(4)).astext()
    sched = ray_scheduler(2)
    out = sched.run(P.record_body_type, P.calling_module(4))  # a fresh, untyped module
    assert out.astext() == expected
    assert [stage.ran_in_driver for stage in sched.last_run.stages] == [True]
    typed = P.calling_module(4)
    ir.infer_type(typed)
    assert sched.run(P.record_body_type, typed).astext() == expected
    assert [stage.ran_in_driver for stage in sched.last_run.stages] == [False]


def test_a_type_error_is_reported_by_infer_type_as_in_process(ray_scheduler):
    from passinfra.errors import IRTypeError

    x = ir.var("x", (4,))
    y = ir.var("y", (3,))
    mod = P.chain_module(6)
    mod["bad"] = ir.Function([x, y], ir.op.add(x, y))  # shapes do not broadcast
    with pytest.raises(IRTypeError) as local:
        _typed_pipeline()(mod)
    with pytest.raises(IRTypeError) as remote:
        ray_scheduler(2).run(_typed_pipeline(), mod)
    assert str(remote.value) == str(local.value)


def test_completion_order_never_changes_the_result(ray_scheduler):
    """Random delays on the workers shuffle the order in which batch calls finish; the
    merged module is the same, run after run and for every worker count."""
    pipeline = Sequential([P.add_to_multiply, P.random_delay, P.tag_opt_level], opt_level=0)
    mod = P.chain_module(30, length=4)
    expected = pipeline(mod).astext()
    for workers, batch_size in ((2, 1), (3, 2), (3, 1)):
        sched = ray_scheduler(workers, batch_size=batch_size)
        for _ in range(2):
            assert sched.run(pipeline, mod).astext() == expected
        assert sched.last_run.remote_calls >= 10  # many small calls, so order really varies


"""The pool's dispatcher (a dead actor's work is re-sent) and counters derived from records."""

from __future__ import annotations

import pytest

from passinfra.transform import PassContext, Sequential
from passinfra.transform.function_stage import PassRun
from passinfra.transform.run_facts import RunFact
from scheduler.stats import RunStats, StageStats
from tests.scheduler import passes_for_tests as P
from workers.actor import StageSpec
from workers.calls import DRIVER_SLOT, Call, CallKind, CallRecord
from workers.wire import pack_functions, unpack_functions


def _sum(records, attribute, kinds=None):
    return sum(getattr(r, attribute) for r in records if kinds is None or r.kind in kinds)


def test_counters_are_sums_over_the_records():
    """No Ray: records made by hand, every counter of the run and its stages from them."""
    stats = RunStats(backend="ray", worker_pids={0: 100, 1: 101})
    stats.stages.append(StageStats(3, "function", ["A"], 4, functions_moved=2))
    fact = RunFact("A", "f0", 100, "cache_hit", True)
    records = [
        CallRecord(CallKind.SPEC, 3, DRIVER_SLOT, bytes_sent=50),
        CallRecord(CallKind.LOST, 3, 0, bytes_sent=700),
        CallRecord(CallKind.RESTART, 3, 0, bytes_sent=700, pid=200),
        CallRecord(CallKind.SUPERSEDED, 3, 0, bytes_sent=300),
        CallRecord(CallKind.ANSWERED, 3, 0, functions=2, bytes_received=40, busy_seconds=0.5,
                   typing_seconds=0.1, pid=200,
                   runs=(PassRun(7, "f0", 1.0, 0.2, (fact,)), PassRun(7, "f1", 1.2, 0.3))),
        CallRecord(CallKind.ANSWERED, 3, 1, functions=2, bytes_sent=600, busy_seconds=0.25, pid=101),
    ]
    stats.add_records(records, {7: "A"})
    stage = stats.stages[0]
    assert stats.remote_calls == stage.remote_calls == 4 == stats.remote_calls_per_stage()[0]
    assert stats.bytes_sent == stage.bytes_sent == _sum(records, "bytes_sent") == 2350
    assert stats.bytes_received == stage.bytes_received == 40
    assert (stats.retries, stats.worker_restarts, stats.functions_moved) == (1, 1, 2)
    assert stats.worker_busy_seconds == {0: 0.5, 1: 0.25} and stage.worker_seconds == 0.75
    assert stats.worker_functions == {0: 2, 1: 2}
    assert stats.worker_typing_seconds == stage.worker_typing_seconds == 0.1
    assert stats.worker_pids == {0: 200, 1: 101}  # slot 0's restarted actor
    assert [(e.leaf, e.pass_name, e.function, e.worker, e.facts) for e in stats.events] == [
        (7, "A", "f0", 0, (("cache_hit", True),)), (7, "A", "f1", 0, ()),
    ]
    assert stats.facts == [fact] and stats.calls == records


def test_a_dead_actors_calls_are_re_sent_to_its_restarted_actor(ray_session):
    import ray

    from scheduler.dispatch import Dispatcher
    from scheduler.pool.slots import WorkerPool
    from scheduler.pool.transport import RayTransport

    mod = P.chain_module(8)
    functions = {gv.name_hint: func for gv, func in mod.items()}
    slot_of = {name: int(name[1:]) // 4 for name in functions}  # f0-f3 on slot 0, f4-f7 on slot 1
    refilled: list[int] = []

    def refill(slot):
        refilled.append(slot)
        return {name: func for name, func in functions.items() if slot_of[name] == slot}

    pool = WorkerPool(2, 0.25)
    try:
        spec = StageSpec(1, [(0, P.sleep_20ms), (1, P.add_to_multiply)], PassContext().to_spec())
        dispatch = Dispatcher(RayTransport(pool, "test-run"), 0, spec, refill, "stage 0 (test)")
        old_pid = pool.slots[0].info["pid"]
        for start in (0, 2, 4, 6):
            names = [f"f{i}" for i in range(start, start + 2)]
            load = pack_functions({name: functions[name] for name in names})
            slot = slot_of[names[0]]
            dispatch.submit(Call(slot, names, pool.slots[slot].generation, load=load))
        ray.kill(pool.slots[0].actor, no_restart=True)  # both calls of slot 0 are in flight
        answered = {}
        while dispatch:
            call, result = dispatch.next_result()
            assert result.error is None
            answered.update(unpack_functions(result.changed))
            assert result.slot == call.slot
        records = dispatch.close()
    finally:
        pool.shutdown()
    assert sorted(answered, key=lambda n: int(n[1:])) == list(functions)  # nothing lost
    assert refilled == [0]
    kinds = [record.kind for record in records]
    assert kinds.count(CallKind.RESTART) == 1 and kinds.count(CallKind.ANSWERED) == 4
    assert kinds.count(CallKind.LOST) + kinds.count(CallKind.SUPERSEDED) == 2
    restart = next(r for r in records if r.kind is CallKind.RESTART)
    assert restart.pid != old_pid and restart.bytes_sent > 0
    assert {r.pid for r in records if r.kind is CallKind.ANSWERED and r.slot == 0} == {restart.pid}


@pytest.mark.parametrize("batch_size", [None, 2])
def test_a_runs_counters_equal_the_sums_over_its_records(ray_scheduler, tmp_path, batch_size):
    sched = ray_scheduler(2, batch_size=batch_size) if batch_size else ray_scheduler(2)
    pipeline = Sequential([P.add_to_multiply, P.crash_once_pass(str(tmp_path), "f5")], opt_level=0)
    sched.run(pipeline, P.chain_module(12))
    run = sched.last_run
    records = run.calls
    assert run.retries == sum(r.kind is CallKind.LOST for r in records) >= 1
    assert run.worker_restarts == sum(r.kind is CallKind.RESTART for r in records) >= 1
    assert run.remote_calls == sum(r.kind.is_batch_call for r in records) == sum(run.remote_calls_per_stage())
    assert run.bytes_sent == _sum(records, "bytes_sent") > 0
    assert run.bytes_received == _sum(records, "bytes_received") > 0
    answered = [r for r in records if r.kind is CallKind.ANSWERED]
    for slot, busy in run.worker_busy_seconds.items():
        assert busy == pytest.approx(sum(r.busy_seconds for r in answered if r.slot == slot))
    assert sum(run.worker_functions.values()) == sum(r.functions for r in answered) == 12
    assert len(run.events) == sum(len(r.runs) for r in records)

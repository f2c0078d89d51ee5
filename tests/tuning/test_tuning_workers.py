"""Where tuning measures (issue 32): worker processes of this machine and Ray actors, one
job in flight per worker; a worker that dies loses only the job it was running."""

from __future__ import annotations

import concurrent.futures as futures
import os
import signal
import time

import pytest

import passinfra
from passinfra.frontend import from_onnx
from passinfra.frontend.zoo.dynamic_models import mlp
from passinfra.tuning import TuningDatabase, all_points, current_target
from passinfra.tuning.runner import MAX_LOSSES, ProcessRunner, Runner, core_groups
from passinfra.tuning.tuner import TuneResult, _check_model, fused_module, kernel_tasks


def _square_or_die(x: int) -> int:
    if x == 2:
        os._exit(1)  # this job kills its worker, every time
    return x * x


def _mlp():
    return from_onnx(mlp(in_features=64, hidden=64), shapes={"input": (16, 64)})


def test_a_job_that_kills_its_worker_is_given_up_and_every_other_job_finishes():
    done = {}
    with ProcessRunner(2) as runner:
        given_up, not_started = runner.run(_square_or_die, [(x,) for x in range(6)],
                                           lambda index, value, run: done.update({index: (value, run.slot)}))
        assert given_up == [2] and not not_started and runner.lost_workers == MAX_LOSSES
        assert {index: value for index, (value, _) in done.items()} == {x: x * x for x in (0, 1, 3, 4, 5)}
        assert {slot for _, slot in done.values()} == {0, 1}
        assert len(set(runner.pids())) == 2  # both slots have a live worker again


def _compile_stopped_by_ctrl_c() -> None:
    from passinfra.codegen.cc_driver import CompileInterrupted

    raise CompileInterrupted("the C compiler was stopped by signal 2 while compiling 'kernel'")


def test_a_job_whose_compiler_ctrl_c_stopped_ends_the_run_as_interrupted():
    """The Ctrl-C that reaches the driver reaches a worker's compiler too, which may stop
    first: its job's error is that interruption (KeyboardInterrupt: ``raypass tune``
    keeps what was measured, exit 130), not a failure of the job (a CI run under load
    once ended in ``raypass: CompileInterrupted`` and exit 1)."""
    with ProcessRunner(1) as runner, pytest.raises(KeyboardInterrupt):
        runner.run(_compile_stopped_by_ctrl_c, [()], lambda index, value, run: None)


def _nap(x: int) -> int:
    time.sleep(0.2)
    return x


def test_no_job_starts_after_the_deadline_and_every_started_job_finishes():
    done = []
    with ProcessRunner(2) as runner:
        runner.pids()  # the workers are up
        given_up, not_started = runner.run(_nap, [(x,) for x in range(20)],
                                           lambda index, value, run: done.append(index),
                                           deadline=time.monotonic() + 0.5)
    assert not given_up and 2 <= len(done) <= 8
    assert sorted(done + not_started) == list(range(20)) and not_started == list(range(len(done), 20))


def test_workers_ignore_ctrl_c_and_abort_stops_a_job_in_flight():
    """SIGINT (a terminal's Ctrl-C reaches the whole process group) leaves a worker
    running, so only the driver decides; abort() then stops a job in flight at once
    instead of waiting for it, and leaves no worker behind."""
    runner = ProcessRunner(1)
    try:
        (pid,) = runner.pids()
        os.kill(pid, signal.SIGINT)
        assert runner.pids() == [pid]  # still there, still taking jobs
        job = runner._submit(0, time.sleep, (60,))
        time.sleep(0.5)
        started = time.monotonic()
        runner.abort()
        assert time.monotonic() - started < 10
        assert job.done()
    finally:
        runner.abort()
    deadline = time.monotonic() + 10
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "the worker outlived abort()"
        time.sleep(0.1)


def _tune_killing_one_worker(runner, tmp_path):
    """Tune the MLP on ``runner``, SIGKILLing one worker's process once the first
    candidate is measured; returns the result and the database."""
    mod = _mlp()
    victim = runner.pids()[1]
    killed = []

    def report(line):
        if line.startswith("[") and not killed:
            os.kill(victim, signal.SIGKILL)
            killed.append(victim)

    path = str(tmp_path / "db.json")
    result = passinfra.tune(mod, trials=12, db_path=path, report=report, runner=runner)
    assert killed and victim not in runner.pids()
    return result, TuningDatabase.load(path), len(kernel_tasks(fused_module(mod))[0])


def test_a_worker_process_killed_mid_tune_loses_no_measurement(tmp_path):
    with ProcessRunner(2, cache_dir=str(tmp_path / "c")) as runner:
        result, database, kernels = _tune_killing_one_worker(runner, tmp_path)
    assert result.lost_workers == 1 and result.given_up == 0 and not result.interrupted
    assert result.measured == result.planned > kernels  # every candidate sent was measured, once
    assert len(database.records) == kernels == len(result.kernels)
    assert sum(job["kind"] == "candidate" for job in result.jobs) == result.measured


@pytest.mark.usefixtures("ray_session")
def test_tune_on_ray_actors_with_one_killed_mid_tune(tmp_path):
    from scheduler.tuning import RayRunner

    with RayRunner(2, cpus_per_worker=0.5, cache_dir=str(tmp_path / "c")) as runner:
        assert runner.target()["threads"] == 1
        result, database, kernels = _tune_killing_one_worker(runner, tmp_path)
    assert result.lost_workers == 1 and result.given_up == 0
    assert result.measured == result.planned > kernels
    assert len(database.records) == kernels
    assert {job["slot"] for job in result.jobs} == {0, 1}


class _Answers(Runner):
    """A runner whose one slot answers every job with ``answer`` at once (no worker)."""

    slots, threads = 1, 1

    def __init__(self, answer):
        super().__init__()
        self.answer = answer

    def _submit(self, slot, fn, args):
        future = futures.Future()
        future.set_result((os.getpid(), 0.0, 0.0, self.answer))
        return future

    def _is_lost_worker(self, error):
        return False

    def _replace(self, slot):
        raise AssertionError("no worker to replace")

    def close(self):
        pass


@pytest.mark.parametrize(("tuned_seconds", "kept"), [(0.9, True), (1.0, True), (1.1, False)])
def test_choices_that_make_the_model_slower_are_not_recorded(tuned_seconds, kept, tmp_path):
    """Kernels are chosen alone; the model with all choices is timed against the rules'
    (here the runner answers 1.0 s for the rules and ``tuned_seconds`` for the choices)."""
    mod = _mlp()
    task = kernel_tasks(fused_module(mod))[0][0]
    better = next(p for p in all_points(next(f for gv, f in task.module.items() if gv.name_hint != "main"))
                  if p != task.default)
    task.times = {task.default: 2e-5, better: 1e-5}
    result, lines = TuneResult(), []
    _check_model(mod, [task], current_target(1), _Answers([1.0, tuned_seconds]), result, lines.append)
    assert result.model_check == {"rules": 1.0, "tuned": tuned_seconds, "kernels": 1, "kept": kept}
    assert (better in task.times) is kept
    assert ("the rules' schedules are kept" in lines[-1]) is not kept


def _affinity() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def test_a_worker_pinned_to_one_cpu_measures_as_one_of_many_would():
    """``--cpus-per-worker 1``: one worker measures the target (threads, CPUs) that each
    of N one-CPU workers does, so throughput at N and at 1 compares like with like."""
    groups = core_groups(1, cpus_per_worker=1)
    assert len(groups) == 1 and len(groups[0]) == 1
    done = {}
    with ProcessRunner(1, cpus_per_worker=1) as runner:
        assert runner.threads == 1 and runner.target()["threads"] == 1
        runner.run(_affinity, [()], lambda index, value, run: done.update({index: value}))
    assert done == {0: sorted(groups[0])}

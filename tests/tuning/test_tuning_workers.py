"""Where tuning measures (issue 32): worker processes of this machine and Ray actors, one
job in flight per worker; a worker that dies loses only the job it was running."""

from __future__ import annotations

import os
import signal
import time

import pytest

import passinfra
from passinfra.frontend import from_onnx
from passinfra.frontend.zoo.dynamic_models import mlp
from passinfra.tuning import TuningDatabase
from passinfra.tuning.runner import MAX_LOSSES, ProcessRunner
from passinfra.tuning.tuner import fused_module, kernel_tasks


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

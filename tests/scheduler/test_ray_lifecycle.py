"""Schedulers on a Ray the program started itself (the session's ``ray_session``, as a
user's ``ray.init()`` would): one after the other and at the same time, each leaves the
cluster's CPUs as it found them, and a Scheduler that starts its own Ray leaves no trace
of it in Ray's ``ray_current_cluster`` file."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from passinfra.transform import Sequential
from scheduler import Scheduler
from scheduler.pool import slots as pool_module
from scheduler.pool.slots import WorkerStartError
from tests.scheduler import passes_for_tests as P

ROOT = Path(__file__).resolve().parents[2]
JOIN_TIMEOUT = 300  # seconds: a bound for a thread's build, never expected to be reached

pytestmark = pytest.mark.usefixtures("ray_session")


def _pipeline() -> Sequential:
    return Sequential([P.add_to_multiply, P.tag_opt_level], opt_level=0)


def _cpus() -> tuple[float, float]:
    """(free, total) CPUs as Ray reports them this moment."""
    import ray

    return ray.available_resources().get("CPU", 0.0), ray.cluster_resources()["CPU"]


@pytest.fixture
def all_cpus_free() -> float:
    """The session's CPUs, every one free (no pool of an earlier test left behind)."""
    free, total = _cpus()
    assert free == total, f"an earlier test left {total - free:g} of {total:g} CPUs taken"
    return total


def test_three_schedulers_back_to_back_each_find_every_cpu_free(all_cpus_free):
    mod = P.chain_module(8)
    expected = _pipeline()(mod).astext()
    pools = []
    for _ in range(3):
        # the default: one CPU per worker, so each pool takes all the session's CPUs
        with Scheduler(backend="ray", num_workers=2) as sched:
            assert sched.run(_pipeline(), mod).astext() == expected
            assert sched.last_run.remote_calls > 0  # the workers did the work
            assert _cpus()[0] == all_cpus_free - 2  # Ray counts the pool's CPUs as taken
            pools.append(tuple(sched.worker_pids))
        # shutdown has returned: Ray reports the CPUs free already, with no wait here
        assert _cpus()[0] == all_cpus_free
    assert len({pid for pids in pools for pid in pids}) == 6  # three pools, fresh actors each


def _build_in_threads(count: int, body: Callable[[int], None]) -> list[BaseException]:
    errors: list[BaseException] = []

    def guarded(index: int) -> None:
        try:
            body(index)
        except BaseException as error:  # reported by the test, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_TIMEOUT)
    assert not any(thread.is_alive() for thread in threads), f"a scheduler thread never finished; {errors}"
    return errors


def test_two_schedulers_that_each_want_the_whole_cluster_both_finish(all_cpus_free):
    """The second pool waits for the CPUs of the first instead of failing, and the two
    never split the CPUs between them and then wait for each other."""
    mod = P.chain_module(8)
    expected = _pipeline()(mod).astext()
    results: dict[int, str] = {}

    def build(index: int) -> None:
        with Scheduler(backend="ray", num_workers=2) as sched:
            results[index] = sched.run(_pipeline(), mod).astext()

    assert _build_in_threads(2, build) == []
    assert results == {0: expected, 1: expected}
    assert _cpus()[0] == all_cpus_free


def test_two_schedulers_that_fit_together_run_at_the_same_time(all_cpus_free):
    mod = P.chain_module(8)
    expected = _pipeline()(mod).astext()
    both_built = threading.Barrier(2, timeout=JOIN_TIMEOUT)
    results: dict[int, str] = {}
    free_while_both_ran: list[float] = []

    def build(index: int) -> None:
        try:
            with Scheduler(backend="ray", num_workers=2, cpus_per_worker=0.5) as sched:
                results[index] = sched.run(_pipeline(), mod).astext()
                both_built.wait()  # both pools are alive now
                free_while_both_ran.append(_cpus()[0])
                both_built.wait()  # neither shuts down before the other has looked
        except BaseException:
            both_built.abort()  # the other thread stops waiting for this one
            raise

    assert _build_in_threads(2, build) == []
    assert results == {0: expected, 1: expected}
    assert free_while_both_ran == [all_cpus_free - 2] * 2
    assert _cpus()[0] == all_cpus_free


def test_a_pool_larger_than_the_cluster_fails_at_once_naming_the_cpus(all_cpus_free):
    with Scheduler(backend="ray", num_workers=3, cpus_per_worker=1.0) as sched:
        with pytest.raises(WorkerStartError, match=r"3 workers with 1 CPU each: the Ray cluster has 2 CPUs"):
            sched.run(_pipeline(), P.chain_module(4))
    assert _cpus()[0] == all_cpus_free


def test_a_pool_waits_for_cpus_only_as_long_as_its_bound(all_cpus_free, monkeypatch):
    monkeypatch.setattr(pool_module, "CPU_WAIT_TIMEOUT", 0.5)
    mod = P.chain_module(4)
    with Scheduler(backend="ray", num_workers=2) as holder:
        holder.run(_pipeline(), mod)
        with Scheduler(backend="ray", num_workers=2) as waiter:
            with pytest.raises(WorkerStartError, match=r"still has 0 of its 2 CPUs free after waiting 0.5s"):
                waiter.run(_pipeline(), mod)
    assert _cpus()[0] == all_cpus_free


def test_a_failed_run_frees_its_cpus_before_the_error_reaches_the_caller(all_cpus_free):
    mod = P.chain_module(6)
    with Scheduler(backend="ray", num_workers=2) as sched:
        with pytest.raises(P.MyPassError):
            sched.run(Sequential([P.fail_on_f3_factory()], opt_level=0), mod)
        assert _cpus()[0] == all_cpus_free  # the failed run's pool is gone, CPUs and all
        assert sched.run(_pipeline(), mod).astext() == _pipeline()(mod).astext()  # a fresh pool


# a program of its own: a Scheduler that starts (and stops) its own local Ray (in its private pool)
OWN_RAY_PROGRAM = """
from passinfra.transform import PassContext, Sequential
from scheduler import Scheduler
from tests.scheduler import passes_for_tests as P

mod = P.chain_module(4)
# no head start: the driver waits for its workers instead of running the four functions
with Scheduler(backend="ray", num_workers=2, cpus_per_worker=0.5) as sched, \\
        PassContext(config={"scheduler.head_start": False}):
    out = sched.run(Sequential([P.add_to_multiply], opt_level=0), mod)
    # its own Ray, in a private pool (never a user's cluster it might find on the machine)
    assert sched.last_run.workers == "private pool", sched.last_run.workers
    assert sched.last_run.startup_seconds > 0  # it started them, measured from spawn to ready
    # ... and the machine's start-up record, which backend="auto" reads, has it
    from scheduler.pool import startup_times
    assert startup_times.measured()[2][-1] == round(sched.last_run.startup_seconds, 3)
    # ... which runs at a lower CPU priority than this driver (it starts while the driver
    # works), and so do the Ray it started and its workers (Ray's own niceness on top)
    import os
    from scheduler.pool.startup import PRIVATE_POOL_NICE
    mine, daemon = os.getpriority(os.PRIO_PROCESS, 0), sched._workers._private.daemon.pid
    assert os.getpriority(os.PRIO_PROCESS, daemon) == min(19, mine + PRIVATE_POOL_NICE)
    workers = {os.getpriority(os.PRIO_PROCESS, pid) for pid in sched.last_run.worker_pids.values()}
    assert min(workers) >= min(19, mine + PRIVATE_POOL_NICE), workers
    try:  # where the kernel shares CPU between sessions first, the pool's session yields too
        autogroup = open(f"/proc/{daemon}/autogroup").read() if open(
            "/proc/sys/kernel/sched_autogroup_enabled").read().strip() == "1" else None
    except OSError:
        autogroup = None
    assert autogroup is None or autogroup.split()[-1] == str(PRIVATE_POOL_NICE), autogroup
    # its Ray's head node runs without the autoscaler's monitor, the log monitor
    # (ray_runtime._SKIPPED_HEAD_PROCESSES) and the API server (dashboard.py, which Ray
    # starts even with include_dashboard=False): the processes the daemon started
    from tests.process_tree import descendant_commands
    commands = descendant_commands(daemon)
    assert any("raylet" in c for c in commands), commands  # the walk found its Ray
    assert not [c for c in commands if "monitor.py" in c or "dashboard.py" in c], commands
assert out.astext() == Sequential([P.add_to_multiply], opt_level=0)(mod).astext()
print("built")
"""


@pytest.mark.parametrize("registered", [None, "127.0.0.1:6379"], ids=["no-cluster", "a-users-cluster"])
def test_a_scheduler_with_its_own_ray_leaves_ray_current_cluster_as_it_was(registered, ray_tmpdir):
    # the program's Ray directory is the test's own, so the machine's file is never
    # touched; a user's `ray start --head` would have written the file there
    address_file = ray_tmpdir / "ray" / "ray_current_cluster"
    if registered is not None:
        address_file.parent.mkdir()
        address_file.write_text(registered)
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=str(ray_tmpdir), PYTHONPATH=str(ROOT))
    command = [sys.executable, "-c", OWN_RAY_PROGRAM]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "built" in proc.stdout, proc.stderr[-3000:]
    assert any((ray_tmpdir / "ray").glob("session_*")), "the program's Ray did not use RAY_TMPDIR"
    if registered is None:
        assert not address_file.exists(), address_file.read_text()
    else:
        assert address_file.read_text() == registered

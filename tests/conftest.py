"""Fixtures shared across the test suite.

``tests`` is a package (tests/__init__.py), so pytest puts the project root on sys.path
and test modules import shared helpers as ``from tests.strategies import ...``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

PYTHON_DEFAULT_RECURSION_LIMIT = 1000


@pytest.fixture(scope="module")
def default_recursion_limit() -> Iterator[int]:
    """Run a test module under Python's default recursion limit, whatever raised it
    before (deep-IR code must not depend on a raised limit)."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(PYTHON_DEFAULT_RECURSION_LIMIT)
    try:
        yield PYTHON_DEFAULT_RECURSION_LIMIT
    finally:
        sys.setrecursionlimit(previous)


@pytest.fixture(scope="session")
def ray_session():
    """One private Ray instance for the whole test session (starting Ray costs seconds).

    ``address="local"`` starts a fresh instance even if another Ray runs on this
    machine (a plain ``ray.init`` would attach to it). Two CPUs, loopback only, no
    dashboard; workers see the test process's import path, so passes defined in test
    modules unpickle on them.
    """
    import ray

    from scheduler.ray_runtime import local_worker_env

    started = False
    if not ray.is_initialized():
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            runtime_env=local_worker_env(),
            log_to_driver=False,
            logging_level="ERROR",
        )
        started = True
    yield ray
    if started:
        ray.shutdown()


def _wait_for_cpus(ray: Any, needed: float, timeout: float = 60.0) -> None:
    """Actors of a scheduler a previous test shut down release their CPUs asynchronously;
    a new pool started before that fails to place its actors (WorkerStartError)."""
    deadline = time.monotonic() + timeout
    while ray.available_resources().get("CPU", 0.0) < needed - 1e-9 and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.fixture
def ray_scheduler(ray_session):
    """A factory of ray-backend Schedulers on the session's Ray (fractional CPUs per
    worker); one per configuration, all shut down after the test."""
    from scheduler import Scheduler

    made = {}

    def make(num_workers=2, **options):
        options.setdefault("cpus_per_worker", 0.25)
        key = (num_workers, tuple(sorted(options.items())))
        if key not in made:
            _wait_for_cpus(ray_session, num_workers * options["cpus_per_worker"])
            made[key] = Scheduler(backend="ray", num_workers=num_workers, **options)
        return made[key]

    yield make
    for sched in made.values():
        sched.shutdown()

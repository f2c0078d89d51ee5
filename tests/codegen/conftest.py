"""One Ray instance for the whole test session (starting Ray costs seconds)."""

import pytest


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from scheduler.ray_runtime import local_worker_env

    if not ray.is_initialized():
        ray.init(
            address="local",  # a fresh instance, even if `ray start` left a cluster running
            num_cpus=2,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            runtime_env=local_worker_env(),
            log_to_driver=False,
            logging_level="ERROR",
        )
    yield ray
    ray.shutdown()


@pytest.fixture
def ray_scheduler(ray_session):
    """A factory of Schedulers on the session's Ray; every one is shut down after the test."""
    from scheduler import Scheduler

    made = {}

    def make(num_workers=2, **options):
        """One scheduler per configuration (hypothesis calls this once per example)."""
        options.setdefault("cpus_per_worker", 0.25)
        key = (num_workers, tuple(sorted(options.items())))
        if key not in made:
            made[key] = Scheduler(backend="ray", num_workers=num_workers, **options)
        return made[key]

    yield make
    for sched in made.values():
        sched.shutdown()

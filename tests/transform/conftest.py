"""Fixtures for the transform tests.

``ray_session``: one Ray instance for the test session, as in tests/scheduler/conftest.py,
but started with ``address="local"``: without it ``ray.init`` attaches to whatever
cluster another process on the machine started last (found through
/tmp/ray/ray_current_cluster), and fails because ``num_cpus`` is given.
"""

import pytest


@pytest.fixture(scope="session")
def ray_session():
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

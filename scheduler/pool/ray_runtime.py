"""Starting, attaching to and stopping Ray for the scheduler.

Without an address the scheduler starts a private local Ray instance (127.0.0.1 only, no
dashboard) with the machine's CPUs and stops it on shutdown; with an address (``"auto"``
or ``host:port``) it attaches and never stops the cluster. If Ray is already initialized
in this process (a test session, a user's own ``ray.init``) that instance is used as is.
When attaching, the project's packages travel to the workers through ``runtime_env``
``py_modules``, so cluster nodes need nothing but Ray and NumPy installed.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx
import ray

import passinfra
import scheduler
import workers


@dataclass
class RayHandle:
    started_here: bool  # we called ray.init and will call ray.shutdown
    attached: bool  # connected to an existing cluster
    address: str | None

    @property
    def private(self) -> bool:
        """A local instance of our own: ``disconnect`` stops it, with everything in it."""
        return self.started_here and not self.attached


def project_packages() -> list[str]:
    """The directories of the pure-Python packages raypass workers import: the
    project's own, networkx (used by type inference) and cloudpickle (what a warm pool's
    drivers pickle with), so that cluster nodes need nothing installed but Ray and NumPy."""
    import cloudpickle

    packages = (passinfra, scheduler, workers, networkx, cloudpickle)
    return [str(Path(module.__file__).parent) for module in packages]


def local_worker_env() -> dict[str, Any]:
    """runtime_env for a local instance: workers see the driver's import path, so passes
    defined in the caller's own modules (tests, scripts) unpickle on the workers. The
    working directory comes last, if the path lacks it: a file there named like a
    dependency (ray.so, numpy.py) must not shadow it on the workers."""
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    cwd = os.getcwd()
    if cwd not in paths:
        paths.append(cwd)
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(paths)}}


def connect(address: str | None, num_cpus: int | None, namespace: str | None = None) -> RayHandle:
    if ray.is_initialized():
        return RayHandle(started_here=False, attached=True, address=address)
    if address is not None:
        ray.init(
            address=address,
            namespace=namespace,
            runtime_env={"py_modules": project_packages()},
            log_to_driver=False,
            logging_level="ERROR",
        )
        return RayHandle(started_here=True, attached=True, address=address)
    # Ray's usage statistics, reported when an instance starts, cost ray.init a second
    # (1.7 s instead of 2.7 s here, where no network answers): a private instance of a
    # compile is not a cluster to report. The user's own setting wins.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    with _lean_head_node():
        _init_private(namespace, num_cpus)
    return RayHandle(started_here=True, attached=False, address=None)


def _init_private(namespace: str | None, num_cpus: int | None) -> None:
    ray.init(
        address="local",  # a private instance, even if another one runs on this machine
        namespace=namespace,
        num_cpus=num_cpus or os.cpu_count() or 1,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        runtime_env=local_worker_env(),
        log_to_driver=False,
        logging_level="ERROR",
        # Ray starts an idle worker process per CPU for the first driver; ours run actors
        # with their own runtime_env, which those cannot serve: they only took CPU from
        # the start-up of the workers that are used (and from the driver's head start)
        _system_config={"prestart_worker_first_driver": False},
    )


# what a private instance's head node is started without: Ray's autoscaler monitor (a
# private instance of fixed size has nothing to scale) and its log monitor (it streams the
# workers' output to drivers, which ours turn off: log_to_driver=False). Two Python
# processes that each spent 0.7-0.8 s of CPU starting, beside the workers' own start-up:
# `raypass pool start --workers 2` took 8.9 s (median) with them here, 8.0 s without
# (bench/results_private_pool_startup.md)
_SKIPPED_HEAD_PROCESSES = {"no_monitor": True, "include_log_monitor": False}


@contextlib.contextmanager
def _lean_head_node() -> Iterator[None]:
    """``ray.init`` of a private instance inside this block starts its head node without
    the processes of :data:`_SKIPPED_HEAD_PROCESSES` and without Ray's API server.
    ``ray.init`` has no arguments for them (``ray start`` has ``--no-monitor`` and
    ``--include-log-monitor``), so the block sets them on the node parameters it makes;
    a Ray whose parameters lack them starts as usual.

    The API server is the dashboard's process. With ``include_dashboard=False`` Ray still
    starts it, in its minimal mode, to serve usage statistics (off here: see
    :func:`connect`) and the job and state APIs, which nothing in a private instance
    calls (its drivers are raypass's own, and they reach the workers through the GCS).
    It is one more Python process, 0.7-0.8 s of CPU while the workers start. The block
    skips it as a node does when the server fails to start: no process, no dashboard
    address."""
    from ray._private import node, parameter

    original_params = parameter.RayParams.__init__
    accepted = inspect.signature(original_params).parameters
    skip_monitors = all(name in accepted for name in _SKIPPED_HEAD_PROCESSES)
    original_api_server = getattr(node.Node, "start_api_server", None)

    def without_monitors(self: Any, *args: Any, **kwargs: Any) -> None:
        original_params(self, *args, **{**kwargs, **_SKIPPED_HEAD_PROCESSES})

    def without_api_server(self: Any, *args: Any, **kwargs: Any) -> None:
        self._webui_url = None

    if skip_monitors:
        parameter.RayParams.__init__ = without_monitors  # type: ignore[method-assign]
    if original_api_server is not None:
        node.Node.start_api_server = without_api_server  # type: ignore[method-assign]
    try:
        yield
    finally:
        parameter.RayParams.__init__ = original_params  # type: ignore[method-assign]
        if original_api_server is not None:
            node.Node.start_api_server = original_api_server  # type: ignore[method-assign]


def disconnect(handle: RayHandle | None) -> None:
    """Stop what we started: a local instance is shut down; from a cluster we only
    disconnect (ray.shutdown in a client driver does not stop the cluster)."""
    if handle is not None and handle.started_here and ray.is_initialized():
        ray.shutdown()


def cluster_cpus() -> float:
    return float(ray.cluster_resources().get("CPU", 1.0))

"""Getting workers for a Scheduler: a warm pool, a private pool started at once, or Ray here.

:class:`WorkerSource` is made when the Scheduler is. Where the workers come from:

* a **warm pool** (``scheduler.pool``) on this machine, or registered at ``address``:
  nothing to start; each run opens a gateway connection (milliseconds);
* a **private pool**, when this process has no Ray and no address is given: the same
  daemon as a warm pool (``scheduler.pool.daemon``), started as a child *the moment
  the scheduler is made* (``start_in_background``), so Ray and the workers start while
  the driver loads the model and runs the serial passes; only the first function stage
  waits for it, and the run's statistics say how much of the start-up that hid
  (``startup_seconds``, ``startup_waited_seconds``: until its first worker was up; it
  serves from then on, and the others join the run as they come up). It stops with the
  scheduler, or when this process dies;
* **Ray in this process**: when the caller initialized Ray (a test session, a user's
  ``ray.init``) or gave a cluster's address with no pool there, actors are made here,
  in the main thread, when the first stage needs them.
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler import pool as pool_api
from scheduler.pool import startup_times
from scheduler.pool.transport import Transport

# minutes a private pool stays up without a run (the scheduler normally stops it first)
PRIVATE_POOL_IDLE_MINUTES = 60.0
# how much lower a private pool's CPU priority is than its driver's: while it starts, the
# driver runs the build itself (head start), and on few cores the two compete. DenseNet-121
# with no pool on 2 cores, every stage run in the driver while the pool started: 1.36 of
# local -> 1.12 (bench/results_compile_units_whole.md)
PRIVATE_POOL_NICE = 10


@dataclass
class Opened:
    transport: Transport
    startup_seconds: float  # what starting Ray and the actors took (0: a warm pool)
    waited_seconds: float  # of it, what the run waited for (the rest was hidden)


class WorkerSource:
    def __init__(self, num_workers: int | None, address: str | None, options: dict[str, Any]) -> None:
        self.num_workers = num_workers
        self.address = address
        self.options = options
        self.warm = pool_api.find(address) if address is None else _local_pool_for(address)
        self._ray: Any = None  # ray_runtime.RayHandle, when this process connected
        self._pool: Any = None  # scheduler.pool.slots.WorkerPool, when this process made actors
        self._cluster_pool: pool_api.FoundPool | None = None
        self._private: _PrivatePool | None = None
        self._startup_reported = False

    @property
    def has_warm_pool(self) -> bool:
        return self.warm is not None and self.warm.usable

    @property
    def unused_pool_note(self) -> str | None:
        """Why a warm pool that runs is not used (None: there is none, or it is used)."""
        if self.warm is None or self.warm.usable:
            return None
        return f"not using the warm pool: {self.warm.reason}"

    def _in_process(self) -> bool:
        """Whether the workers are made by this process's own Ray (see the module docstring)."""
        if self.address is not None:
            return True
        import sys

        ray = sys.modules.get("ray")  # never imported here just to ask
        return ray is not None and ray.is_initialized()

    def start_in_background(self) -> None:
        """Start a private pool now, unless a warm pool or this process's Ray serves."""
        if self.has_warm_pool or self._private is not None or self._in_process():
            return
        self._private = _PrivatePool(self.num_workers, self.options)

    def ready_now(self) -> bool:
        """Whether ``open_run`` would return without waiting for workers to start. A
        private pool not started yet is started now; Ray in this process starts in
        ``open_run`` itself (it cannot start in the background), so it counts as ready."""
        if self.has_warm_pool or self._in_process():
            return True
        self.start_in_background()
        assert self._private is not None
        return self._private.poll()

    def open_run(self) -> tuple[Opened, str]:
        """A transport for one run, and what it runs on (for ``backend_reason``)."""
        if self.has_warm_pool:
            assert self.warm is not None
            return self._open_gateway(self.warm), self.warm.reason
        first = not self._startup_reported
        self._startup_reported = True
        if not self._in_process():
            self.start_in_background()
            assert self._private is not None
            waited_from = time.perf_counter()
            record = self._private.ready()
            waited = time.perf_counter() - waited_from
            opened = self._open_gateway(pool_api.check(record))
            opened.transport.description = "private pool"
            if first:
                opened.startup_seconds, opened.waited_seconds = self._private.startup_seconds, waited
                startup_times.record(record.workers, self._private.startup_seconds)  # for backend="auto"
            return opened, opened.transport.description
        started = time.perf_counter()
        self._connect_here()
        startup = time.perf_counter() - started
        if self._cluster_pool is not None and self._cluster_pool.usable:
            return self._open_gateway(self._cluster_pool), self._cluster_pool.reason
        description = "Ray in this process" if self._ray is None or not self._ray.attached else "Ray"
        if self.address is not None:
            description = f"Ray at {self.address}"
        transport = _ray_transport(self._pool, description)
        startup = startup if first else 0.0
        return Opened(transport, startup, startup), description

    def _connect_here(self) -> None:
        if self._pool is not None:
            return
        from scheduler.pool import ray_runtime
        from scheduler.pool.slots import WorkerPool

        if self._ray is None:
            self._ray = ray_runtime.connect(self.address, self.options.get("num_cpus"))
            if self.address is not None:
                self._cluster_pool = pool_api.registered_pool()
        if self._cluster_pool is not None and self._cluster_pool.usable:
            return
        cpus = ray_runtime.cluster_cpus()
        workers = self.num_workers or max(1, int(cpus))
        per_worker = self.options.get("cpus_per_worker") or min(1.0, cpus / workers)
        self._pool = WorkerPool(workers, per_worker)

    def _open_gateway(self, found: pool_api.FoundPool) -> Opened:
        from scheduler.pool.gateway import GatewayTransport

        return Opened(GatewayTransport(found.endpoint, found.authkey, self.num_workers), 0.0, 0.0)

    def wait_ready(self) -> None:
        """Start the workers unless a warm pool serves, and wait until they are up."""
        if self.has_warm_pool:
            return
        if self._in_process():
            self._connect_here()
            return
        self.start_in_background()
        assert self._private is not None
        self._private.wait_all()

    @property
    def pool(self) -> Any:
        return self._pool

    @property
    def ray_handle(self) -> Any:
        return self._ray

    def stop_workers(self, wait: bool = True) -> None:
        """Stop the workers this source started (a failed run: the next one starts fresh).
        ``wait=False``: a private pool is asked to stop and finishes stopping by itself."""
        if self._private is not None:
            self._private.stop(wait)
            self._private = None
        if self._pool is not None:
            # a private instance is stopped right after: waiting for its CPUs is pointless
            self._pool.shutdown(wait=not (self._ray is not None and self._ray.private))
            self._pool = None

    def shutdown(self, wait: bool = True) -> None:
        self.stop_workers(wait)
        if self._ray is not None:
            from scheduler.pool import ray_runtime

            ray_runtime.disconnect(self._ray)
            self._ray = None


class _PrivatePool:
    """A pool daemon of this scheduler's own (see the module docstring)."""

    def __init__(self, num_workers: int | None, options: dict[str, Any]) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="raypass-private-pool-"))
        self.record_path = self._dir / "pool.json"
        self.log_path = self._dir / "pool.log"
        self._spawned = time.time()
        try:
            self.daemon = pool_api.spawn_daemon(
                self.log_path, PRIVATE_POOL_IDLE_MINUTES, workers=num_workers,
                cpus_per_worker=options.get("cpus_per_worker"), num_cpus=options.get("num_cpus"),
                record=self.record_path, parent=os.getpid(), nice=PRIVATE_POOL_NICE,
            )
        except BaseException:
            # no pool object to stop (a Ctrl-C while the daemon was spawned): its directory
            # goes now, or nothing would remove it
            self._cleanup()
            raise
        self._record: pool_api.PoolRecord | None = None
        self.startup_seconds = 0.0

    def ready(self) -> pool_api.PoolRecord:
        if self._record is None:
            try:
                self._record = pool_api.wait_ready(self.daemon, self.log_path, self.record_path)
            except pool_api.PoolError:
                self._cleanup()
                raise
            # the daemon writes its record the moment its workers are ready
            self.startup_seconds = max(0.0, self.record_path.stat().st_mtime - self._spawned)
        return self._record

    def wait_all(self) -> None:
        """Wait until every worker is up (``ready`` returns at the first: the pool serves
        from then on, and the others join the run as they come up)."""
        from scheduler.pool.gateway import query
        from scheduler.pool.slots import START_TIMEOUT

        record = self.ready()
        found = pool_api.check(record)
        deadline = time.monotonic() + START_TIMEOUT

        def all_up() -> bool:
            views = query(found.endpoint, found.authkey, "slots")
            return all(info.get("ready", True) for _, _, info in views)

        while not all_up():
            if time.monotonic() > deadline or self.daemon.poll() is not None:
                break  # a run goes on with the workers that are up
            time.sleep(0.05)

    def poll(self) -> bool:
        """Whether ``ready`` would return at once: the daemon wrote its record (its
        workers are up) or it exited (``ready`` then raises its error)."""
        if self._record is not None or self.daemon.poll() is not None:
            return True
        return self.record_path.exists()

    def stop(self, wait: bool = True) -> None:
        if self.daemon.poll() is not None:  # it died (killed): end what its Ray left running
            pool_api.reap_session(self.daemon.pid)
            self._cleanup()
            return
        record = self._record or pool_api.read_record(self.record_path)
        if record is not None and not wait:
            # asked to stop, the daemon stops its workers and its Ray by itself (about
            # 1.5 s that a command line need not wait for: the user has the result)
            pool_api.ask_to_stop(record)
            self._cleanup()
            return
        if record is not None:
            pool_api.stop_daemon(record, self.record_path)
        else:
            # still starting (the driver finished first) or failed: nothing of it is in
            # use and a stop it would only answer once its workers were up, so its session
            # ends at once (the daemon, its Ray, the workers starting)
            pool_api.kill_session(self.daemon.pid)
        try:
            self.daemon.wait(timeout=pool_api.STOP_TIMEOUT)
        except Exception:  # noqa: BLE001  (it ignored SIGTERM: end its whole group)
            pool_api.terminate(self.daemon.pid)
        self._cleanup()

    def _cleanup(self) -> None:
        import shutil

        # a process of the pool's session that is still ending may write into the
        # directory (its log, its record) while it is removed: a few tries, briefly
        for _ in range(20):
            shutil.rmtree(self._dir, ignore_errors=True)
            if not self._dir.exists():
                return
            time.sleep(0.05)


def _ray_transport(pool: Any, description: str) -> Transport:
    from scheduler.pool.transport import RayTransport

    return RayTransport(pool, f"run-{uuid.uuid4().hex[:12]}", description)


def _local_pool_for(address: str) -> pool_api.FoundPool | None:
    """The pool recorded on this machine, if it runs at ``address`` (no Ray needed)."""
    record = pool_api.read_record()
    if record is not None and address in ("auto", record.address, record.ray_address):
        return pool_api.find(record.address)
    return None


__all__ = ["Opened", "WorkerSource"]

"""The warm pool's process: ``python -m scheduler.pool.daemon`` (started by ``pool.start``).

It connects to Ray (a private local instance, or the cluster at ``--address``), starts
the worker actors and warms them up, registers the named actor ``raypass-pool`` on a
cluster (its record, for drivers that only know the cluster's address), opens the gateway, writes
the pool's record, and then waits: for ``stop`` (a gateway request or SIGTERM), or for
``--idle-timeout`` minutes with no driver connected and no run. On the way out it stops
everything it started, in reverse order, and removes its record.

A scheduler with no pool to use starts one of its own the same way, as a *private*
pool (``--record FILE --parent PID``): its record goes to ``FILE`` (no other driver
finds it) and it stops when its parent process is gone, however that ended. The
scheduler starts it the moment it is made, so Ray and the workers start while the
driver loads the model and runs the serial passes (Ray cannot be started from a
background thread of the driver: its object store then fails in the main thread).

A private pool runs at a lower CPU priority (``--nice``): it starts while the build
that made it runs its serial passes and its first stages itself, and where cores are
few that build is what the user waits for; the pool takes the cores the build leaves
free (once the build waits for it, all of them).

A private pool serves as soon as its first worker is up: the others join the run as
they come up (the gateway tells the driver, whose work queue gives them work at once),
so the slowest worker's start-up never holds a build. A warm pool, started ahead of its
builds, writes its record once every worker is up.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from typing import Any

_POLL_SECONDS = 0.5


class _NamedRecord:
    """The named actor drivers on other machines find the pool by."""

    def __init__(self, record: dict[str, Any]) -> None:
        self._record = record

    def record(self) -> dict[str, Any]:
        return self._record


class PoolDaemon:
    def __init__(self, workers: int | None, address: str | None, idle_timeout_minutes: float,
                 cpus_per_worker: float | None, record_path: str | None = None,
                 parent: int | None = None, num_cpus: int | None = None) -> None:
        self.record_path = record_path
        self.parent = parent
        self.num_cpus = num_cpus
        self.workers = workers
        self.address = address
        self.idle_timeout = idle_timeout_minutes * 60.0
        self.cpus_per_worker = cpus_per_worker
        self.started = time.time()
        self._last_activity = time.monotonic()
        self._lock = threading.Lock()
        self._active_runs: set[str] = set()
        self.runs_served = 0
        self._stop = threading.Event()

    # ----- the gateway's callbacks ------------------------------------------------------
    def touch(self) -> None:
        self._last_activity = time.monotonic()

    def on_run(self, run_id: str, begins: bool) -> None:
        with self._lock:
            if begins:
                self._active_runs.add(run_id)
                self.runs_served += 1
            else:
                self._active_runs.discard(run_id)
        self.touch()

    def status(self) -> dict[str, Any]:
        import ray

        from scheduler.pool.slots import CONTROL_GROUP

        # what the workers still hold (a run's state is evicted when it ends), answered
        # by each worker's control thread even while it runs a batch
        refs = [slot.actor.runs.options(concurrency_group=CONTROL_GROUP).remote() for slot in self.pool.slots]
        try:
            held = ray.get(refs, timeout=10)
        except Exception:  # noqa: BLE001  (a dead worker holds nothing)
            held = []
        return {
            "runs_on_workers": sorted({run for runs in held for run in runs}),
            "workers": [dict(slot.info, generation=slot.generation) for slot in self.pool.slots],
            "uptime_seconds": time.time() - self.started,
            "idle_seconds": self.idle_seconds(),
            "runs_served": self.runs_served,
            "active_runs": len(self._active_runs),
            "drivers": self.gateway.drivers,
            "restarts": self.pool.restarts,
        }

    def idle_seconds(self) -> float:
        if self._active_runs or self.gateway.connections:
            return 0.0
        return time.monotonic() - self._last_activity

    def stop(self) -> None:
        self._stop.set()

    def _let_join(self) -> None:
        """Tell the drivers of each worker that comes up, until all are up."""
        from scheduler.pool.slots import WorkerStartError

        try:
            while self.pool.starting and not self._stop.is_set():
                for index in self.pool.ready_slots(timeout=_POLL_SECONDS):
                    self.gateway.slot_ready(index)
        except WorkerStartError as error:  # the run goes on with the workers that are up
            print(f"raypass pool: {error}", flush=True)

    # ----- life --------------------------------------------------------------------------
    def run(self) -> int:
        import ray

        from scheduler import pool as pool_api
        from scheduler.pool import ray_runtime
        from scheduler.pool.gateway import GatewayServer
        from scheduler.pool.slots import WorkerPool

        handle = ray_runtime.connect(self.address, self.num_cpus, namespace=pool_api.POOL_NAMESPACE)
        named = None
        try:
            cpus = ray_runtime.cluster_cpus()
            count = self.workers or max(1, int(cpus))
            per_worker = self.cpus_per_worker or min(1.0, cpus / count)
            self.pool = WorkerPool(count, per_worker, wait=False)
            joining = self.record_path is not None  # a private pool: serve from its first worker on
            while self.pool.starting and not (joining and any(s.info["ready"] for s in self.pool.slots)):
                self.pool.ready_slots(timeout=_POLL_SECONDS)
            host = "127.0.0.1" if self.address is None else ray.util.get_node_ip_address()
            self.gateway = GatewayServer(self.pool, host, self.touch, self.on_run, self.status, self.stop)
            record = pool_api.PoolRecord(
                pid=os.getpid(), host=self.gateway.endpoint[0], port=self.gateway.endpoint[1],
                authkey=self.gateway.authkey.hex(), workers=count, address=self.address,
                ray_address=ray.get_runtime_context().gcs_address, started=self.started,
                code_version=pool_api.code_version(), idle_timeout_minutes=self.idle_timeout / 60.0,
            )
            if self.record_path is None and self.address is not None:
                # a shared pool on a cluster: findable through it. A pool's own Ray listens on
                # the loopback only, where drivers find the pool by its record; the actor
                # would be one more Ray worker process (1.4 s of CPU to start)
                named = ray.remote(_NamedRecord).options(
                    name=pool_api.POOL_ACTOR_NAME, namespace=pool_api.POOL_NAMESPACE, num_cpus=0
                ).remote(record.__dict__)
                ray.get(named.record.remote())
            # the pool is ready: `pool start` (or the waiting scheduler) goes on
            pool_api.write_record(record, self.record_path)
            starting = f" ({self.pool.starting} still starting)" if self.pool.starting else ""
            print(f"raypass pool: ready, {count} workers{starting}, gateway {host}:{record.port}", flush=True)
            if self.pool.starting:
                threading.Thread(target=self._let_join, name="raypass-joining", daemon=True).start()
            while not self._stop.wait(_POLL_SECONDS):
                if self.parent is not None and os.getppid() != self.parent:
                    print("raypass pool: the scheduler that started this pool is gone, stopping", flush=True)
                    break
                if self.idle_seconds() > self.idle_timeout:
                    print(f"raypass pool: idle for {self.idle_timeout / 60:g} minutes, stopping", flush=True)
                    break
            return 0
        finally:
            pool_api.remove_record(os.getpid(), self.record_path)
            if getattr(self, "gateway", None) is not None:
                self.gateway.close()
            if named is not None:
                ray.kill(named, no_restart=True)
            if getattr(self, "pool", None) is not None:
                self.pool.shutdown(wait=not handle.private)
            ray_runtime.disconnect(handle)


def _lower_priority(nice: int) -> None:
    """This process's CPU priority, and that of all it starts (Ray, the workers), lowered
    by ``nice``. Where the kernel schedules by session first (autogroup: most Linux
    systems), a process's nice value only orders it within its session, and the daemon has
    a session of its own: that session's nice goes up too."""
    os.nice(nice)
    try:
        with open("/proc/self/autogroup", "w") as autogroup:
            autogroup.write(str(nice))
    except OSError:  # no autogroup scheduling (or no /proc): the nice value is what orders it
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler.pool.daemon")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--address", default=None)
    parser.add_argument("--idle-timeout", type=float, required=True, help="minutes")
    parser.add_argument("--cpus-per-worker", type=float, default=None)
    parser.add_argument("--num-cpus", type=int, default=None, help="of a private Ray instance")
    parser.add_argument("--record", default=None, help="a private pool's record file")
    parser.add_argument("--parent", type=int, default=None, help="stop when this process is gone")
    parser.add_argument("--driver-dir", default=None, help="the driver's working directory: imported last")
    parser.add_argument("--nice", type=int, default=0,
                        help="run at this much lower CPU priority, Ray and the workers too")
    args = parser.parse_args(argv)
    if args.nice > 0:
        _lower_priority(args.nice)
    if args.driver_dir and args.driver_dir not in sys.path:
        sys.path.append(args.driver_dir)  # after site-packages: it shadows no dependency
    daemon = PoolDaemon(args.workers, args.address, args.idle_timeout, args.cpus_per_worker,
                        args.record, args.parent, args.num_cpus)
    # `raypass pool stop` asks through the gateway; SIGTERM (a process manager) does the same
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop())
    try:
        return daemon.run()
    except Exception as error:  # noqa: BLE001  (the one line `pool start` shows the user)
        print(f"raypass pool: error: {type(error).__name__}: {error}", flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())

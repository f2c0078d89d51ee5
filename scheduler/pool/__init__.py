"""A warm worker pool: workers started once, used by every compile until stopped.

    from scheduler import pool
    pool.start(workers=2, idle_timeout_minutes=30)   # returns once the workers are ready
    pool.status()                                     # PoolStatus, or None: no pool
    with Scheduler(backend="ray") as sched: ...       # finds the pool and uses it
    pool.stop()

``raypass pool start|status|stop`` are the same from the command line.

The pool is a small daemon process (``scheduler.pool.daemon``) that starts or attaches
to Ray, creates the worker actors, imports the passes and the code generator in them
(``FunctionWorker.warm_up``), on a cluster registers a named actor ``raypass-pool``
in the ``raypass`` namespace (so a driver given the cluster's address finds it), and serves
drivers through its gateway socket (``scheduler.pool.gateway``): a driver on this machine
needs no Ray at all, which keeps a warm compile's fixed cost to milliseconds. The
daemon owns the actors, so they live exactly as long as the pool; it stops after
``idle_timeout_minutes`` without a driver, and stops the Ray instance it started.

Where the pool is recorded: ``$RAYPASS_POOL_DIR/pool.json`` (default
``~/.cache/raypass/pool``), with the gateway's address and key (mode 0600). A stale
record (its daemon gone) is ignored and removed. A pool running other raypass code than
the driver's (the sources changed since it started) is not used: results must be the
ones this code computes; the scheduler says so in ``last_run.backend_reason``.

This package is everything about getting workers and reaching them, whoever runs them:
``startup`` (where a Scheduler's workers come from: this pool, a private pool started at
once, or Ray in the driver), ``daemon`` (the pool's process), ``ray_runtime`` (starting
and attaching to Ray), ``slots`` (the worker actors, restarted when they die),
``transport`` and ``gateway`` (how a run's calls reach the slots: Ray futures, or the
pool's socket). What runs inside a worker is in ``workers``.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from passinfra.errors import RaypassError

POOL_NAMESPACE = "raypass"
POOL_ACTOR_NAME = "raypass-pool"
STATE_FILE = "pool.json"
START_TIMEOUT = 300.0  # seconds for a daemon to report its workers ready
STOP_TIMEOUT = 60.0
DEFAULT_IDLE_TIMEOUT_MINUTES = 30.0


class PoolError(RaypassError, RuntimeError):
    """Starting, finding or stopping the warm pool failed."""


@dataclass
class PoolRecord:
    """What ``pool.json`` says about a running pool."""

    pid: int  # the daemon's
    host: str
    port: int
    authkey: str  # hex
    workers: int
    address: str | None  # the Ray address asked for (None: a private instance)
    ray_address: str  # the GCS address of the Ray it runs on
    started: float  # time.time()
    code_version: str
    idle_timeout_minutes: float

    @property
    def endpoint(self) -> tuple[str, int]:
        return self.host, self.port


@dataclass
class PoolStatus:
    """``raypass pool status``: what the daemon reports about itself."""

    record: PoolRecord
    workers: list[dict[str, Any]] = field(default_factory=list)  # slot, pid, host, node_id, ...
    uptime_seconds: float = 0.0
    idle_seconds: float = 0.0
    runs_served: int = 0
    active_runs: int = 0
    drivers: int = 0  # connected now
    restarts: int = 0
    runs_on_workers: list[str] = field(default_factory=list)  # runs whose state the workers hold


def pool_dir() -> Path:
    """Where the pool's record and log live (``$RAYPASS_POOL_DIR``, else ~/.cache/raypass/pool)."""
    explicit = os.environ.get("RAYPASS_POOL_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "raypass" / "pool"


def code_version() -> str:
    """A fingerprint of the raypass sources a driver or worker runs (paths, sizes and
    modification times of passinfra, scheduler and workers): a pool started before the
    sources changed must not compute with the old code."""
    import passinfra
    import scheduler
    import workers

    digest = hashlib.sha256()
    for package in (passinfra, scheduler, workers):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            info = path.stat()
            digest.update(f"{path.relative_to(root.parent)}:{info.st_size}:{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


# ----- the record --------------------------------------------------------------------------
def read_record(path: str | os.PathLike[str] | None = None) -> PoolRecord | None:
    """The recorded pool (at ``path``, default the machine's), if its daemon is alive (a
    stale record is removed)."""
    path = Path(path) if path is not None else pool_dir() / STATE_FILE
    try:
        record = PoolRecord(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):  # a half-written or foreign file: not a pool
        return None
    if not process_alive(record.pid):
        path.unlink(missing_ok=True)
        reap_session(record.pid)
        return None
    return record


def reap_session(pid: int) -> list[int]:
    """End what is left of a dead daemon ``pid``: the processes of its session (the
    daemon starts one of its own). Killed with SIGKILL, the daemon takes its Ray's
    GCS and raylet with it, but Ray's agents (``ray::DashboardAgent``,
    ``ray::RuntimeEnvAgent``) keep running; they are still in the session. Only a
    dead daemon's session is reaped: no new process can take its id while its leader's
    pid is free, so every member is a leftover. Returns the pids signalled."""
    if process_alive(pid):
        return []
    members = [other for other in _session_members(pid) if other != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for member in members:
            try:
                os.kill(member, sig)
            except (ProcessLookupError, PermissionError):
                pass
        if all(_wait_gone(member, 2.0) for member in members):
            break
    return members


def kill_session(pid: int) -> None:
    """End daemon ``pid`` (a child of this process, still starting) and its session at once."""
    try:
        os.killpg(pid, signal.SIGKILL)  # the daemon, and its Ray's GCS, raylet and agents
    except (ProcessLookupError, PermissionError):
        pass
    _wait_gone(pid, 5.0)
    reap_session(pid)  # the worker processes, in process groups of their own


def _session_members(sid: int) -> list[int]:
    members: list[int] = []
    proc = Path("/proc")
    if not proc.is_dir():
        return members
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        # after the command: state, ppid, pgrp, session, ...; a zombie is already dead
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def write_record(record: PoolRecord, path: str | os.PathLike[str] | None = None) -> None:
    from passinfra.atomic_io import atomic_write

    path = Path(path) if path is not None else pool_dir() / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(record.__dict__, indent=1).encode())
    os.chmod(path, 0o600)  # it holds the gateway's key


def remove_record(pid: int, path: str | os.PathLike[str] | None = None) -> None:
    """Remove the record if it is still the one of daemon ``pid``."""
    path = Path(path) if path is not None else pool_dir() / STATE_FILE
    try:
        if json.loads(path.read_text()).get("pid") == pid:
            path.unlink()
    except (FileNotFoundError, ValueError):
        pass


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (``raypass_cli.forkserver`` asks this too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie (exited, not yet reaped by its parent) is not a pool
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


# ----- finding a pool ------------------------------------------------------------------------
@dataclass
class FoundPool:
    """A pool a scheduler can use, or the reason it cannot."""

    record: PoolRecord | None
    usable: bool
    reason: str

    @property
    def endpoint(self) -> tuple[str, int]:
        assert self.record is not None
        return self.record.endpoint

    @property
    def authkey(self) -> bytes:
        assert self.record is not None
        return bytes.fromhex(self.record.authkey)


def find(address: str | None = None) -> FoundPool | None:
    """The warm pool for a scheduler with this ``address``: the one recorded on this
    machine (for no address, or the address it runs on), else, for an address, the one
    registered in that Ray cluster. None: there is no pool."""
    record = read_record()
    if record is not None and address in (None, "auto", record.address, record.ray_address):
        return check(record)
    if address is None:
        return None
    return _find_in_cluster(address)


def check(record: PoolRecord) -> FoundPool:
    """Whether this driver may use the pool ``record`` describes."""
    mine = code_version()
    if record.code_version != mine:
        return FoundPool(record, False, f"the warm pool (pid {record.pid}) runs other raypass sources "
                                        "than this driver: restart it with `raypass pool stop` and `start`")
    return FoundPool(record, True, f"warm pool (pid {record.pid}, {record.workers} workers)")


def _find_in_cluster(address: str) -> FoundPool | None:
    """Ask the Ray cluster at ``address`` for the pool's named actor (this connects the
    driver to Ray: only for a pool started on another machine)."""
    import ray

    if not ray.is_initialized():
        from scheduler.pool import ray_runtime

        ray_runtime.connect(address, None, namespace=POOL_NAMESPACE)
    return registered_pool()


def registered_pool() -> FoundPool | None:
    """The pool registered in the Ray cluster this process is connected to, if any."""
    import ray

    try:
        actor = ray.get_actor(POOL_ACTOR_NAME, namespace=POOL_NAMESPACE)
    except ValueError:
        return None
    return check(PoolRecord(**ray.get(actor.record.remote(), timeout=30)))


# ----- start, status, stop -----------------------------------------------------------------
def start(
    workers: int | None = None,
    address: str | None = None,
    idle_timeout_minutes: float = DEFAULT_IDLE_TIMEOUT_MINUTES,
    cpus_per_worker: float | None = None,
    spawned: Callable[[int], None] | None = None,
) -> PoolStatus:
    """Start a warm pool (the daemon, and a private Ray instance unless ``address``
    names a cluster) and return its status once every worker is ready. A pool that is
    already running is returned as it is. ``spawned``, if given, is called with the
    daemon's pid as soon as the daemon runs, before its workers are ready: what starts
    beside the pool (``raypass pool start``'s warm driver) starts meanwhile."""
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise PoolError(f"workers must be a positive int, got {workers!r}")
    if not idle_timeout_minutes > 0:
        raise PoolError(f"the idle timeout must be positive, got {idle_timeout_minutes!r} minutes")
    existing = read_record()
    if existing is not None:
        return status_of(existing)
    directory = pool_dir()
    directory.mkdir(parents=True, exist_ok=True)
    daemon = spawn_daemon(
        directory / "pool.log", idle_timeout_minutes, workers=workers, address=address,
        cpus_per_worker=cpus_per_worker,
    )
    if spawned is not None:
        spawned(daemon.pid)
    return status_of(wait_ready(daemon, directory / "pool.log"))


def spawn_daemon(log_path: Path, idle_timeout_minutes: float, **options: Any) -> subprocess.Popen:
    """Start ``scheduler.pool.daemon`` with ``options`` (workers, address,
    cpus_per_worker, num_cpus, record, parent, nice; None: left out), logging to ``log_path``.
    Returns at once: the daemon writes its record when its workers are ready."""
    command = [sys.executable, "-m", "scheduler.pool.daemon", "--idle-timeout", str(idle_timeout_minutes)]
    for name, value in options.items():
        if value is not None:
            value = Path(value).resolve() if isinstance(value, Path) else value  # a record file
            command += [f"--{name.replace('_', '-')}", str(value)]
    import scheduler

    root = str(Path(scheduler.__file__).resolve().parents[1])  # the directory holding the package
    env = dict(os.environ)
    # the daemon imports raypass from where this driver did. The driver's working directory
    # (passes of the driver's own modules must unpickle on the workers) goes after
    # site-packages (--driver-dir: the daemon appends it), so that a file there named like
    # a dependency (ray.so, numpy.py) shadows nothing; and the daemon runs in the log's
    # directory, since `python -m` puts its working directory first on the path
    paths = [root, *env.get("PYTHONPATH", "").split(os.pathsep)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    command += ["--driver-dir", os.getcwd()]
    if env.get("RAYPASS_POOL_DIR"):  # the same directory, seen from the daemon's working directory
        env["RAYPASS_POOL_DIR"] = str(Path(env["RAYPASS_POOL_DIR"]).resolve())
    log_path = Path(log_path).resolve()
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=log_path.parent,
            start_new_session=True, env=env,  # not killed with the terminal that started it
        )


def wait_ready(daemon: subprocess.Popen, log_path: Path, record_path: Path | None = None) -> PoolRecord:
    """The daemon's record once it is ready; PoolError with its own message if it failed."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        record = read_record(record_path)
        if record is not None and record.pid == daemon.pid:
            return record
        if daemon.poll() is not None:
            raise PoolError(f"the workers did not start: {_last_error(log_path)}")
        time.sleep(0.02)
    terminate(daemon.pid)
    raise PoolError(f"the workers did not become ready within {START_TIMEOUT:.0f}s (log: {log_path})")


def status(address: str | None = None) -> PoolStatus | None:
    """The running pool's status, or None when there is none."""
    found = find(address)
    return status_of(found.record) if found is not None and found.record is not None else None


def status_of(record: PoolRecord) -> PoolStatus:
    from scheduler.pool.gateway import query

    report = query(record.endpoint, bytes.fromhex(record.authkey), "status")
    return PoolStatus(record, **report)


def stop(address: str | None = None) -> bool:
    """Stop the pool (its workers, and the Ray instance it started); False: none ran."""
    found = find(address)
    if found is None or found.record is None:
        return False
    stop_daemon(found.record)
    return True


def ask_to_stop(record: PoolRecord) -> None:
    """Ask the daemon of ``record`` to stop (it may be gone already), without waiting."""
    from scheduler.pool.gateway import GatewayError, query

    try:
        query(record.endpoint, bytes.fromhex(record.authkey), "stop")
    except (GatewayError, OSError):
        pass


def stop_daemon(record: PoolRecord, record_path: Path | None = None) -> None:
    """Ask the daemon of ``record`` to stop and wait until it has (else end it)."""
    ask_to_stop(record)  # it may be gone already; the pid check below decides
    if process_alive(record.pid) and not _wait_gone(record.pid, STOP_TIMEOUT):
        terminate(record.pid)
    remove_record(record.pid, record_path)


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while process_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def terminate(pid: int) -> None:
    """Stop a daemon that does not stop by itself: its whole process group."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        if _wait_gone(pid, 15.0):
            return


def _last_error(log_path: Path) -> str:
    """The daemon's own one-line error (its last line), for the user."""
    try:
        lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
    except FileNotFoundError:
        return "no log written"
    for line in reversed(lines):
        if line.startswith("raypass pool: error: "):
            return line.removeprefix("raypass pool: error: ")
    return lines[-1] if lines else "it exited without a message"


__all__ = [
    "DEFAULT_IDLE_TIMEOUT_MINUTES", "POOL_ACTOR_NAME", "POOL_NAMESPACE", "FoundPool", "PoolError",
    "PoolRecord", "PoolStatus", "ask_to_stop", "check", "code_version", "find", "kill_session", "pool_dir",
    "process_alive",
    "reap_session", "registered_pool", "spawn_daemon", "start", "status", "stop", "stop_daemon",
    "terminate", "wait_ready",
]

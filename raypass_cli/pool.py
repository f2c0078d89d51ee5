"""``raypass pool start|status|stop``: the warm worker pool (``scheduler.pool``)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from raypass_cli.common import CliUserError


def _seconds(value: float) -> str:
    if value < 120:
        return f"{value:.0f}s"
    if value < 7200:
        return f"{value / 60:.0f}m"
    return f"{value / 3600:.1f}h"


def _print_status(status: Any) -> None:
    record = status.record
    where = record.address or "a private Ray instance"
    gateway = f"{record.host}:{record.port}"
    print(f"pool: pid {record.pid}, {len(status.workers)} workers on {where}, gateway {gateway}")
    print(
        f"up {_seconds(status.uptime_seconds)}, idle {_seconds(status.idle_seconds)} "
        f"(stops after {record.idle_timeout_minutes:g} minutes idle), runs served {status.runs_served}, "
        f"running now {status.active_runs}, drivers connected {status.drivers}, restarts {status.restarts}"
    )
    for worker in status.workers:
        node = (worker.get("node_id") or "?")[:12]
        warm = worker.get("warm_up_seconds")
        warm_text = f", warmed up in {warm:.2f}s" if warm is not None else ""
        print(f"  worker {worker['slot']}: pid {worker['pid']} on {worker['host']} (node {node}){warm_text}")


def _print_warm_driver() -> None:
    from raypass_cli import forkserver

    record = forkserver.read_record()
    if record is not None:
        print(f"warm driver: pid {record['pid']}, commands served {record.get('served', 0)}, "
              f"running now {record.get('running', 0)}")


def _spawn_warm_driver(pool_pid: int) -> Any:
    """Beside a pool on this machine, a warm driver (raypass_cli.forkserver) for the
    `raypass compile` commands of this environment (the pool serves without one): its
    process, starting; None when one runs already."""
    from raypass_cli import forkserver
    from scheduler import pool

    if forkserver.read_record() is not None:
        return None
    return forkserver.spawn(pool.pool_dir(), pool_pid)


def _await_warm_driver(driver: Any) -> None:
    """Wait until ``driver`` (from :func:`_spawn_warm_driver`) serves; one that cannot is
    stopped, and said so."""
    from raypass_cli import forkserver
    from scheduler import pool

    if driver is None:
        return
    directory = pool.pool_dir()
    if forkserver.wait_ready(driver, directory) is None:
        _discard_warm_driver(driver)
        print(f"(no warm driver: it did not start; see {directory / 'warm_driver.log'})")


def _discard_warm_driver(driver: Any) -> None:
    if driver is not None:
        driver.kill()
        driver.wait()


def cmd_pool(args: argparse.Namespace) -> int:
    from raypass_cli import forkserver
    from scheduler import pool

    if args.action == "start":
        if args.workers is not None and args.workers < 1:
            raise CliUserError(f"--workers must be at least 1, got {args.workers}")
        if args.idle_timeout <= 0:
            raise CliUserError(f"--idle-timeout must be positive, got {args.idle_timeout:g}")
        already = pool.status(args.address)
        if already is not None:
            if args.address is None:
                _await_warm_driver(_spawn_warm_driver(already.record.pid))
            print("a pool is running already:")
            _print_status(already)
            _print_warm_driver()
            return 0
        started = time.perf_counter()
        drivers: list[Any] = []

        def beside(daemon_pid: int) -> None:
            # the warm driver imports the compiler while Ray and the workers start (about
            # a second of CPU: after the workers were ready, it was that much longer)
            if args.address is None:
                drivers.append(_spawn_warm_driver(daemon_pid))

        try:
            status = pool.start(args.workers, args.address, args.idle_timeout, spawned=beside)
        except pool.PoolError as error:
            for driver in drivers:  # it would stop with the daemon; it is not left to
                _discard_warm_driver(driver)
            raise CliUserError(str(error)) from None
        for driver in drivers:
            _await_warm_driver(driver)
        print(f"pool started in {time.perf_counter() - started:.1f}s")
        _print_status(status)
        _print_warm_driver()
        return 0
    if args.action == "status":
        status = pool.status(args.address)
        if status is None:
            print("no pool is running (start one with `raypass pool start`)")
            return 1
        _print_status(status)
        _print_warm_driver()
        return 0
    if args.address is None:
        # the warm driver first, while its record still names it: once the pool is gone it
        # removes its record and exits by itself, and a stop that came after the record went
        # returned while the driver still ran
        forkserver.stop()
    stopped = pool.stop(args.address)
    print("pool stopped" if stopped else "no pool was running")
    return 0


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "pool",
        help="start, inspect or stop a warm worker pool that compiles use",
        description="A warm pool keeps Ray and its workers running between compiles, so a "
        "compile with --backend ray|auto pays no start-up.",
    )
    parser.add_argument("action", choices=("start", "status", "stop"))
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="worker actors (default: one per CPU of the cluster)")
    parser.add_argument("--address", default=None, metavar="ADDR",
                        help="the Ray cluster to run the pool on (default: a private local instance)")
    parser.add_argument("--idle-timeout", type=float, default=30.0, metavar="MINUTES",
                        help="stop after this many minutes without a compile (default 30)")
    parser.set_defaults(func=cmd_pool)

"""A tuning worker: measures candidate schedules for ``passinfra.tune`` inside a Ray actor
(``scheduler.tuning.RayRunner`` makes it one). Plain class, testable without Ray."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from passinfra.tuning.runner import configure_worker, in_worker


class MeasureWorker:
    def __init__(self, threads: int, cache_dir: str | None) -> None:
        # no CPU pinning: Ray reserves this actor's CPUs, and the library runs on as many threads
        configure_worker(threads, cache_dir)
        self.threads = threads

    def target(self) -> dict[str, Any]:
        """The tuning target this worker measures: its node's instruction set and threads."""
        from passinfra.tuning.database import current_target

        return current_target(self.threads)

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[int, float, float, Any]:
        return in_worker(fn, args)


__all__ = ["MeasureWorker"]

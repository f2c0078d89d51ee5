"""Progress of a build: a rich progress bar per plan stage on a terminal, one plain log
line per finished stage otherwise (CI logs).

The stages are those of the plan the scheduler runs: the scheduler hands it over before
the run starts (``on_plan``, a :class:`scheduler.executor.PlanListener` hook), the same
plan its executor walks, so the display never plans on its own. What the build runs in
this process after the scheduler's pipeline (the link step) is planned then, under the
run's context, so the first line already counts every stage.

The instrument follows the plan's leaves in run order through the before/after hooks.
Under the Ray backend a whole function stage runs on the workers when its first pass
starts, and the hooks of its later passes replay right after, so a bar fills as the
stage's passes are accounted for: the unit is one pass run over one function.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from passinfra.instrument import PassInstrument
from scheduler.executor import plan_for

if TYPE_CHECKING:
    from passinfra.ir.module import IRModule
    from passinfra.transform import Pass, PassContext
    from passinfra.transform.pass_info import PassInfo
    from scheduler.plan import Plan


@dataclass
class _StageTrack:
    label: str
    passes: int
    done: int = 0
    functions: int = 0
    started: float = 0.0
    task: Any = None


class BuildProgress(PassInstrument):
    """Reports the stage progress of a build: the stages of the plan the scheduler hands
    over (:meth:`on_plan`), then those of ``then_in_process``, the pipelines the build
    runs in this process after the scheduler's (one after the other)."""

    uses_module = False  # it reads len(mod) only; batching stays allowed

    def __init__(
        self, then_in_process: Sequence[Pass] = (), live: bool | None = None, log: TextIO | None = None
    ) -> None:
        self._then_in_process = list(then_in_process)
        self._leaves: list[tuple[str, _StageTrack]] = []
        self._next = 0
        self._stage_count = 0
        self._finished = 0
        self.live = sys.stdout.isatty() if live is None else live
        self._log = log or sys.stderr
        self._progress: Any = None

    # ----- lifecycle: the CLI opens and closes the display around the build ---------------
    def __enter__(self) -> BuildProgress:
        if self.live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("pass x function runs"),
                TimeElapsedColumn(),
            )
            self._progress.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    # ----- hooks ------------------------------------------------------------------------
    def on_plan(self, plan: Plan, ctx: PassContext) -> None:
        """The scheduler's plan for the run about to start (scheduler.executor calls this).
        The in-process pipelines follow the first run, under its context (the build's),
        so they are planned once, here, as they will run."""
        plans = [plan, *(plan_for(pipeline, ctx) for pipeline in self._then_in_process)]
        self._then_in_process = []
        # a later run's stages go after what is known so far, as the run itself comes later
        for each in plans:
            for stage in each.stages:
                names = [leaf.name for leaf in stage.leaves]
                shown = (
                    ", ".join(names)
                    if len(names) <= 3
                    else f"{names[0]} ... {names[-1]} ({len(names)} passes)"
                )
                track = _StageTrack(f"{stage.kind} stage: {shown}", len(names))
                self._leaves.extend((name, track) for name in names)
        self._stage_count = len({id(track) for _, track in self._leaves})

    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        track = self._expected(info.name)
        if track is None or track.done or track.started:
            return
        track.started = time.perf_counter()
        track.functions = len(mod)
        if self._progress is not None:
            track.task = self._progress.add_task(track.label, total=track.passes * max(track.functions, 1))

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        track = self._expected(info.name)
        if track is None:
            return  # a Sequential closing, or a pass outside the plan
        self._next += 1
        track.done += 1
        if track.task is not None:
            self._progress.advance(track.task, max(track.functions, 1))
        if track.done == track.passes:
            self._finished += 1
            if not self.live:
                seconds = time.perf_counter() - track.started
                print(
                    f"[raypass] {self._finished}/{self._stage_count} {track.label}: "
                    f"{track.functions} functions, {seconds:.2f}s",
                    file=self._log,
                    flush=True,
                )

    def _expected(self, name: str) -> _StageTrack | None:
        if self._next < len(self._leaves) and self._leaves[self._next][0] == name:
            return self._leaves[self._next][1]
        return None

"""Progress of a build: a rich progress bar per plan stage on a terminal, one plain log
line per finished stage otherwise (CI logs).

The instrument follows the plan's leaves in run order through the before/after hooks.
Under the Ray backend a whole function stage runs on the workers when its first pass
starts, and the hooks of its later passes replay right after, so a bar fills as the
stage's passes are accounted for: the unit is one pass run over one function.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from passinfra.instrument import PassInstrument
from scheduler.executor import batching_allowed
from scheduler.plan import build_plan

if TYPE_CHECKING:
    from passinfra.ir.module import IRModule
    from passinfra.transform import Pass, PassContext
    from passinfra.transform.pass_info import PassInfo


@dataclass
class _StageTrack:
    label: str
    passes: int
    done: int = 0
    functions: int = 0
    started: float = 0.0
    task: Any = None


class BuildProgress(PassInstrument):
    """Reports stage progress of ``pipelines`` (run one after the other)."""

    uses_module = False  # it reads len(mod) only; batching stays allowed

    def __init__(
        self, pipelines: list[Pass], ctx: PassContext, live: bool | None = None, log: TextIO | None = None
    ) -> None:
        self._leaves: list[tuple[str, _StageTrack]] = []
        batch = batching_allowed(ctx)
        for pipeline in pipelines:
            for stage in build_plan(pipeline, ctx, batch=batch).stages:
                names = [leaf.name for leaf in stage.leaves]
                shown = (
                    ", ".join(names)
                    if len(names) <= 3
                    else f"{names[0]} ... {names[-1]} ({len(names)} passes)"
                )
                track = _StageTrack(f"{stage.kind} stage: {shown}", len(names))
                self._leaves.extend((name, track) for name in names)
        self._next = 0
        self._stage_count = len({id(track) for _, track in self._leaves})
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

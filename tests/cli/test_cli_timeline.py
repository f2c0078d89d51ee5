"""The timeline picture names what it shows: a legend of the passes, and the driver's
time in a stage that runs on the workers told apart from its own passes."""

from __future__ import annotations

from raypass_cli.trace import Span, _within_a_stage, write_timeline_png
from scheduler.stats import RunStats, StageStats, WorkEvent
from tests.cli.conftest import png_size


def _run() -> tuple[list[Span], RunStats]:
    """A driver pass, then a 2 s stage on two workers whose first pass's driver span
    covers it, as a batched stage's does."""
    spans = [Span("FuseOps", 100.0, 0.2, "pass"), Span("LowerToPrimFunc", 100.19, 2.02, "pass")]
    stats = RunStats(backend="ray", num_workers=2, worker_pids={0: 11, 1: 12})
    stats.stages.append(StageStats(4, "function", ["LowerToPrimFunc"], 8, start=100.2, wall_seconds=2.0))
    for i in range(8):
        start = 100.3 + 0.4 * (i // 2)
        stats.events.append(WorkEvent(3, "LowerToPrimFunc", f"f{i}", i % 2, start, 0.4, (), 4))
    return spans, stats


def test_the_driver_waiting_on_a_stage_is_told_apart_from_its_passes():
    stage = {"ts": 200.0, "dur": 2000.0}
    assert _within_a_stage({"ts": 190.0, "dur": 2020.0}, [stage])  # the batched stage's first pass
    assert not _within_a_stage({"ts": 0.0, "dur": 200.0}, [stage])  # a pass before it
    assert not _within_a_stage({"ts": 0.0, "dur": 350.0}, [stage])  # mostly before it


def test_the_legend_makes_room_for_itself(tmp_path):
    spans, stats = _run()
    path, width, height = write_timeline_png(tmp_path / "timeline.png", spans, stats)
    assert png_size(path) == (width, height)
    bare, _, bare_height = write_timeline_png(tmp_path / "bare.png", [], None)
    assert height > bare_height  # lanes and the legend's rows

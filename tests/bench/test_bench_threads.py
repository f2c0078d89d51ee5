"""bench/threads.py's report: its headline row for results.md (the build-time budget)."""

from __future__ import annotations

from bench.common import Sample, headline_rows
from bench.threads import BUILD_BUDGET, render

POOL = {"raypass pool": {"tiny_us": 0.3, "tiny_after_gap_us": 0.4, "large_us": 45.0, "idle_cpu_share": 0.0,
                         "fork_child_ok": True, "large_worker_chunks": 390, "large_stolen_chunks": 10,
                         "tiny_worker_sleeps": 0}}


def build_samples(with_s: float, without_s: float) -> dict[str, Sample]:
    return {"with Parallelize": Sample("a", [with_s]), "without Parallelize": Sample("b", [without_s]),
            "with Parallelize (CPU)": Sample("c", [with_s]),
            "without Parallelize (CPU)": Sample("d", [without_s])}


def test_the_build_time_ratio_is_judged_against_the_budget_in_the_headline():
    notes = {"load average (1, 5, 15 min)": "1.00, 1.00, 1.00"}
    within = headline_rows(render([], build_samples(10.0, 9.0), POOL, notes, "0%", 5, 5))
    over = headline_rows(render([], build_samples(12.0, 9.0), POOL, notes, "0%", 5, 5))
    assert [(r[1], r[3], r[4]) for r in within] == [("1.111", f"<= {BUILD_BUDGET}", "met")]
    assert over[0][1] == "1.333" and over[0][4].startswith("MISSED")
    assert headline_rows(render([], None, POOL, notes, "0%", 5, 5)) == []  # no build run, no row

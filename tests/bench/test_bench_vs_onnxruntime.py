"""The measuring helpers of bench/vs_onnxruntime.py: blocks of back-to-back calls."""

from __future__ import annotations

import bench.vs_onnxruntime as vs
from bench.common import headline_rows


def test_a_block_is_the_median_of_its_counted_calls_after_one_uncounted_call(monkeypatch):
    monkeypatch.setattr(vs, "IDLE_GAP_SECONDS", 0.0)
    clock = iter([0.0, 1.0, 10.0, 13.0, 20.0, 22.0])  # calls of 1, 3 and 2 s
    monkeypatch.setattr(vs.time, "perf_counter", lambda: next(clock))
    calls = []
    assert vs.block(lambda: calls.append(1), 3)() == 2.0
    assert len(calls) == 4  # the first call after the gap is not counted


def test_blocks_last_about_the_block_time_within_their_bounds(monkeypatch):
    for seconds, expected in ((1.0, vs.MIN_BLOCK_CALLS), (1e-6, vs.MAX_BLOCK_CALLS), (0.01, 5)):
        clock = iter([0.0, seconds])
        monkeypatch.setattr(vs.time, "perf_counter", lambda clock=clock: next(clock))
        assert vs.block_calls(lambda: None) == expected


def test_the_headline_judges_the_three_targets():
    rows = headline_rows(vs.headline_table(0.9, (1.7, "AlexNet"), 1.2, 4))
    assert [(r[1], r[3], r[4].split()[0]) for r in rows] == [
        ("0.90", "<= 1.0", "met"), ("1.70", "<= 1.5", "MISSED"), ("1.20", "<= 1.0", "MISSED")]
    assert "AlexNet" in rows[1][0] and "4 models" in rows[0][0]

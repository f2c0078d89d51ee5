"""The pure helpers of bench/end_to_end.py: run order, ratios, verdicts, the table, parsing.
No process is started here."""

from __future__ import annotations

import pytest

from bench.common import headline_rows
from bench.end_to_end import (
    Group,
    carries_marker,
    error_lines,
    group_rows,
    headline_table,
    interleave_order,
    judge,
    parse_built_line,
    parse_models,
    phase_groups,
    pool_misses,
    ratio_row,
    render_table,
    round_differences,
    round_ratios,
    summary,
)


def test_interleaved_order_runs_every_variant_once_per_round_warmup_first():
    order = interleave_order(["a", "b", "c"], repeats=2, warmup=1)
    assert [key for _, key, _ in order] == ["a", "b", "c"] * 3
    assert [r for r, _, _ in order] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert [w for _, _, w in order] == [True] * 3 + [False] * 6


def test_summary_ratios_and_differences_pair_runs_of_the_same_round():
    assert summary([3.0, 1.0, 2.0]) == (2.0, 1.0, 3.0)
    assert round_ratios([1.0, 3.0], [2.0, 2.0]) == [0.5, 1.5]
    assert round_differences([1.0, 3.0], [2.0, 2.0]) == [-1.0, 1.0]


def test_judge_passes_at_or_under_the_target_and_says_by_how_much_it_fails():
    assert judge(0.65, 0.65) == "pass"
    assert judge(0.5, 0.65) == "pass"
    assert judge(0.75, 0.5, " s") == "fail (over by 0.25 s, 50%)"


def test_ratio_row_is_the_ratio_of_medians_with_the_range_of_round_ratios():
    row = ratio_row("m", "pool", [1.0, 2.0, 6.0], [4.0, 4.0, 4.0], target=0.65)
    assert (row.median, row.range) == ("2.00", "1.00-6.00")
    assert row.ratio == "0.50 (rounds 0.25-1.50)"
    assert (row.target, row.verdict) == ("<= 0.65", "pass")
    assert ratio_row("m", "private", [8.0] * 3, [4.0] * 3, target=None).verdict == "(for comparison)"


def test_rows_of_a_group_with_fixed_cost_and_an_unavailable_variant():
    groups = phase_groups(["mlp"], "own-pool", {"mlp": "zoo:mlp"})
    group: Group = groups["pool2"][0]
    assert [v.key for v in group.variants] == ["local", "pool2", "auto"]
    group.runs = {"local": [1.0, 1.2, 1.1], "pool2": [1.3, 1.5, 1.4]}
    group.unavailable = {"auto": "pool start failed"}
    rows = group_rows(group, "own-pool")
    by_variant = {row.variant: row for row in rows}
    assert by_variant["local"].ratio == "1.00 (baseline)"
    fixed = by_variant["fixed cost: warm pool (2 workers) - local"]
    assert (fixed.median, fixed.range, fixed.verdict) == ("+0.30", "+0.30 to +0.30 (rounds)", "pass")
    assert by_variant["auto, pool running"].verdict == "not available: pool start failed"
    table = render_table(rows).splitlines()
    assert table[0].startswith("| model | variant | median s |") and len(table) == 2 + len(rows)


def test_the_headline_keeps_the_rows_with_a_target_and_results_md_reads_it_back():
    groups = phase_groups(["mlp"], "own-pool", {"mlp": "zoo:mlp"})
    group: Group = groups["pool2"][0]
    group.runs = {"local": [1.0, 1.2, 1.1], "pool2": [1.3, 1.5, 1.4], "auto": [1.0, 1.1, 1.3]}
    rows = group_rows(group, "own-pool")
    text = "intro\n\n" + headline_table(rows) + "\n\n" + render_table(rows) + "\n"
    read = headline_rows(text)
    # local is the baseline (no target); pool, fixed cost and auto have targets
    assert [r[0] for r in read] == [
        "zoo:mlp: ray N=2, warm pool / local",
        "zoo:mlp: fixed cost: warm pool (2 workers) - local",
        "zoo:mlp: auto, pool running / local",
    ]
    pool = read[0]
    assert pool[1:4] == ["1.27", "rounds 1.25-1.30", "<= 1.10"] and pool[4].startswith("fail")
    assert read[1][1:4] == ["+0.30", "+0.30 to +0.30 (rounds)", "<= 0.50 s"]


def test_phases_put_n1_on_its_own_pool_or_on_the_shared_one():
    own = phase_groups(["densenet121"], "own-pool", {"densenet121": "d.onnx"})
    assert [v.key for v in own["pool2"][0].variants] == ["local", "pool2", "private2"]
    assert [(v.key, v.env) for v in own["pool1"][0].variants] == [("local", "nopool"), ("pool1", "pool1")]
    shared = phase_groups(["densenet121"], "shared-pool", {"densenet121": "d.onnx"})
    assert shared["pool1"] == []
    assert [(v.key, v.env) for v in shared["pool2"][0].variants][-1] == ("pool1", "pool2")


def test_parsing_the_compile_line_and_the_model_list():
    line = "wrote x.so (+ .raypass.json, .weights.bin): 4 kernels, built in 0.53s on the ray backend\n"
    assert parse_built_line(line) == (0.53, "ray")
    assert parse_built_line("nothing") == (None, None)
    pooled = "built in 0.46s on the ray backend (warm pool at 127.0.0.1:45485, 2 workers)"
    assert parse_built_line(pooled) == (0.46, "ray (warm pool, 2 workers)")
    auto = (
        "built in 0.3s on the ray backend (warm pool at 127.0.0.1:1, 2 workers; auto: estimated "
        "0.18s local vs 0.17s on 2 Ray workers (warm pool, no start-up))\n"
    )
    assert parse_built_line(auto)[1].endswith("on 2 Ray workers (warm pool, no start-up))")
    assert pool_misses(["ray (warm pool, 2 workers)", "ray (a private pool (this scheduler's Ray))"], 2) == 1
    assert pool_misses(["ray (warm pool, 2 workers)", "ray (warm pool, 1 workers)"], 1) == 1
    failed = "[raypass] 11/15 module stage: FuseOps\nTraceback (most recent call last):\nValueError: bad\n"
    assert error_lines(failed) == ["Traceback (most recent call last):", "ValueError: bad"]
    assert parse_models("mlp, densenet121,mlp") == ["densenet121", "mlp"]
    with pytest.raises(ValueError, match="unknown model"):
        parse_models("vgg")


def test_processes_are_ours_by_their_ray_tmpdir_or_a_path_under_our_directory():
    root = "/tmp/rpe2e-abc"
    assert carries_marker(b"A=1\0RAY_TMPDIR=/tmp/rpe2e-abc/pool2-ray\0", b"", root)
    assert carries_marker(b"RAY_TMPDIR=/tmp/rpe2e-abc", b"", root)
    assert not carries_marker(b"RAY_TMPDIR=/tmp/rpe2e-abcd\0", b"", root)
    assert carries_marker(b"", b"raylet\0--session_dir=/tmp/rpe2e-abc/nopool-ray/ray/s", root)
    assert not carries_marker(b"HOME=/root\0", b"python\0-m\0pytest", root)


def test_a_pool_row_whose_runs_did_not_use_the_warm_pool_is_invalid():
    group = phase_groups(["mlp"], "own-pool", {"mlp": "zoo:mlp"})["pool1"][0]
    group.runs = {"local": [1.0, 1.0, 1.0], "pool1": [1.1, 1.1, 9.0]}
    group.backends = {"pool1": ["ray (warm pool, 1 workers)"] * 2 + ["ray (a private pool)"]}
    verdicts = [row.verdict for row in group_rows(group, "own-pool")[1:]]
    assert (
        verdicts
        == ["invalid: 1 of 3 runs did not run on the warm pool with 1 worker(s) (ray (a private pool))"] * 2
    )

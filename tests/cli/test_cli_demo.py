"""``raypass demo`` end to end on a local Ray (the one CLI test that starts Ray)."""

from __future__ import annotations

import json
import os
import re

from tests.cli.conftest import png_size, table_rows

SMALL_TRANSFORMER = "zoo:transformer?layers=1&hidden=32&seq=8&vocab=32"


def test_demo_builds_on_ray_verifies_and_traces(raypass, tmp_path):
    result = raypass("demo", "--model", SMALL_TRANSFORMER, "--workers", "2", "--out-dir", "out", timeout=400)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"max abs difference \S+ -> PASS", out)
    assert "Workers (ray: private pool)" in out  # no warm pool: the demo started its own

    # the trace: valid trace-event JSON, a lane for the driver and one per worker
    trace = json.loads((tmp_path / "out" / "trace.json").read_text())
    events = trace["traceEvents"]
    for event in events:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(event), event
    lanes = {e["args"]["name"].split(" (")[0]: e["tid"] for e in events if e["ph"] == "M"}
    assert set(lanes) == {"driver", "worker 0", "worker 1", "function stages"}
    _check_what_the_simulator_calibrates_on(trace)
    # (pass, function) slices: on both worker lanes, and on the driver's for the stages
    # with a single function (before FuseOps), which the scheduler runs in the driver
    worker_slices = [e for e in events if e["ph"] == "X" and e["cat"] == "function"]
    tids = {e["tid"] for e in worker_slices}
    assert {lanes["worker 0"], lanes["worker 1"]} <= tids <= set(lanes.values())
    assert all(e["args"]["function"] for e in worker_slices)

    # per pass, the worker slices sum to the table's "worker CPU ms"
    rows = table_rows(out, "Pass timing")
    checked = 0
    for name, cells in rows.items():
        if name == "total" or cells[2] == "-":
            continue
        traced_ms = sum(e["dur"] for e in worker_slices if e["name"] == name) / 1e3
        assert abs(traced_ms - float(cells[2])) <= 0.002 * len(worker_slices) + 1e-3, (name, traced_ms, cells)
        checked += 1
    assert checked >= 8  # the batched graph passes and the codegen passes

    # the timeline picture has the size the demo states
    stated = re.search(r"timeline: (\S+) \((\d+)x(\d+)\)", out)
    assert stated is not None
    assert png_size(tmp_path / "out" / "timeline.png") == (int(stated.group(2)), int(stated.group(3)))


def _check_what_the_simulator_calibrates_on(document: dict) -> None:
    """The trace holds the function stages, which stage each slice belongs to, and the
    run's counters: what bench/simulator.py predicts other worker counts from."""
    from bench.simulator import predict, profile_from_trace

    run = document["otherData"]["raypass_run"]
    assert run["num_workers"] == 2 and run["cpus"] == os.cpu_count()
    events = [e for e in document["traceEvents"] if e["ph"] == "X"]
    stages = [e for e in events if e["cat"] == "stage"]
    work = [e for e in events if e["cat"] == "function"]
    assert stages and {e["args"]["stage"] for e in work} <= {e["args"]["stage"] for e in stages}
    profile = profile_from_trace(document)
    shipped = {e["args"]["stage"] for e in stages if not e["args"]["ran_in_driver"]}
    assert shipped and [stage.index for stage in profile.stages] == sorted(shipped)
    # every (stage, function) with a slice in a shipped stage has its cost
    assert sum(len(stage.costs) for stage in profile.stages) == len(
        {(e["args"]["stage"], e["args"]["function"]) for e in work if e["args"]["stage"] in shipped})
    assert 0 < profile.serial_seconds < profile.process_seconds
    assert predict(profile, 1) > predict(profile, 2)

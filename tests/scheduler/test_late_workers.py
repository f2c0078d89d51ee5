"""Workers that come up late still get work: a private pool serves from its first worker
on, and each worker that comes up after the run began takes work from the queue at once
(counters of a real private pool, in a program of its own: the test session's own Ray
would otherwise serve the scheduler)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import json
from passinfra.transform import PassContext, Sequential
from scheduler import Scheduler
from tests.scheduler import passes_for_tests as P

mod = P.chain_module(250)
pipeline = Sequential([P.sleep_20ms, P.add_to_multiply], opt_level=0)
# no head start: the driver waits for its first worker rather than working itself
with Scheduler(backend="ray", num_workers=2, cpus_per_worker=0.5) as sched, \\
        PassContext(config={"scheduler.head_start": False}):
    out = sched.run(pipeline, mod)
    stats = sched.last_run
first = {}
for event in stats.events:
    first[event.worker] = min(first.get(event.worker, event.start), event.start)
print(json.dumps({
    "same": out.astext() == pipeline(mod).astext(),
    "workers": stats.workers,
    "answered": sorted({r.slot for r in stats.calls if r.kind.value == "answered"}),
    "functions": {str(slot): n for slot, n in stats.worker_functions.items()},
    "first_start": {str(slot): t for slot, t in first.items()},
    "notes": stats.notes,
}))
"""


def test_a_worker_that_comes_up_late_still_gets_work(ray_tmpdir):
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    # worker 1 takes 2.5 s longer to come up than worker 0, as on a loaded node: beyond
    # what a busy machine's start-up alone puts between two workers (0.6 s seen), within
    # the 5 s the stage takes on one worker
    env.update(RAY_TMPDIR=str(ray_tmpdir), PYTHONPATH=str(ROOT), RAYPASS_SLOW_START="1=2.5")
    proc = subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["same"] and result["workers"] == "private pool"
    # the run began on worker 0 alone; worker 1 joined it and took part of the stage
    assert result["answered"] == [0, 1]
    assert result["first_start"]["1"] - result["first_start"]["0"] > 1.0
    assert 0 < result["functions"]["1"] < 250 and sum(result["functions"].values()) == 250
    assert any(note.startswith("worker 1 joined during stage") for note in result["notes"])


def test_a_worker_announced_while_the_run_begins_is_not_missed():
    """The gateway may announce a worker after the snapshot its answer to "begin" holds
    but before that answer arrives; the driver still sees it up, and counts every
    worker that joins once."""
    from collections import deque

    from scheduler.pool.gateway import GatewayTransport
    from scheduler.pool.transport import SlotView

    transport = GatewayTransport.__new__(GatewayTransport)  # no pool: only its bookkeeping
    transport._done, transport._joined, transport._announced, transport.slots = deque(), [], {}, []
    assert transport._take(("ready", 1, (1, 0, {"slot": 1, "ready": True, "pid": 7})))
    snapshot = [SlotView(0, 0, {"slot": 0, "ready": True}), SlotView(1, 0, {"slot": 1, "ready": False})]
    transport._begin(snapshot)
    assert transport.is_ready(1) and transport.slots[1].info["pid"] == 7
    transport.slots[1] = SlotView(1, 0, {"slot": 1, "ready": False})  # a worker still starting ...
    for _ in range(2):  # ... announced twice (a refresh saw it too)
        transport._take(("ready", 1, (1, 0, {"slot": 1, "ready": True})))
    assert transport.joined() == [1] and transport.joined() == []

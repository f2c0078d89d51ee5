"""How long a private pool takes to start on this machine, by worker count.

``backend="auto"`` weighs the start-up of a private pool against the work it would
spread. That time depends on the machine far more than on the model (2 workers start in
about 5 s on the 2-core development machine, 15 in 11.8 s on a 16-core one), so every
private pool that starts records what it took here (``startup_times.json`` beside the
warm pool's record, ``scheduler.pool.pool_dir``), and the estimate uses the machine's own
measurements: the median of the last few for that worker count, else the nearest
measured count moved along the prior's slope, else the prior itself.

The prior is the line through the two measurements above (4.8 s for 2 workers, 11.8 s
for 15): ``PRIOR_BASE_SECONDS + PRIOR_SECONDS_PER_WORKER * N``.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from pathlib import Path

FILE_NAME = "startup_times.json"
KEEP = 5  # measurements kept per worker count (the newest)
PRIOR_BASE_SECONDS = 3.7
PRIOR_SECONDS_PER_WORKER = 0.54


def _path() -> Path:
    from scheduler import pool

    return pool.pool_dir() / FILE_NAME


def measured() -> dict[int, list[float]]:
    """``{workers: [seconds, ...]}`` recorded on this machine (oldest first)."""
    try:
        raw = json.loads(_path().read_text())
        return {int(workers): [float(s) for s in seconds][-KEEP:] for workers, seconds in raw.items()}
    except (OSError, ValueError, TypeError, AttributeError):  # none yet, or a foreign file
        return {}


def record(workers: int, seconds: float) -> None:
    """Add one private pool's start-up. Best effort: a read-only cache costs the estimate
    its calibration, never the build."""
    if workers < 1 or not seconds > 0:
        return
    times = measured()
    times[workers] = [*times.get(workers, []), round(seconds, 3)][-KEEP:]
    write_json(_path(), {str(n): s for n, s in sorted(times.items())})


def write_json(path: Path, data: object) -> None:
    """A measurement file of this machine, written whole and renamed (two compiles
    finishing together leave one valid file). Best effort: a read-only cache costs the
    estimates their calibration, never the build."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".json")
        with os.fdopen(fd, "w") as out:
            json.dump(data, out)
        os.replace(temporary, path)
    except OSError:
        pass


def prior(workers: int) -> float:
    """The start-up the prior line gives ``workers`` (no measurement on this machine)."""
    return PRIOR_BASE_SECONDS + PRIOR_SECONDS_PER_WORKER * workers


def expected(workers: int) -> tuple[float, str]:
    """The seconds a private pool of ``workers`` should take to start here, and where
    the number comes from (for ``backend_reason``)."""
    times = measured()
    if workers in times:
        return statistics.median(times[workers]), f"measured here, {len(times[workers])} starts"
    if times:
        nearest = min(times, key=lambda n: (abs(n - workers), n))
        seconds = statistics.median(times[nearest]) + PRIOR_SECONDS_PER_WORKER * (workers - nearest)
        return max(seconds, 0.0), f"from {nearest} workers measured here"
    return prior(workers), "prior"


__all__ = ["FILE_NAME", "expected", "measured", "prior", "record", "write_json"]

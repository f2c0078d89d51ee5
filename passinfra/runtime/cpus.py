"""How many CPUs this process may use: the default thread count of a compiled library.

The rule (:func:`available_cpus`): the CPUs in the process's affinity mask
(``os.sched_getaffinity``: ``taskset``, ``docker --cpuset-cpus``), capped by the tightest
CPU quota of the cgroups that contain the process (``docker --cpus``, a Kubernetes CPU
limit), rounded up: a quota of 1.5 CPUs lets two threads run three quarters of the time
each, which finishes an inference sooner than one thread would. Both cgroup versions are
read: v2's ``cpu.max`` (``"max 100000"`` or ``"150000 100000"``) and v1's
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1: none), in the process's own
cgroup and every ancestor up to the mount point, since a parent's limit binds its
children too. Missing or unreadable files mean no limit.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

PROC_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"


def available_cpus(proc_cgroup: str = PROC_CGROUP, cgroup_root: str = CGROUP_ROOT,
                   affinity: set[int] | None = None) -> int:
    """The CPUs this process may use (module docstring); at least 1. ``affinity``
    replaces the process's affinity mask (tests)."""
    if affinity is None:
        try:
            affinity = os.sched_getaffinity(0)
        except (AttributeError, OSError):  # not Linux: every CPU of the machine
            affinity = set(range(os.cpu_count() or 1))
    cpus = max(len(affinity), 1)
    quota = cgroup_cpu_quota(proc_cgroup, cgroup_root)
    if quota is not None:
        cpus = min(cpus, max(math.ceil(quota), 1))
    return cpus


def cgroup_cpu_quota(proc_cgroup: str = PROC_CGROUP, cgroup_root: str = CGROUP_ROOT) -> float | None:
    """The tightest CPU quota, in CPUs, of the cgroups containing this process (as
    ``proc_cgroup`` lists them, under the mount point ``cgroup_root``), or None."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    root = Path(cgroup_root)
    quotas: list[float] = []
    for line in lines:
        fields = line.split(":", 2)
        if len(fields) != 3:
            continue
        hierarchy, controllers, path = fields
        if hierarchy == "0" and not controllers:  # v2 (also mounted at unified/ on hybrid hosts)
            for base in _unique((root, root / "unified")):
                quotas += (q for d in _ancestors(base, path) if (q := _v2_quota(d)) is not None)
        elif "cpu" in controllers.split(","):  # v1: the cpu controller's own mount
            mounts = (root / controllers, root / "cpu", root / "cpu,cpuacct", root / "cpuacct,cpu")
            for base in _unique(mounts):
                quotas += (q for d in _ancestors(base, path) if (q := _v1_quota(d)) is not None)
    return min(quotas) if quotas else None


def _unique(paths: tuple[Path, ...]) -> list[Path]:
    """The paths that exist, each directory once (cpu is often a link to cpu,cpuacct)."""
    seen: set[str] = set()
    found = []
    for path in paths:
        if path.is_dir() and (real := os.path.realpath(path)) not in seen:
            seen.add(real)
            found.append(path)
    return found


def _ancestors(base: Path, path: str) -> Iterator[Path]:
    """``base/path`` and each of its parents up to ``base`` (those that exist: inside a
    container the process's path may name a cgroup of the host, mounted as ``base``)."""
    parts = [part for part in path.strip().split("/") if part and part != ".."]
    for depth in range(len(parts), -1, -1):
        directory = base.joinpath(*parts[:depth])
        if directory.is_dir():
            yield directory


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _v2_quota(directory: Path) -> float | None:
    text = _read(directory / "cpu.max")
    fields = text.split() if text else []
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1])


def _v1_quota(directory: Path) -> float | None:
    quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
    if quota is None or period is None:
        return None
    return _ratio(quota, period)


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


__all__ = ["available_cpus", "cgroup_cpu_quota"]

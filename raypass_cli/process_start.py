"""When the command the user waits for began, as ``time.time()``.

Usually this process's own start (the trace's "start-up" span runs from there to the
model's load). A command served by a warm driver (``raypass_cli.forkserver``) runs in a
child forked long after its parent started: there the start is the ``raypass`` process
the user typed, which the child is told. Imports nothing heavy: the warm driver's
client reads it before anything else is loaded.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_IMPORTED = time.time()  # the fallback start: when the command line's modules were loading
_told: float | None = None  # the start of the command a warm driver's child runs


def set_command_start(started: float) -> None:
    """This process runs a command that began at ``started`` in another process."""
    global _told
    _told = started


def process_start_time() -> float:
    """When this command began (Linux: the process's start time in /proc, in clock ticks
    since boot, set against the boot clock now; elsewhere: when this module was imported,
    which misses the interpreter's own start)."""
    if _told is not None:
        return _told
    try:
        fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
        since_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # starttime, field 22 of proc(5)
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - since_boot
        return min(time.time() - age, _IMPORTED)
    except (OSError, ValueError, IndexError, AttributeError):
        return _IMPORTED

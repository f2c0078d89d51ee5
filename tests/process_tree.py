"""The processes a process started, read from /proc (Linux): what the tests of a pool's
start-up check it runs, and does not."""

from __future__ import annotations

import os


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (its children, theirs, ...)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rpartition(")")[2].split()[1])
        except (ValueError, OSError, IndexError):  # gone meanwhile
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def descendant_commands(root: int) -> list[str]:
    """The command lines (arguments joined by spaces) of :func:`descendants`, as Ray's
    processes name themselves (``ray::FunctionWorker``, ``.../raylet/raylet ...``)."""
    commands = []
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                commands.append(cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip())
        except OSError:
            continue
    return commands

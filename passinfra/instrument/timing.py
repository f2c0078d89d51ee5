"""PassTimingInstrument: a tree of pass durations, rendered in TVM's format.

Each pass run becomes a node under the pass that was running when it started (a
Sequential's passes nest under it). A failed pass closes its node through
``on_pass_error``, so the tree stays consistent and ``render()`` works at any time,
even from inside a pass (open passes show their time so far).

Every rendered line keeps one format, failed or not, so tools that parse the report
never meet a line they do not know; which runs failed is a separate query
(:meth:`PassTimingInstrument.failed_passes`, or ``"failed"`` in :meth:`timings`).

Parallel runs: the scheduler hands what workers measured to the ``on_remote_timings``
hook, which merges it with :meth:`PassTimingInstrument.record_remote`; the pass's line
then ends with ``[workers: <cpu>us cpu, <n> functions]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from passinfra.errors import PassNotFoundError
from passinfra.instrument.base import PassInstrument

if TYPE_CHECKING:
    from collections.abc import Mapping

    from passinfra.ir.module import IRModule
    from passinfra.transform.pass_info import PassInfo


@dataclass
class _Profile:
    name: str
    start: float = 0.0
    wall: float = 0.0  # time.time() at the start, for timelines (start is perf_counter's)
    seconds: float | None = None  # None while the pass is running
    failed: bool = False
    children: list[_Profile] = field(default_factory=list)
    worker_cpu_seconds: float = 0.0
    worker_functions: int = 0
    worker_ids: set[Any] = field(default_factory=set)

    def elapsed(self, now: float) -> float:
        return self.seconds if self.seconds is not None else now - self.start


class PassTimingInstrument(PassInstrument):
    """Times every pass run under its context; ``render()`` / ``timings()`` report.

    Data is cleared when the context exits. One instance belongs to one thread's context.
    It never looks at the module, which lets a parallel scheduler batch function passes
    while it is active (``uses_module = False``).
    """

    uses_module = False

    def __init__(self) -> None:
        self._root = _Profile("root")
        self._open: list[_Profile] = []  # passes started and not finished, outermost first

    # ----- hooks -------------------------------------------------------------------
    def run_before_pass(self, mod: IRModule, info: PassInfo) -> None:
        node = _Profile(info.name, start=time.perf_counter(), wall=time.time())
        parent = self._open[-1] if self._open else self._root
        parent.children.append(node)
        self._open.append(node)

    def run_after_pass(self, mod: IRModule, info: PassInfo) -> None:
        self._close(info.name, failed=False)

    def on_pass_error(self, mod: IRModule, info: PassInfo, error: BaseException) -> None:
        self._close(info.name, failed=True)

    def exit_pass_ctx(self) -> None:
        self.clear()

    def clear(self) -> None:
        """Forget every measurement."""
        self._root = _Profile("root")
        self._open = []

    def _close(self, name: str, failed: bool) -> None:
        now = time.perf_counter()
        # close the innermost open pass with this name and anything opened inside it,
        # so a hook sequence broken by an error never leaves stale open passes behind
        for depth in range(len(self._open) - 1, -1, -1):
            if self._open[depth].name == name:
                for node in self._open[depth:]:
                    node.seconds = now - node.start
                    node.failed = node.failed or failed or node is not self._open[depth]
                del self._open[depth:]
                return

    # ----- merging worker measurements ---------------------------------------------------
    def on_remote_timings(self, info: PassInfo, per_worker: Mapping[Any, tuple[float, int]]) -> None:
        for worker_id, (cpu_seconds, num_functions) in per_worker.items():
            self.record_remote(info.name, worker_id, cpu_seconds, num_functions)

    def record_remote(self, pass_name: str, worker_id: Any, cpu_seconds: float, num_functions: int) -> None:
        """Add what one worker measured for the latest run of ``pass_name`` (open, or
        else the last finished one). Called by the scheduler, in the driver."""
        node = self._latest(pass_name)
        if node is None:
            raise PassNotFoundError(
                f"PassTimingInstrument has no run of pass {pass_name!r} to attach worker times to"
            )
        node.worker_cpu_seconds += float(cpu_seconds)
        node.worker_functions += int(num_functions)
        node.worker_ids.add(worker_id)

    def _latest(self, pass_name: str) -> _Profile | None:
        for node in reversed(self._open):
            if node.name == pass_name:
                return node
        found = None
        for node in _preorder(self._root):
            if node.name == pass_name:
                found = node
        return found

    # ----- reports -------------------------------------------------------------------
    def spans(self) -> list[tuple[str, float, float]]:
        """Every finished pass run as (name, start as ``time.time()``, seconds), each after
        the passes it ran (the order they finished): the same measurements as
        :meth:`timings`, for a timeline that agrees with the table to the microsecond."""
        result: list[tuple[str, float, float]] = []

        def visit(node: _Profile) -> None:
            for child in node.children:
                visit(child)
            if node is not self._root and node.seconds is not None:
                result.append((node.name, node.wall, node.seconds))

        visit(self._root)
        return result

    def timings(self) -> list[dict[str, Any]]:
        """The tree as dicts: name, total_us, self_us, total_pct, parent_pct, failed,
        workers (``{"cpu_us", "functions", "worker_ids"}`` or None), children."""
        now = time.perf_counter()
        top_total = sum(child.elapsed(now) for child in self._root.children)
        result: list[dict[str, Any]] = []
        # (node, parent total seconds, list to append the node's dict to)
        stack = [(child, top_total, result) for child in reversed(self._root.children)]
        while stack:
            node, parent_total, siblings = stack.pop()
            total = node.elapsed(now)
            own = total - sum(child.elapsed(now) for child in node.children)
            entry: dict[str, Any] = {
                "name": node.name,
                "total_us": total * 1e6,
                "self_us": own * 1e6,
                "total_pct": _percent(total, top_total),
                "parent_pct": _percent(total, parent_total),
                "failed": node.failed,
                "running": node.seconds is None,
                "workers": _workers(node),
                "children": [],
            }
            siblings.append(entry)
            stack.extend((child, total, entry["children"]) for child in reversed(node.children))
        return result

    def failed_passes(self) -> list[str]:
        """The names of the pass runs that failed, in the order they started (a pass
        that raised, and the passes it enclosed, e.g. its Sequential's open ones)."""
        return [node.name for node in _preorder(self._root) if node.failed]

    def render(self) -> str:
        """One line per pass run, children indented by one tab:
        ``name: <total>us [<self>us] (<total%>; <parent%>)``, plus
        `` [workers: <cpu>us cpu, <n> functions]`` for a pass that ran on workers.
        A failed run keeps this format (see :meth:`failed_passes`). Empty if nothing ran."""
        lines: list[str] = []
        stack = [(entry, 0) for entry in reversed(self.timings())]
        while stack:
            entry, depth = stack.pop()
            indent = "\t" * depth
            line = (
                f"{indent}{entry['name']}: {entry['total_us']:.0f}us [{entry['self_us']:.0f}us] "
                f"({entry['total_pct']:.2f}%; {entry['parent_pct']:.2f}%)"
            )
            workers = entry["workers"]
            if workers is not None:
                line += f" [workers: {workers['cpu_us']:.0f}us cpu, {workers['functions']} functions]"
            lines.append(line + "\n")
            stack.extend((child, depth + 1) for child in reversed(entry["children"]))
        return "".join(lines)


def _percent(part: float, whole: float) -> float:
    return part / whole * 100.0 if whole > 0 else 0.0


def _workers(node: _Profile) -> dict[str, Any] | None:
    if not node.worker_ids:
        return None
    return {
        "cpu_us": node.worker_cpu_seconds * 1e6,
        "functions": node.worker_functions,
        "worker_ids": sorted(node.worker_ids, key=repr),
    }


def _preorder(root: _Profile):
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.children))

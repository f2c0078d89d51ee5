"""What each function cost in this machine's earlier builds: the order of the work queue.

A stage's functions that no worker holds wait in the work queue largest first (LPT, see
``scheduler.residency``): by what each took in the same stage of an earlier build (this
module), else in the last stage of this run that ran it, else by its node count. In the
kernel stage every function is new to the run, and a
node count says little about what the C compiler will take: DenseNet-121's
``fused_nn_max_pool2d`` has a dozen nodes and took 174 ms to compile, three times the
median kernel; queued by size it came last, and on 15 workers it held the kernel stage
about 0.2 s after every other worker had finished (16-core run of 2026-11-30). A queue
ordered by the measured seconds of the same functions (LPT on the real costs) ends within
a function of the ideal.

So a run on workers remembers the seconds each function took in each stage of more than
one function (``function_costs.json`` beside the pool's record, the newest
:data:`KEEP` entries), and the next run's placement reads them before it estimates. A
function is known by the stage's passes, its name and its parameters' types: the same
model compiled again finds its kernels; another model's same-named kernel of other
shapes does not. A kernel taken from the compiled-kernel cache cost nothing to compile,
which says nothing about a compile: its time is not remembered. The order decides only
where and when functions run, never what a build produces.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from passinfra.ir.expr import BaseFunc, Function

FILE_NAME = "function_costs.json"
KEEP = 4000  # entries kept, the newest: a DenseNet-121 build adds about 200
# a stage of fewer functions has no order worth learning (the graph stages: one function)
MIN_FUNCTIONS = 8


def _path() -> Path:
    from scheduler import pool

    return pool.pool_dir() / FILE_NAME


def function_key(passes: Sequence[str], name: str, func: BaseFunc) -> str:
    """The function as a stage of ``passes`` sees it, across builds."""
    params = func.params if isinstance(func, Function) else ()
    signature = ",".join(str(param.type_annotation) for param in params)
    return f"{'/'.join(passes)}|{name}|{signature}"


class CostMemory:
    """The seconds of earlier builds (read at the first stage that asks) and of this run
    (written by :meth:`save`)."""

    def __init__(self) -> None:
        self._known: dict[str, float] | None = None
        self._keys: dict[tuple[tuple[str, ...], str], str] = {}  # (stage passes, name) -> key
        self._new: dict[str, float] = {}

    def prior(self, passes: Sequence[str], functions: Mapping[str, BaseFunc]) -> dict[str, float]:
        """The remembered seconds of those of ``functions`` a stage of ``passes`` ran
        before (name -> seconds)."""
        if len(functions) < MIN_FUNCTIONS:
            return {}
        known = self._load()
        stage = tuple(passes)
        found: dict[str, float] = {}
        for name, func in functions.items():
            key = self._keys[(stage, name)] = function_key(stage, name, func)
            if key in known:
                found[name] = known[key]
        return found

    def measured(self, passes: Sequence[str], seconds: Mapping[str, float], cached: set[str]) -> None:
        """What the functions of a stage of ``passes`` took (those in ``cached`` came
        from the kernel cache: not remembered)."""
        stage = tuple(passes)
        for name, value in seconds.items():
            key = self._keys.get((stage, name))
            if key is not None and name not in cached and value > 0:
                self._new[key] = round(value, 5)

    def save(self) -> None:
        """Add this run's measurements to the file (best effort, as every measurement of
        this machine: a read-only cache costs the order its knowledge, never the build)."""
        if not self._new:
            return
        from scheduler.pool.startup_times import write_json

        merged = {key: value for key, value in self._load().items() if key not in self._new}
        merged.update(self._new)  # the newest last: the oldest go first
        write_json(_path(), dict(list(merged.items())[-KEEP:]))
        self._known, self._new = merged, {}

    def _load(self) -> dict[str, float]:
        if self._known is None:
            try:
                data = json.loads(_path().read_text())
                self._known = {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}
            except (OSError, ValueError, TypeError, AttributeError):  # none yet, or a foreign file
                self._known = {}
        return self._known


__all__ = ["FILE_NAME", "KEEP", "MIN_FUNCTIONS", "CostMemory", "function_key"]

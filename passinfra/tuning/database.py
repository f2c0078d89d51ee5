"""The tuning database: the best schedule measured for each kernel on each target.

A record says: on this target (the instruction set the kernels run with, the CPU's
threads), the kernel with this structural hash (a primitive function after FuseOps, the
same in every model that has it) ran fastest with this schedule, in this time, against
the rules' time. A database is a JSON file a user can commit and merge; records of one
(kernel, target) keep the fastest. Compiling with a database
(:mod:`passinfra.codegen.passes.apply_tuning_records`) gives each kernel its record's
schedule; records of another target are not applied.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from passinfra.errors import RaypassError
from passinfra.ir.expr import Function
from passinfra.ir.structural import structural_hash
from passinfra.runtime.cpus import available_cpus
from passinfra.runtime.module import host_isa
from passinfra.transform.schedule import SCHEDULE_ATTR
from passinfra.tuning.space import Schedule

FORMAT = "raypass-tuning/1"


class TuningDatabaseError(RaypassError, ValueError):
    """A tuning database file that cannot be read (names the file and what is wrong)."""


def kernel_key(func: Function) -> str:
    """The key of primitive ``func`` in a database: its structural hash (16 hex digits),
    without a schedule it may carry already."""
    if SCHEDULE_ATTR in func.attrs:
        func = Function(func.params, func.body, func.ret_type,
                        {k: v for k, v in func.attrs.items() if k != SCHEDULE_ATTR})
    return f"{structural_hash(func):016x}"


def current_target(threads: int | None = None) -> dict[str, Any]:
    """This machine as a tuning target: the instruction set the kernels run with (capped
    by ``RAYPASS_MAX_ISA``) and the threads a library runs on (``threads``, default every
    CPU this process may use)."""
    count = threads if threads else available_cpus()
    return {"isa": host_isa(), "threads": int(count)}


def target_text(target: Mapping[str, Any]) -> str:
    return f"{target.get('isa')}, {target.get('threads')} threads"


@dataclass
class TuningRecord:
    kernel: str  # kernel_key
    name: str  # the function's name where it was tuned (for people reading the file)
    target: dict[str, Any]
    schedule: list[list[Any]]  # [[config key, value], ...]
    seconds: float  # the schedule's time (median of a block, on one worker)
    default_seconds: float  # the rules' time, measured with it
    candidates: int = 0  # points measured

    @property
    def schedule_items(self) -> Schedule:
        return tuple((str(key), value) for key, value in self.schedule)


@dataclass
class TuningDatabase:
    records: list[TuningRecord] = field(default_factory=list)

    @staticmethod
    def load(path: str | os.PathLike) -> TuningDatabase:
        """The database in ``path`` (an empty one when the file does not exist)."""
        file = Path(path)
        if not file.exists():
            return TuningDatabase()
        try:
            data = json.loads(file.read_text())
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {FORMAT!r}")
            return TuningDatabase([TuningRecord(**record) for record in data["records"]])
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise TuningDatabaseError(f"tuning database {str(path)!r} cannot be read: {error}") from None

    def save(self, path: str | os.PathLike) -> None:
        """Write the database (records sorted, so a file is the same for the same records)."""
        records = sorted(self.records, key=lambda r: (r.kernel, json.dumps(r.target, sort_keys=True)))
        data = {"format": FORMAT, "records": [asdict(r) for r in records]}
        text = json.dumps(data, indent=1, sort_keys=True)
        tmp = Path(f"{path}.tmp")
        tmp.write_text(text + "\n")
        os.replace(tmp, path)

    def add(self, record: TuningRecord) -> bool:
        """Keep ``record`` unless the database has a faster one for its kernel and target;
        whether it was kept."""
        for index, known in enumerate(self.records):
            if known.kernel == record.kernel and known.target == record.target:
                if record.seconds < known.seconds:
                    self.records[index] = record
                    return True
                return False
        self.records.append(record)
        return True

    def merge(self, others: Iterable[TuningDatabase]) -> TuningDatabase:
        for other in others:
            for record in other.records:
                self.add(record)
        return self

    def lookup(self, kernel: str, target: Mapping[str, Any]) -> TuningRecord | None:
        for record in self.records:
            if record.kernel == kernel and record.target == dict(target):
                return record
        return None

    def for_kernel(self, kernel: str) -> Iterator[TuningRecord]:
        return (record for record in self.records if record.kernel == kernel)


__all__ = ["FORMAT", "TuningDatabase", "TuningDatabaseError", "TuningRecord", "current_target",
           "kernel_key", "target_text"]

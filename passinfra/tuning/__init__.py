"""Kernel tuning: each kernel's schedule space (:mod:`~passinfra.tuning.space`), the
search that measures candidates on worker processes (:mod:`~passinfra.tuning.tuner`,
``passinfra.tune``), and the database of the best schedules that compiles apply
(:mod:`~passinfra.tuning.database`; the ApplyTuningRecords pass)."""

from passinfra.tuning.database import (
           TuningDatabase,
           TuningDatabaseError,
           TuningRecord,
           current_target,
           kernel_key,
)
from passinfra.tuning.space import KNOBS, Knob, all_points, candidates, default_point, knobs_for, neighbours
from passinfra.tuning.tuner import TuneResult, tune

__all__ = ["KNOBS", "Knob", "TuneResult", "TuningDatabase", "TuningDatabaseError", "TuningRecord",
           "all_points", "candidates", "current_target", "default_point", "kernel_key", "knobs_for",
           "neighbours", "tune"]

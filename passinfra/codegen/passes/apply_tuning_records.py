"""ApplyTuningRecords: give each kernel the schedule a tuning database recorded for it.

Config ``codegen.tuning_db`` (a path; CLI ``raypass compile --tuning-db FILE``) names a
database (:mod:`passinfra.tuning.database`). Right after FuseOps, each primitive function
whose key (its structural hash) has a record for this target gets the record's schedule
as its ``Schedule`` attr, which every later pass on it runs under
(:mod:`passinfra.transform.schedule`); a function without one keeps the rules. The
target is this machine's instruction set and the thread count the library will run with
(``codegen.num_threads``, default every CPU): records of another target are not applied,
and a warning (:class:`TuningTargetWarning`) says how many and for which targets. The
database is read once per build, in the process that runs this module pass, so a build
on workers applies exactly what a local one does.

Without the config the pipeline does not hold this pass (``compile_pass_names``).
"""

from __future__ import annotations

import warnings

from passinfra.ir.expr import Function
from passinfra.ir.module import IRModule
from passinfra.transform.config import register_config
from passinfra.transform.context import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass
from passinfra.transform.schedule import SCHEDULE_ATTR

TUNING_DB_CONFIG = "codegen.tuning_db"
register_config(TUNING_DB_CONFIG, str)


class TuningTargetWarning(UserWarning):
    """A tuning database has records for a kernel of the model, but for another target."""


def apply_tuning_records(mod: IRModule, path: str, threads: int | None = None) -> IRModule:
    """``mod`` (after FuseOps) with each primitive function that has a record for this
    target scheduled as recorded."""
    from passinfra.tuning.database import TuningDatabase, current_target, kernel_key, target_text

    database = TuningDatabase.load(path)
    target = current_target(threads)
    out, other_targets = mod, {}
    for gv, func in list(mod.items()):
        if not (isinstance(func, Function) and func.attrs.get("Primitive", 0)):
            continue
        key = kernel_key(func)
        record = database.lookup(key, target)
        if record is None:
            for other in database.for_kernel(key):
                other_targets[target_text(other.target)] = other_targets.get(target_text(other.target), 0) + 1
            continue
        if out is mod:
            out = mod.copy()
        out.update_func(gv, func.with_attr(SCHEDULE_ATTR, record.schedule_items))
    if other_targets:
        found = ", ".join(f"{count} for {text}" for text, count in sorted(other_targets.items()))
        warnings.warn(f"tuning database {path!r}: records of this model's kernels for other targets "
                      f"({found}) are not applied on this one ({target_text(target)})",
                      TuningTargetWarning, stacklevel=2)
    return out


def _apply_tuning_records(mod: IRModule, ctx: PassContext) -> IRModule:
    path = ctx.get_config(TUNING_DB_CONFIG, "")
    if not path:
        return mod
    return apply_tuning_records(mod, path, ctx.get_config("codegen.num_threads", 0) or None)


@register_pass("ApplyTuningRecords")
def ApplyTuningRecords() -> ModulePass:  # noqa: N802 - pass factories are named like classes
    """Schedule each kernel as config ``codegen.tuning_db``'s database records it for this
    target (opt_level 0)."""
    return ModulePass(_apply_tuning_records, PassInfo(0, "ApplyTuningRecords"))


__all__ = ["TUNING_DB_CONFIG", "ApplyTuningRecords", "TuningTargetWarning", "apply_tuning_records"]

"""The one place where instrument hooks wrap a pass body.

Kept apart from the Pass classes so the scheduler can reproduce, in the driver, exactly
the hook sequence of an in-process run while the body runs on workers: it calls
``run_instrumented(pass_info, mod, ctx, body)`` with a body that ships the work out.
"""

from __future__ import annotations

from collections.abc import Callable

from passinfra.instrument.base import PassInstrument
from passinfra.ir.module import IRModule
from passinfra.transform.context import PassContext
from passinfra.transform.errors import add_note
from passinfra.transform.pass_info import PassInfo

PassBody = Callable[[IRModule], IRModule]


def run_instrumented(info: PassInfo, mod: IRModule, ctx: PassContext, body: PassBody) -> IRModule:
    """Run ``body(mod)`` between the instruments' hooks (TVM's order and semantics).

    should_run is asked of every instrument (no short circuit) unless ``info.name`` is in
    ``ctx.required_pass``; if any says False, ``mod`` is returned unchanged and no other
    hook runs. Exceptions from hooks or the body keep their type and gain a note.
    """
    instruments = ctx.instruments
    if not instruments:
        return _run_body(info, mod, body)
    if not ctx.is_required(info.name):
        verdicts = [_call_hook(inst, "should_run", info, mod, info) for inst in instruments]
        if not all(verdicts):
            return mod
    pending_after: list[PassInstrument] = []  # before ran, after not yet
    result = mod
    try:
        for inst in instruments:
            _call_hook(inst, "run_before_pass", info, mod, info)
            pending_after.append(inst)
        result = _run_body(info, mod, body)
        while pending_after:
            _call_hook(pending_after[0], "run_after_pass", info, result, info)
            pending_after.pop(0)
    except BaseException as error:
        for inst in pending_after:
            _notify_error(inst, mod, info, error)
        raise
    return result


def _run_body(info: PassInfo, mod: IRModule, body: PassBody) -> IRModule:
    try:
        return body(mod)
    except BaseException as error:
        add_note(error, f"raised while running pass {info.name!r}")
        raise


def _call_hook(inst: PassInstrument, hook: str, info: PassInfo, *args: object) -> object:
    try:
        return getattr(inst, hook)(*args)
    except BaseException as error:
        add_note(error, f"raised by instrument {inst.name}.{hook} for pass {info.name!r}")
        raise


def _notify_error(inst: PassInstrument, mod: IRModule, info: PassInfo, error: BaseException) -> None:
    # a broken cleanup hook must not hide the original error; record it on that error
    try:
        inst.on_pass_error(mod, info, error)
    except Exception as cleanup_error:
        add_note(error, f"instrument {inst.name}.on_pass_error also failed: {cleanup_error!r}")

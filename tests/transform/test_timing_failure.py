"""PassTimingInstrument after a failing pass: every rendered line keeps the timing
format, and which runs failed is a separate query, the same in-process and on workers."""

from __future__ import annotations

import re

import pytest

from passinfra.instrument import PassTimingInstrument
from passinfra.transform import PassContext, Sequential, module_pass
from tests.scheduler import passes_for_tests as P

# the whole line: nothing may follow the percentages but the workers part of parallel runs
LINE = re.compile(
    r"(\t*)([^\s:]+): (\d+)us \[(-?\d+)us\] \((\d+\.\d\d)%; (\d+\.\d\d)%\)"
    r"( \[workers: \d+us cpu, \d+ functions\])?"
)


class BoomError(Exception):
    """The failure of the test pass (its own type, so nothing else is mistaken for it)."""


@module_pass(opt_level=0, name="Boom")
def boom(mod, ctx):
    raise BoomError("boom")


def _parsed(rendered: str) -> list[re.Match]:
    lines = rendered.splitlines()
    matches = [LINE.fullmatch(line) for line in lines]
    bad = [line for line, match in zip(lines, matches, strict=True) if match is None]
    assert not bad, f"lines not in the timing format: {bad!r}\n{rendered}"
    return matches


def _names(matches: list[re.Match]) -> list[tuple[int, str]]:
    return [(len(m.group(1)), m.group(2)) for m in matches]


def test_every_line_keeps_the_format_after_a_failure_in_process():
    timing = PassTimingInstrument()
    inner = Sequential([P.add_to_multiply, boom], opt_level=0, name="inner")
    with PassContext(instruments=[timing]):
        with pytest.raises(BoomError):
            Sequential([P.identity, inner], opt_level=0, name="outer")(P.chain_module(3))
        after_failure = timing.render()
        failed = timing.failed_passes()
        P.identity(P.chain_module(2))  # the instrument keeps working after the failure
        later = timing.render()
    assert _names(_parsed(after_failure)) == [
        (0, "outer"), (1, "Identity"), (1, "inner"), (2, "AddToMultiply"), (2, "Boom"),
    ]
    assert failed == ["outer", "inner", "Boom"]
    assert _names(_parsed(later))[-1] == (0, "Identity")
    assert timing.failed_passes() == [] and timing.render() == ""  # cleared on exit


def test_failed_passes_is_empty_without_a_failure():
    timing = PassTimingInstrument()
    with PassContext(instruments=[timing]):
        Sequential([P.identity, P.add_to_multiply], opt_level=0)(P.chain_module(2))
        assert timing.failed_passes() == []
        assert [e["failed"] for e in timing.timings()] == [False]


def _failing_pipeline() -> Sequential:
    # a module pass between the stages, so the first function stage finishes on the
    # workers (and its line carries their time) before the failing one starts
    return Sequential([P.add_to_multiply, P.add_helper_function, P.fail_on_f3_factory()],
                      opt_level=0, name="pipeline")


def _run_failing(run, tmp_path) -> tuple[str, list[str]]:
    timing = PassTimingInstrument()
    config = {"scheduler.reproducer_dir": str(tmp_path)}
    with PassContext(instruments=[timing], config=config):
        with pytest.raises(P.MyPassError, match="not welcome"):
            run(_failing_pipeline(), P.chain_module(6))
        return timing.render(), timing.failed_passes()


def test_every_line_keeps_the_format_after_a_failure_on_workers(ray_scheduler, tmp_path):
    sched = ray_scheduler(2)
    rendered, failed = _run_failing(sched.run, tmp_path)
    matches = _parsed(rendered)
    local_rendered, local_failed = _run_failing(lambda pipeline, mod: pipeline(mod), tmp_path)
    # parallel equals sequential: the same passes, nesting and failures
    assert _names(matches) == _names(_parsed(local_rendered)) == [
        (0, "pipeline"), (1, "AddToMultiply"), (1, "AddHelperFunction"), (1, "FailOnF3"),
    ]
    assert failed == local_failed == ["pipeline", "FailOnF3"]
    by_name = {m.group(2): m for m in matches}
    assert by_name["AddToMultiply"].group(7) is not None  # it ran on the workers
    assert by_name["AddHelperFunction"].group(7) is None  # a module pass, in the driver

"""The build's progress log (``raypass compile`` on a pipe): one line per stage of the plan
the scheduler hands over, then of the link step, every line counting all of them."""

from __future__ import annotations

import io
import re

from passinfra import ir
from passinfra.build import build, link_pipeline
from passinfra.ir import op
from passinfra.transform import PassContext
from raypass_cli.progress import BuildProgress
from scheduler import Scheduler

LINE = re.compile(r"\[raypass\] (\d+)/(\d+) (function|module) stage: (.+): (\d+) functions, [0-9.]+s")


def test_every_stage_of_the_build_is_logged_once_in_order(tmp_path) -> None:
    x = ir.var("x", (4,))
    mod = ir.IRModule.from_expr(op.exp(op.add(x, ir.const(1.0))))
    log = io.StringIO()
    progress = BuildProgress([link_pipeline()], live=False, log=log)
    config = {"codegen.cache_dir": str(tmp_path), "codegen.build_cache": False}
    with progress, PassContext(opt_level=3, instruments=[progress], config=config):
        build(mod, scheduler=Scheduler(backend="local"))
    matches = [LINE.fullmatch(line) for line in log.getvalue().splitlines()]
    assert matches and all(matches), log.getvalue()
    numbers = [(int(m.group(1)), int(m.group(2))) for m in matches if m]
    total = len(numbers)
    assert numbers == [(i, total) for i in range(1, total + 1)]
    stages = [m.group(4) for m in matches if m]
    # the scheduler's pipeline first (it starts with type inference), the link step last
    assert stages[0] == "InferType" and stages[-1] == "LinkLibrary"
    assert any("CompileC" in stage for stage in stages)

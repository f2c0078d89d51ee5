"""Reproducers record each pass with its options, and ``raypass replay`` rebuilds exactly
those passes: a pipeline with ``DeadCodeElimination(inline_once=True)`` replays with
``inline_once`` (whose output differs from the default), and files that hold plain pass
names (written before options were recorded) still replay."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from passinfra import ir
from passinfra.ir import op
from passinfra.transform import (
    DeadCodeElimination,
    FoldConstant,
    FunctionPass,
    InferType,
    PassContext,
    PassInfo,
    Sequential,
    register_pass,
    unregister_pass,
)
from scheduler.reproducer import PassSpec, read_header, write_reproducer

INLINE_ONCE = {"name": "DeadCodeElimination", "options": {"inline_once": True, "interprocedural": False}}


class MarkedError(Exception):
    """What FailWhileMarked raises."""


@dataclass(frozen=True)
class FailWhileMarked(FunctionPass):
    """A user's pass with an option: it fails while the file ``marker`` exists."""

    marker: str = ""
    info: ClassVar[PassInfo] = PassInfo(0, "FailWhileMarked")
    reads_module: ClassVar[bool] = False

    def pass_func(self, func: ir.Function, mod: ir.IRModule, ctx: PassContext) -> ir.Function:
        if self.marker and Path(self.marker).exists():
            raise MarkedError(f"{self.marker} exists")
        return func


@pytest.fixture
def fail_while_marked():
    """FailWhileMarked registered (the class itself: its options can be recorded) for one test."""
    register_pass("FailWhileMarked", override=True)(FailWhileMarked)
    yield FailWhileMarked
    unregister_pass("FailWhileMarked")


def single_use_module() -> ir.IRModule:
    """``a`` is used once, ``b`` twice: DeadCodeElimination removes nothing by default and
    inlines ``a`` with inline_once."""
    x, a, b = ir.var("x", (2,)), ir.Var("a"), ir.Var("b")
    body = ir.Let(a, op.exp(x), ir.Let(b, op.negative(x), op.add(op.add(a, b), b)))
    return ir.IRModule({"main": ir.Function([x], body)})


def _header(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^# (\w+): (.*)$", path.read_text(), flags=re.MULTILINE))


def _replayed_ir(raypass_inprocess, repro: Path) -> str:
    status, out, err = raypass_inprocess("replay", str(repro), "--print-ir")
    assert status == 0, (out, err)
    assert "the replay finished without an error" in out
    return out


def _write(tmp_path: Path, mod: ir.IRModule, pipeline: list) -> Path:
    return write_reproducer(tmp_path / "repro", mod, "main", "DeadCodeElimination", pipeline, PassContext(),
                            ValueError("recorded"))


def test_the_pipeline_records_options(tmp_path):
    repro = _write(tmp_path, single_use_module(),
                   [InferType(), DeadCodeElimination(inline_once=True), FoldConstant()])
    assert json.loads(_header(repro)["pipeline"]) == [
        "InferType", INLINE_ONCE, {"name": "FoldConstant", "options": {"interprocedural": False}},
    ]
    steps = read_header(repro).steps
    assert [step.build() for step in steps][1:] == [DeadCodeElimination(inline_once=True), FoldConstant()]
    assert read_header(repro).pipeline == ["InferType", "DeadCodeElimination", "FoldConstant"]


def test_replay_rebuilds_the_recorded_options(tmp_path, raypass_inprocess):
    mod = single_use_module()
    expected = DeadCodeElimination(inline_once=True)(mod).astext()
    assert expected != DeadCodeElimination()(mod).astext()  # the option shows in the output
    repro = _write(tmp_path, mod, [DeadCodeElimination(inline_once=True)])
    out = _replayed_ir(raypass_inprocess, repro)
    assert expected in out


def test_a_file_with_plain_names_replays_the_default_passes(tmp_path, raypass_inprocess):
    mod = single_use_module()
    repro = _write(tmp_path, mod, ["DeadCodeElimination"])  # as files were written before options
    assert json.loads(_header(repro)["pipeline"]) == ["DeadCodeElimination"]
    assert read_header(repro).steps == [PassSpec("DeadCodeElimination")]
    out = _replayed_ir(raypass_inprocess, repro)
    assert DeadCodeElimination()(mod).astext() in out
    assert DeadCodeElimination(inline_once=True)(mod).astext() not in out


@dataclass(frozen=True)
class LoggingFoldConstant(FoldConstant):
    """A user's variant, named like the built-in one: the registry does not make it."""


def test_options_are_recorded_only_where_the_registry_can_pass_them_on():
    # the registry's "FoldConstant" is the built-in class: the variant's options would
    # configure another class, so (as before options were recorded) only its name is kept
    assert PassSpec.of(LoggingFoldConstant(True)) == PassSpec("FoldConstant")
    assert PassSpec.of(FailWhileMarked("m")) == PassSpec("FailWhileMarked")  # not registered here
    assert PassSpec.of(InferType()) == PassSpec("InferType")  # no options
    assert PassSpec.of(FoldConstant(True)) == PassSpec("FoldConstant", {"interprocedural": True})


def test_a_broken_pipeline_entry_is_a_reproducer_error(tmp_path):
    from scheduler.reproducer import ReproducerError

    repro = _write(tmp_path, single_use_module(), [DeadCodeElimination(inline_once=True)])
    text = repro.read_text().replace('"inline_once": true', '"inline_twice": true')
    repro.write_text(text)
    with pytest.raises(ReproducerError, match="'DeadCodeElimination'.*'inline_twice'"):
        read_header(repro).steps[0].build()
    repro.write_text(re.sub(r"^# pipeline: .*$", "# pipeline: [42]", text, flags=re.MULTILINE))
    with pytest.raises(ReproducerError, match="pipeline entry"):
        read_header(repro)


def test_a_parallel_run_records_options_and_replays_them(ray_scheduler, fail_while_marked, tmp_path,
                                                         raypass_inprocess):
    mod = single_use_module()
    marker = tmp_path / "failing"
    marker.touch()
    pipeline = Sequential([FailWhileMarked(str(marker)), DeadCodeElimination(inline_once=True)], opt_level=0)
    with pytest.raises(MarkedError):
        with PassContext(config={"scheduler.reproducer_dir": str(tmp_path / "repro")}):
            ray_scheduler(2).run(pipeline, mod)
    repro = next((tmp_path / "repro").glob("repro-*.txt"))
    assert json.loads(_header(repro)["pipeline"]) == [
        {"name": "FailWhileMarked", "options": {"marker": str(marker)}}, INLINE_ONCE,
    ]
    # the user's pass is fixed (its marker gone): the replay runs the rest as it ran
    marker.unlink()
    expected = Sequential([FailWhileMarked(str(marker)), DeadCodeElimination(inline_once=True)],
                          opt_level=0)(mod)
    assert expected.astext() in _replayed_ir(raypass_inprocess, repro)

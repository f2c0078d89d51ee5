"""``passes``, ``ops``, ``plan`` (text, DOT, PNG) and ``replay``."""

from __future__ import annotations

from tests.cli.conftest import png_size, table_rows

FAILING_REPRO_BODY = """def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(4, 5), float32]) {
  add(%x, %y)
}
"""


def test_passes_table(raypass):
    result = raypass("passes")
    assert result.returncode == 0, result.stderr
    rows = table_rows(result.stdout, "Registered passes")
    assert rows["FuseOps"] == ["module", "0", "InferType"]
    assert rows["FoldConstant"] == ["function", "2", "-"]
    assert rows["FoldScaleAxis"][0] == "sequential"


def test_ops_listing(raypass):
    result = raypass("ops")
    assert result.returncode == 0
    assert "nn.conv2d" in result.stdout and result.stdout.rstrip().endswith("ops")


def test_plan_text_dot_and_png(raypass, tmp_path):
    result = raypass("plan", "--opt-level", "0", "--dot", "plan.dot")
    assert result.returncode == 0, result.stderr
    assert "stage 0: module [InferType] (driver)" in result.stdout
    assert "FoldConstant" not in result.stdout  # opt_level 2 pass, off at level 0
    dot = (tmp_path / "plan.dot").read_text()
    assert dot.startswith("digraph raypass_plan {") and "subgraph cluster_0" in dot and "->" in dot

    result = raypass("plan", "--png", "plan.png", "--disabled-pass", "FoldScaleAxis")
    assert result.returncode == 0, result.stderr
    assert "BackwardFoldScaleAxis" not in result.stdout
    assert "wrote the plan picture to plan.png (1400x500)" in result.stdout
    assert png_size(tmp_path / "plan.png") == (1400, 500)


def test_plan_png_and_dot_are_exclusive(raypass_inprocess):
    import pytest

    with pytest.raises(SystemExit) as exit_info:
        raypass_inprocess("plan", "--png", "a.png", "--dot", "a.dot")
    assert exit_info.value.code == 2


def _reproducer(tmp_path, body: str, pipeline: list[str], error: BaseException | None = None):
    from passinfra import ir
    from passinfra.transform import PassContext
    from scheduler.reproducer import write_reproducer

    mod = ir.parse(body)
    error = ValueError("boom") if error is None else error
    return write_reproducer(tmp_path, mod, "main", pipeline[0], pipeline, PassContext(), error)


def test_replay_reproduces_a_failure(raypass, tmp_path):
    import pytest

    from passinfra import ir, transform

    # "reproduced" means the recorded exception type, so record the one InferType raises
    with pytest.raises(Exception) as original:
        transform.InferType()(ir.parse(FAILING_REPRO_BODY))
    path = _reproducer(tmp_path, FAILING_REPRO_BODY, ["InferType"], original.value)
    result = raypass("replay", path)
    assert result.returncode == 1, result.stderr
    assert "the original run failed in InferType on main" in result.stdout
    assert "the failure reproduced:" in result.stdout


def test_replay_that_passes(raypass_inprocess, tmp_path):
    path = _reproducer(
        tmp_path, FAILING_REPRO_BODY.replace("(4, 5)", "(2, 3)"), ["InferType", "FoldConstant"]
    )
    status, out, _ = raypass_inprocess("replay", path)
    assert status == 0
    assert "did not reproduce" in out

"""User errors: one line on stderr, exit status 2, no traceback; --debug shows it."""

from __future__ import annotations

import sys
import types

import onnx
from onnx import TensorProto, helper

CYCLE_PLUGIN = """
from passinfra.transform import module_pass, register_pass

@register_pass("CliCycleA")
def cycle_a():
    return module_pass(lambda mod, ctx: mod, opt_level=0, name="CliCycleA", required=["CliCycleB"])

@register_pass("CliCycleB")
def cycle_b():
    return module_pass(lambda mod, ctx: mod, opt_level=0, name="CliCycleB", required=["CliCycleA"])
"""


def assert_user_error(result, *fragments: str) -> None:
    """``result``: a CompletedProcess, or (status, stdout, stderr) of an in-process run."""
    status, stderr = (
        (result[0], result[2]) if isinstance(result, tuple) else (result.returncode, result.stderr)
    )
    assert status == 2, (status, stderr)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("raypass: error: ")
    assert "Traceback" not in stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_missing_model_file(raypass):
    assert_user_error(raypass("compile", "nope.onnx", "-o", "lib.so"), "'nope.onnx' does not exist")


def test_missing_library_and_reproducer(raypass_inprocess):
    raypass = raypass_inprocess
    assert_user_error(raypass("run", "missing.so"), "'missing.so' does not exist")
    assert_user_error(raypass("replay", "missing.txt"), "'missing.txt' does not exist")


def test_unsupported_onnx_op(raypass, tmp_path):
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["out"])
    graph = helper.make_graph(
        [node],
        "unsupported",
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 4, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 4]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.INT64, [None, 3])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    assert_user_error(
        raypass("compile", "m.onnx", "-o", "lib.so"), "unsupported op", "NonMaxSuppression (x1)"
    )


def test_unknown_pass(raypass, raypass_inprocess):
    result = raypass("compile", "zoo:mlp", "-o", "lib.so", "--disabled-pass", "FoldConstant,NoSuchPass")
    assert_user_error(result, "unknown pass 'NoSuchPass'")
    assert_user_error(raypass_inprocess("plan", "--required-pass", "Nope"), "unknown pass 'Nope'")


def test_bad_config_key_and_value(raypass, raypass_inprocess):
    result = raypass("compile", "zoo:mlp", "-o", "lib.so", "--config", "codegen.no_such=1")
    assert_user_error(result, "unknown PassContext config key 'codegen.no_such'")
    raypass = raypass_inprocess
    result = raypass("compile", "zoo:mlp", "-o", "lib.so", "--config", "codegen.no_cache=maybe")
    assert_user_error(result, "config 'codegen.no_cache' expects a bool", "'maybe'")
    result = raypass("compile", "zoo:mlp", "-o", "lib.so", "--config", "codegen.target_isa=sse4")
    assert_user_error(result, "config 'codegen.target_isa' is 'sse4'", "one of portable, avx2, avx512")
    assert_user_error(raypass("plan", "--config", "relay.FuseOps.max_depth=deep"), "expects a int")
    assert_user_error(raypass("plan", "--config", "novalue"), "expected key=value")


def test_cycle_in_required(raypass, tmp_path):
    (tmp_path / "cycle.py").write_text(CYCLE_PLUGIN)
    result = raypass(
        "compile", "zoo:mlp", "-o", "lib.so", "--plugin", "cycle.py", "--required-pass", "CliCycleA"
    )
    assert_user_error(result, "cycle", "'CliCycleA' requires 'CliCycleB' requires 'CliCycleA'")


def test_bad_zoo_spec_and_shapes(raypass_inprocess):
    raypass = raypass_inprocess
    assert_user_error(raypass("compile", "zoo:alexnet", "-o", "lib.so"), "unknown zoo model 'alexnet'")
    result = raypass("compile", "zoo:mlp", "-o", "lib.so", "--shapes", "input=4,x")
    assert_user_error(result, "bad --shapes value 'input=4,x'")


def test_compile_without_output_is_a_user_error(raypass_inprocess):
    raypass = raypass_inprocess
    assert_user_error(raypass("compile", "zoo:mlp"), "needs -o LIB")


def test_debug_shows_the_traceback(raypass):
    result = raypass("--debug", "compile", "zoo:mlp", "-o", "lib.so", "--disabled-pass", "NoSuchPass")
    assert result.returncode != 0
    assert "Traceback" in result.stderr
    assert "PassNotFoundError" in result.stderr


def test_bench_without_the_bench_package(raypass_inprocess, monkeypatch):
    # None in sys.modules makes an import fail as a missing module does (both names: this
    # process may have imported the real package already)
    monkeypatch.setitem(sys.modules, "bench", None)
    monkeypatch.setitem(sys.modules, "bench.__main__", None)
    assert_user_error(raypass_inprocess("bench", "--quick"), "the bench package", "pip install -e .")


def test_bench_calls_the_package_entry_point_with_its_options(raypass_inprocess, monkeypatch):
    def main(argv: list[str]) -> int:
        print("bench argv", argv)
        return 3

    entry = types.ModuleType("bench.__main__")
    entry.main = main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "bench.__main__", entry)
    status, out, _ = raypass_inprocess("bench", "--quick", "--only", "ir")
    assert status == 3
    assert "bench argv ['--quick', '--only', 'ir']" in out


def test_bench_imports_the_installed_package_from_any_directory(raypass, tmp_path):
    """The console script, outside the checkout, reaches the benchmarks by import (the
    editable install maps the bench package); an unknown section is bench's own error."""
    result = raypass("bench", "--only", "no_such_section")
    assert result.returncode == 2, result.stderr
    assert "unknown section(s) no_such_section" in result.stderr

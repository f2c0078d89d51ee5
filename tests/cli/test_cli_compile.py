"""``raypass compile`` and ``raypass run`` on small models with the local backend."""

from __future__ import annotations

import json
import re

import numpy as np

from tests.cli.conftest import table_rows

TEXT_IR = """def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32]) {
  nn.relu(add(%x, %y))
}
"""


def test_compile_then_run(raypass, tmp_path):
    result = raypass(
        "compile",
        "zoo:mlp?batch=2",
        "-o",
        "mlp.so",
        "--backend",
        "local",
        "--timing",
        "--trace",
        "trace.json",
        "--print-ir-after",
        "FuseOps",
        "--dump-ir",
        "dump",
        "--cache-dir",
        "cache",
        "--opt-level",
        "2",
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "mlp.so").is_file() and (tmp_path / "mlp.so.raypass.json").is_file()
    assert "After Running Pass: FuseOps" in result.stdout
    assert any(path.name.endswith("_FuseOps.txt") for path in (tmp_path / "dump").iterdir())
    assert any((tmp_path / "cache").iterdir()), "compiled kernels go to --cache-dir"
    # plain log lines (stdout is not a terminal), one per stage, on stderr
    assert "[raypass] 1/" in result.stderr and "LinkLibrary" in result.stderr
    # the timing table's wall column and the driver slices of the trace agree per pass
    rows = table_rows(result.stdout, "Pass timing")
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert {e["tid"] for e in events} == {0}, "the local backend has the driver lane only"
    for name in ("FuseOps", "LowerToPrimFunc", "CompileC"):
        traced_ms = sum(e["dur"] for e in events if e["name"] == name and e["cat"] == "pass") / 1e3
        table_ms = float(rows[name][1])
        assert abs(traced_ms - table_ms) <= 0.05 + 0.02 * table_ms, (name, traced_ms, table_ms)
    # the process around the build, on the same lane: start-up (from the process's start,
    # the trace's first moment), loading the model, then the passes, then writing
    process = {e["name"]: e for e in events if e.get("cat") == "process"}
    startup, load, write = (process[name] for name in ("start-up (interpreter, imports)", "load the model",
                                                       "write the outputs"))
    passes = [e for e in events if e.get("cat") == "pass"]
    assert startup["ts"] == min(e["ts"] for e in events if e["ph"] == "X") and startup["dur"] > 0
    assert startup["ts"] + startup["dur"] <= load["ts"]
    assert load["ts"] + load["dur"] <= min(e["ts"] for e in passes)
    assert max(e["ts"] + e["dur"] for e in passes) <= write["ts"]
    assert "outside the build: start-up (interpreter, imports) " in result.stdout

    np.save(tmp_path / "x.npy", np.ones((2, 32), np.float32))
    ran = raypass("run", "mlp.so", "--input", "input=x.npy", "--output", "out")
    assert ran.returncode == 0, ran.stderr
    assert "input  input: (2, 32) float32" in ran.stdout
    assert "output 0: (2, 10) float32" in ran.stdout
    saved = np.load(tmp_path / "out" / "output_0.npy")
    np.testing.assert_allclose(saved.sum(axis=-1), 1.0, rtol=1e-5)  # softmax rows


def test_emit_c_writes_every_kernel_and_the_host_code(raypass, tmp_path):
    result = raypass("compile", "zoo:mlp", "--emit", "c", "-o", "mlp.c", "--backend", "local", "--no-cache")
    assert result.returncode == 0, result.stderr
    source = (tmp_path / "mlp.c").read_text()
    assert "/* fused_nn_softmax */" in source and "/* host code: raypass_main */" in source
    assert source.count("/* fused_") == 4


def test_emit_ir_of_a_text_ir_model(raypass_inprocess, tmp_path):
    (tmp_path / "model.txt").write_text(TEXT_IR)
    status, out, err = raypass_inprocess("compile", "model.txt", "--emit", "ir", "--backend", "local")
    assert status == 0, err
    assert "def @main(%x: Tensor[(2, 3), float32]" in out
    assert "a PrimFunc" in out and "fused_add_nn_relu" in out


def test_config_values_are_converted_to_their_types(raypass_inprocess, tmp_path):
    (tmp_path / "model.txt").write_text(TEXT_IR)
    status, out, err = raypass_inprocess(
        "compile",
        "model.txt",
        "-o",
        "m.so",
        "--backend",
        "local",
        "--config",
        "codegen.cflags=-O1",
        "--config",
        "relay.FuseOps.max_depth=1",
        "--config",
        "codegen.no_cache=yes",
    )
    assert status == 0, err
    assert "wrote m.so" in out


def test_run_with_random_inputs(raypass_inprocess, tmp_path):
    (tmp_path / "model.txt").write_text(TEXT_IR)
    assert raypass_inprocess("compile", "model.txt", "-o", "m.so", "--backend", "local")[0] == 0
    status, out, err = raypass_inprocess("run", "m.so", "--input", "y=random")
    assert status == 0, err
    assert "output 0: (2, 3) float32 min " in out
    status, _, err = raypass_inprocess("run", "m.so", "--input", "z=random")
    assert status == 2 and "no input named 'z'" in err


def test_run_profiles_the_kernel_calls(raypass_inprocess, tmp_path):
    (tmp_path / "model.txt").write_text(TEXT_IR)
    assert raypass_inprocess("compile", "model.txt", "-o", "m.so", "--backend", "local")[0] == 0
    status, out, err = raypass_inprocess("run", "m.so", "--profile", "3")
    assert status == 0, err
    assert "profile: 3 runs, median " in out and "ms a run" in out
    assert re.search(r"^ +0 +fused_\w+ +\d+\.\d{3} +\d+\.\d%$", out, re.M), out
    status, _, err = raypass_inprocess("run", "m.so", "--profile", "0")
    assert status == 2 and err.strip() == "raypass: error: --profile takes a positive number of runs, got 0"


def test_the_command_exits_quickly_and_still_does_what_an_exit_must(raypass, tmp_path):
    """``raypass`` skips the interpreter's teardown (raypass_cli.main.cli) but not what an
    exit must do: atexit handlers run (a plugin's here; the library's temporary directory
    is removed), the output arrives whole, and the exit status is the command's."""
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    (tmp_path / "at_exit.py").write_text(
        "import atexit, pathlib\n"
        "atexit.register(pathlib.Path('exited.txt').write_text, 'the handler ran')\n"
    )
    env = {"TMPDIR": str(private_tmp)}
    compiled = raypass("compile", "zoo:mlp?batch=2", "-o", "mlp.so", "--backend", "local", "--timing",
                       "--plugin", "at_exit.py", env=env)
    assert compiled.returncode == 0, compiled.stderr
    assert compiled.stdout.startswith("wrote mlp.so") and "outside the build: " in compiled.stdout
    assert (tmp_path / "exited.txt").read_text() == "the handler ran"
    ran = raypass("run", "mlp.so", "--input", "input=random", env=env)
    assert ran.returncode == 0 and "output 0: (2, 10) float32" in ran.stdout, ran.stderr
    assert list(private_tmp.iterdir()) == []  # both processes removed what they made there
    wrong = raypass("run", "mlp.so", "--input", "nothing=random", env=env)
    assert wrong.returncode == 2 and wrong.stderr.startswith("raypass: error: ")



def test_the_build_runs_with_the_loaded_objects_frozen_and_leaves_the_collector_as_it_was(
        raypass_inprocess, tmp_path, monkeypatch):
    import gc

    from raypass_cli import compile as compile_command
    from raypass_cli.common import YOUNG_COLLECTION_ALLOCATIONS

    seen = []
    real = compile_command.compile_model

    def compile_model(*args, **kwargs):
        seen.append((gc.get_freeze_count(), gc.get_threshold()[0]))
        return real(*args, **kwargs)

    monkeypatch.setattr(compile_command, "compile_model", compile_model)
    (tmp_path / "model.txt").write_text(TEXT_IR)
    before = (gc.get_freeze_count(), gc.get_threshold())
    status, _, err = raypass_inprocess("compile", "model.txt", "--emit", "ir", "--backend", "local")
    assert status == 0, err
    frozen, young = seen[0]
    assert frozen > before[0] and young == YOUNG_COLLECTION_ALLOCATIONS
    assert (gc.get_freeze_count(), gc.get_threshold()) == before

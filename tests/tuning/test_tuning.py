"""Kernel tuning (issue 32): the schedule space, the database, compiles that apply it, and
the search on worker processes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import passinfra
from passinfra.build import compile_pass_names, compile_pipeline, run_link
from passinfra.codegen.compute.conv_direct import ConvGeometry
from passinfra.codegen.compute.conv_microkernel import rows_per_block
from passinfra.codegen.passes.apply_tuning_records import TuningTargetWarning
from passinfra.frontend import from_onnx
from passinfra.frontend.zoo.dynamic_models import cnn, mlp
from passinfra.ir.type_infer import infer_type
from passinfra.transform import PassContext
from passinfra.transform.errors import PassConfigError
from passinfra.transform.schedule import SCHEDULE_ATTR
from passinfra.tuning import (
    TuningDatabase,
    TuningRecord,
    all_points,
    candidates,
    current_target,
    kernel_key,
    knobs_for,
    neighbours,
)
from passinfra.tuning.database import TuningDatabaseError
from passinfra.tuning.tuner import fused_module, kernel_tasks, scheduled
from tests.fake_compilers import foreground_sigint

F32 = "float32"


def _mlp():
    return from_onnx(mlp(in_features=128, hidden=128), shapes={"input": (32, 128)})


def _cnn():
    return from_onnx(cnn(), shapes={"input": (2, 3, 32, 32)})


@pytest.fixture(scope="module")
def tasks():
    """The one-kernel modules of a small MLP and CNN: every kernel kind the knobs cover."""
    found = {}
    for mod in (_mlp(), _cnn()):
        for task in kernel_tasks(fused_module(mod))[0]:
            found[task.name] = task
    return found


@pytest.fixture
def config(tmp_path):
    return {"codegen.cache_dir": str(tmp_path / "cache"), "codegen.build_cache": False}


# ----- the space ----------------------------------------------------------------------------
def test_each_kernel_gets_the_knobs_of_its_ops(tasks):
    def keys(name):
        func = next(f for gv, f in tasks[name].module.items() if gv.name_hint != "main")
        return {knob.key for knob in knobs_for(func)}

    matmul = next(name for name in tasks if name.startswith("fused_matmul"))
    conv = next(name for name in tasks if "conv2d" in name)
    assert keys(matmul) == {"codegen.matmul_microkernel", "codegen.min_parallel_work"}
    assert keys(conv) == {"codegen.conv_kernel", "codegen.conv_block_pixels",
                          "codegen.conv_cached_weight_bytes", "codegen.min_parallel_work"}
    assert tasks[conv].space == 6 * 4 * 4 * 4  # auto, direct, group_gemm, microkernel, winograd, none
    assert tasks[conv].default == (("codegen.conv_block_pixels", 4),
                                   ("codegen.conv_cached_weight_bytes", 262144),
                                   ("codegen.conv_kernel", "auto"), ("codegen.min_parallel_work", 8000))


def test_candidates_start_at_the_rules_then_one_knob_off_then_the_rest(tasks):
    conv = next(name for name in tasks if "conv2d" in name)
    func = next(f for gv, f in tasks[conv].module.items() if gv.name_hint != "main")
    default = tasks[conv].default
    near = neighbours(func, default)
    assert len(near) == (6 - 1) + (4 - 1) * 3  # every other value of each knob
    assert all(sum(a != b for a, b in zip(point, default)) == 1 for point in near)
    points = candidates(func, 1000)
    assert points[0] == default and points[1:1 + len(near)] == near
    assert len(points) == len(set(points)) == tasks[conv].space == len(all_points(func))
    assert candidates(func, 3) == points[:3]


def test_a_conv_kernel_s_block_knobs_change_its_calls_and_not_its_values(tasks, config):
    """More pixels per call: more output rows per microkernel call; a weight over the
    cached size: one call per image. Each output is still summed by one call in one order:
    the same bits."""
    geometry = ConvGeometry(1, 16, 16, 32, 16, 16, 64, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1)
    rows = {}
    for name, extra in (("rules", {}), ("pixels", {"codegen.conv_block_pixels": 64}),
                        ("cached", {"codegen.conv_cached_weight_bytes": 0})):
        with PassContext(config=extra):
            rows[name] = rows_per_block(geometry)
    assert rows == {"rules": 1, "pixels": 4, "cached": 16}
    with PassContext(config={"codegen.conv_block_pixels": 0}):
        with pytest.raises(PassConfigError, match="conv_block_pixels"):
            rows_per_block(geometry)
    conv = next(name for name in tasks if "conv2d" in name)
    module = tasks[conv].module
    arrays = [np.random.default_rng(1).standard_normal(p.type_annotation.shape).astype(F32)
              for p in module["main"].params]
    results = []
    for extra in ({}, {"codegen.conv_block_pixels": 256}, {"codegen.conv_cached_weight_bytes": 0}):
        point = tuple(sorted({"codegen.conv_kernel": "microkernel", **extra}.items()))
        with PassContext(opt_level=3, config=config):
            results.append(passinfra.build(scheduled(module, point))(*arrays))
    assert all(np.array_equal(results[0], r) for r in results[1:])


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_point_compiles_to_what_the_interpreter_computes(tasks, config, data):
    name = data.draw(st.sampled_from(sorted(tasks)))
    task = tasks[name]
    func = next(f for gv, f in task.module.items() if gv.name_hint != "main")
    point = data.draw(st.sampled_from(all_points(func)))
    with PassContext(opt_level=3, config=config):
        lib = passinfra.build(scheduled(task.module, point))
    arrays = [np.random.default_rng(1).standard_normal(p.type_annotation.shape).astype(F32)
              for p in task.module["main"].params]
    expected = passinfra.evaluate(task.module, *arrays)
    np.testing.assert_allclose(lib(*arrays), expected, rtol=1e-4, atol=1e-4)


# ----- the database ---------------------------------------------------------------------------
def _record(kernel="k1", seconds=1.0, isa="avx2", schedule=(("codegen.matmul_microkernel", False),)):
    return TuningRecord(kernel, "fused_x", {"isa": isa, "threads": 2}, [list(s) for s in schedule],
                        seconds, 2.0, 3)


def test_the_database_round_trips_merges_and_keeps_the_fastest(tmp_path):
    a, b = TuningDatabase([_record(seconds=1.0)]), TuningDatabase([_record(seconds=0.5), _record("k2")])
    a.merge([b, TuningDatabase([_record(seconds=0.7), _record(isa="avx512")])])
    assert sorted((r.kernel, r.target["isa"], r.seconds) for r in a.records) == [
        ("k1", "avx2", 0.5), ("k1", "avx512", 1.0), ("k2", "avx2", 1.0)]
    path = tmp_path / "db.json"
    a.save(path)
    again = TuningDatabase.load(path)
    assert again == TuningDatabase(sorted(a.records, key=lambda r: (r.kernel, json.dumps(r.target))))
    again.save(tmp_path / "db2.json")
    assert (tmp_path / "db2.json").read_bytes() == path.read_bytes()
    assert a.lookup("k1", {"isa": "avx2", "threads": 2}).seconds == 0.5
    assert a.lookup("k1", {"isa": "avx2", "threads": 1}) is None
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    with pytest.raises(TuningDatabaseError, match=r"bad.json' cannot be read: format 'other'"):
        TuningDatabase.load(tmp_path / "bad.json")


def test_a_kernel_s_key_ignores_its_schedule(tasks):
    task = next(iter(tasks.values()))
    func = next(f for gv, f in task.module.items() if gv.name_hint != "main")
    scheduled_func = func.with_attr(SCHEDULE_ATTR, (("codegen.min_parallel_work", 2000),))
    assert kernel_key(scheduled_func) == kernel_key(func)


# ----- compiles that apply it -----------------------------------------------------------------
def _sources(mod, config):
    with PassContext(opt_level=3, config=config):
        compiled = compile_pipeline()(mod)
    return {gv.name_hint: f.attrs["c_source"] for gv, f in compiled.items() if "c_source" in f.attrs}


def _matmul_key(mod):
    fused = fused_module(mod)
    name, func = next((gv.name_hint, f) for gv, f in fused.items() if gv.name_hint.startswith("fused_matmul"))
    return name, kernel_key(func)


def test_a_record_schedules_its_kernel_and_only_for_its_target(tmp_path, config):
    mod = _mlp()
    name, key = _matmul_key(mod)
    path = tmp_path / "db.json"
    blas = (("codegen.matmul_microkernel", False), ("codegen.min_parallel_work", 8000))
    record = TuningRecord(key, name, current_target(), [list(s) for s in blas], 1.0, 2.0, 2)
    TuningDatabase([record]).save(path)
    tuned_config = {**config, "codegen.tuning_db": str(path)}
    with PassContext(config=tuned_config):
        assert compile_pass_names().index("ApplyTuningRecords") == compile_pass_names().index("FuseOps") + 1
    plain, tuned = _sources(mod, config), _sources(mod, tuned_config)
    assert "rp_conv2d_f32(" in plain[name] and "rp_conv2d_f32(" not in tuned[name]  # the microkernel, BLAS
    assert "rp_gemm(" in tuned[name]
    assert {n: s for n, s in plain.items() if n != name} == {n: s for n, s in tuned.items() if n != name}
    x = np.random.default_rng(0).standard_normal((32, 128)).astype(F32)
    with PassContext(opt_level=3, config=tuned_config):
        tuned_lib = passinfra.build(mod)
    with PassContext(opt_level=3, config=config):
        np.testing.assert_allclose(tuned_lib(x), passinfra.build(mod)(x), rtol=1e-4, atol=1e-4)
    # a database of another machine: not applied, and a warning says why
    other = {**current_target(), "isa": "portable" if current_target()["isa"] != "portable" else "avx2"}
    TuningDatabase([TuningRecord(key, name, other, [list(s) for s in blas], 1.0, 2.0, 2)]).save(path)
    with pytest.warns(TuningTargetWarning, match=r"kernels for other targets \(1 for "):
        assert _sources(mod, tuned_config) == plain


def test_a_tuned_build_is_the_same_library_in_process_and_on_ray(ray_scheduler, tmp_path, config):
    mod = _mlp()
    name, key = _matmul_key(mod)
    path = tmp_path / "db.json"
    schedule = [["codegen.matmul_microkernel", False], ["codegen.min_parallel_work", 2000]]
    TuningDatabase([TuningRecord(key, name, current_target(), schedule, 1.0, 2.0, 2)]).save(path)
    tuned = {**config, "codegen.tuning_db": str(path), "scheduler.min_stage_functions": 1,
             "scheduler.head_start": False}
    ret_type = infer_type(mod["main"], mod).ret_type
    libraries = []
    for scheduler in (None, ray_scheduler(num_workers=2)):
        with PassContext(opt_level=3, config=tuned):
            pipeline = compile_pipeline()
            compiled = pipeline(mod) if scheduler is None else scheduler.run(pipeline, mod)
            libraries.append(run_link(compiled, ret_type).library)
    assert libraries[0] == libraries[1]


# ----- the search -------------------------------------------------------------------------------
def test_tune_records_every_kernel_and_measures_none_again(tmp_path):
    mod = _mlp()
    path = str(tmp_path / "db.json")
    lines = []
    first = passinfra.tune(mod, trials=5, db_path=path, workers=1, cache_dir=str(tmp_path / "c"),
                           report=lines.append)
    kernels = len(kernel_tasks(fused_module(mod))[0])
    assert len(first.kernels) == kernels and first.measured >= kernels and not first.interrupted
    assert len(first.workers) == 1 and sum(w["candidates"] for w in first.workers.values()) == first.measured
    records = TuningDatabase.load(path).records
    target = current_target(records[0].target["threads"])
    assert len(records) == kernels and all(r.target == target for r in records)
    assert all(r.seconds <= r.default_seconds for r in records)
    assert any("the rules'" in line for line in lines)
    second = passinfra.tune(mod, trials=5, db_path=path, workers=1, cache_dir=str(tmp_path / "c"))
    assert second.measured == 0 and second.skipped_known == kernels


def test_cli_tune_then_compile_with_the_database(tmp_path, capsys):
    import onnx

    from raypass_cli import main as cli

    model, db = tmp_path / "mlp.onnx", tmp_path / "db.json"
    onnx.save(mlp(), model)
    shapes = ["--shapes", "input=16,64"]
    trace = tmp_path / "tune.json"
    assert cli.main(["tune", str(model), *shapes, "--trials", "3", "--db", str(db), "--quiet",
                     "--cache-dir", str(tmp_path / "c"), "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    records = len(TuningDatabase.load(db).records)
    assert records > 0 and f"wrote {db}: {records} kernels tuned, 0 already recorded" in out
    assert "Tuning: kernels" in out and "Tuning: workers" in out
    slices = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    assert sum(e["cat"] == "candidate" for e in slices) >= 3 and {e["tid"] for e in slices} == {1}
    assert all(e["args"]["schedules"] and e["dur"] > 0 for e in slices)
    base = ["compile", str(model), *shapes, "-o", str(tmp_path / "m.so"), "--backend", "local",
            "--cache-dir", str(tmp_path / "c")]
    assert cli.main([*base, "--tuning-db", str(db)]) == 0
    capsys.readouterr()
    db.write_text("not json")
    assert cli.main([*base, "--tuning-db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"raypass: error: tuning database '{db}' cannot be read")
    assert cli.main(["tune", str(model), "--trials", "0", "--db", str(db)]) == 2
    capsys.readouterr()
    assert cli.main(["tune", str(model), "--db", str(db), "--address", "auto"]) == 2
    assert capsys.readouterr().err == "raypass: error: --address is for --backend ray\n"
    from passinfra.runtime.cpus import available_cpus

    too_many = ["--workers", "2", "--cpus-per-worker", str(available_cpus())]
    assert cli.main(["tune", str(model), *shapes, "--db", str(db), *too_many]) == 2
    assert "CPUs; this process may use" in capsys.readouterr().err
    ray_options = ["--backend", "ray", "--cpus-per-worker", "0"]
    assert cli.main(["tune", str(model), *shapes, "--db", str(db), *ray_options]) == 2
    assert capsys.readouterr().err == "raypass: error: --cpus-per-worker must be positive, got 0\n"


def _tune_in_its_own_group(tmp_path):
    """``raypass tune`` of a small CNN on two workers, started in a process group of its
    own, and a thread reading its stderr all along (a pipe left full blocks every write of
    the command: its progress, its last line, a stack dump, and it never exits): (the
    process, its stderr lines so far, an event set once a first candidate is measured, the
    reading thread)."""
    import os
    import subprocess
    import sys
    import threading

    import onnx

    model, db = tmp_path / "cnn.onnx", tmp_path / "db.json"
    onnx.save(cnn(width=16), model)
    command = [sys.executable, "-m", "raypass_cli.main", "tune", str(model), "--shapes", "input=8,3,32,32",
               "--trials", "500", "--workers", "2", "--db", str(db), "--cache-dir", str(tmp_path / "c")]
    # faulthandler: SIGABRT prints every thread's stack, what a hang below shows. A process
    # group of its own with a foreground job's SIGINT, as a terminal gives the command (with
    # SIGINT ignored, only a compiler it ran at that moment would have died of Ctrl-C)
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, start_new_session=True,
                               preexec_fn=foreground_sigint, env=dict(os.environ, PYTHONFAULTHANDLER="1"))
    lines: list[str] = []
    measured = threading.Event()

    def read() -> None:
        for line in process.stderr:
            lines.append(line)
            if line.startswith("[tune] [") and "fused_" in line:  # a candidate was measured
                measured.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return process, lines, measured, reader


def _wait_for_group_gone(group: int, seconds: float) -> None:
    import os
    import time

    deadline = time.monotonic() + seconds
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, "a process of raypass tune outlived it"
        time.sleep(0.2)


def test_ctrl_c_during_raypass_tune_keeps_what_was_measured_and_leaves_no_process(tmp_path):
    """SIGINT to the whole process group, as a terminal's Ctrl-C sends it, once the
    first candidate is measured: exit 130, the database holds the kernels measured so far,
    and every process of the group (workers, forkserver) is gone soon after."""
    import os
    import signal
    import subprocess
    import time

    process, lines, measured, reader = _tune_in_its_own_group(tmp_path)
    try:
        assert measured.wait(timeout=300), "".join(lines)[-3000:]
        time.sleep(1)
        os.killpg(process.pid, signal.SIGINT)
        try:
            status = process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGABRT)
            process.wait(timeout=10)
            reader.join(timeout=10)
            raise AssertionError("raypass tune did not exit after Ctrl-C; its threads:\n"
                                 + "".join(lines)[-6000:]) from None
        reader.join(timeout=10)
        said = "".join(lines)
        assert status == 130 and "interrupted" in said, said[-2000:]  # what it said, where it did not
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    kernels = len(kernel_tasks(fused_module(from_onnx(cnn(width=16), shapes={"input": (8, 3, 32, 32)})))[0])
    assert 0 < len(TuningDatabase.load(tmp_path / "db.json").records) <= kernels
    _wait_for_group_gone(process.pid, 20)


def test_workers_of_a_killed_raypass_tune_end_themselves(tmp_path):
    """SIGKILL to ``raypass tune`` alone (no shutdown of its own runs): its workers and their
    forkserver end within seconds (each worker watches its driver)."""
    import os
    import signal

    process, lines, measured, _ = _tune_in_its_own_group(tmp_path)
    try:
        assert measured.wait(timeout=300), "".join(lines)[-3000:]
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        _wait_for_group_gone(process.pid, 20)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

"""In-process, CompileC starts every kernel's compile ahead on codegen.compile_jobs
threads and takes them in module order: the same objects, facts, counters and first
error as one compile at a time, with the compilers really running side by side."""

from __future__ import annotations

import tempfile
import threading

import pytest

from passinfra.build import COMPILE_PIPELINE, _passes
from passinfra.codegen import cc_driver
from passinfra.codegen.artifacts import kernel_object_code, with_kernel_c_source
from passinfra.codegen.cc_driver import CompileError
from passinfra.codegen.object_cache import compile_stats, reset_compile_stats
from passinfra.codegen.passes.compile_c import CompileC
from passinfra.frontend.zoo.ir_models import demo_cnn
from passinfra.tir import PrimFunc
from passinfra.transform import PassContext, Sequential
from passinfra.transform.run_facts import collect_facts


def _rendered():
    """demo_cnn's kernels with their C rendered, not yet compiled, each its own compile
    unit (what this tests is how the compiles of several run)."""
    names = COMPILE_PIPELINE[:COMPILE_PIPELINE.index("GroupKernels")]
    with PassContext(opt_level=3):
        return Sequential(_passes(names), opt_level=0)(demo_cnn(batch=1, size=16, conv_channels=16))


def _compiled(mod, jobs: int):
    reset_compile_stats()
    config = {"codegen.compile_jobs": jobs, "codegen.no_cache": True}
    with PassContext(config=config), collect_facts() as facts:
        out = CompileC()(mod)
    objects = {gv.name_hint: kernel_object_code(f) for gv, f in out.items() if isinstance(f, PrimFunc)}
    return objects, [(fact.function, fact.value) for fact in facts], compile_stats()["compiles"]


def test_ahead_compiles_give_what_one_at_a_time_gives_and_run_side_by_side(monkeypatch):
    mod = _rendered()
    _compiled(mod, jobs=1)  # the convolution runtime is compiled (once) too: not counted below
    one_objects, one_facts, one_compiles = _compiled(mod, jobs=1)
    # two compiles must meet here: side by side they do at once; one at a time the first
    # would wait for the second forever (the barrier gives up, the test fails)
    barrier, real = threading.Barrier(2, timeout=60), cc_driver._run_compiler
    met = []

    def meeting(source, settings, name):
        if not met:
            barrier.wait()
            met.append(name)
        return real(source, settings, name)

    monkeypatch.setattr(cc_driver, "_run_compiler", meeting)
    objects, facts, compiles = _compiled(mod, jobs=2)
    assert len(one_objects) >= 3 and met
    assert objects == one_objects and facts == one_facts and compiles == one_compiles == len(objects)


def test_the_first_failing_kernel_is_the_error_and_no_other_keeps_a_c_file(monkeypatch, tmp_path):
    mod = _rendered()
    kernels = [gv for gv, func in mod.items() if isinstance(func, PrimFunc)]
    broken = mod.copy()
    for gv in kernels[1:3]:  # two kernels whose C does not compile; the first is the error
        broken[gv] = with_kernel_c_source(mod[gv], "this is not C;\n")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with PassContext(config={"codegen.compile_jobs": 4, "codegen.no_cache": True}):
        with pytest.raises(CompileError) as caught:
            CompileC()(broken)
    assert kernels[1].name_hint in str(caught.value)
    kept = [path for path in tmp_path.iterdir() if path.name.startswith("raypass-cc-")]
    assert kept == [caught.value.kept]

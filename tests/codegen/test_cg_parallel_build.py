"""Built with the Ray backend (2 workers), the library is byte-identical to the one built
in-process, and the C compiles ran in the workers' processes (CompileC's records, which
are run facts in ``last_run``, not IR attrs)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import passinfra
from passinfra.build import compile_pipeline
from passinfra.codegen.passes.compile_c import compile_records
from passinfra.frontend.zoo.ir_models import demo_cnn, transformer_block
from passinfra.ir.module import IRModule
from passinfra.runtime.interpreter import evaluate
from passinfra.transform import PassContext
from passinfra.transform.run_facts import collect_facts

MODELS = {
    "demo_cnn": (lambda: demo_cnn(batch=1, size=16, conv_channels=16), (1, 3, 16, 16)),
    "transformer_block": (lambda: transformer_block(seq=16, hidden=64), (16, 64)),
}


class KeepCompiled:
    """A scheduler wrapper keeping the module its ``run`` returned (build() links it in
    the driver and keeps only the library), so the test can look at the compiled IR."""

    def __init__(self, scheduler) -> None:
        self.scheduler = scheduler
        self.compiled: IRModule | None = None

    def run(self, pipeline, mod):
        self.compiled = self.scheduler.run(pipeline, mod)
        return self.compiled


@pytest.mark.parametrize("name", sorted(MODELS))
def test_ray_build_is_byte_identical_and_compiled_on_workers(name, ray_scheduler, tmp_path):
    make, input_shape = MODELS[name]
    mod = make()
    scheduler = ray_scheduler(num_workers=2, cpus_per_worker=0.5)
    keep = KeepCompiled(scheduler)
    with PassContext(config={"codegen.cache_dir": str(tmp_path / "local_cache")}):
        local = passinfra.build(mod)
    # a separate cold cache: the workers must really compile, not read the driver's objects
    with PassContext(config={"codegen.cache_dir": str(tmp_path / "ray_cache")}):
        remote = passinfra.build(mod, scheduler=keep)
    local.export_library(tmp_path / "local.so")
    remote.export_library(tmp_path / "remote.so")
    assert (tmp_path / "local.so").read_bytes() == (tmp_path / "remote.so").read_bytes()

    records = compile_records(scheduler.last_run.facts)
    assert len(records) >= 2, records  # several kernels, each compiled by CompileC
    kernels = {gv.name_hint: func for gv, func in keep.compiled.items() if gv.name_hint in records}
    assert len(kernels) == len(records)  # the records name the module's kernels, which carry no
    # fact about the process that compiled them
    assert all(set(func.attrs) & {"compile_pid", "compile_cache_hit"} == set() for func in kernels.values())
    pids = {pid for pid, _ in records.values()}
    assert os.getpid() not in pids
    assert pids <= set(scheduler.last_run.worker_pids.values())
    assert not any(hit for _, hit in records.values()), "the cold cache cannot hit: cc ran on the workers"

    x = np.random.default_rng(0).standard_normal(input_shape).astype("float32")
    np.testing.assert_allclose(remote(x), evaluate(mod, x), rtol=1e-5, atol=1e-5)


def test_compile_records_in_process_cold_then_warm(tmp_path):
    mod = demo_cnn()
    with PassContext(opt_level=3, config={"codegen.cache_dir": str(tmp_path)}):
        with collect_facts() as cold_facts:
            compile_pipeline()(mod)
        with collect_facts() as warm_facts:
            compile_pipeline()(mod)
    cold, warm = compile_records(cold_facts), compile_records(warm_facts)
    assert cold and {pid for pid, _ in cold.values()} == {os.getpid()}
    assert not any(hit for _, hit in cold.values())
    assert warm.keys() == cold.keys() and all(hit for _, hit in warm.values())


CODEGEN_FUNCTION_PASSES = ("LowerToPrimFunc", "Simplify", "StorageFlatten", "VectorizeLoop", "UnrollLoop",
                           "RemoveNoOp", "CodegenC")


def test_codegen_function_passes_share_one_stage_and_compile_units_follow_it():
    from passinfra.transform.registry import get_pass
    from scheduler.plan import build_plan, reads_module

    assert not any(reads_module(get_pass(name)) for name in (*CODEGEN_FUNCTION_PASSES, "CompileC"))
    with PassContext(opt_level=3) as ctx:
        plan = build_plan(compile_pipeline(), ctx)
    stage_of = {leaf.pass_.info.name: leaf.stage for leaf in plan.leaves}
    assert len({stage_of[name] for name in CODEGEN_FUNCTION_PASSES}) == 1
    # the kernels' C meets in the driver (GroupKernels), then their units compile on the workers
    assert stage_of["GroupKernels"] == stage_of["CodegenC"] + 1 == stage_of["CompileC"] - 1
    kinds = [plan.stages[stage_of[name]].kind for name in ("GroupKernels", "CompileC")]
    assert kinds == ["module", "function"]

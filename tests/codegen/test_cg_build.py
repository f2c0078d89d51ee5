"""Host code, memory planning, linking, runtime.Module and build()."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest
from cg_c_support import loop, prim_func

from passinfra import tir
from passinfra.codegen.artifacts import collect_link_products
from passinfra.codegen.host import analyze_main, plan_memory
from passinfra.codegen.passes import CodegenC, CompileC, HostCodegen, LinkLibrary, PlanMemory
from passinfra.errors import EvaluationError, IRError, RaypassError
from passinfra.ir import op
from passinfra.ir.expr import Call, Function, GlobalVar, Let, Tuple, TupleGetItem, Var, const, var
from passinfra.ir.module import IRModule
from passinfra.runtime.module import Module, load_module
from passinfra.runtime.profile import PROFILE_SYMBOL
from passinfra.transform import PassContext, Sequential

F32 = "float32"


@pytest.fixture
def ctx(tmp_path):
    with PassContext(config={"codegen.cache_dir": str(tmp_path / "cache")}) as context:
        yield context


def unary_kernel(symbol: str, n: int, fn) -> tir.PrimFunc:
    x, out = tir.Buffer("x", (n,), F32), tir.Buffer("out", (n,), F32)
    i = tir.TVar("i")
    return prim_func([x, out], loop(i, n, tir.BufferStore(out, fn(x.load(i)), (i,))), 1, symbol)


def binary_kernel(symbol: str, n: int, fn) -> tir.PrimFunc:
    a, b, out = tir.Buffer("a", (n,), F32), tir.Buffer("b", (n,), F32), tir.Buffer("out", (n,), F32)
    i = tir.TVar("i")
    return prim_func([a, b, out], loop(i, n, tir.BufferStore(out, fn(a.load(i), b.load(i)), (i,))), 2, symbol)


def split_kernel(symbol: str, n: int) -> tir.PrimFunc:
    """One input, two outputs: (x * 2, x + 1)."""
    x, o1, o2 = tir.Buffer("x", (n,), F32), tir.Buffer("o1", (n,), F32), tir.Buffer("o2", (n,), F32)
    i = tir.TVar("i")
    body = loop(i, n, tir.SeqStmt((tir.BufferStore(o1, x.load(i) * 2.0, (i,)),
                                   tir.BufferStore(o2, x.load(i) + 1.0, (i,)))))
    return prim_func([x, o1, o2], body, 1, symbol)


def chain_module(n: int = 64, length: int = 6) -> IRModule:
    """main(x) = k(...k(x)) with k(v) = v * 1.5 + 1, each call a separate kernel call."""
    step = GlobalVar("step")
    x = var("x", (n,))
    body = x
    for _ in range(length):
        body = Call(step, [body])
    return IRModule({"main": Function([x], body), step: unary_kernel("step", n, lambda v: v * 1.5 + 1.0)})


def compile_lowered(mod: IRModule) -> Module:
    with collect_link_products() as products:
        Sequential([CodegenC(), CompileC(), PlanMemory(), HostCodegen(), LinkLibrary()])(mod)
    artifact = products.build_artifact()
    return Module(artifact.library, artifact.metadata, artifact.weights)


def test_chain_runs_and_plans_less_than_the_naive_sum(ctx):
    mod = chain_module()
    lib = compile_lowered(mod)
    x = np.random.default_rng(0).standard_normal(64).astype(F32)
    expected = x.copy()
    for _ in range(6):
        expected = expected * np.float32(1.5) + np.float32(1.0)
    np.testing.assert_allclose(lib(x), expected, rtol=1e-6)
    with collect_link_products() as products:
        PlanMemory()(mod)
    planned = products.memory_plan
    # 5 intermediates of 256 bytes (the last call writes into the output): two slots suffice
    assert planned.naive_bytes == 5 * 256
    assert planned.workspace_bytes == 2 * 256
    assert lib.metadata["workspace_bytes"] == 2 * 256


def test_profile_times_every_call_inside_its_run_and_changes_nothing(ctx, tmp_path):
    lib = compile_lowered(chain_module())
    x = np.random.default_rng(1).standard_normal(64).astype(F32)
    expected = lib(x)
    profile = lib.profile(x, runs=4)
    assert profile.kernels == ("step",) * 6 and profile.call_ns.shape == (4, 6)
    assert (profile.call_ns >= 0).all() and profile.call_ns.sum() > 0
    # each call is timed inside its run: no run's calls add up to more than the run
    for calls, seconds in zip(profile.call_ns, profile.run_seconds):
        assert calls.sum() <= seconds * 1e9 + 1000
    assert [call.step for call in profile.calls()] == list(range(6))
    assert len(profile.slowest(2)) == 2 and set(profile.by_kernel()) == {"step"}
    # profiling ended with the call: later runs add nothing to its arrays
    timed = profile.call_ns.copy()
    np.testing.assert_array_equal(lib(x), expected)
    np.testing.assert_array_equal(profile.call_ns, timed)
    with pytest.raises(RaypassError, match="runs must be a positive integer"):
        lib.profile(x, runs=0)
    lib.export_library(tmp_path / "chain.so")  # a loaded library profiles alike
    assert load_module(tmp_path / "chain.so").profile(x, runs=1).call_ns.shape == (1, 6)


def test_profile_counts_only_the_calling_threads_runs(ctx):
    """The host's profiling pointer is per thread: runs in another thread while one thread
    profiles never write into its arrays."""
    lib = compile_lowered(chain_module())
    x = np.ones(64, F32)
    hook = getattr(lib._cdll, PROFILE_SYMBOL)
    hook.restype, hook.argtypes = None, [ctypes.c_void_p]
    mine = np.zeros(6, np.int64)
    hook(mine.ctypes.data)
    try:
        other = threading.Thread(target=lambda: [lib(x) for _ in range(20)])
        other.start()
        other.join()
        assert not mine.any()
        lib(x)
        assert mine.sum() > 0
    finally:
        hook(None)


def test_plan_never_overlaps_tensors_that_are_live_together():
    # diamond + long-lived value: v1 is read by the last call, so it must keep its slot
    n, add, neg = 16, GlobalVar("add"), GlobalVar("neg")
    x = var("x", (n,))
    v1 = Call(neg, [x])
    v2 = Call(neg, [v1])
    v3 = Call(neg, [v2])
    v4 = Call(add, [v3, v1])
    out = Call(neg, [v4])
    mod = IRModule({"main": Function([x], out), add: binary_kernel("add", n, lambda a, b: a + b),
                    neg: unary_kernel("neg", n, lambda a: -a)})
    program = analyze_main(mod)
    plan = plan_memory(program)
    steps = {t: s for s, call in enumerate(program.calls) for t in call.outputs}
    last = dict(steps)
    for s, call in enumerate(program.calls):
        for t in call.args:
            last[t] = max(last.get(t, s), s)
    placed = sorted(plan.offsets)
    for a in placed:
        for b in placed:
            if a < b and steps[a] <= last[b] and steps[b] <= last[a]:
                size = 64
                assert plan.offsets[a] + size <= plan.offsets[b] or plan.offsets[b] + size <= plan.offsets[a]
    assert plan.workspace_bytes < plan.naive_bytes


def test_tuples_constants_lets_and_multiple_outputs(ctx):
    n = 8
    split, add = GlobalVar("split2"), GlobalVar("add")
    x = var("x", (n,))
    weight = np.arange(n, dtype=F32)
    parts = Var("parts")
    body = Let(parts, Call(split, [x]),
               Tuple([Call(add, [TupleGetItem(parts, 0), const(weight)]), TupleGetItem(parts, 1), x,
                      TupleGetItem(parts, 1)]))
    mod = IRModule({"main": Function([x], body), split: split_kernel("split2", n),
                    add: binary_kernel("add", n, lambda a, b: a + b)})
    lib = compile_lowered(mod)
    data = np.random.default_rng(3).standard_normal(n).astype(F32)
    first, second, same, again = lib(data)
    np.testing.assert_allclose(first, data * 2 + weight, rtol=1e-6)
    np.testing.assert_allclose(second, data + 1, rtol=1e-6)
    np.testing.assert_array_equal(same, data)
    np.testing.assert_array_equal(again, second)
    assert lib.metadata["weights_bytes"] == weight.nbytes


def test_host_rejects_constructs_it_cannot_run():
    x = var("x", (4,))
    with pytest.raises(IRError, match="op 'exp' directly"):
        analyze_main(IRModule({"main": Function([x], op.exp(x))}))
    from passinfra.ir.expr import If

    cond = var("c", (), "bool")
    with pytest.raises(IRError, match="cannot handle If"):
        analyze_main(IRModule({"main": Function([cond, x], If(cond, x, x))}))
    helper = GlobalVar("helper")
    mod = IRModule({"main": Function([x], Call(helper, [x])), helper: Function([var("y", (4,))], x)})
    with pytest.raises(IRError, match="@helper, which is not lowered"):
        analyze_main(mod)


def test_host_checks_argument_shapes_against_kernel_buffers():
    k = GlobalVar("k")
    x = var("x", (5,))
    mod = IRModule({"main": Function([x], Call(k, [x])), k: unary_kernel("k", 4, lambda v: v)})
    with pytest.raises(IRError, match=r"argument 0 of @k is float32\[5\].*buffer 'x' is float32\[4\]"):
        analyze_main(mod)


def test_runtime_checks_inputs_and_round_trips_through_files(ctx, tmp_path):
    lib = compile_lowered(chain_module(n=16, length=2))
    with pytest.raises(EvaluationError, match=r"takes 1 inputs \(x\), got 2"):
        lib(np.zeros(16, F32), np.zeros(16, F32))
    with pytest.raises(EvaluationError, match="input 'x': expected shape"):
        lib(np.zeros(15, F32))
    with pytest.raises(EvaluationError, match="input 'x': expected dtype float32, got float64"):
        lib(np.zeros(16))
    with pytest.raises(KeyError, match="no entry named 'other'"):
        lib["other"]
    x = np.linspace(-1, 1, 16).astype(F32)
    path = tmp_path / "model.so"
    lib.export_library(path)
    assert (tmp_path / "model.so.raypass.json").exists() and (tmp_path / "model.so.weights.bin").exists()
    loaded = load_module(path)
    np.testing.assert_array_equal(loaded["main"](x), lib(x))
    assert loaded.library_bytes == lib.library_bytes


# ----- build() end to end ------------------------------------------------------------------
def test_build_rejects_unknown_target():
    from passinfra.build import BuildError, build

    with pytest.raises(BuildError, match="unsupported target 'cuda'"):
        build(chain_module(), target="cuda")


def test_build_hands_the_compile_pipeline_to_the_scheduler(ctx):
    from passinfra.build import build

    class RecordingScheduler:
        def __init__(self):
            self.calls = []

        def run(self, pipeline, mod):
            self.calls.append([p.info.name for p in pipeline.passes])
            raise RuntimeError("stop here")

    scheduler = RecordingScheduler()
    x = var("x", (4,))
    with pytest.raises(RuntimeError, match="stop here"):
        build(IRModule.from_expr(Function([x], op.exp(x))), scheduler=scheduler)
    assert scheduler.calls and scheduler.calls[0][-3:] == ["CodegenC", "GroupKernels", "CompileC"]
    assert "FuseOps" in scheduler.calls[0]


@pytest.mark.parametrize("model", ["demo_cnn", "mlp", "transformer_block"])
def test_build_zoo_model_matches_the_interpreter(ctx, model):
    import passinfra
    from passinfra.build import build
    from passinfra.frontend.zoo.ir_models import MODELS

    mod = MODELS[model]()
    main = mod["main"]
    ty = main.params[0].type_annotation
    x = np.random.default_rng(0).standard_normal(ty.shape).astype(ty.dtype)
    lib = build(mod, opt_level=3)
    np.testing.assert_allclose(lib(x), passinfra.evaluate(mod, x), rtol=1e-5, atol=1e-5)


def test_threads_calling_one_module_each_get_their_own_workspace(ctx):
    # the workspace is kept between calls, per thread: concurrent calls (which run without
    # the GIL) must neither share it nor see each other's intermediates
    import threading

    import passinfra
    from passinfra.build import build
    from passinfra.frontend.zoo.ir_models import MODELS

    mod = MODELS["demo_cnn"]()
    ty = mod["main"].params[0].type_annotation
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(ty.shape).astype(ty.dtype) for _ in range(4)]
    expected = [passinfra.evaluate(mod, x) for x in inputs]
    lib = build(mod, opt_level=3)
    assert lib.metadata["workspace_bytes"] > 0
    results: dict[int, list] = {}

    def worker(index: int) -> None:
        results[index] = [lib(inputs[index]) for _ in range(20)]

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index, outputs in results.items():
        for output in outputs:
            np.testing.assert_allclose(output, expected[index], rtol=1e-5, atol=1e-5)
    assert lib._workspace() is lib._workspace()  # kept between calls on one thread


def test_build_export_and_load_round_trip(ctx, tmp_path):
    import passinfra
    from passinfra.build import build
    from passinfra.frontend.zoo.ir_models import mlp

    mod = mlp()
    lib = build(mod)
    path = tmp_path / "mlp.so"
    lib.export_library(path)
    x = np.random.default_rng(1).standard_normal(mod["main"].params[0].type_annotation.shape).astype(F32)
    np.testing.assert_allclose(load_module(path)(x), passinfra.evaluate(mod, x), rtol=1e-5, atol=1e-5)


def test_second_build_compiles_nothing(ctx):
    from passinfra.build import build
    from passinfra.codegen.object_cache import compile_stats, reset_compile_stats
    from passinfra.frontend.zoo.ir_models import mlp

    build(mlp())
    reset_compile_stats()
    # the object cache's own behaviour: without the whole-build cache every pass runs again
    with PassContext(config={**ctx.config, "codegen.build_cache": False}):
        build(mlp())
    assert compile_stats()["compiles"] == 0 and compile_stats()["hits"] > 0
    reset_compile_stats()
    build(mlp())  # and with it, the object cache is not even consulted
    assert compile_stats()["build_hits"] == 1 and compile_stats()["hits"] == 0


def test_host_analysis_and_planning_of_a_100k_call_chain(default_recursion_limit):
    n, length = 4, 100_000
    mod = chain_module(n=n, length=length)
    program = analyze_main(mod)
    assert len(program.calls) == length
    plan = plan_memory(program)
    assert plan.workspace_bytes == 2 * 64 and plan.naive_bytes == (length - 1) * n * 4


def test_same_model_links_to_byte_identical_libraries(ctx):
    from passinfra.build import build
    from passinfra.frontend.zoo.ir_models import demo_cnn

    # deterministic compile and link, not the whole-build cache, must make them identical
    with PassContext(config={**ctx.config, "codegen.build_cache": False}):
        first, second = build(demo_cnn()), build(demo_cnn())
    assert first.library_bytes == second.library_bytes
    assert first.metadata == second.metadata
    assert first.metadata["workspace_bytes"] <= first.metadata["naive_intermediate_bytes"]


def test_a_main_with_symbolic_dimensions_builds_once_for_every_size() -> None:
    import passinfra
    from passinfra.ir import DimVar
    from passinfra.runtime.shape_binding import DimBindingError

    x = var("x", (DimVar("batch", 1, 64), 16))
    lib = passinfra.build(IRModule.from_expr(Function([x], op.nn.relu(op.add(x, x)))))
    assert lib.metadata["dims"] == [{"name": "batch", "lo": 1, "hi": 64}]
    for batch in (1, 7, 64):
        data = np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)
        np.testing.assert_array_equal(lib(data), np.maximum(data + data, 0))
    with pytest.raises(DimBindingError, match="batch"):
        lib(np.zeros((65, 16), np.float32))


def test_an_op_whose_rule_needs_static_sizes_is_one_clear_error_naming_it() -> None:
    """A compute rule written for static shapes only (here a user's op that loops over
    ``range(extent)``): the build names the function, its op and the sizes."""
    import passinfra
    from passinfra.codegen.compute import ComputeOp, register_compute
    from passinfra.errors import SymbolicSizeError
    from passinfra.ir import DimVar
    from passinfra.ir.op.registry import SYMBOLIC_SHAPES, OpPattern, register_op

    reverse = register_op("test_cg_build.reverse", num_inputs=1, type_rel=lambda types, attrs: types[0],
                          impl=lambda args, attrs: args[0][::-1], pattern=OpPattern.INJECTIVE, override=True)
    reverse.set_attr(SYMBOLIC_SHAPES, True)

    def rule(inputs, attrs, out_type):
        (data,) = inputs
        last = int(data.shape[0]) - 1  # a static size only
        return ComputeOp("reverse", data.shape, data.dtype, lambda idx: data.load(last - idx[0], *idx[1:]))

    register_compute("test_cg_build.reverse")(rule)
    x = var("x", (DimVar("batch", 1, 64), 16))
    expected = r"test_cg_build\.reverse.*symbolic sizes \(batch\).*--shapes"
    with pytest.raises(SymbolicSizeError, match=expected):
        passinfra.build(IRModule.from_expr(Function([x], op.nn.relu(Call(reverse, [x])))))

"""``backend="auto"``: the cost model's choice, with and without a warm pool (no Ray here)."""

from __future__ import annotations

from passinfra.build import compile_pipeline
from passinfra.frontend.zoo.ir_models import mlp, transformer_block
from passinfra.ir import IRModule
from passinfra.ir.type_infer import infer_module
from passinfra.transform import PassContext, Sequential
from scheduler.auto import CostModel, choose, predicted_kernels
from scheduler.plan import build_plan
from tests.scheduler import passes_for_tests as P


def _typed(mod: IRModule) -> IRModule:
    infer_module(mod)
    return mod


def _decide(pipeline, mod, warm: bool, **config) -> tuple[str, str]:
    with PassContext(opt_level=3, config=config) as ctx:
        return choose(build_plan(pipeline, ctx), mod, 2, warm, ctx)


def test_identical_layers_predict_shared_kernels():
    one = _typed(transformer_block(seq=8, hidden=32)).copy()
    wider = _typed(transformer_block(seq=8, hidden=64))
    both = IRModule({"a": one["main"], "b": one["main"]})
    assert predicted_kernels(both) == predicted_kernels(one)  # the same anchors: no new kernels
    assert predicted_kernels(IRModule({"a": one["main"], "b": wider["main"]})) > predicted_kernels(one)


def test_a_tiny_graph_pipeline_stays_local_with_or_without_a_pool():
    pipeline = Sequential([P.add_to_multiply], opt_level=0)
    for warm in (False, True):
        backend, reason = _decide(pipeline, P.chain_module(3), warm)
        assert backend == "local" and "too small to pay for Ray" in reason


def _many_kernels() -> IRModule:
    """Blocks of six widths: their kernels all differ."""
    blocks = {f"block{h}": _typed(transformer_block(seq=8, hidden=h))["main"] for h in range(32, 128, 16)}
    return IRModule(blocks)


def test_a_small_build_stays_local_even_on_a_warm_pool():
    backend, reason = _decide(compile_pipeline(), _typed(mlp(hidden=(32, 48, 64))), warm=True)
    assert backend == "local" and "too small to pay for Ray" in reason and "warm pool" in reason


def test_a_large_build_goes_to_a_warm_pool_and_stays_local_when_ray_must_start():
    mod = _many_kernels()
    assert predicted_kernels(mod) > 30
    with_pool, reason = _decide(compile_pipeline(), mod, warm=True)
    assert with_pool == "ray" and "warm pool, no start-up" in reason
    without, reason = _decide(compile_pipeline(), mod, warm=False)
    startup = CostModel().startup_seconds
    assert without == "local" and f"start-up {startup:.1f}s" in reason  # the measured constant, shown


def test_enough_kernels_pay_for_starting_ray():
    mod = _typed(mlp(hidden=(32, 48, 64)))
    kernels = predicted_kernels(mod)
    # at a second per kernel, the kernels' work outweighs a 1 s start-up
    config = {"scheduler.auto_seconds_per_kernel": 1.0, "scheduler.auto_startup_seconds": 1.0}
    backend, reason = _decide(compile_pipeline(), mod, warm=False, **config)
    assert kernels >= 3 and backend == "ray" and f"{kernels} kernels" in reason


def test_no_function_stage_means_local():
    backend, reason = _decide(Sequential([], opt_level=0), P.chain_module(4), warm=True)
    assert backend == "local" and "no function passes" in reason


def test_calls_are_counted_for_the_stages_that_ship():
    """A single function's graph stages run in the driver: of a build of one function
    only the kernel stage ships, so only its calls cost anything."""
    from scheduler.auto import estimate

    single = _typed(transformer_block(seq=8, hidden=32))
    with PassContext(opt_level=3) as ctx:
        plan = build_plan(compile_pipeline(), ctx)
        one = estimate(plan, single, 2, 0.0, CostModel())
        two = estimate(plan, IRModule({"a": single["main"], "b": single["main"]}), 2, 0.0, CostModel())
    function_stages = sum(1 for stage in plan.stages if stage.kind == "function")
    assert function_stages > 1
    assert one.calls == min(one.kernels, 2 * 8)  # the kernel stage alone
    assert two.calls == function_stages * min(max(two.kernels, 2), 2 * 8)

"""The built-in passes together: the seed's example pipeline, the standard opt_level=3
pipeline on the builder models (in-process and on Ray workers), and the plan the
scheduler makes of it now that the built-ins promise ``reads_module=False``."""

from __future__ import annotations

import numpy as np
import pytest

from passinfra import ir, transform
from passinfra.frontend.zoo.ir_models import demo_cnn, transformer_block
from passinfra.ir import op
from passinfra.runtime.interpreter import evaluate
from scheduler import Scheduler, build_plan
from tests.transform.pass_equivalence import assert_same_value

C_DATA = np.array([1.0, 2.0, 3.0], "float32")


# --------------------------------------------------------------------------- the seed example


def seed_program() -> ir.IRModule:
    """c = const; y = add(c, c); y = multiply(y, 2); y = add(x, y); z = add(y, c);
    z1 = add(y, c); z2 = add(z, z1)  (z and z1 are separate, equal nodes)."""
    x = ir.var("x", (3,))
    c = ir.const(C_DATA)
    y = op.add(x, op.multiply(op.add(c, c), ir.const(2.0)))
    z, z1 = op.add(y, c), op.add(y, c)
    return ir.IRModule({"main": ir.Function([x], op.add(z, z1))})


def seed_pipeline() -> transform.Sequential:
    return transform.Sequential(
        [transform.InferType(), transform.FoldConstant(), transform.EliminateCommonSubexpr(),
         transform.AlterOpLayout()]
    )


def expected_seed_result(merged: bool) -> ir.IRModule:
    x = ir.var("x", (3,))
    c = ir.const(C_DATA)
    y = op.add(x, ir.const((C_DATA + C_DATA) * 2))
    z = op.add(y, c)
    z1 = z if merged else op.add(y, c)
    return ir.IRModule({"main": ir.Function([x], op.add(z, z1))})


def test_seed_pipeline_folds_constants_and_merges_z_and_z1():
    with transform.PassContext(opt_level=3):
        after = seed_pipeline()(seed_program())
    expected = expected_seed_result(merged=True)
    ir.assert_structural_equal(after["main"], expected["main"])
    # structural equality does not see sharing; identity and the text do
    result = after["main"].body
    assert result.args[0] is result.args[1]
    assert after.astext() == expected.astext()
    x = np.array([0.5, -1.0, 2.0], "float32")
    assert_same_value(evaluate(after, x), evaluate(seed_program(), x))


def test_seed_pipeline_with_cse_disabled_keeps_z_and_z1_apart():
    with transform.PassContext(opt_level=3, disabled_pass=["EliminateCommonSubexpr"]):
        after = seed_pipeline()(seed_program())
    expected = expected_seed_result(merged=False)
    ir.assert_structural_equal(after["main"], expected["main"])
    result = after["main"].body
    assert result.args[0] is not result.args[1]
    assert after.astext() == expected.astext()


def test_seed_pipeline_below_opt_level_3_skips_cse():
    # EliminateCommonSubexpr is opt_level 3; FoldConstant (2) still runs
    with transform.PassContext(opt_level=2):
        after = seed_pipeline()(seed_program())
    assert after.astext() == expected_seed_result(merged=False).astext()


# --------------------------------------------------------------------------- the standard pipeline


def standard_pipeline() -> transform.Sequential:
    return transform.Sequential(
        [transform.SimplifyInference(), transform.FoldConstant(), transform.FoldScaleAxis(),
         transform.EliminateCommonSubexpr(), transform.DeadCodeElimination(), transform.AlterOpLayout(),
         transform.FoldConstant(), transform.FuseOps()],
        name="standard",
    )


def optimize(mod: ir.IRModule) -> ir.IRModule:
    with transform.PassContext(opt_level=3):
        return standard_pipeline()(mod)


def primitive_names(mod: ir.IRModule) -> list[str]:
    return [gv.name_hint for gv, func in mod.functions.items() if func.attrs.get("Primitive")]


def calls_in_main(mod: ir.IRModule) -> list[str]:
    return [
        node.op.name_hint
        for node in ir.iter_post_order(mod["main"].body)
        if isinstance(node, ir.Call) and isinstance(node.op, ir.GlobalVar)
    ]


def ops_of(func: ir.Function) -> list[str]:
    return [node.op.name for node in ir.iter_post_order(func.body) if isinstance(node, ir.Call)]


def test_demo_cnn_keeps_its_values_and_fuses_into_five_primitives():
    mod = demo_cnn()
    after = optimize(mod)
    data = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype("float32")
    assert_same_value(evaluate(after, data), evaluate(mod, data))
    # 5 primitives, checked by hand against the printed module:
    #  1. transpose: the NCHW input to NHWC (AlterOpLayout); an injective op cannot fuse
    #     into the conv2d that consumes it
    #  2. conv2d + add + relu: the batch norm's scale went into the conv weights
    #     (SimplifyInference, FoldConstant, BackwardFoldScaleAxis), its shift is the add;
    #     both elementwise ops fuse into the conv2d (out_ewise_fusable)
    #  3. transpose + reshape: back to NCHW, then flatten (an injective chain)
    #  4. dense + bias_add
    #  5. softmax, alone
    assert primitive_names(after) == [
        "fused_transpose", "fused_nn_conv2d_add_nn_relu", "fused_transpose_reshape",
        "fused_nn_dense_nn_bias_add", "fused_nn_softmax",
    ]
    assert ops_of(after["fused_nn_conv2d_add_nn_relu"]) == ["nn.conv2d", "add", "nn.relu"]
    assert after["fused_nn_conv2d_add_nn_relu"].body.args[0].args[0].attrs["data_layout"] == "NHWC"
    assert len(calls_in_main(after)) == 5
    assert "nn.batch_norm" not in after.astext()


def test_transformer_block_keeps_its_values_and_fuses_into_eleven_primitives():
    mod = transformer_block()
    after = optimize(mod)
    x = np.random.default_rng(2).standard_normal((8, 32)).astype("float32")
    assert_same_value(evaluate(after, x), evaluate(mod, x))
    # 15 fused groups, 11 distinct primitive functions (structurally equal groups share
    # one), checked by hand against the printed module:
    #   layer_norm (x2, shared)                  dense + bias_add (q, k, v: shared)
    #   reshape + transpose(1, 0, 2) (q, v)      reshape + transpose(1, 2, 0) (k)
    #   matmul + multiply (scores * 1/sqrt(d))   softmax
    #   matmul (context)                         transpose + reshape (merge heads)
    #   dense + bias_add + add (out projection and residual)
    #   dense + bias_add + gelu (ffn1)           dense + bias_add + add (ffn2 and residual,
    #                                            a 32x128 weight: a different function)
    assert len(primitive_names(after)) == 11
    calls = calls_in_main(after)
    assert len(calls) == 15
    assert calls.count("fused_nn_dense_nn_bias_add") == 3
    assert calls.count("fused_nn_layer_norm") == 2
    assert calls.count("fused_reshape_transpose") == 2
    assert ops_of(after["fused_matmul_multiply"]) == ["matmul", "multiply"]


# --------------------------------------------------------------------------- the plan


def stage_list(pipeline: transform.Pass) -> list[tuple[str, list[str]]]:
    with transform.PassContext(opt_level=3) as ctx:
        plan = build_plan(pipeline, ctx)
    return [(stage.kind, [leaf.name for leaf in stage.leaves]) for stage in plan.stages]


def test_builtin_function_passes_do_not_read_the_module():
    for make in (transform.FoldConstant, transform.DeadCodeElimination, transform.EliminateCommonSubexpr,
                 transform.SimplifyInference, transform.BackwardFoldScaleAxis,
                 transform.ForwardFoldScaleAxis, transform.AlterOpLayout, transform.ToANormalForm,
                 transform.ToGraphNormalForm):
        made = make()
        assert isinstance(made, transform.FunctionPass)
        assert made.reads_module is False, made.info.name


def test_standard_pipeline_plan_batches_function_passes_between_infer_types():
    # every pass that needs types requires InferType, a module pass, so it starts a
    # stage; everything else joins the stage before it
    assert stage_list(standard_pipeline()) == [
        ("module", ["InferType"]),
        ("function", ["SimplifyInference", "FoldConstant"]),
        ("module", ["InferType"]),
        ("function", ["BackwardFoldScaleAxis"]),
        ("module", ["InferType"]),
        ("function", ["ForwardFoldScaleAxis", "EliminateCommonSubexpr", "DeadCodeElimination"]),
        ("module", ["InferType"]),
        ("function", ["AlterOpLayout", "FoldConstant"]),
        ("module", ["InferType"]),
        ("module", ["FuseOps"]),
    ]


def test_interprocedural_passes_read_the_module_and_get_stages_of_their_own():
    pipeline = transform.Sequential(
        [transform.FoldConstant(interprocedural=True), transform.EliminateCommonSubexpr(interprocedural=True),
         transform.DeadCodeElimination(interprocedural=True)]
    )
    assert stage_list(pipeline) == [
        ("function", ["FoldConstant"]), ("function", ["EliminateCommonSubexpr"]),
        ("function", ["DeadCodeElimination"]),
    ]


def test_calls_of_global_functions_merge_only_when_interprocedural():
    # by default CSE reads only its own function, so it cannot know @f is pure
    x, y = ir.var("x", (2,)), ir.var("y", (2,))
    f = ir.GlobalVar("f")
    main = ir.Function([x], op.add(ir.Call(f, [x]), ir.Call(f, [x])))
    mod = ir.IRModule({"main": main, "f": ir.Function([y], op.exp(y))})
    assert transform.EliminateCommonSubexpr()(mod)["main"] is main
    merged = transform.EliminateCommonSubexpr(interprocedural=True)(mod)["main"].body
    assert merged.args[0] is merged.args[1]


def test_typed_passes_use_cached_types_without_the_module():
    # after InferType, a typed pass must not need the module: hand it an empty one
    mod = transform.InferType()(demo_cnn())
    func = mod["main"]
    ctx = transform.PassContext(opt_level=3)
    for make in (transform.SimplifyInference, transform.BackwardFoldScaleAxis,
                 transform.ForwardFoldScaleAxis, transform.AlterOpLayout):
        result = make().pass_func(func, ir.IRModule(), ctx)
        assert isinstance(result, ir.Function)


# --------------------------------------------------------------------------- on Ray workers


def two_model_module() -> ir.IRModule:
    """Both models in one module, so the two workers each get a function."""
    return ir.IRModule({"main": demo_cnn()["main"], "block": transformer_block()["main"]})


@pytest.mark.usefixtures("ray_session")
def test_standard_pipeline_on_ray_workers_prints_like_in_process():
    mod = two_model_module()
    expected = optimize(mod)
    with Scheduler(backend="ray", num_workers=2, cpus_per_worker=0.5) as sched:
        with transform.PassContext(opt_level=3):
            remote = sched.run(standard_pipeline(), mod)
        stats = sched.last_run
    assert remote.astext() == expected.astext()
    assert remote is not mod and mod.astext() == two_model_module().astext()
    # one round of remote calls per function stage: 4 stages (see the plan test)
    function_stages = [stage for stage in stats.stages if stage.kind == "function"]
    assert len(function_stages) == 4
    assert stats.remote_calls >= 4

"""FuseOps: TVM's fusion rules, lifting into global Primitive functions, dedup, regions.

Expected modules are written by hand (TVM's Before/Expected style) and compared with
structural equality; every fused module is also evaluated against the original.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from passinfra import evaluate, ir
from passinfra.errors import IRError
from passinfra.ir import op
from passinfra.ir.graph import IndexedForwardGraph, PostDominatorTree
from passinfra.ir.op.registry import OpPattern
from passinfra.testing import make_chain
from passinfra.transform.builtin.fuse_ops import (
    MAX_FUSE_DEPTH,
    GraphPartitioner,
    fuse_ops,
    fused_function_name,
)
from tests.strategies import GEN_SETTINGS, program_inputs, programs

F32 = "float32"


def tensor(shape, dtype=F32):
    return ir.TensorType(shape, dtype)


def primitive(params, body):
    return ir.Function(params, body, attrs={"Primitive": 1})


def module(main, **functions):
    """An IRModule with ``main`` first, then ``functions`` in the order given."""
    return ir.IRModule({"main": main, **functions})


def call(name, *args):
    return ir.Call(ir.GlobalVar(name), list(args))


def primitive_names(mod):
    return [gv.name_hint for gv, func in mod.functions.items() if func.attrs.get("Primitive")]


def random_inputs(params, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-2, 2, p.type_annotation.shape).astype(p.type_annotation.dtype) for p in params]


def assert_same_values(before, after, args):
    """Evaluate both modules' ``main`` on ``args``; results (arrays or nested tuples of
    arrays) must match."""
    pending = [(evaluate(before, *args), evaluate(after, *args))]
    while pending:
        expected, actual = pending.pop()
        if isinstance(expected, tuple):
            assert isinstance(actual, tuple) and len(actual) == len(expected)
            pending.extend(zip(expected, actual))
        else:
            np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


def check_fused(before, expected=None, **kwargs):
    """Fuse, compare with ``expected`` (if given), type-check, verify, evaluate."""
    after = fuse_ops(before, **kwargs)
    if expected is not None:
        ir.assert_structural_equal(after, expected)
    ir.infer_type(after)
    ir.verify_well_formed(after)
    assert_same_values(before, after, random_inputs(before["main"].params))
    return after


# ---------------------------------------------------------------------- out_ewise_fusable


def test_conv2d_bias_add_relu_fuse_into_one_function():
    x, w, b = ir.var("x", (1, 3, 8, 8)), ir.var("w", (4, 3, 3, 3)), ir.var("b", (4,))
    before = module(ir.Function([x, w, b], op.nn.relu(op.nn.bias_add(op.nn.conv2d(x, w, padding=(1, 1)), b))))

    p0, p1, p2 = ir.var("p0", (1, 3, 8, 8)), ir.var("p1", (4, 3, 3, 3)), ir.var("p2", (4,))
    fused = primitive([p0, p1, p2], op.nn.relu(op.nn.bias_add(op.nn.conv2d(p0, p1, padding=(1, 1)), p2)))
    x, w, b = ir.var("x", (1, 3, 8, 8)), ir.var("w", (4, 3, 3, 3)), ir.var("b", (4,))
    expected = module(
        ir.Function([x, w, b], call("fused_nn_conv2d_nn_bias_add_nn_relu", x, w, b)),
        fused_nn_conv2d_nn_bias_add_nn_relu=fused,
    )
    check_fused(before, expected)


def test_lifted_bodies_keep_the_types_inferred_before_fusion():
    """The kernels' nodes are the graph's, rebuilt over same-typed parameters: their types
    come along (no kernel is inferred again)."""
    x, w, b = ir.var("x", (1, 3, 8, 8)), ir.var("w", (4, 3, 3, 3)), ir.var("b", (4,))
    mod = module(ir.Function([x, w, b], op.nn.relu(op.nn.bias_add(op.nn.conv2d(x, w, padding=(1, 1)), b))))
    ir.infer_type(mod)
    calls = lambda func: [node for node in ir.iter_post_order(func.body) if isinstance(node, ir.Call)]  # noqa: E731
    inferred = [node.checked_type for node in calls(mod["main"])]
    carried = [node._checked_type for node in calls(fuse_ops(mod)["fused_nn_conv2d_nn_bias_add_nn_relu"])]
    assert carried == inferred and inferred[-1] == tensor((1, 4, 8, 8))


def test_residual_add_takes_only_one_conv2d():
    # both convs are post-dominated by the add, but a group holds one out_ewise master:
    # the first conv takes the add and relu, the second stays alone
    x = ir.var("x", (1, 2, 6, 6))
    w1, w2 = ir.var("w1", (2, 2, 3, 3)), ir.var("w2", (2, 2, 3, 3))
    c1 = op.nn.conv2d(x, w1, padding=(1, 1))
    c2 = op.nn.conv2d(x, w2, padding=(1, 1))
    before = module(ir.Function([x, w1, w2], op.nn.relu(op.add(c1, c2))))

    q0, q1 = ir.var("p0", (1, 2, 6, 6)), ir.var("p1", (2, 2, 3, 3))
    conv_alone = primitive([q0, q1], op.nn.conv2d(q0, q1, padding=(1, 1)))
    p0, p1, p2 = ir.var("p0", (1, 2, 6, 6)), ir.var("p1", (2, 2, 3, 3)), ir.var("p2", (1, 2, 6, 6))
    conv_add_relu = primitive([p0, p1, p2], op.nn.relu(op.add(op.nn.conv2d(p0, p1, padding=(1, 1)), p2)))
    x = ir.var("x", (1, 2, 6, 6))
    w1, w2 = ir.var("w1", (2, 2, 3, 3)), ir.var("w2", (2, 2, 3, 3))
    residual = call("fused_nn_conv2d", x, w2)
    expected = module(
        ir.Function([x, w1, w2], call("fused_nn_conv2d_add_nn_relu", x, w1, residual)),
        fused_nn_conv2d=conv_alone,
        fused_nn_conv2d_add_nn_relu=conv_add_relu,
    )
    check_fused(before, expected)


def test_out_ewise_fusable_ops_do_not_chain():
    # dense -> bias_add -> relu is one group; the second dense starts its own
    x, w1, w2 = ir.var("x", (2, 5)), ir.var("w1", (4, 5)), ir.var("w2", (3, 4))
    b = ir.var("b", (4,))
    hidden = op.nn.relu(op.nn.bias_add(op.nn.dense(x, w1), b))
    before = module(ir.Function([x, w1, b, w2], op.nn.dense(hidden, w2)))
    after = check_fused(before)
    assert primitive_names(after) == ["fused_nn_dense_nn_bias_add_nn_relu", "fused_nn_dense"]


# -------------------------------------------------------------------------------- diamonds


def test_diamond_of_elementwise_ops_is_one_group():
    x = ir.var("x", (3, 4))
    e = op.exp(x)
    before = module(ir.Function([x], op.add(op.nn.relu(e), op.negative(e))))

    p0 = ir.var("p0", (3, 4))
    pe = op.exp(p0)
    fused = primitive([p0], op.add(op.nn.relu(pe), op.negative(pe)))
    x = ir.var("x", (3, 4))
    expected = module(ir.Function([x], call("fused_exp_nn_relu_negative_add", x)),
                      fused_exp_nn_relu_negative_add=fused)
    check_fused(before, expected)


def test_diamond_through_an_opaque_op_is_not_fused():
    # exp's post-dominator is the add, but one path runs through softmax (opaque)
    x = ir.var("x", (3, 4))
    e = op.exp(x)
    before = module(ir.Function([x], op.add(e, op.nn.softmax(e))))
    after = check_fused(before)
    assert primitive_names(after) == ["fused_exp", "fused_nn_softmax", "fused_add"]


def test_conv2d_diamond_epilogue_fuses():
    x, w = ir.var("x", (1, 2, 5, 5)), ir.var("w", (2, 2, 1, 1))
    c = op.nn.conv2d(x, w)
    before = module(ir.Function([x, w], op.multiply(op.nn.relu(c), op.exp(c))))
    after = check_fused(before)
    assert primitive_names(after) == ["fused_nn_conv2d_nn_relu_exp_multiply"]


def test_node_returned_and_used_stays_a_value():
    # exp is part of the result, so it cannot disappear into the relu group
    x = ir.var("x", (4,))
    e = op.exp(x)
    before = module(ir.Function([x], ir.Tuple([e, op.nn.relu(e)])))
    after = check_fused(before)
    assert primitive_names(after) == ["fused_exp", "fused_nn_relu"]


# ---------------------------------------------------------------------- reduce, injective


def test_reduce_takes_its_elementwise_producers():
    x = ir.var("x", (4, 6))
    before = module(ir.Function([x], op.sum(op.exp(op.multiply(x, ir.const(2.0))), axis=1)))

    p0 = ir.var("p0", (4, 6))
    fused = primitive([p0], op.sum(op.exp(op.multiply(p0, ir.const(2.0))), axis=1))
    x = ir.var("x", (4, 6))
    expected = module(ir.Function([x], call("fused_multiply_exp_sum", x)), fused_multiply_exp_sum=fused)
    check_fused(before, expected)


def test_reduce_does_not_take_injective_producers_or_consumers():
    # TVM's rule: an injective producer only joins an injective-or-less group, and a
    # reduce never grows forwards
    x = ir.var("x", (4, 6))
    reduced = op.mean(op.nn.relu(op.transpose(x)), axis=0)
    before = module(ir.Function([x], op.exp(reduced)))
    after = check_fused(before)
    assert primitive_names(after) == ["fused_transpose", "fused_nn_relu_mean", "fused_exp"]


def test_injective_ops_fuse_with_each_other_and_elementwise():
    x = ir.var("x", (2, 3, 4))
    y = op.exp(op.reshape(op.transpose(op.negative(x), (2, 0, 1)), (8, 3)))
    before = module(ir.Function([x], y))
    after = check_fused(before)
    assert primitive_names(after) == ["fused_negative_transpose_reshape_exp"]


def test_injective_ops_fuse_into_a_tuple_of_concatenate():
    x, y = ir.var("x", (2, 3)), ir.var("y", (3, 2))
    joined = op.concatenate([op.exp(x), op.transpose(y)], axis=0)
    before = module(ir.Function([x, y], op.nn.relu(joined)))
    after = check_fused(before)
    assert primitive_names(after) == ["fused_exp_transpose_concatenate_nn_relu"]


# ------------------------------------------------------------------------------- opaque


def test_opaque_ops_stand_alone():
    x = ir.var("x", (2, 5))
    g, b = ir.var("g", (5,)), ir.var("b", (5,))
    y = op.nn.relu(op.nn.softmax(op.exp(x)))
    z = op.nn.dropout(op.nn.layer_norm(y, g, b))
    before = module(ir.Function([x, g, b], op.add(z, ir.const(1.0))))
    after = check_fused(before)
    assert primitive_names(after) == [
        "fused_exp", "fused_nn_softmax", "fused_nn_relu",
        "fused_nn_layer_norm", "fused_nn_dropout", "fused_add",
    ]


def test_stateful_op_is_not_fused_and_keeps_its_call():
    x = ir.var("x", (3,))
    noise = op.random.uniform(0.0, 1.0, (3,))
    before = module(ir.Function([x], op.add(op.exp(noise), x)))
    after = fuse_ops(before)
    assert primitive_names(after) == ["fused_random_uniform", "fused_exp_add"]
    ir.verify_well_formed(after)


# ------------------------------------------------------------------------------- dedup


def _block(data, weight, bias):
    return op.nn.relu(op.nn.bias_add(op.nn.conv2d(data, weight, padding=(1, 1)), bias))


def test_identical_blocks_share_one_function_and_weights_are_parameters():
    rng = np.random.default_rng(1)
    weights = [ir.const(rng.standard_normal((2, 2, 3, 3)).astype(F32)) for _ in range(2)]
    biases = [ir.const(rng.standard_normal(2).astype(F32)) for _ in range(2)]
    x = ir.var("x", (1, 2, 4, 4))
    before = module(ir.Function([x], _block(_block(x, weights[0], biases[0]), weights[1], biases[1])))

    p0, p1, p2 = ir.var("p0", (1, 2, 4, 4)), ir.var("p1", (2, 2, 3, 3)), ir.var("p2", (2,))
    fused = primitive([p0, p1, p2], _block(p0, p1, p2))
    name = "fused_nn_conv2d_nn_bias_add_nn_relu"
    x = ir.var("x", (1, 2, 4, 4))
    first = call(name, x, weights[0], biases[0])
    expected = module(ir.Function([x], call(name, first, weights[1], biases[1])), **{name: fused})
    check_fused(before, expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8", "uint8", "int16", "uint16", "uint32",
                                   "uint64", "float32", "int64", "bool"])
def test_scalar_constants_of_every_storage_dtype_are_copied_into_the_fused_function(dtype):
    import ml_dtypes

    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    scalar = ir.const(np.array(1, dtype=np_dtype))
    x = ir.var("x", (2, 3), dtype)
    combine = op.logical_and if dtype == "bool" else op.add
    fused = fuse_ops(module(ir.Function([x], combine(combine(x, scalar), scalar))))
    (primitive_function,) = [f for f in fused.functions.values() if f.attrs.get("Primitive")]
    assert len(primitive_function.params) == 1  # the scalar is inside, not a parameter


def test_dedup_is_module_wide_and_names_follow_module_order():
    def make(shape):
        x = ir.var("x", shape)
        return ir.Function([x], op.nn.relu(op.exp(x)))

    before = ir.IRModule({"main": make((2,)), "other": make((3,)), "third": make((2,))})
    after = fuse_ops(before)
    assert primitive_names(after) == ["fused_exp_nn_relu", "fused_exp_nn_relu_1"]
    assert after["main"].body.op == ir.GlobalVar("fused_exp_nn_relu")
    assert after["other"].body.op == ir.GlobalVar("fused_exp_nn_relu_1")
    assert after["third"].body.op == ir.GlobalVar("fused_exp_nn_relu")
    # deterministic: a second run prints the same module
    assert fuse_ops(before).astext() == after.astext()


def test_new_names_avoid_existing_functions():
    x = ir.var("x", (2,))
    y = ir.var("y", (2,))
    before = ir.IRModule({"main": ir.Function([x], op.exp(x)), "fused_exp": ir.Function([y], y)})
    after = fuse_ops(before)
    assert after["main"].body.op == ir.GlobalVar("fused_exp_1")
    assert after["fused_exp"] is before["fused_exp"]


def test_long_names_are_cut_between_op_names():
    name = fused_function_name(["nn.conv2d"] + ["add"] * 40)
    assert len(name) <= 80 and name.startswith("fused_nn_conv2d_add_add") and not name.endswith("_")
    assert fused_function_name(["x" * 100]) == "fused_" + "x" * 100  # one op is never cut


# ---------------------------------------------------------------------------- opt levels


def _exp_add_relu():
    x = ir.var("x", (3,))
    return module(ir.Function([x], op.nn.relu(op.add(op.exp(op.exp(x)), ir.const(1.0)))))


def test_fuse_opt_level_zero_lifts_each_op_alone_and_shares():
    before = _exp_add_relu()
    p_exp, p_add, p_relu = ir.var("p0", (3,)), ir.var("p0", (3,)), ir.var("p0", (3,))
    x = ir.var("x", (3,))
    twice = call("fused_exp", call("fused_exp", x))
    expected = module(
        ir.Function([x], call("fused_nn_relu", call("fused_add", twice))),
        fused_exp=primitive([p_exp], op.exp(p_exp)),
        fused_add=primitive([p_add], op.add(p_add, ir.const(1.0))),  # the scalar stays inside
        fused_nn_relu=primitive([p_relu], op.nn.relu(p_relu)),
    )
    check_fused(before, expected, fuse_opt_level=0)


@pytest.mark.parametrize(
    ("fuse_opt_level", "opt_level", "count"),
    [(-1, 0, 3), (-1, 2, 1), (0, 3, 3), (1, 0, 1), (2, 2, 1)],
)
def test_effective_opt_level(fuse_opt_level, opt_level, count):
    after = fuse_ops(_exp_add_relu(), fuse_opt_level=fuse_opt_level, opt_level=opt_level)
    assert len(primitive_names(after)) == count


# -------------------------------------------------------------------------------- tuples


def test_split_fields_used_apart_keep_a_tuple_valued_function():
    x = ir.var("x", (4, 6))
    parts = op.split(x, 2, axis=1)
    result = ir.Tuple([op.exp(ir.TupleGetItem(parts, 0)), op.negative(ir.TupleGetItem(parts, 1))])
    before = module(ir.Function([x], result))

    s0 = ir.var("p0", (4, 6))
    pair = ir.TupleType([tensor((4, 3)), tensor((4, 3))])
    e0, n0 = ir.Var("p0", pair), ir.Var("p0", pair)
    x = ir.var("x", (4, 6))
    split_call = call("fused_split", x)
    expected = module(
        ir.Function([x], ir.Tuple([call("fused_exp", split_call), call("fused_negative", split_call)])),
        fused_split=primitive([s0], op.split(s0, 2, axis=1)),
        fused_exp=primitive([e0], op.exp(ir.TupleGetItem(e0, 0))),
        fused_negative=primitive([n0], op.negative(ir.TupleGetItem(n0, 1))),
    )
    check_fused(before, expected)


def test_split_fields_joined_again_fuse_with_the_split():
    x = ir.var("x", (4, 6))
    parts = op.split(x, 2, axis=1)
    before = module(ir.Function([x], op.add(op.exp(ir.TupleGetItem(parts, 0)), ir.TupleGetItem(parts, 1))))
    after = check_fused(before)
    assert primitive_names(after) == ["fused_split_exp_add"]


def test_batch_norm_stands_alone_and_its_getitem_joins_the_consumer():
    x = ir.var("x", (2, 3, 4, 4))
    stats = [ir.var(n, (3,)) for n in ("g", "b", "m", "v")]
    bn = op.nn.batch_norm(x, *stats)
    result = ir.Tuple([op.nn.relu(ir.TupleGetItem(bn, 0)), ir.TupleGetItem(bn, 1)])
    before = module(ir.Function([x, *stats], result))
    after = fuse_ops(before)
    assert primitive_names(after) == ["fused_nn_batch_norm", "fused_nn_relu"]
    relu_fn = after["fused_nn_relu"]
    assert isinstance(relu_fn.params[0].type_annotation, ir.TupleType)
    assert isinstance(relu_fn.body.args[0], ir.TupleGetItem)
    # the field nobody fuses with stays a TupleGetItem in the caller
    result = after["main"].body
    assert isinstance(result.fields[1], ir.TupleGetItem)
    assert result.fields[1].tuple_value.op == ir.GlobalVar("fused_nn_batch_norm")
    ir.verify_well_formed(after)
    args = random_inputs(before["main"].params)
    args[4] = np.abs(args[4]) + 0.5  # a variance
    assert_same_values(before, after, args)


def test_group_with_several_outputs_returns_a_tuple(monkeypatch):
    # TVM's partition always yields one output per group; the lifting handles more, as
    # a partition that puts exp and relu together while both are used outside shows
    x = ir.var("x", (3,))
    e = op.exp(x)
    r = op.nn.relu(e)
    before = module(ir.Function([x], ir.Tuple([e, r])))

    def exp_and_relu_together(self):
        nodes = self.graph.nodes
        roots = list(range(len(nodes)))
        roots[self.graph.index_of[e]] = self.graph.index_of[r]
        return roots

    monkeypatch.setattr(GraphPartitioner, "partition", exp_and_relu_together)
    p0 = ir.var("p0", (3,))
    pe = op.exp(p0)
    x = ir.var("x", (3,))
    fused_call = call("fused_exp_nn_relu", x)
    expected = module(
        ir.Function([x], ir.Tuple([ir.TupleGetItem(fused_call, 0), ir.TupleGetItem(fused_call, 1)])),
        fused_exp_nn_relu=primitive([p0], ir.Tuple([pe, op.nn.relu(pe)])),
    )
    check_fused(before, expected)


def test_a_cyclic_partition_is_rejected(monkeypatch):
    # exp and negative in one group, softmax between them in another: a cycle
    x = ir.var("x", (3,))
    e = op.exp(x)
    n = op.negative(op.nn.softmax(e))
    before = module(ir.Function([x], n))

    def cyclic(self):
        roots = list(range(len(self.graph.nodes)))
        roots[self.graph.index_of[e]] = self.graph.index_of[n]
        return roots

    monkeypatch.setattr(GraphPartitioner, "partition", cyclic)
    with pytest.raises(IRError, match="cycle"):
        fuse_ops(before)


# ------------------------------------------------------------------------------- regions


def test_let_value_and_body_are_fused_separately():
    x = ir.var("x", (4,))
    v = ir.var("v", (4,))
    before = module(ir.Function([x], ir.Let(v, op.nn.relu(op.exp(x)), op.add(op.exp(v), ir.const(1.0)))))

    p0, q0 = ir.var("p0", (4,)), ir.var("p0", (4,))
    x, v = ir.var("x", (4,)), ir.var("v", (4,))
    expected = module(
        ir.Function([x], ir.Let(v, call("fused_exp_nn_relu", x), call("fused_exp_add", v))),
        fused_exp_nn_relu=primitive([p0], op.nn.relu(op.exp(p0))),
        fused_exp_add=primitive([q0], op.add(op.exp(q0), ir.const(1.0))),
    )
    check_fused(before, expected)


def test_node_shared_between_let_value_and_body_is_not_fused_across():
    x = ir.var("x", (4,))
    v = ir.var("v", (4,))
    e = op.exp(x)
    before = module(ir.Function([x], ir.Let(v, op.nn.relu(e), op.add(v, e))))
    after = check_fused(before)
    assert primitive_names(after) == ["fused_exp", "fused_nn_relu", "fused_add"]


def test_if_condition_and_branches_are_separate_regions():
    x = ir.var("x", (5,))
    cond = op.greater(op.sum(op.exp(x)), ir.const(4.0))
    body = ir.If(cond, op.nn.relu(op.negative(x)), op.tanh(op.exp(x)))
    before = module(ir.Function([x], op.multiply(body, ir.const(2.0))))
    after = check_fused(before)
    assert primitive_names(after) == [
        "fused_exp_sum", "fused_greater", "fused_negative_nn_relu", "fused_exp_tanh", "fused_multiply",
    ]
    for seed in range(4):  # both branches
        assert_same_values(before, after, random_inputs(before["main"].params, seed))


def test_closure_body_is_fused_and_calls_stay_opaque():
    y = ir.var("y", (3,))
    closure = ir.Function([y], op.nn.relu(op.exp(y)))
    f = ir.Var("f", ir.FuncType([tensor((3,))], tensor((3,))))
    x = ir.var("x", (3,))
    body = ir.Let(f, closure, op.negative(ir.Call(f, [op.add(x, x)])))
    helper_in = ir.var("h", (3,))
    helper = ir.Function([helper_in], op.sigmoid(op.sigmoid(helper_in)))
    main = ir.Function([x], op.add(body, ir.Call(ir.GlobalVar("helper"), [op.exp(x)])))
    before = ir.IRModule({"main": main, "helper": helper})
    after = check_fused(before)
    assert primitive_names(after) == [
        "fused_exp_nn_relu", "fused_add", "fused_negative",
        "fused_exp", "fused_add_1", "fused_sigmoid_sigmoid",
    ]
    fused_closure = after["main"].body.args[0].value
    assert isinstance(fused_closure, ir.Function) and not fused_closure.attrs.get("Primitive")


def test_primitive_and_skip_optimization_functions_are_left_alone():
    x, y = ir.var("x", (2,)), ir.var("y", (2,))
    prim = primitive([x], op.nn.relu(op.exp(x)))
    skipped = ir.Function([y], op.nn.relu(op.exp(y))).with_attr("SkipOptimization", True)
    z = ir.var("z", (2,))
    before = ir.IRModule({"main": ir.Function([z], call("prim", z)), "prim": prim, "skipped": skipped})
    after = fuse_ops(before)
    assert after["prim"] is prim and after["skipped"] is skipped
    assert after["main"] is before["main"]  # nothing to fuse: the very same function
    assert len(after) == 3


def test_input_module_is_not_changed():
    before = _exp_add_relu()
    main = before["main"]
    text = before.astext()
    fuse_ops(before)
    assert before["main"] is main and len(before) == 1 and before.astext() == text


# ------------------------------------------------------------------------------- models


def _weight(rng, *shape):
    return ir.const((rng.standard_normal(shape) * 0.3).astype(F32))


def test_small_cnn_function_count():
    rng = np.random.default_rng(2)
    x = ir.var("x", (1, 3, 8, 8))
    h = op.nn.relu(op.nn.bias_add(op.nn.conv2d(x, _weight(rng, 4, 3, 3, 3), padding=(1, 1)), _weight(rng, 4)))
    h = op.nn.max_pool2d(h, (2, 2), strides=(2, 2))
    h = op.nn.relu(op.nn.bias_add(op.nn.conv2d(h, _weight(rng, 8, 4, 3, 3), padding=(1, 1)), _weight(rng, 8)))
    h = op.reshape(op.nn.global_avg_pool2d(h), (1, 8))
    logits = op.nn.bias_add(op.nn.dense(h, _weight(rng, 10, 8)), _weight(rng, 10))
    before = module(ir.Function([x], op.nn.softmax(logits)))
    after = check_fused(before)
    # the two conv blocks differ in shapes, so they are two functions of one name
    assert primitive_names(after) == [
        "fused_nn_conv2d_nn_bias_add_nn_relu", "fused_nn_max_pool2d", "fused_nn_conv2d_nn_bias_add_nn_relu_1",
        "fused_nn_global_avg_pool2d", "fused_reshape", "fused_nn_dense_nn_bias_add", "fused_nn_softmax",
    ]
    # every weight was lifted to a parameter: no non-scalar constant inside
    for name in primitive_names(after):
        assert not any(isinstance(n, ir.Constant) and n.data.ndim for n in ir.iter_post_order(after[name]))


def test_transformer_block_function_count():
    rng = np.random.default_rng(3)
    seq, d = 4, 8
    x = ir.var("x", (seq, d))

    def linear(h, out_dim, in_dim=d):
        return op.nn.bias_add(op.nn.dense(h, _weight(rng, out_dim, in_dim)), _weight(rng, out_dim), axis=-1)

    def layer_norm(h):
        return op.nn.layer_norm(h, ir.const(np.ones(d, F32)), ir.const(np.zeros(d, F32)))

    h = layer_norm(x)
    q, k, v = linear(h, d), linear(h, d), linear(h, d)
    scores = op.multiply(op.matmul(q, op.transpose(k)), ir.const(d ** -0.5))
    attn = op.matmul(op.nn.softmax(scores), v)
    res = op.add(linear(attn, d), x)
    ff = op.nn.gelu(linear(layer_norm(res), 4 * d))
    out = op.add(linear(ff, d, in_dim=4 * d), res)
    before = module(ir.Function([x], out))
    after = check_fused(before)
    calls = [n for n in ir.iter_post_order(after["main"]) if isinstance(n, ir.Call)]
    assert len(calls) == 12
    assert primitive_names(after) == [
        "fused_nn_layer_norm", "fused_nn_dense_nn_bias_add", "fused_transpose", "fused_matmul_multiply",
        "fused_nn_softmax", "fused_matmul", "fused_nn_dense_nn_bias_add_add",
        "fused_nn_dense_nn_bias_add_nn_gelu",
        "fused_nn_dense_nn_bias_add_add_1",
    ]


# ------------------------------------------------------------------------- depth and size


def test_chain_is_cut_at_the_max_fuse_depth(default_recursion_limit):
    n = 20_000
    before = make_chain(n, "add")
    after = fuse_ops(before)
    calls = [node for node in ir.iter_post_order(after["main"]) if isinstance(node, ir.Call)]
    assert len(calls) == -(-n // MAX_FUSE_DEPTH)
    sizes = sorted(
        sum(isinstance(node, ir.Call) for node in ir.iter_post_order(after[name].body))
        for name in primitive_names(after)
    )
    # the first group starts with add(x, x) (one parameter), the last is short, and
    # every full group in between shares one function
    assert sizes == [n % MAX_FUSE_DEPTH, MAX_FUSE_DEPTH, MAX_FUSE_DEPTH]
    x = np.arange(2, dtype=F32)
    np.testing.assert_allclose(evaluate(after, x), (n + 1) * x)


def test_let_chain_is_fused_binding_by_binding(default_recursion_limit):
    n = 10_000
    after = fuse_ops(make_chain(n, "let"))
    # add(x, x) for the first binding, add(v, x) for all the others
    assert primitive_names(after) == ["fused_add", "fused_add_1"]
    assert len(after["fused_add"].params) == 1 and len(after["fused_add_1"].params) == 2
    x = np.arange(2, dtype=F32)
    np.testing.assert_allclose(evaluate(after, x), (n + 1) * x)


def test_small_max_fuse_depth():
    x = ir.var("x", (2,))
    y = x
    for _ in range(10):
        y = op.exp(y)
    before = module(ir.Function([x], y))
    after = fuse_ops(before, max_fuse_depth=4)
    assert primitive_names(after) == ["fused_exp_exp_exp_exp", "fused_exp_exp"]
    calls = [node for node in ir.iter_post_order(after["main"]) if isinstance(node, ir.Call)]
    assert [c.op.name_hint for c in calls] == ["fused_exp_exp_exp_exp"] * 2 + ["fused_exp_exp"]


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_arguments_are_rejected(bad):
    with pytest.raises(IRError, match="max_fuse_depth"):
        fuse_ops(_exp_add_relu(), max_fuse_depth=bad)
    with pytest.raises(IRError, match="IRModule"):
        fuse_ops(_exp_add_relu()["main"])


# ------------------------------------------------------------------------ graph analysis


def test_post_dominator_tree_of_a_diamond():
    x = ir.var("x", (3,))
    e = op.exp(x)
    left, right = op.nn.relu(e), op.negative(op.nn.softmax(e))
    out = op.add(left, right)
    ir.infer_type(ir.Function([x], out))
    graph = IndexedForwardGraph.from_expr(out)
    tree = PostDominatorTree(graph)
    at = graph.index_of
    assert tree.parent[at[e]] == at[out]
    assert tree.pattern[at[e]] == OpPattern.OPAQUE  # the path through softmax
    assert tree.parent[at[left]] == at[out] and tree.pattern[at[left]] == OpPattern.ELEMWISE
    assert tree.parent[at[out]] is None and graph.node_of(out).extern_ref
    assert tree.depth[at[e]] == 2


def test_broadcast_edge_becomes_elementwise_when_shapes_match():
    a, b = ir.var("a", (2, 3)), ir.var("b", (3,))
    out = op.add(op.exp(a), op.exp(b))
    ir.infer_type(ir.Function([a, b], out))
    graph = IndexedForwardGraph.from_expr(out)
    assert graph.node_of(out.args[0]).outputs == [(graph.index_of[out], OpPattern.ELEMWISE)]
    assert graph.node_of(out.args[1]).outputs == [(graph.index_of[out], OpPattern.BROADCAST)]


def test_uses_from_another_scope_are_external():
    x = ir.var("x", (3,))
    v = ir.var("v", (3,))
    e = op.exp(x)
    let = ir.Let(v, op.nn.relu(e), op.add(v, e))
    ir.infer_type(ir.Function([x], let))
    graph = IndexedForwardGraph.from_expr(let)
    assert graph.node_of(e).extern_ref
    assert graph.node_of(let.value).extern_ref and graph.node_of(let.body).extern_ref


# ---------------------------------------------------------------------------- properties


@settings(GEN_SETTINGS, max_examples=20)
@given(mod=programs(max_nodes=25), seed=st.integers(0, 3), level=st.sampled_from([0, 2]))
def test_fusion_preserves_values(mod, seed, level):
    after = fuse_ops(mod, fuse_opt_level=level)
    ir.infer_type(after)
    ir.verify_well_formed(after)
    args = program_inputs(mod, seed)
    assert_same_values(mod, after, args)
    # fusing again changes nothing: the callers only call primitive functions now
    again = fuse_ops(after, fuse_opt_level=level)
    assert again.astext() == after.astext()

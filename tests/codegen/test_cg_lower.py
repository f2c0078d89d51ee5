"""LowerToPrimFunc and the compute rules: every op lowered alone and run with the TIR
interpreter against its NumPy reference; fusion structure (inlining, epilogue fusion,
materialization); whole models through FuseOps + lowering against the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import passinfra
from passinfra import tir
from passinfra.codegen.compute import ComputeOp, register_compute
from passinfra.codegen.compute.conv_plan import CONV_KERNEL_CONFIG
from passinfra.codegen.lower import MAX_INLINE_DEPTH, lower_primitive_function
from passinfra.codegen.passes import LowerToPrimFunc
from passinfra.errors import IRError
from passinfra.frontend.zoo.ir_models import demo_cnn, mlp, transformer_block
from passinfra.ir import op
from passinfra.ir.expr import Call, Function, GlobalVar, Tuple, TupleGetItem, Var, const, var
from passinfra.ir.module import IRModule
from passinfra.ir.op.registry import Op, OpPattern, register_op
from passinfra.ir.types import TensorType
from passinfra.tir.evaluator import run_prim_func
from passinfra.tir.functor import iter_expr_post_order
from passinfra.transform import PassContext, get_pass
from passinfra.transform.builtin.fuse_ops import FuseOps
from passinfra.transform.builtin.infer_type import InferType

RNG_SEED = 7


# --------------------------------------------------------------------------- helpers


def _random(shape: tuple[int, ...], dtype: str, rng: np.random.Generator,
            positive: bool = False) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("int"):
        values = rng.integers(1 if positive else -5, 6, size=shape)
        return values.astype(dtype)
    values = rng.uniform(0.5, 2.0, shape) if positive else rng.standard_normal(shape)
    return np.asarray(values, dtype=dtype)


def _primitive(params: list[Var], body) -> Function:
    return Function(params, body, attrs={"Primitive": 1})


def _lower(func: Function, name: str = "fused_test") -> tir.PrimFunc:
    mod = LowerToPrimFunc()(IRModule({name: func}))
    lowered = mod[name]
    assert isinstance(lowered, tir.PrimFunc)
    return lowered


def _flat_outputs(value) -> list[np.ndarray]:
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _flat_outputs(item)]
    return [np.asarray(value)]


def _check_against_reference(func: Function, inputs: list[np.ndarray], rtol: float = 1e-5,
                             atol: float = 1e-5) -> tir.PrimFunc:
    """Lower ``func``, run it with the TIR interpreter, compare with passinfra.evaluate."""
    prim = _lower(func)
    expected = _flat_outputs(passinfra.evaluate(func, *inputs))
    flat_inputs = _flat_outputs(inputs)
    got = _flat_outputs(run_prim_func(prim, *flat_inputs))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype
        np.testing.assert_allclose(g.reshape(e.shape), e, rtol=rtol, atol=atol)
    return prim


def _single_op(build, *specs, positive: bool = False) -> tir.PrimFunc:
    """Lower a primitive function holding ``build(*params)`` and check it numerically;
    ``specs`` are (shape, dtype) of the parameters."""
    rng = np.random.default_rng(RNG_SEED)
    params = [var(f"p{i}", shape, dtype) for i, (shape, dtype) in enumerate(specs)]
    inputs = [_random(shape, dtype, rng, positive) for shape, dtype in specs]
    return _check_against_reference(_primitive(params, build(*params)), inputs)


def _stmts(stmt: tir.Stmt) -> list[tir.Stmt]:
    """Every statement of a body, outermost first (iteratively)."""
    out, stack = [], [stmt]
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, tir.SeqStmt):
            stack.extend(reversed(node.stmts))
        elif isinstance(node, (tir.For, tir.Allocate, tir.LetStmt)):
            stack.append(node.body)
        elif isinstance(node, tir.IfThenElse):
            stack.extend(s for s in (node.then_case, node.else_case) if s is not None)
    return out


def _global_allocations(prim: tir.PrimFunc) -> list[tir.Buffer]:
    return [s.buffer for s in _stmts(prim.body) if isinstance(s, tir.Allocate) and s.buffer.scope != "local"]


def _run_lowered_main(mod: IRModule, *inputs: np.ndarray):
    """Evaluate ``main`` of a lowered module: each call of a PrimFunc GlobalVar runs with
    the TIR interpreter (tuple arguments flattened, as the host code passes them)."""
    main = mod["main"]
    values: dict = dict(zip(main.params, inputs))
    from passinfra.ir.functor import iter_post_order

    for node in iter_post_order(main.body):
        if node in values or isinstance(node, (Op, GlobalVar)):
            continue
        if isinstance(node, Call):
            callee = mod[node.op]
            assert isinstance(callee, tir.PrimFunc), node.op
            args = [leaf for a in node.args for leaf in _flat_outputs(values[a])]
            result = run_prim_func(callee, *args)
            outputs = callee.params[callee.attrs["num_inputs"]:]
            arrays = result if isinstance(result, tuple) else (result,)
            shaped = tuple(a.reshape(b.shape) for a, b in zip(arrays, outputs))
            values[node] = shaped if len(shaped) > 1 else shaped[0]
        elif isinstance(node, Tuple):
            values[node] = tuple(values[f] for f in node.fields)
        elif isinstance(node, TupleGetItem):
            values[node] = values[node.tuple_value][node.index]
        else:
            values[node] = node.data
    return values[main.body]


# --------------------------------------------------------------------------- elementwise


F32 = "float32"


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "maximum", "minimum"])
@pytest.mark.parametrize("shapes", [((2, 3), (2, 3)), ((2, 1, 4), (3, 1)), ((4,), ()), ((1, 3), (2, 1))])
def test_binary_arithmetic_with_broadcasting(name, shapes):
    _single_op(getattr(op, name), (shapes[0], F32), (shapes[1], F32), positive=name == "divide")


def test_integer_divide_truncates_toward_zero():
    rng = np.random.default_rng(RNG_SEED)
    lhs = rng.integers(-20, 20, (3, 4)).astype("int32")
    rhs = rng.choice([-3, -2, 2, 3, 5], (3, 4)).astype("int32")
    a, b = var("a", (3, 4), "int32"), var("b", (3, 4), "int32")
    _check_against_reference(_primitive([a, b], op.divide(a, b)), [lhs, rhs])


def test_power_float_and_int():
    _single_op(op.power, ((2, 3), F32), ((3,), F32), positive=True)
    _single_op(op.power, ((2, 3), "int32"), ((2, 3), "int32"), positive=True)


@pytest.mark.parametrize("name", ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"])
def test_comparisons(name):
    prim = _single_op(getattr(op, name), ((2, 3), "int32"), ((1, 3), "int32"))
    assert prim.params[-1].dtype == "bool"


@pytest.mark.parametrize("name", ["logical_and", "logical_or"])
def test_logical_binary(name):
    _single_op(getattr(op, name), ((3, 2), "bool"), ((2,), "bool"))


@pytest.mark.parametrize("name", ["negative", "abs", "exp", "tanh", "sigmoid", "erf"])
def test_unary_float(name):
    _single_op(getattr(op, name), ((2, 5), F32))


@pytest.mark.parametrize("name", ["log", "sqrt"])
def test_unary_positive_domain(name):
    _single_op(getattr(op, name), ((2, 5), F32), positive=True)


def test_unary_integer_and_bool():
    _single_op(op.abs, ((6,), "int32"))
    _single_op(op.negative, ((6,), "int64"))
    _single_op(op.logical_not, ((6,), "bool"))


def test_clip_float_and_int():
    _single_op(lambda x: op.clip(x, -0.5, 0.7), ((3, 4), F32))
    _single_op(lambda x: op.clip(x, -2.5, 3.5), ((3, 4), "int32"))


@pytest.mark.parametrize("dtypes", [(F32, "int32"), ("int32", F32), (F32, "float64"), ("int32", "bool")])
def test_cast(dtypes):
    source, target = dtypes
    _single_op(lambda x: op.cast(x, target), ((2, 3), source))


@pytest.mark.parametrize("name", ["relu", "gelu"])
def test_nn_activations(name):
    _single_op(getattr(op.nn, name), ((3, 4), F32))


def test_dropout_is_identity():
    _single_op(lambda x: op.nn.dropout(x, 0.3), ((3, 4), F32))


@pytest.mark.parametrize("axis, shape", [(1, (2, 3, 4)), (-1, (2, 3, 4)), (0, (3, 2))])
def test_bias_add(axis, shape):
    _single_op(lambda x, b: op.nn.bias_add(x, b, axis), (shape, F32), ((shape[axis],), F32))


# --------------------------------------------------------------------------- layout and creation


@pytest.mark.parametrize("newshape", [(6, 4), (-1,), (2, 0, -1), (4, 3, 2)])
def test_reshape(newshape):
    _single_op(lambda x: op.reshape(x, newshape), ((2, 3, 4), F32))


@pytest.mark.parametrize("axes", [None, (1, 0, 2), (2, 0, 1), (-1, -3, -2)])
def test_transpose(axes):
    _single_op(lambda x: op.transpose(x, axes), ((2, 3, 4), F32))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concatenate(axis):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for i, shape in enumerate(shapes):
        shape[axis] = i + 1
    _single_op(lambda a, b, c: op.concatenate(Tuple([a, b, c]), axis), *[(tuple(s), F32) for s in shapes])


@pytest.mark.parametrize("sections, axis", [(3, 1), ((1, 4), 1), (2, 0)])
def test_split_returns_every_piece(sections, axis):
    prim = _single_op(lambda x: op.split(x, sections, axis), ((4, 6), F32))
    expected_pieces = sections if isinstance(sections, int) else len(sections) + 1
    assert len(prim.params) - prim.attrs["num_inputs"] == expected_pieces


def test_split_piece_consumed_inside_the_group():
    def build(x):
        pieces = op.split(x, 2, axis=1)
        return op.add(TupleGetItem(pieces, 0), TupleGetItem(pieces, 1))

    prim = _single_op(build, ((3, 4), F32))
    assert not _global_allocations(prim)


@pytest.mark.parametrize("axis", [None, (0, 2), (-1,)])
def test_squeeze(axis):
    _single_op(lambda x: op.squeeze(x, axis), ((1, 3, 1), F32))


@pytest.mark.parametrize("axis, count", [(0, 1), (-1, 2), (1, 1)])
def test_expand_dims(axis, count):
    _single_op(lambda x: op.expand_dims(x, axis, count), ((2, 3), F32))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_take_with_negative_indices(axis):
    data = np.arange(12, dtype=F32).reshape(3, 4)
    extent = data.size if axis is None else data.shape[axis]
    indices = np.array([[0, -1], [extent - 1, -extent]], dtype="int32")
    d, i = var("d", (3, 4)), var("i", (2, 2), "int32")
    _check_against_reference(_primitive([d, i], op.take(d, i, axis)), [data, indices])


@pytest.mark.parametrize(("dtype", "extent", "tested"), [("uint8", 256, False), ("uint8", 200, True),
                                                     ("int32", 256, True)])
def test_take_tests_only_what_the_index_type_allows(dtype, extent, tested):
    """8-bit codes into a table of 256 (a quantized activation's lookup) read the table at
    the code itself: no wrap of negative indices, no clamp (a Select and a Min/Max)."""
    table, codes = var("t", (extent,)), var("i", (3, 5), dtype)
    indices = np.random.default_rng(0).integers(0, extent, (3, 5)).astype(dtype)
    prim = _check_against_reference(_primitive([table, codes], op.take(table, codes, 0)),
                                    [np.arange(extent, dtype=F32) * 0.5, indices])
    checks = [n for s in _stmts(prim.body) if isinstance(s, tir.BufferStore)
              for n in iter_expr_post_order(s.value) if isinstance(n, (tir.Select, tir.Min, tir.Max))]
    assert bool(checks) == tested


def test_where_broadcasts_all_three():
    _single_op(op.where, ((2, 1, 3), "bool"), ((4, 1), F32), ((3,), F32))


def test_creation_ops():
    rng = np.random.default_rng(RNG_SEED)
    fill = var("fill", (), F32)
    _check_against_reference(_primitive([fill], op.full(fill, (2, 3), "float64")), [_random((), F32, rng)])
    # zero-argument calls, combined with a parameter so the function has an input
    x = var("x", (2, 3))
    body = op.add(op.add(x, op.zeros((2, 3))), op.ones((3,)))
    _check_against_reference(_primitive([x], body), [_random((2, 3), F32, rng)])
    _check_against_reference(_primitive([], op.ones((2, 2), "int32")), [])


# --------------------------------------------------------------------------- reductions


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, (0, 2), -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reductions_over_each_axis(name, axis, keepdims):
    _single_op(lambda x: getattr(op, name)(x, axis, keepdims), ((2, 3, 4), F32))


def test_integer_reductions():
    _single_op(lambda x: op.sum(x, 1), ((3, 4), "int32"))
    _single_op(lambda x: op.max(x, 0, True), ((3, 4), "int64"))


def test_reduction_epilogue_and_prologue_fuse():
    # sum(exp(x)) * 2: the exp is inlined into the reduction, the multiply fused after it
    prim = _single_op(lambda x: op.multiply(op.sum(op.exp(x), axis=1), const(2.0)), ((3, 5), F32))
    assert not _global_allocations(prim)


# --------------------------------------------------------------------------- nn contractions


CONV_CASES = [
    dict(strides=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1),
    dict(strides=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1),
    dict(strides=(2, 1), padding=(1, 2, 0, 1), dilation=(1, 1), groups=1),
    dict(strides=(1, 2), padding=(2, 2), dilation=(2, 1), groups=1),
    dict(strides=(1, 1), padding=(1, 1), dilation=(1, 1), groups=2),
    dict(strides=(2, 2), padding=(1, 1), dilation=(1, 1), groups=4),  # depthwise
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_nchw(case):
    groups = case["groups"]
    _single_op(lambda d, w: op.nn.conv2d(d, w, **case), ((1, 4, 7, 6), F32), ((4, 4 // groups, 3, 3), F32))


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_nhwc_hwio(case):
    groups = case["groups"]
    _single_op(lambda d, w: op.nn.conv2d(d, w, data_layout="NHWC", kernel_layout="HWIO", **case),
               ((2, 6, 5, 4), F32), ((3, 2, 4 // groups, 4), F32))


def test_conv2d_mixed_layouts():
    _single_op(lambda d, w: op.nn.conv2d(d, w, padding=(1, 1), data_layout="NCHW", kernel_layout="HWIO"),
               ((1, 3, 5, 5), F32), ((3, 3, 3, 2), F32))


def test_conv2d_nhwc_keeps_output_channel_innermost():
    # the generic loop nest (the microkernels, which would take this convolution, off)
    with PassContext(config={CONV_KERNEL_CONFIG: "none"}):
        prim = _single_op(lambda d, w: op.nn.conv2d(d, w, data_layout="NHWC", kernel_layout="HWIO"),
                          ((1, 4, 4, 2), F32), ((3, 3, 2, 5), F32))
    loops = [s for s in _stmts(prim.body) if isinstance(s, tir.For)]
    # the 4 output loops (N, H, W, C) come first; C (extent 5) is the innermost of them
    assert [loop.extent.value for loop in loops[:4]] == [1, 2, 2, 5]


@pytest.mark.parametrize("data_shape", [(3, 8), (2, 3, 8), (8,)])
def test_dense(data_shape):
    _single_op(op.nn.dense, (data_shape, F32), ((5, 8), F32))


def test_dense_reads_k_innermost_contiguously():
    prim = _single_op(op.nn.dense, ((3, 8), F32), ((5, 8), F32))
    loops = [s for s in _stmts(prim.body) if isinstance(s, tir.For)]
    innermost = loops[-1]
    loads = [s.value for s in _stmts(innermost.body) if isinstance(s, tir.BufferStore)]
    assert innermost.extent.value == 8
    text = repr(loads)
    # both operands are indexed by the reduction variable in their last position
    assert text.count(f"indices=(TVar(name='i0', dtype='int64'), TVar(name='{innermost.loop_var.name}'") == 1


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                                    ((4,), (4, 3)), ((2, 3, 4), (4,)), ((4,), (4,))])
def test_matmul_numpy_semantics(shapes):
    _single_op(op.matmul, (shapes[0], F32), (shapes[1], F32))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("padding, strides", [((0, 0), (1, 1)), ((1, 1), (2, 2)), ((1, 0, 0, 1), (1, 2))])
def test_max_pool2d(layout, padding, strides):
    shape = (1, 3, 6, 5) if layout == "NCHW" else (1, 6, 5, 3)
    _single_op(lambda x: op.nn.max_pool2d(x, (3, 2), strides, padding, layout), (shape, F32))


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_avg_pool2d_with_padding(count_include_pad, layout):
    shape = (2, 2, 5, 6) if layout == "NCHW" else (2, 5, 6, 2)
    _single_op(lambda x: op.nn.avg_pool2d(x, (3, 3), (2, 2), (1, 1), layout, count_include_pad), (shape, F32))


def test_max_pool2d_int():
    _single_op(lambda x: op.nn.max_pool2d(x, (2, 2), (1, 1), (1, 1)), ((1, 2, 3, 3), "int32"))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_global_avg_pool2d(layout):
    _single_op(lambda x: op.nn.global_avg_pool2d(x, layout), ((2, 3, 4, 5), F32))


# --------------------------------------------------------------------------- normalizations


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax(axis):
    _single_op(lambda x: op.nn.softmax(x, axis), ((2, 3, 4), F32))


@pytest.mark.parametrize("axis", [-1, 0])
def test_layer_norm(axis):
    shape = (3, 5)
    _single_op(lambda x, g, b: op.nn.layer_norm(x, g, b, axis), (shape, F32), ((shape[axis],), F32),
               ((shape[axis],), F32))


@pytest.mark.parametrize("axis", [1, 3])
def test_batch_norm_returns_three_outputs(axis):
    rng = np.random.default_rng(RNG_SEED)
    shape = (2, 3, 4, 3)
    channels = shape[axis]
    params = [var("x", shape)] + [var(n, (channels,)) for n in ("gamma", "beta", "mean", "var")]
    inputs = [_random(shape, F32, rng)] + [_random((channels,), F32, rng, positive=True) for _ in range(4)]
    func = _primitive(params, op.nn.batch_norm(*params, axis=axis))
    prim = _check_against_reference(func, inputs)
    assert len(prim.params) == 8 and prim.attrs["num_inputs"] == 5


# --------------------------------------------------------------------------- fusion structure


def test_conv_bias_relu_is_one_loop_nest_with_a_local_accumulator():
    def build(d, w, b):
        return op.nn.relu(op.nn.bias_add(op.nn.conv2d(d, w, padding=(1, 1)), b))

    prim = _single_op(build, ((1, 2, 5, 5), F32), ((3, 2, 3, 3), F32), ((3,), F32))
    assert not _global_allocations(prim)
    stores = [s for s in _stmts(prim.body) if isinstance(s, tir.BufferStore)]
    output = prim.params[-1]
    # the output is stored once per index, after the accumulation (no read-modify-write)
    assert [s.buffer for s in stores].count(output) == 1
    assert isinstance(prim.body, tir.For)


def test_dense_feeding_a_reshape_is_materialized():
    # a reshape reads the dense result at computed indices, so it cannot be fused
    prim = _single_op(lambda x, w: op.reshape(op.nn.dense(x, w), (2, 6)), ((3, 4), F32), ((4, 4), F32))
    assert [b.shape for b in _global_allocations(prim)] == [(3, 4)]


def test_elementwise_chain_is_inlined():
    prim = _single_op(lambda x, y: op.exp(op.add(op.multiply(x, y), y)), ((3, 4), F32), ((4,), F32))
    assert not _global_allocations(prim)
    assert sum(isinstance(s, tir.BufferStore) for s in _stmts(prim.body)) == 1


def test_cheap_value_used_twice_is_recomputed_inline():
    def build(x):
        y = op.add(x, x)
        return op.multiply(y, y)

    assert not _global_allocations(_single_op(build, ((4,), F32)))


def test_expensive_value_used_twice_is_materialized():
    def build(x):
        y = op.exp(x)
        return op.multiply(y, op.add(y, x))

    prim = _single_op(build, ((4, 2), F32))
    assert [b.shape for b in _global_allocations(prim)] == [(4, 2)]


def test_squaring_chain_stays_small():
    # each value is used twice: inlining everything would grow as 2**40
    def build(x):
        for _ in range(40):
            x = op.multiply(x, x)
        return x

    rng = np.random.default_rng(RNG_SEED)
    x = var("x", (3,))
    data = rng.uniform(0.999, 1.001, 3).astype(F32)
    prim = _check_against_reference(_primitive([x], build(x)), [data], rtol=1e-3)
    assert _global_allocations(prim)


def test_reduction_read_twice_is_materialized_once():
    def build(x):
        s = op.sum(x, axis=1, keepdims=True)
        return op.divide(x, op.add(s, s))

    prim = _single_op(build, ((3, 4), F32), positive=True)
    assert [b.shape for b in _global_allocations(prim)] == [(3, 1)]


def test_tuple_parameter_and_tuple_result():
    p = Var("p", passinfra.ir.TupleType([TensorType((2, 3), F32), TensorType((3,), F32)]))
    body = Tuple([op.add(TupleGetItem(p, 0), TupleGetItem(p, 1)), op.exp(TupleGetItem(p, 1))])
    func = _primitive([p], body)
    prim = _lower(func)
    assert [b.shape for b in prim.params] == [(2, 3), (3,), (2, 3), (3,)]
    rng = np.random.default_rng(RNG_SEED)
    a, b = _random((2, 3), F32, rng), _random((3,), F32, rng)
    got = run_prim_func(prim, a, b)
    np.testing.assert_allclose(got[0], a + b, rtol=1e-6)
    np.testing.assert_allclose(got[1], np.exp(b), rtol=1e-6)


def test_outputs_that_are_parameters_or_repeated_are_copied():
    x = var("x", (2, 2))
    y = op.negative(x)
    prim = _lower(_primitive([x], Tuple([y, x, y])))
    data = np.arange(4, dtype=F32).reshape(2, 2)
    got = run_prim_func(prim, data)
    np.testing.assert_array_equal(got[0], -data)
    np.testing.assert_array_equal(got[1], data)
    np.testing.assert_array_equal(got[2], -data)


def test_output_also_read_inside_the_group():
    x = var("x", (3,))
    y = op.exp(x)
    func = _primitive([x], Tuple([y, op.add(y, const(1.0))]))
    rng = np.random.default_rng(RNG_SEED)
    prim = _check_against_reference(func, [_random((3,), F32, rng)])
    assert not _global_allocations(prim)  # the second output reads the first one's buffer


# --------------------------------------------------------------------------- errors and the pass


def test_random_uniform_has_no_rule_and_says_why():
    func = _primitive([], op.random.uniform(0.0, 1.0, (2,)))
    with pytest.raises(IRError, match=r"random\.uniform has no compute rule.*stateful"):
        _lower(func, "fused_random_uniform")


def test_user_op_without_rule_then_with_rule():
    name = "test_cg_lower.twice"
    user_op = register_op(name, num_inputs=1, type_rel=lambda types, attrs: types[0],
                          impl=lambda args, attrs: args[0] * 2, pattern=OpPattern.ELEMWISE, override=True)
    x = var("x", (3,))
    func = _primitive([x], Call(user_op, [x]))
    with pytest.raises(IRError, match=r"op test_cg_lower\.twice has no compute rule.*'fused_user'"):
        _lower(func, "fused_user")

    @register_compute(name)
    def _twice(inputs, attrs, out_type):
        (data,) = inputs
        return ComputeOp(name, data.shape, data.dtype, lambda idx: data.load(*idx) * 2)

    prim = _lower(func, "fused_user")
    np.testing.assert_allclose(run_prim_func(prim, np.arange(3, dtype=F32)), [0, 2, 4])


def test_non_scalar_constant_is_rejected_with_its_shape():
    x = var("x", (3,))
    func = _primitive([x], op.add(x, const(np.ones(3, F32))))
    with pytest.raises(IRError, match=r"constant of shape \(3,\)"):
        _lower(func)


def test_pass_lowers_only_primitive_functions_and_names_symbols():
    x = var("x", (2,))
    prim_fn = _primitive([x], op.exp(x))
    y = var("y", (2,))
    gv = GlobalVar("fused.exp-1")
    main = Function([y], Call(gv, [y]))
    z = var("z", (2,))
    skipped = Function([z], op.exp(z), attrs={"Primitive": 1, "SkipOptimization": 1})
    mod = IRModule({"main": main, gv: prim_fn, "skipped": skipped})
    lowered = get_pass("LowerToPrimFunc")(mod)
    assert lowered["main"] is main
    assert lowered["skipped"] is skipped
    prim = lowered[gv]
    assert isinstance(prim, tir.PrimFunc)
    assert prim.attrs["global_symbol"] == "fused_exp_1"
    assert prim.attrs["num_inputs"] == 1
    assert tuple(prim.attrs["op_names"]) == ("exp",)
    assert LowerToPrimFunc().info.opt_level == 0
    assert mod[gv] is prim_fn  # the input module is untouched


def test_error_names_the_function():
    func = _primitive([], op.random.uniform(0.0, 1.0, (2,)))
    mod = IRModule({"fused_random": func})
    with pytest.raises(IRError) as info:
        LowerToPrimFunc()(mod)
    assert "fused_random" in str(info.value) + "".join(getattr(info.value, "__notes__", []))


def test_lower_primitive_function_rejects_control_flow():
    x = var("x", (2,))
    func = _primitive([x], passinfra.ir.If(const(True), x, op.exp(x)))
    with pytest.raises(IRError, match="not a dataflow graph"):
        lower_primitive_function(func, "f")


# --------------------------------------------------------------------------- whole models


def _compile_and_compare(mod: IRModule, inputs: list[np.ndarray], rtol: float = 1e-4) -> IRModule:
    fused = FuseOps()(InferType()(mod))
    lowered = LowerToPrimFunc()(fused)
    prims = [f for f in lowered.functions.values() if isinstance(f, tir.PrimFunc)]
    leftover = [f for f in lowered.functions.values() if isinstance(f, Function) and f.attrs.get("Primitive")]
    assert prims and not leftover
    expected = passinfra.evaluate(mod, *inputs)
    got = _run_lowered_main(lowered, *inputs)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=1e-5)
    return lowered


def test_demo_cnn_lowered_matches_the_interpreter():
    rng = np.random.default_rng(RNG_SEED)
    lowered = _compile_and_compare(demo_cnn(size=8), [_random((1, 3, 8, 8), F32, rng)])
    conv = next(f for gv, f in lowered.items() if gv.name_hint == "fused_nn_conv2d")
    assert not _global_allocations(conv)


def test_transformer_block_lowered_matches_the_interpreter():
    rng = np.random.default_rng(RNG_SEED)
    _compile_and_compare(transformer_block(seq=4, hidden=16, heads=2), [_random((4, 16), F32, rng)])


def test_mlp_lowered_matches_the_interpreter():
    rng = np.random.default_rng(RNG_SEED)
    lowered = _compile_and_compare(mlp(batch=2), [_random((2, 16), F32, rng)])
    for gv, func in lowered.items():
        if isinstance(func, tir.PrimFunc) and "nn.dense" in func.attrs["op_names"]:
            assert not _global_allocations(func), gv.name_hint  # dense + bias + relu fused


# --------------------------------------------------------------------------- ops of ir.op.extra

extra = pytest.importorskip("passinfra.ir.op.extra")


@pytest.mark.parametrize("name", ["floor", "ceil", "sign", "reciprocal", "sin", "cos", "asinh", "nn.softplus",
                                  "nn.softsign", "nn.leaky_relu", "nn.elu", "nn.selu", "nn.hard_sigmoid"])
def test_extra_unary(name):
    _single_op(lambda x: extra.unary(name, x), ((3, 4), F32))


def test_extra_inverse_hyperbolic_domains():
    rng = np.random.default_rng(RNG_SEED)
    x = var("x", (5,))
    _check_against_reference(_primitive([x], extra.unary("acosh", x)), [rng.uniform(1.5, 3, 5).astype(F32)])
    inside = rng.uniform(-0.8, 0.8, 5).astype(F32)
    _check_against_reference(_primitive([x], extra.unary("atanh", x)), [inside])


def test_extra_strided_slice():
    _single_op(lambda x: extra.strided_slice(x, (5, 6), (0, 1), (1, -1), (5, 0), (2, -2)), ((5, 6), F32))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
def test_extra_pad_modes(mode):
    _single_op(lambda x: extra.pad(x, ((1, 2), (3, 0)), 1.5, mode), ((3, 4), F32))


def test_extra_pad_crops_with_negative_widths():
    _single_op(lambda x: extra.pad(x, ((-1, 1), (2, -2)), 0.0, "constant"), ((3, 4), F32))


def test_extra_tile_broadcast_to_trilu():
    _single_op(lambda x: extra.tile(x, (2, 1, 3)), ((2, 3, 2), F32))
    _single_op(lambda x: extra.broadcast_to(x, (4, 2, 3)), ((2, 1), F32))
    _single_op(lambda x: extra.trilu(x, 1, True), ((2, 4, 5), F32))
    _single_op(lambda x: extra.trilu(x, -1, False), ((4, 3), F32))


@pytest.mark.parametrize("axis, keepdims", [(None, False), (1, True), (0, False)])
def test_extra_prod(axis, keepdims):
    _single_op(lambda x: extra.prod(x, axis, keepdims), ((3, 4), F32), positive=True)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("axis, keepdims, last", [(0, True, False), (1, False, False), (-1, True, True)])
def test_extra_arg_reductions_with_ties(name, axis, keepdims, last):
    data = np.array([[1, 3, 3, 0], [2, 2, -1, -1], [0, 5, 5, 5]], dtype="int32")
    x = var("x", (3, 4), "int32")
    builder = getattr(extra, name)
    _check_against_reference(_primitive([x], builder(x, axis, keepdims, last)), [data])


def test_long_inlined_chain_lowers_under_the_default_recursion_limit(default_recursion_limit):
    # dropout adds nothing to the expression, so only the inline depth bound stops the
    # chain from turning into one 256-level-deep expression
    x = var("x", (4,))
    y = x
    for _ in range(255):
        y = op.nn.dropout(y)
    prim = _lower(_primitive([x], op.nn.relu(y)))
    data = np.arange(-2, 2, dtype=F32)
    np.testing.assert_array_equal(run_prim_func(prim, data), np.maximum(data, 0))
    # the chain is cut into pieces of bounded inline depth
    assert len(_global_allocations(prim)) == 255 // MAX_INLINE_DEPTH

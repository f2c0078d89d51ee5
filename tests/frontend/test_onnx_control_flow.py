"""ONNX If, Scan and Loop with static shapes (passinfra/frontend/onnx_ops/control_flow.py):
each compiled into the C library (``passinfra.build``) and compared with onnxruntime, plus
the errors for what cannot be unrolled at import, one line each.

Models are built with the onnx helper API. Subgraphs read outer values by name (graph
inputs and initializers of the main graph, and values of an enclosing subgraph), as
exporters emit them.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import passinfra
from passinfra.frontend import OnnxImportError, UnsupportedOpsError, from_onnx
from passinfra.frontend.onnx_ops import control_flow
from passinfra.ir.expr import Call
from passinfra.ir.functor import iter_post_order
from passinfra.transform import PassContext

ort = pytest.importorskip("onnxruntime")

F = TensorProto.FLOAT
B = TensorProto.BOOL
I64 = TensorProto.INT64
RTOL, ATOL = 1e-5, 1e-6


def tensor(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def const(name: str, value) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value), name))


def model_of(nodes, inputs, outputs, initializers=(), opset: int = 17, functions=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("local", 1)],
        functions=functions,
    )
    model.ir_version = 8  # (outputs are declared without shapes, which onnxruntime accepts)
    return model


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("codegen_cache_control_flow"))


def check_compiled(model: onnx.ModelProto, feeds: dict[str, np.ndarray], cache_dir: str) -> list[np.ndarray]:
    """Compile ``model``, run it on ``feeds`` and compare every output with onnxruntime."""
    mod = from_onnx(model)
    with PassContext(config={"codegen.cache_dir": cache_dir}):
        lib = passinfra.build(mod)
    names = [p.name_hint for p in mod["main"].params]
    got = lib(*(feeds[n] for n in names))
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
    return got


def ops_in(model: onnx.ModelProto) -> set[str]:
    body = from_onnx(model)["main"].body
    return {n.op.name for n in iter_post_order(body) if isinstance(n, Call)}


RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 3)).astype(np.float32)


# --------------------------------------------------------------------------- If


def if_model(cond_init: bool | None, else_shape=(2, 3)) -> onnx.ModelProto:
    """``out = x + w`` if cond else ``x * w`` (or a different shape), ``w`` an outer initializer;
    ``cond`` an initializer when ``cond_init`` is given, else a graph input."""
    then_g = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["t"])], "then", [], [tensor("t", F, [2, 3])]
    )
    else_nodes = [helper.make_node("Mul", ["x", "w"], ["e0"])]
    if else_shape != (2, 3):
        else_nodes.append(const("e_shape", np.asarray(else_shape, dtype=np.int64)))
        else_nodes.append(helper.make_node("Reshape", ["e0", "e_shape"], ["e"]))
    else:
        else_nodes.append(helper.make_node("Identity", ["e0"], ["e"]))
    else_g = helper.make_graph(else_nodes, "else", [], [tensor("e", F, list(else_shape))])
    node = helper.make_node("If", ["cond"], ["out"], then_branch=then_g, else_branch=else_g)
    w = numpy_helper.from_array(RNG.standard_normal((2, 3)).astype(np.float32), "w")
    inits = [w]
    inputs = [tensor("x", F, [2, 3])]
    if cond_init is None:
        inputs.append(tensor("cond", B, []))
    else:
        inits.append(numpy_helper.from_array(np.asarray(cond_init), "cond"))
    return model_of([node], inputs, [tensor("out", F, None)], inits)


@pytest.mark.parametrize("value", [True, False])
def test_if_runtime_condition_selects_with_where(value, cache_dir):
    model = if_model(None)
    assert "where" in ops_in(model)
    check_compiled(model, {"x": X, "cond": np.asarray(value)}, cache_dir)


@pytest.mark.parametrize("value", [True, False])
def test_if_constant_condition_imports_only_the_taken_branch(value, cache_dir):
    # the branches differ in shape: fine when the condition is known, as only one is imported
    model = if_model(value, else_shape=(3, 2))
    ops = ops_in(model)
    assert "where" not in ops
    assert ("add" in ops) == value and ("multiply" in ops) != value
    check_compiled(model, {"x": X}, cache_dir)


def test_if_runtime_condition_with_branches_of_different_shapes_is_an_error():
    with pytest.raises(
        OnnxImportError, match=r"If node .*output 0 differs between the branches .*\[2, 3\] vs .*\[3, 2\]"
    ):
        from_onnx(if_model(None, else_shape=(3, 2)))


# --------------------------------------------------------------------------- Scan


def test_scan_two_scan_inputs_reverse_direction_and_axes(cache_dir):
    """State s (3,); scan inputs a (4, 3) forward along axis 0 and b (3, 4) reverse along
    axis 1; outputs: y1 stacked along axis 1, y2 in reverse order along axis 0. The body
    also reads the outer initializer ``k``."""
    body = helper.make_graph(
        [
            helper.make_node("Mul", ["a_t", "k"], ["ak"]),
            helper.make_node("Add", ["s_in", "ak"], ["s1"]),
            helper.make_node("Sub", ["s1", "b_t"], ["s_out"]),
            helper.make_node("Mul", ["s_out", "b_t"], ["y1"]),
            helper.make_node("ReduceSum", ["s_out"], ["y2"], keepdims=0),
        ],
        "body",
        [tensor("s_in", F, [3]), tensor("a_t", F, [3]), tensor("b_t", F, [3])],
        [tensor("s_out", F, [3]), tensor("y1", F, [3]), tensor("y2", F, [])],
    )
    node = helper.make_node(
        "Scan",
        ["s0", "a", "b"],
        ["s_final", "y1s", "y2s"],
        body=body,
        num_scan_inputs=2,
        scan_input_axes=[0, 1],
        scan_input_directions=[0, 1],
        scan_output_axes=[1, 0],
        scan_output_directions=[0, 1],
    )
    k = numpy_helper.from_array(np.asarray([0.5, -1.0, 2.0], dtype=np.float32), "k")
    model = model_of(
        [node],
        [tensor("s0", F, [3]), tensor("a", F, [4, 3]), tensor("b", F, [3, 4])],
        [tensor("s_final", F, None), tensor("y1s", F, None), tensor("y2s", F, None)],
        [k],
    )
    feeds = {
        "s0": RNG.standard_normal(3).astype(np.float32),
        "a": RNG.standard_normal((4, 3)).astype(np.float32),
        "b": RNG.standard_normal((3, 4)).astype(np.float32),
    }
    got = check_compiled(model, feeds, cache_dir)
    assert [g.shape for g in got] == [(3,), (3, 4), (4,)]


def test_scan_opset8_batch_form(cache_dir):
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y"])],
        "body",
        [tensor("s_in", F, [2]), tensor("x_t", F, [2])],
        [tensor("s_out", F, [2]), tensor("y", F, [2])],
    )
    node = helper.make_node(
        "Scan", ["", "s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1, directions=[1]
    )
    model = model_of(
        [node],
        [tensor("s0", F, [3, 2]), tensor("x", F, [3, 4, 2])],
        [tensor("s", F, None), tensor("ys", F, None)],
        opset=8,
    )
    feeds = {
        "s0": RNG.standard_normal((3, 2)).astype(np.float32),
        "x": RNG.standard_normal((3, 4, 2)).astype(np.float32),
    }
    check_compiled(model, feeds, cache_dir)


def scan_model(length: int) -> onnx.ModelProto:
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"])],
        "body",
        [tensor("s_in", F, [1]), tensor("x_t", F, [1])],
        [tensor("s_out", F, [1])],
    )
    node = helper.make_node("Scan", ["s0", "x"], ["s"], body=body, num_scan_inputs=1)
    return model_of([node], [tensor("s0", F, [1]), tensor("x", F, [length, 1])], [tensor("s", F, None)])


def test_scan_over_the_unroll_limit_is_an_error(monkeypatch):
    monkeypatch.setattr(control_flow, "MAX_UNROLLED_STEPS", 8)
    from_onnx(scan_model(8))
    with pytest.raises(OnnxImportError, match=r"Scan node .*9 steps, above the limit of 8"):
        from_onnx(scan_model(9))


# --------------------------------------------------------------------------- Loop


def loop_model(trip: int | None, cond_stop: int | None, trip_input: bool = False) -> onnx.ModelProto:
    """y <- y * 0.5 + x[i % 2] each iteration, with y stacked as a scan output; the body's
    condition is ``i < cond_stop`` (always true when None)."""
    nodes = [
        const("two", np.asarray(2, dtype=np.int64)),
        helper.make_node("Mod", ["i", "two"], ["i2"]),
        helper.make_node("Gather", ["x", "i2"], ["row"], axis=0),
        const("half", np.asarray(0.5, dtype=np.float32)),
        helper.make_node("Mul", ["y_in", "half"], ["yh"]),
        helper.make_node("Add", ["yh", "row"], ["y_out"]),
        helper.make_node("Identity", ["y_out"], ["y_scan"]),
    ]
    if cond_stop is None:
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    else:
        nodes.append(const("stop", np.asarray(cond_stop, dtype=np.int64)))
        nodes.append(helper.make_node("Less", ["i", "stop"], ["c_out"]))
    body = helper.make_graph(
        nodes,
        "body",
        [tensor("i", I64, []), tensor("c_in", B, []), tensor("y_in", F, [3])],
        [tensor("c_out", B, []), tensor("y_out", F, [3]), tensor("y_scan", F, [3])],
    )
    inputs = [tensor("x", F, [2, 3]), tensor("y0", F, [3])]
    inits = []
    if trip_input:
        inputs.append(tensor("M", I64, []))
    elif trip is not None:
        inits.append(numpy_helper.from_array(np.asarray(trip, dtype=np.int64), "M"))
    m_name = "M" if trip_input or trip is not None else ""
    node = helper.make_node("Loop", [m_name, "", "y0"], ["y", "ys"], body=body)
    return model_of([node], inputs, [tensor("y", F, None), tensor("ys", F, None)], inits)


LOOP_FEEDS = {
    "x": RNG.standard_normal((2, 3)).astype(np.float32),
    "y0": RNG.standard_normal(3).astype(np.float32),
}


def test_loop_known_trip_count(cache_dir):
    got = check_compiled(loop_model(5, None), LOOP_FEEDS, cache_dir)
    assert got[1].shape == (5, 3)


def test_loop_stops_where_its_condition_turns_false(cache_dir):
    # i < 2 is false at i = 2: iterations 0, 1, 2 run (the step that turns it false counts)
    got = check_compiled(loop_model(10, 2), LOOP_FEEDS, cache_dir)
    assert got[1].shape == (3, 3)


def test_loop_without_trip_count_ends_by_its_condition(cache_dir):
    got = check_compiled(loop_model(None, 3), LOOP_FEEDS, cache_dir)
    assert got[1].shape == (4, 3)


def test_loop_with_a_runtime_trip_count_is_an_error():
    with pytest.raises(OnnxImportError, match=r"Loop node .*trip count M is a runtime value.*dynamic shape"):
        from_onnx(loop_model(None, None, trip_input=True))


def test_loop_that_never_stops_is_an_error(monkeypatch):
    monkeypatch.setattr(control_flow, "MAX_UNROLLED_STEPS", 16)
    with pytest.raises(OnnxImportError, match=r"Loop node .*17 steps, above the limit of 16"):
        from_onnx(loop_model(None, None))


def test_loop_with_a_runtime_condition_is_an_error():
    body = helper.make_graph(
        [
            helper.make_node("ReduceSum", ["y_in"], ["total"], keepdims=0),
            const("zero", np.asarray(0.0, dtype=np.float32)),
            helper.make_node("Greater", ["total", "zero"], ["c_out"]),
            helper.make_node("Neg", ["y_in"], ["y_out"]),
        ],
        "body",
        [tensor("i", I64, []), tensor("c_in", B, []), tensor("y_in", F, [3])],
        [tensor("c_out", B, []), tensor("y_out", F, [3])],
    )
    m = numpy_helper.from_array(np.asarray(4, dtype=np.int64), "M")
    node = helper.make_node("Loop", ["M", "", "y0"], ["y"], body=body)
    model = model_of([node], [tensor("y0", F, [3])], [tensor("y", F, None)], [m])
    with pytest.raises(OnnxImportError, match=r"Loop node .*condition output depends on runtime values"):
        from_onnx(model)


# --------------------------------------------------------------------------- nesting and scopes


def test_nested_control_flow_with_outer_scope_references(cache_dir):
    """A Loop whose body holds an If on the (known) parity of the iteration, whose branches
    read the graph input ``x`` and the initializer ``w`` from two scopes out, and a Scan
    over ``x``'s rows whose body holds an If on the runtime graph input ``flag`` (a where)
    and reads the Loop body's value ``y_in``."""
    inner_scan_body = helper.make_graph(
        [
            helper.make_node(
                "If",
                ["flag"],
                ["picked"],
                then_branch=helper.make_graph(
                    [helper.make_node("Add", ["r", "y_in"], ["p1"])], "t2", [], [tensor("p1", F, [3])]
                ),
                else_branch=helper.make_graph(
                    [helper.make_node("Sub", ["r", "w"], ["p2"])], "e2", [], [tensor("p2", F, [3])]
                ),
            ),
            helper.make_node("Add", ["acc_in", "picked"], ["acc_out"]),
        ],
        "scan_body",
        [tensor("acc_in", F, [3]), tensor("r", F, [3])],
        [tensor("acc_out", F, [3])],
    )
    loop_body = helper.make_graph(
        [
            const("two", np.asarray(2, dtype=np.int64)),
            const("zero", np.asarray(0, dtype=np.int64)),
            helper.make_node("Mod", ["i", "two"], ["parity"]),
            helper.make_node("Equal", ["parity", "zero"], ["even"]),
            helper.make_node(
                "If",
                ["even"],
                ["stepped"],
                then_branch=helper.make_graph(
                    [
                        helper.make_node("Gather", ["x", "zero"], ["x0"], axis=0),
                        helper.make_node("Add", ["y_in", "x0"], ["a1"]),
                    ],
                    "t1",
                    [],
                    [tensor("a1", F, [3])],
                ),
                else_branch=helper.make_graph(
                    [helper.make_node("Mul", ["y_in", "w"], ["a2"])], "e1", [], [tensor("a2", F, [3])]
                ),
            ),
            helper.make_node("Scan", ["stepped", "x"], ["y_out"], body=inner_scan_body, num_scan_inputs=1),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        "loop_body",
        [tensor("i", I64, []), tensor("c_in", B, []), tensor("y_in", F, [3])],
        [tensor("c_out", B, []), tensor("y_out", F, [3])],
    )
    m = numpy_helper.from_array(np.asarray(3, dtype=np.int64), "M")
    w = numpy_helper.from_array(np.asarray([0.5, 0.25, -0.5], dtype=np.float32), "w")
    node = helper.make_node("Loop", ["M", "", "y0"], ["y"], body=loop_body)
    model = model_of(
        [node],
        [tensor("x", F, [2, 3]), tensor("y0", F, [3]), tensor("flag", B, [])],
        [tensor("y", F, None)],
        [m, w],
    )
    for flag in (True, False):
        feeds = {"x": X, "y0": RNG.standard_normal(3).astype(np.float32), "flag": np.asarray(flag)}
        check_compiled(model, feeds, cache_dir)


def test_if_inside_a_model_function_reads_the_functions_values(cache_dir):
    """A model-local function whose body has an If whose branches read body values: the
    expansion renames the body's values, and the branches' reads with them."""
    function = helper.make_function(
        "local",
        "PickScale",
        ["a", "c"],
        ["out"],
        [
            const("k", np.asarray(3.0, dtype=np.float32)),
            helper.make_node("Mul", ["a", "k"], ["scaled"]),
            helper.make_node(
                "If",
                ["c"],
                ["out"],
                then_branch=helper.make_graph(
                    [helper.make_node("Neg", ["scaled"], ["n"])], "t", [], [tensor("n", F, [2, 3])]
                ),
                else_branch=helper.make_graph(
                    [helper.make_node("Add", ["scaled", "a"], ["s"])], "e", [], [tensor("s", F, [2, 3])]
                ),
            ),
        ],
        [helper.make_opsetid("", 17)],
    )
    node = helper.make_node("PickScale", ["x", "cond"], ["y"], domain="local")
    model = model_of(
        [node], [tensor("x", F, [2, 3]), tensor("cond", B, [])], [tensor("y", F, None)], functions=[function]
    )
    for value in (True, False):
        check_compiled(model, {"x": X, "cond": np.asarray(value)}, cache_dir)


def test_unsupported_op_inside_a_subgraph_is_listed():
    then_g = helper.make_graph(
        [
            helper.make_node("SequenceConstruct", ["x"], ["seq"]),
            helper.make_node("SequenceAt", ["seq", "i"], ["t"]),
        ],
        "then",
        [],
        [tensor("t", F, [2, 3])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])], "else", [], [tensor("e", F, [2, 3])]
    )
    node = helper.make_node("If", ["cond"], ["out"], then_branch=then_g, else_branch=else_g)
    i = numpy_helper.from_array(np.asarray(0, dtype=np.int64), "i")
    model = model_of([node], [tensor("x", F, [2, 3]), tensor("cond", B, [])], [tensor("out", F, None)], [i])
    with pytest.raises(
        UnsupportedOpsError, match=r"SequenceAt \(in If\) \(x1\), SequenceConstruct \(in If\) \(x1\)"
    ):
        from_onnx(model)

"""Issue 31: values a node needs at import that the graph gives at run time (a Reshape's
shape, a TopK's k as graph inputs): the importer names the value, and the ONNX backend
compiles the model at each run for those inputs' values, once per distinct value."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from passinfra.frontend.onnx import from_onnx
from passinfra.frontend.onnx_backend import RaypassBackend, RaypassBackendRep, ValueSpecializedRep
from passinfra.frontend.onnx_ops.context import OnnxImportError, RuntimeValueError

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(name, ty, shape) for name, ty, shape in inputs],
        [helper.make_tensor_value_info(name, ty, shape) for name, ty, shape in outputs],
        [helper.make_tensor(name, I64, value.shape, value.reshape(-1)) for name, value in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _reshape_model():
    # the shape is computed from a graph input: Add(shape_in, zeros), so the input it
    # comes from is found through the node that uses it
    nodes = [helper.make_node("Add", ["shape_in", "zero"], ["shape"]),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    return _model(nodes, [("x", F, [2, 6]), ("shape_in", I64, [2])], [("y", F, ["a", "b"])],
                  [("zero", np.zeros(2, np.int64))])


def test_the_importer_names_the_runtime_value_it_needs():
    with pytest.raises(RuntimeValueError, match=r"Reshape node \(opset 17\): input 1 \(shape\)") as info:
        from_onnx(_reshape_model())
    assert info.value.value_name == "shape"


@pytest.mark.parametrize("executor", ["interpreter", "compiled"])
def test_a_runtime_shape_compiles_per_value(executor, tmp_path):
    from passinfra.frontend.onnx_backend import compiled_executor, interpreter_executor

    chosen = interpreter_executor if executor == "interpreter" else compiled_executor
    rep = RaypassBackend.prepare(_reshape_model(), executor=chosen,
                                 config={"codegen.cache_dir": str(tmp_path)})
    assert isinstance(rep, ValueSpecializedRep) and rep.frozen == ["shape_in"]
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    for shape in ([3, 4], [4, 3], [3, 4], [12, 1]):
        (y,) = rep.run([x, np.array(shape, np.int64)])
        np.testing.assert_array_equal(y, x.reshape(shape))
    assert len(rep.compiled) == 3  # one compile per distinct shape, the repeat reused
    assert all(isinstance(r, RaypassBackendRep) and r.input_names == ["x"] for r in rep.compiled.values())


def test_values_found_one_after_another_and_a_wrong_value_is_the_import_s_error():
    # TopK's k and then a Reshape's shape, each a graph input
    nodes = [helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1),
             helper.make_node("Reshape", ["values", "shape"], ["y"])]
    model = _model(nodes, [("x", F, [2, 5]), ("k", I64, [1]), ("shape", I64, [1])], [("y", F, ["n"])])
    rep = RaypassBackend.prepare(model, executor=_interpreter())
    assert rep.frozen == ["k"]
    x = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]], np.float32)
    (y,) = rep.run({"x": x, "k": np.array([2]), "shape": np.array([4])})
    np.testing.assert_array_equal(y, [5, 4, 9, 6])
    assert rep.frozen == ["k", "shape"]
    with pytest.raises(OnnxImportError, match=r"Reshape node \(opset 17\): op reshape: cannot reshape"):
        rep.run({"x": x, "k": np.array([2]), "shape": np.array([5])})


def _interpreter():
    from passinfra.frontend.onnx_backend import interpreter_executor

    return interpreter_executor

"""Model files that are no model, and zoo specs with bad parameters: one line
``raypass: error: ...`` naming the file (or spec) and what is wrong, exit status 2, and
nothing written (no library, no .raypass.json, no .weights.bin)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from passinfra.frontend import zoo
from tests.cli.test_cli_errors import assert_user_error

TEXT_IR = "def @main(%x: Tensor[(2, 3), float32]) {\n  nn.relu(%x)\n}\n"


def valid_onnx() -> bytes:
    return zoo.mlp(batch=1, in_features=4, hidden=4, layers=1, classes=2).SerializeToString()


def assert_nothing_written(directory: Path, *kept: str) -> None:
    assert sorted(p.name for p in directory.iterdir()) == sorted(kept)


# ------------------------------------------------------------------- ONNX files (processes)

BAD_ONNX = {
    "truncated": (lambda: valid_onnx()[:200], "is not a valid ONNX model (truncated or corrupt"),
    "garbage": (lambda: b"this is no model\n" + bytes(range(256)), "is not a valid ONNX model"),
    "empty": (lambda: b"", "is empty"),
    # decodes (a lone ir_version field) but is no model: protobuf skips what it does not know
    "no-graph": (lambda: b"\x08\x08", "has no graph"),
}


@pytest.mark.parametrize("kind", sorted(BAD_ONNX))
def test_bad_onnx_file(raypass, tmp_path, kind):
    make, problem = BAD_ONNX[kind]
    (tmp_path / "model.onnx").write_bytes(make())
    result = raypass("compile", "model.onnx", "-o", "lib.so", "--backend", "local", timeout=120)
    assert_user_error(result, "'model.onnx'", problem)
    assert_nothing_written(tmp_path, "model.onnx")


@pytest.mark.parametrize("name", ["model.onnx", "models"])
def test_a_directory_given_as_the_model(raypass, tmp_path, name):
    (tmp_path / name).mkdir()
    result = raypass("compile", name, "-o", "lib.so", "--backend", "local", timeout=120)
    assert_user_error(result, f"'{name}' is a directory")
    assert_nothing_written(tmp_path, name)


def test_the_python_importer_names_the_problem_too(tmp_path):
    from passinfra.frontend import OnnxImportError, from_onnx

    for kind, (make, problem) in BAD_ONNX.items():
        path = tmp_path / f"{kind}.onnx"
        path.write_bytes(make())
        with pytest.raises(OnnxImportError, match=problem.replace("(", r"\(")) as info:
            from_onnx(path)
        assert str(path) in str(info.value)
    with pytest.raises(OnnxImportError, match="is a directory"):
        from_onnx(tmp_path)


# ----------------------------------------------------------------- text-IR files (in-process)

BAD_TEXT = {
    "empty": (b"  \n", "is empty"),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\xff", "is not UTF-8 text"),
    "syntax": (b"def @main(%x: Tensor[(2, 3), float32]) {\n  nn.relu(%x\n}\n", "line 3, column 1: expected"),
    "ill-typed": (TEXT_IR.replace("relu(%x)", "softmax(%x, axis=2)").encode(), "not a valid program: op nn"),
    "no-main": (TEXT_IR.replace("@main", "@other").encode(), "has no function @main"),
    "unbound": (TEXT_IR.replace("nn.relu(%x)", "nn.relu(%y)").encode(), "undefined variable %y"),
}


@pytest.mark.parametrize("kind", sorted(BAD_TEXT))
def test_bad_text_ir_file(raypass_inprocess, tmp_path, kind):
    data, problem = BAD_TEXT[kind]
    (tmp_path / "model.txt").write_bytes(data)
    result = raypass_inprocess("compile", "model.txt", "-o", "lib.so", "--backend", "local")
    assert_user_error(result, "text-IR model 'model.txt'", problem)
    assert_nothing_written(tmp_path, "model.txt")


def test_a_valid_text_ir_file_still_compiles(raypass_inprocess, tmp_path):
    (tmp_path / "model.txt").write_text(TEXT_IR)
    status, out, err = raypass_inprocess("compile", "model.txt", "-o", "lib.so", "--backend", "local")
    assert status == 0, err
    assert (tmp_path / "lib.so").is_file()


# ----------------------------------------------------------------------------- zoo specs

ZOO_PARAMS = [(name, param) for name, builder in zoo.MODELS.items() for param in builder.params]


def test_every_bad_zoo_parameter_is_named_by_the_command_line(raypass_inprocess, tmp_path):
    for model, param in ZOO_PARAMS:
        for value in (param.minimum - 1, "x"):
            spec = f"zoo:{model}?{param.name}={value}"
            result = raypass_inprocess("compile", spec, "-o", "lib.so", "--backend", "local")
            assert_user_error(result, spec, param.name)
        result = raypass_inprocess("compile", f"zoo:{model}?colour=3", "-o", "lib.so", "--backend", "local")
        assert_user_error(result, "unknown parameter 'colour'")
    assert_nothing_written(tmp_path)


ISSUE_EXAMPLES = [("zoo:transformer?layers=-1", "layers"), ("zoo:mlp?hidden=0", "hidden")]


@pytest.mark.parametrize("spec, name", ISSUE_EXAMPLES)
def test_the_issue_examples_as_real_processes(raypass, tmp_path, spec, name):
    result = raypass("compile", spec, "-o", "lib.so", "--backend", "local", timeout=120)
    assert_user_error(result, spec, f"parameter '{name}' must be an int from 1 to")
    assert_nothing_written(tmp_path)


# ------------------------------------------- decodable but corrupt models (found by fuzzing)


def _mlp() -> onnx.ModelProto:
    return zoo.mlp(batch=1, in_features=4, hidden=4, layers=1, classes=2)


def _node(model: onnx.ModelProto, op_type: str) -> onnx.NodeProto:
    return next(node for node in model.graph.node if node.op_type == op_type)


def _attribute_of_another_type(model: onnx.ModelProto) -> None:
    _node(model, "Softmax").attribute[0].type = onnx.AttributeProto.FLOAT  # its value is in .i


def _short_initializer(model: onnx.ModelProto) -> None:
    model.graph.initializer[0].raw_data = model.graph.initializer[0].raw_data[:5]


def _unknown_element_type(model: onnx.ModelProto) -> None:
    model.graph.initializer[0].data_type = 65


def _negative_input_dimension(model: onnx.ModelProto) -> None:
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -1


def _small_graph(nodes: list, initializers: list) -> onnx.ModelProto:
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "g", [], [output], initializer=initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


CORRUPT_MODELS = {
    "attribute-type": (lambda: _edited(_attribute_of_another_type), "node 'Softmax_12' is not valid ONNX"),
    "short-initializer": (lambda: _edited(_short_initializer), "initializer 'w_1' is malformed"),
    "element-type": (lambda: _edited(_unknown_element_type), "is malformed: unknown element type 65"),
    "negative-dim": (lambda: _edited(_negative_input_dimension), "has a negative dimension -1 at position 0"),
    "reshape-zero": (
        lambda: _small_graph(
            [helper.make_node("Reshape", ["x", "s"], ["y"], name="r")],
            [numpy_helper.from_array(np.ones((2, 3), np.float32), "x"),
             numpy_helper.from_array(np.array([3, 2, 0], np.int64), "s")],
        ),
        "copies (0) a dimension beyond the input's rank 2",
    ),
    "index-out-of-range": (
        lambda: _small_graph(
            [helper.make_node("Gather", ["x", "i"], ["y"], name="g")],
            [numpy_helper.from_array(np.ones(4, np.float32), "x"),
             numpy_helper.from_array(np.array([9], np.int64), "i")],
        ),
        "Gather node 'g' (opset 17): cannot be computed from its constant inputs",
    ),
    "cast-to-unknown-type": (
        lambda: _small_graph(
            [helper.make_node("Cast", ["x"], ["y"], name="c", to=2**31 - 1)],
            [numpy_helper.from_array(np.ones(4, np.float32), "x")],
        ),
        "unknown ONNX element type 2147483647",
    ),
}


def _edited(edit) -> onnx.ModelProto:
    model = _mlp()
    edit(model)
    return model


@pytest.mark.parametrize("kind", sorted(CORRUPT_MODELS))
def test_decodable_but_corrupt_models_are_import_errors(kind):
    from passinfra.frontend import OnnxImportError, from_onnx

    make, problem = CORRUPT_MODELS[kind]
    with pytest.raises(OnnxImportError, match=re.escape(problem)):
        from_onnx(make())


def test_names_that_are_not_utf8_are_import_errors(raypass_inprocess, tmp_path):
    # protobuf does not check proto2 strings: an invalid name would arrive as bytes
    data = valid_onnx()
    assert data.count(b"Relu_6") == 1
    (tmp_path / "model.onnx").write_bytes(data.replace(b"Relu_6", b"Rel\xf5_6"))
    result = raypass_inprocess("compile", "model.onnx", "-o", "lib.so", "--backend", "local")
    assert_user_error(result, "'model.onnx' holds names that are not valid UTF-8")
    assert_nothing_written(tmp_path, "model.onnx")

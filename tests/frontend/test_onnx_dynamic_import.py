"""Issue 31: the ONNX importer keeps dim_param and unnamed dims symbolic, folds shape
computations over them, and the CLI takes ``--dim`` and stops a dynamic build clearly."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from passinfra import evaluate, transform
from passinfra.frontend import OnnxImportError, from_onnx
from passinfra.frontend.zoo.dynamic_models import bert_encoder, cnn, gpt_decoder, mlp
from passinfra.ir.dims import DimVar
from passinfra.ir.types import TensorType
from raypass_cli import main as cli

F, I64 = TensorProto.FLOAT, TensorProto.INT64
BATCH, SEQ, PAST, ROWS = DimVar("batch"), DimVar("seq"), DimVar("past"), DimVar("rows")


def _main_type(mod):
    return transform.InferType()(mod)["main"].checked_type


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        initializer=[onnx.numpy_helper.from_array(a, n) for n, a in initializers],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_mlp_and_cnn_import_with_symbolic_types():
    mod = from_onnx(mlp())
    assert _main_type(mod).arg_types == (TensorType((ROWS, 64), "float32"),)
    assert _main_type(mod).ret_type == TensorType((ROWS, 10), "float32")
    assert mod.astext().startswith("def @main[rows](%input: Tensor[(rows, 64), float32])")

    mod = from_onnx(cnn())  # Flatten of (batch, 16, 1, 1) keeps the batch
    assert _main_type(mod).ret_type == TensorType((BATCH, 10), "float32")
    assert "Tensor[(batch, 3, 32, 32), float32]" in mod.astext()


def test_bert_and_gpt_import_with_symbolic_types():
    # the position / token-type buffers sliced to the run-time seq (strided_slice with a dim
    # end), the token types expanded to [batch, seq] (broadcast_to with dims) and GPT's
    # positions arange(past, past + seq) and arange(0, past + seq) are ops with dims in attrs
    mod = from_onnx(bert_encoder())
    assert _main_type(mod).ret_type == TensorType((BATCH, SEQ, 64), "float32")
    text = mod.astext()
    assert "end=(dim(seq),)" in text and "broadcast_to(%1, shape=(dim(batch), dim(seq)))" in text
    mod = from_onnx(gpt_decoder())
    present = TensorType((BATCH, 4, PAST + SEQ, 16), "float32")
    assert _main_type(mod).ret_type.fields == (TensorType((BATCH, SEQ, 97), "float32"), *[present] * 4)
    text = mod.astext()
    assert 'arange(start=dim(past), stop=dim(past + seq), step=1, dtype="int64")' in text
    assert 'arange(start=0, stop=dim(past + seq), step=1, dtype="int64")' in text


def test_dim_params_are_shared_and_expressions_are_parsed():
    nodes = [helper.make_node("Identity", [name], [f"{name}_out"]) for name in ("ids", "mask", "x")]
    model = _model(
        nodes,
        [("ids", I64, ["batch", "seq"]), ("mask", I64, ["batch", "past + seq"]), ("x", F, [None, "n/2", 2])],
        [("ids_out", I64), ("mask_out", I64), ("x_out", F)],
    )
    args = _main_type(from_onnx(model, dims={"batch": (1, 8), "past": (0, 127)})).arg_types
    batch, past = DimVar("batch", 1, 8), DimVar("past", 0, 127)
    assert args[0].shape == (batch, SEQ)
    assert args[1].shape == (batch, past + SEQ) and args[1].dim_vars == (batch, past, SEQ)
    # unnamed: a fresh variable after the input and position; "n/2" is no dim expression: a name
    assert args[2].shape == (DimVar("x_dim0"), DimVar("n_2"), 2)
    with pytest.raises(OnnxImportError, match="'pst'.*no graph input"):
        from_onnx(model, dims={"pst": (0, 4)})


def test_shape_computations_fold_into_a_symbolic_reshape():
    # x.view(x.size(0) * x.size(1), -1) and Size, as exporters write them
    shape = helper.make_node("Shape", ["x"], ["s"])
    sizes = [helper.make_node("Gather", ["s", f"i{i}"], [f"d{i}"], axis=0) for i in range(2)]
    nodes = [
        shape,
        *sizes,
        helper.make_node("Mul", ["d0", "d1"], ["rows"]),
        helper.make_node("Unsqueeze", ["rows", "axis0"], ["rows1"]),
        helper.make_node("Concat", ["rows1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
        helper.make_node("Size", ["x"], ["n"]),
        helper.make_node("Range", ["zero", "n", "one"], ["r"]),
    ]
    inits = [("i0", np.array(0)), ("i1", np.array(1)), ("axis0", np.array([0])), ("minus1", np.array([-1])),
             ("zero", np.array(0)), ("one", np.array(1))]
    model = _model(nodes[:-2], [("x", F, ["b", "t", 8])], [("y", F)], inits)
    b, t = DimVar("b"), DimVar("t")
    assert _main_type(from_onnx(model)).ret_type == TensorType((b * t, 8), "float32")
    ranged = _model(nodes, [("x", F, ["b", "t", 8])], [("r", I64)], inits)
    assert _main_type(from_onnx(ranged)).ret_type == TensorType((b * t * 8,), "int64")  # arange(0, b*t*8)
    # a run-time step has no arange: the one clear error naming node, input and dims
    nodes[-1] = helper.make_node("Range", ["zero", "n", "n"], ["r"])
    with pytest.raises(OnnxImportError,
                       match=r"Range node .*input 2 \(delta\) is \[b \* t \* 8\].*dimensions b, t"):
        from_onnx(_model(nodes, [("x", F, ["b", "t", 8])], [("r", I64)], inits))


_CACHE = [f"past_key_values.{i}.{kind}" for i in range(2) for kind in ("key", "value")]
_GPT_SHAPES = {"input_ids": (2, 3), "attention_mask": (2, 7), **dict.fromkeys(_CACHE, (2, 4, 4, 16))}


@pytest.mark.parametrize("build, shapes", [
    (mlp, {"input": (3, 64)}),
    (cnn, {"input": (2, 3, 32, 32)}),
    (bert_encoder, {"input_ids": (2, 5), "attention_mask": (2, 5)}),
    (gpt_decoder, _GPT_SHAPES),
])
def test_shapes_give_the_ir_of_the_statically_declared_model(build, shapes):
    # the same model with every dim declared as the value shapes= gives: the same IR text
    # (checked by hand against the importer before symbolic dims: byte-identical)
    model, declared = build(), build()
    for value in declared.graph.input:
        for dim, size in zip(value.type.tensor_type.shape.dim, shapes[value.name]):
            dim.dim_value = size
    fixed = from_onnx(model, shapes=shapes)
    assert _main_type(fixed).is_static and fixed.astext() == from_onnx(declared).astext()


def _cli(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    status = cli.main([str(a) for a in args])
    return status, capsys.readouterr().err


def test_cli_dynamic_compile_and_dim_option(tmp_path, capsys):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    base = ("compile", path, "-o", tmp_path / "m.so", "--backend", "local")
    status, err = _cli(capsys, *base, "--dim", "rows=1..64")
    assert status == 0, err  # compiled once for every rows in 1..64
    status = cli.main(["run", str(tmp_path / "m.so"), "--dim", "rows=5"])
    out = capsys.readouterr().out
    assert status == 0 and "dims rows=5" in out and "output 0: (5, 10) float32" in out
    for bad, message in (("rows=65", "rows"), ("rows=x", "bad --dim value 'rows=x'"), ("seq=3", "'seq'")):
        status, err = _cli(capsys, "run", tmp_path / "m.so", "--dim", bad)
        assert status == 2 and err.count("\n") == 1 and err.startswith("raypass: error: ") and message in err
    for bad in ("rows=1..x", "rows", "rows=4..2"):
        status, err = _cli(capsys, *base, "--dim", bad)
        assert status == 2 and err.startswith(f"raypass: error: bad --dim value {bad!r}")
    status, err = _cli(capsys, *base, "--dim", "batch=1..")
    assert status == 2 and "'batch'" in err


def test_constant_of_shape_and_expand_to_a_symbolic_shape_run():
    # full(2.5) of Shape(x), and a [1, 8] row expanded to [b, 8]: ops with dims in attrs,
    # evaluated by the interpreter with the sizes of x
    fill = helper.make_tensor("value", F, [1], [2.5])
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("ConstantOfShape", ["s"], ["c"], value=fill),
        helper.make_node("Expand", ["row", "s"], ["e"]),
    ]
    row = np.arange(8, dtype=np.float32)[None]
    mod = from_onnx(_model(nodes, [("x", F, ["b", 8])], [("c", F), ("e", F)], [("row", row)]))
    b = DimVar("b")
    assert _main_type(mod).ret_type.fields == (TensorType((b, 8), "float32"),) * 2
    for rows in (0, 3):
        full, expanded = evaluate(mod, np.zeros((rows, 8), np.float32))
        np.testing.assert_array_equal(full, np.full((rows, 8), 2.5, np.float32))
        np.testing.assert_array_equal(expanded, np.broadcast_to(row, (rows, 8)))

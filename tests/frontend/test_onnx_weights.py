"""Initializers become constants without copies: views of ``raw_data``, memory maps of
external data; malformed or unsafe weights give one OnnxImportError naming the tensor."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from passinfra import evaluate
from passinfra.frontend import OnnxImportError, from_onnx
from passinfra.ir.expr import Constant
from passinfra.ir.functor import iter_post_order

DTYPES = ["float32", "float64", "int32", "int64", "bool"]


def weighted_model(weights: dict[str, np.ndarray], shape=(2, 3)) -> onnx.ModelProto:
    """y = x + w0 + w1 + ... (float32 weights), and the other dtypes' weights as extra outputs."""
    inits = [numpy_helper.from_array(array, name) for name, array in weights.items()]
    nodes, current, outputs = [], "x", []
    for name, array in weights.items():
        if array.dtype == np.float32 and array.shape == shape:
            nodes.append(helper.make_node("Add", [current, name], [f"{name}_sum"]))
            current = f"{name}_sum"
        else:  # Identity keeps the weight a graph output, so it stays in main
            nodes.append(helper.make_node("Identity", [name], [f"{name}_out"]))
            elem = helper.np_dtype_to_tensor_dtype(array.dtype)
            outputs.append(helper.make_tensor_value_info(f"{name}_out", elem, array.shape))
    outputs.insert(0, helper.make_tensor_value_info(current, TensorProto.FLOAT, shape))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def constants(mod) -> list[np.ndarray]:
    return [node.data for node in iter_post_order(mod["main"].body) if isinstance(node, Constant)]


def sample_weights(rng) -> dict[str, np.ndarray]:
    return {
        "w0": rng.standard_normal((2, 3)).astype("float32"),
        "w1": rng.standard_normal((2, 3)).astype("float32"),
        "wd": rng.standard_normal((4,)).astype("float64"),
        "wi": rng.integers(-50, 50, (3, 2)).astype("int32"),
        "wl": rng.integers(-(2**40), 2**40, (5,)).astype("int64"),
        "wb": rng.integers(0, 2, (2, 2)).astype("bool"),
    }


def test_raw_data_initializers_are_read_only_views_with_the_exact_values():
    weights = sample_weights(np.random.default_rng(0))
    mod = from_onnx(weighted_model(weights))
    held = constants(mod)
    for name, expected in weights.items():
        (array,) = [a for a in held if a.shape == expected.shape and a.dtype == expected.dtype
                    and np.array_equal(a, expected)]
        # not a copy: a view of protobuf's bytes, which Constant keeps as it is (read-only)
        assert not array.flags.writeable and not array.flags.owndata, name
    x = np.random.default_rng(1).standard_normal((2, 3)).astype("float32")
    got = evaluate(mod["main"], x)
    np.testing.assert_array_equal(got[0], x + weights["w0"] + weights["w1"])


def test_external_data_is_memory_mapped_from_the_models_directory(tmp_path):
    weights = sample_weights(np.random.default_rng(2))
    path = tmp_path / "model.onnx"
    onnx.save(weighted_model(weights), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.weights", size_threshold=0)
    assert (tmp_path / "model.weights").exists()
    mod = from_onnx(path)
    held = constants(mod)
    mapped = [a for a in held if isinstance(a.base, np.memmap) or isinstance(a, np.memmap)]
    assert len(mapped) == len(weights)  # every initializer maps the data file, none is read
    for expected in weights.values():
        assert any(a.dtype == expected.dtype and np.array_equal(a, expected) for a in held)
    x = np.ones((2, 3), "float32")
    np.testing.assert_array_equal(evaluate(mod["main"], x)[0], x + weights["w0"] + weights["w1"])


def _external_model(tmp_path, edit) -> str:
    weights = {"w0": np.arange(6, dtype="float32").reshape(2, 3), "w1": np.ones((2, 3), "float32")}
    path = tmp_path / "model.onnx"
    onnx.save(weighted_model(weights), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
              location="data.bin", size_threshold=0)
    model = onnx.load(str(path), load_external_data=False)
    edit(model, tmp_path)
    onnx.save(model, str(path))
    return str(path)


def _set_field(key, value):
    def edit(model, _):
        for entry in model.graph.initializer[0].external_data:
            if entry.key == key:
                entry.value = value
    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_set_field("location", "../outside.bin"), "points outside the model's directory"),
        (_set_field("location", "/etc/passwd"), "must be a path relative to the model"),
        (_set_field("location", "missing.bin"), "external data file 'missing.bin' not found"),
        (_set_field("offset", "1000000"), "the tensor needs 24 at offset 1000000"),
        (_set_field("length", "7"), "external data length 7 bytes"),
        (_set_field("offset", "x"), "offset/length are not integers"),
    ],
)
def test_bad_external_data_is_one_error_naming_the_initializer(tmp_path, edit, message):
    path = _external_model(tmp_path, edit)
    with pytest.raises(OnnxImportError, match="initializer 'w0'") as caught:
        from_onnx(path)
    assert message in str(caught.value)


def test_a_model_in_memory_without_its_external_data_says_how_to_load_it(tmp_path):
    path = _external_model(tmp_path, lambda model, _: None)
    with pytest.raises(OnnxImportError, match="stored in external data, and the model was given in memory"):
        from_onnx(onnx.load(path, load_external_data=False))
    # loaded by onnx (data read into raw_data), the same model imports
    assert len(constants(from_onnx(onnx.load(path)))) == 2


@pytest.mark.parametrize("dtype", DTYPES)
def test_raw_data_of_the_wrong_size_names_the_tensor_and_both_sizes(dtype):
    array = np.zeros((2, 3), dtype)
    model = weighted_model({"w0": np.zeros((2, 3), "float32"), "wq": array})
    init = model.graph.initializer[1]
    init.raw_data = init.raw_data[:-1]
    with pytest.raises(OnnxImportError, match=r"initializer 'wq' is malformed: raw_data holds \d+ bytes"):
        from_onnx(model)


def test_initializers_without_raw_data_are_still_checked_and_decoded():
    model = weighted_model({"w0": np.zeros((2, 3), "float32")})
    init = model.graph.initializer[0]
    init.CopyFrom(helper.make_tensor("w0", TensorProto.FLOAT, (2, 3), [1, 2, 3, 4, 5, 6]))
    held = constants(from_onnx(model))
    assert any(np.array_equal(a, np.arange(1, 7, dtype="float32").reshape(2, 3)) for a in held)
    del init.float_data[3:]  # three values for a 2x3 tensor
    with pytest.raises(OnnxImportError, match="initializer 'w0' is malformed"):
        from_onnx(model)


def test_a_mapped_model_compiles_and_exports(tmp_path):
    from passinfra.build import build
    from passinfra.runtime.module import WEIGHTS_SUFFIX, load_module
    from passinfra.transform.context import PassContext

    weights = {"w0": np.random.default_rng(3).standard_normal((2, 3)).astype("float32"),
               "w1": np.random.default_rng(4).standard_normal((2, 3)).astype("float32")}
    path = tmp_path / "model.onnx"
    onnx.save(weighted_model(weights), str(path), save_as_external_data=True, location="d.bin",
              size_threshold=0)
    with PassContext(config={"codegen.cache_dir": str(tmp_path / "cache")}):
        lib = build(from_onnx(path))
    x = np.random.default_rng(5).standard_normal((2, 3)).astype("float32")
    expected = x + weights["w0"] + weights["w1"]
    np.testing.assert_allclose(lib(x), expected, rtol=1e-6)
    out = tmp_path / "out" / "m.so"
    out.parent.mkdir()
    lib.export_library(out)
    loaded = load_module(out)
    assert loaded.weights_path == os.fspath(out) + WEIGHTS_SUFFIX  # mapped, not read
    np.testing.assert_allclose(loaded(x), expected, rtol=1e-6)


# ----- the mapped reader (onnx_reader): a model file's raw weights stay in the file -------------
def _printed(mod) -> str:
    return mod.astext()


def test_a_model_file_is_imported_with_its_weights_viewed_in_the_mapped_file(tmp_path):
    import mmap

    from passinfra.frontend.onnx_reader import read_mapped

    weights = sample_weights(np.random.default_rng(6))
    path = tmp_path / "model.onnx"
    onnx.save(weighted_model(weights), str(path))
    mapped = read_mapped(str(path))
    assert mapped is not None and all(isinstance(raw.obj, mmap.mmap) for raw in mapped.raw)
    # the parsed model lacks only the raw bytes; everything else is protobuf's own decoding
    full = onnx.load(str(path))
    for stripped, init, raw in zip(mapped.model.graph.initializer, full.graph.initializer, mapped.raw):
        assert not stripped.HasField("raw_data") and bytes(raw) == init.raw_data
        stripped.raw_data = bytes(raw)
    assert mapped.model.SerializeToString() == full.SerializeToString()
    # and the import is the same module as from the loaded ModelProto, weights included
    assert _printed(from_onnx(path)) == _printed(from_onnx(full))


def test_repeated_graph_fields_are_merged_as_protobuf_merges_them(tmp_path):
    from passinfra.frontend.onnx_reader import read_mapped

    weights = sample_weights(np.random.default_rng(7))
    model = weighted_model(weights)
    half = onnx.ModelProto()
    half.CopyFrom(model)
    del half.graph.initializer[3:]  # the first message holds three initializers...
    rest = onnx.ModelProto()
    rest.graph.initializer.extend(model.graph.initializer[3:])  # ...a second graph field the rest
    path = tmp_path / "split.onnx"
    path.write_bytes(half.SerializeToString() + rest.SerializeToString())
    merged = onnx.load(str(path))
    assert len(merged.graph.initializer) == len(weights)
    mapped = read_mapped(str(path))
    assert mapped is not None and len(mapped.raw) == len(weights)
    assert _printed(from_onnx(path)) == _printed(from_onnx(merged))


@pytest.mark.parametrize("cut", [1, 7, 100, -3])
def test_a_truncated_file_falls_back_to_onnx_load_and_its_error(tmp_path, cut):
    from passinfra.frontend.onnx_reader import read_mapped

    path = tmp_path / "cut.onnx"
    data = weighted_model(sample_weights(np.random.default_rng(8))).SerializeToString()
    path.write_bytes(data[:cut])
    assert read_mapped(str(path)) is None
    with pytest.raises(OnnxImportError, match="cut.onnx"):
        from_onnx(path)

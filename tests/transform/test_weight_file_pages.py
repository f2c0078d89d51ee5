"""Weights read from a map of the model's file do not stay resident once converted or
written (passinfra.file_pages): issue 29's 24-layer decoder from external data compiled
at 2.11x its weights in RSS, the model file's pages (every weight read by PanelWeights)
next to the panels made of them. Counted in pages, from /proc/self/smaps."""

from __future__ import annotations

import io
import mmap
import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from passinfra.build import COMPILE_PIPELINE
from passinfra.file_pages import release_file_pages
from passinfra.frontend import from_onnx
from passinfra.ir.expr import Constant
from passinfra.ir.functor import iter_post_order
from passinfra.runtime.weights import PackedWeights
from passinfra.transform import PassContext, Sequential, get_pass

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")

UP_TO_PANELS = COMPILE_PIPELINE[:COMPILE_PIPELINE.index("PanelWeights") + 1]


def resident_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes of ``path``'s pages mapped into this process (Rss of its maps, summed)."""
    target = os.path.realpath(path)
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                inside = len(head) >= 6 and head[5] == target  # a mapping's header line
            elif inside and head and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


def write_data(path: os.PathLike[str], array: np.ndarray) -> np.ndarray:
    path_str = os.fspath(path)
    array.tofile(path_str)
    return np.memmap(path_str, dtype=array.dtype, mode="r", shape=array.shape)


def test_a_read_only_maps_pages_are_dropped_and_its_values_read_back(tmp_path):
    values = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    mapped = write_data(tmp_path / "w.bin", values)
    assert np.array_equal(np.asarray(mapped), values)  # read whole
    assert resident_bytes(tmp_path / "w.bin") >= values.nbytes  # read: every page resident
    assert release_file_pages(mapped[64:])  # a view of the map: its pages, whole ones
    assert resident_bytes(tmp_path / "w.bin") <= values.nbytes // 4 + mmap.PAGESIZE
    np.testing.assert_array_equal(mapped, values)  # faulted back from the page cache
    # an inline model's weights: np.frombuffer over a slice of an ACCESS_READ map
    with open(tmp_path / "w.bin", "rb") as handle:
        whole = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    view = np.frombuffer(memoryview(whole)[4096:], dtype=np.float32)
    view.sum()
    assert release_file_pages(view)
    np.testing.assert_array_equal(view, values.reshape(-1)[1024:])


def test_memory_that_dropping_would_lose_is_left_alone(tmp_path):
    values = np.arange(4096, dtype=np.float32)
    assert not release_file_pages(values.copy())  # anonymous
    written = np.memmap(tmp_path / "c.bin", dtype=np.float32, mode="w+", shape=values.shape)
    written[:] = values
    private = np.memmap(tmp_path / "c.bin", dtype=np.float32, mode="c", shape=values.shape)
    private[0] = -1.0  # a copy-on-write page only this map holds
    private.flags.writeable = False
    assert not release_file_pages(private)
    assert not release_file_pages(written)  # writable shared map: not one the importer makes
    assert private[0] == -1.0


def matmul_model_from_external_data(directory) -> tuple[str, np.ndarray]:
    """y = (x @ w1) @ w2, saved as issue 29's user saved their decoder."""
    rng = np.random.default_rng(1)
    w1, w2 = (rng.standard_normal((256, 256)).astype(np.float32) for _ in range(2))
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 256])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = os.path.join(directory, "model.onnx")
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.data", size_threshold=1024)
    return path, np.concatenate([w1.reshape(-1), w2.reshape(-1)])


def test_weights_converted_into_panels_leave_the_model_file_unmapped(tmp_path):
    path, weights = matmul_model_from_external_data(tmp_path)
    data = tmp_path / "model.data"
    mod = from_onnx(path)
    with PassContext(opt_level=3):
        panelled = Sequential([get_pass(name) for name in UP_TO_PANELS], opt_level=0)(mod)
    shapes = [node.shape for node in iter_post_order(panelled["main"].body) if isinstance(node, Constant)]
    assert shapes.count((8, 256, 32)) == 2  # both weights converted (so both were read whole)
    assert resident_bytes(data) <= 2 * mmap.PAGESIZE
    # the control: reading the originals again maps them in, which is what the count sees
    originals = [node.data for node in iter_post_order(mod["main"].body) if isinstance(node, Constant)]
    read = np.concatenate([np.asarray(a).reshape(-1) for a in originals])
    assert np.array_equal(np.sort(read), np.sort(weights))  # every value, whatever the order
    assert resident_bytes(data) >= weights.nbytes


def test_weights_written_into_the_blob_leave_their_file_unmapped(tmp_path):
    values = np.random.default_rng(2).standard_normal(100_000).astype(np.float32)
    mapped = write_data(tmp_path / "w.bin", values)
    packed = PackedWeights.pack([np.arange(3, dtype=np.int64), mapped])
    out = io.BytesIO()
    packed.write(out)
    assert resident_bytes(tmp_path / "w.bin") <= 2 * mmap.PAGESIZE
    blob = out.getvalue()
    assert len(blob) == packed.nbytes and blob[packed.offsets[1]:] == values.tobytes()
    assert blob == packed.tobytes()  # the same bytes as the unreleased path


def save_external(model: onnx.ModelProto, directory) -> str:
    path = os.path.join(directory, "model.onnx")
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.data", size_threshold=1024)
    return path


def test_the_duplicate_filter_check_of_a_dense_weight_leaves_it_unmapped(tmp_path):
    # Gemm(transB=1) imports as nn.dense; the check reads a few values of every filter
    # (row), which faults in every page of a weight whose rows are a page or more long
    weight = np.random.default_rng(3).standard_normal((256, 1024)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 256])],
        [numpy_helper.from_array(weight, "w")],
    )
    path = save_external(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path)
    mod = from_onnx(path)
    assert resident_bytes(tmp_path / "model.data") <= 2 * mmap.PAGESIZE  # the import reads none
    passes = COMPILE_PIPELINE[:COMPILE_PIPELINE.index("DeduplicateFilters") + 1]
    with PassContext(opt_level=3):
        Sequential([get_pass(name) for name in passes], opt_level=0)(mod)
    assert resident_bytes(tmp_path / "model.data") <= 2 * mmap.PAGESIZE


def test_a_mapped_weight_folded_at_import_or_by_fold_constant_is_left_unmapped(tmp_path):
    # a head tied to the embedding: MatMul(x, Transpose(wte)), folded as the model is read
    wte = np.random.default_rng(4).standard_normal((512, 256)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Transpose", ["wte"], ["head"], perm=[1, 0]),
         helper.make_node("MatMul", ["x", "head"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 512])],
        [numpy_helper.from_array(wte, "wte")],
    )
    path = save_external(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path)
    mod = from_onnx(path)
    folded = [n.data for n in iter_post_order(mod["main"].body) if isinstance(n, Constant)]
    assert any(a.shape == (256, 512) and np.array_equal(a, wte.T) for a in folded)
    assert resident_bytes(tmp_path / "model.data") <= 2 * mmap.PAGESIZE
    # FoldConstant, on a constant that views a map
    from passinfra import ir
    from passinfra.ir import op
    from passinfra.transform import FoldConstant

    mapped = write_data(tmp_path / "w.bin", wte)
    x = ir.var("x", (4, 256))
    func = ir.Function([x], op.matmul(x, op.transpose(ir.Constant(mapped), (1, 0))))
    result = FoldConstant()(ir.IRModule({"main": func}))
    folded = [n.data for n in iter_post_order(result["main"].body) if isinstance(n, Constant)]
    assert [a.shape for a in folded] == [(256, 512)] and np.array_equal(folded[0], wte.T)
    assert resident_bytes(tmp_path / "w.bin") <= 2 * mmap.PAGESIZE

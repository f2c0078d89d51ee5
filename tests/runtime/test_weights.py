"""The weights blob: laid out without copies, streamed once into the module's file, mapped,
and published by a hard link (a kernel-side copy across file systems)."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from passinfra import atomic_io
from passinfra.runtime.module import WEIGHTS_SUFFIX, Module, load_module
from passinfra.runtime.weights import ALIGNMENT, PackedWeights, as_blob, blob_view, map_file


def reference_blob(weights: list[np.ndarray]) -> bytes:
    blob = b""
    for array in weights:
        blob += bytes(-len(blob) % ALIGNMENT) + np.ascontiguousarray(array).tobytes()
    return blob


def test_packed_weights_are_the_padded_concatenation_without_copies():
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal(3).astype("float32"), np.arange(7, dtype="int64"),
               rng.standard_normal((4, 5)).T.astype("float64"), np.array(True)]
    packed = PackedWeights.pack(weights)
    assert packed.tobytes() == reference_blob(weights) and packed.nbytes == len(reference_blob(weights))
    assert all(offset % ALIGNMENT == 0 for offset in packed.offsets)
    assert all(packed.arrays[i] is weights[i] for i in (0, 1, 3))
    assert packed.arrays[2] is not weights[2]  # the transposed one is put in C order
    assert blob_view(packed) == reference_blob(weights)


def test_as_blob_keeps_an_aligned_array_and_copies_anything_else_once():
    packed = PackedWeights.pack([np.arange(100, dtype="float32")])
    aligned = as_blob(packed.tobytes())
    assert aligned.ctypes.data % ALIGNMENT == 0 and aligned.tobytes() == packed.tobytes()
    assert as_blob(aligned) is aligned
    unaligned = aligned[1:]
    assert as_blob(unaligned) is not unaligned and as_blob(unaligned).ctypes.data % ALIGNMENT == 0


def test_map_file_maps_and_handles_an_empty_file(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(bytes(range(200)))
    mapped = map_file(path)
    assert isinstance(mapped, np.memmap) and bytes(mapped[:5]) == bytes(range(5))
    (tmp_path / "empty.bin").write_bytes(b"")
    assert map_file(tmp_path / "empty.bin").size == 0


def _module_from_packed(compiled_identity, weights) -> Module:
    library, metadata = compiled_identity
    return Module(library, metadata, PackedWeights.pack(weights))


@pytest.fixture(scope="module")
def compiled_identity(tmp_path_factory):
    """A real library (y = x + w) to load modules from."""
    from passinfra.build import build
    from passinfra.ir import op
    from passinfra.ir.expr import Constant, Function, Var
    from passinfra.ir.module import IRModule
    from passinfra.ir.types import TensorType
    from passinfra.transform.context import PassContext

    x = Var("x", TensorType((4,), "float32"))
    mod = IRModule({"main": Function([x], op.add(x, Constant(np.arange(4, dtype="float32"))))})
    with PassContext(config={"codegen.cache_dir": str(tmp_path_factory.mktemp("cache"))}):
        lib = build(mod)
    return lib.library_bytes, lib.metadata


def test_a_module_streams_a_layout_into_its_own_file_and_maps_it(compiled_identity, tmp_path):
    lib = _module_from_packed(compiled_identity, [np.arange(4, dtype="float32")])
    assert lib.weights_path is not None and os.path.getsize(lib.weights_path) == 16
    np.testing.assert_array_equal(lib(np.ones(4, "float32")), 1 + np.arange(4, dtype="float32"))
    assert not lib.weights.flags.writeable
    # exporting links the module's file: no bytes are written again
    out = tmp_path / "m.so"
    lib.export_library(out)
    assert os.stat(str(out) + WEIGHTS_SUFFIX).st_ino == os.stat(lib.weights_path).st_ino
    loaded = load_module(out)
    assert loaded.weights_path == str(out) + WEIGHTS_SUFFIX
    np.testing.assert_array_equal(loaded(np.ones(4, "float32")), 1 + np.arange(4, dtype="float32"))
    # the private file goes with the module; the exported one stays whole
    private = lib.weights_path
    del lib
    import gc

    gc.collect()
    assert not os.path.exists(private)
    assert (out.parent / (out.name + WEIGHTS_SUFFIX)).read_bytes() == np.arange(4, dtype="float32").tobytes()


def test_export_across_file_systems_copies_the_file(compiled_identity, tmp_path, monkeypatch):
    lib = _module_from_packed(compiled_identity, [np.arange(4, dtype="float32")])

    def no_link(source, target):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(atomic_io.os, "link", no_link)
    out = tmp_path / "m.so"
    lib.export_library(out)
    weights_file = str(out) + WEIGHTS_SUFFIX
    assert os.stat(weights_file).st_ino != os.stat(lib.weights_path).st_ino
    assert open(weights_file, "rb").read() == np.arange(4, dtype="float32").tobytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.so", "m.so.raypass.json", "m.so.weights.bin"]


def test_a_module_loaded_from_bytes_holds_them_in_memory(compiled_identity, tmp_path):
    library, metadata = compiled_identity
    lib = Module(library, metadata, np.arange(4, dtype="float32").tobytes())
    assert lib.weights_path is None
    out = tmp_path / "m.so"
    lib.export_library(out)
    assert load_module(out)(np.zeros(4, "float32")).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_writing_over_a_large_file_leaves_its_freeing_to_another_process(tmp_path, monkeypatch):
    """The old file gets a second name before the replace and a detached rm removes it:
    readers see the old file or the new one, the directory ends with the new one only."""
    import time

    monkeypatch.setattr(atomic_io, "DETACHED_FREE_BYTES", 1)  # every old file counts as large
    detached: list[str] = []
    unlink_detached = atomic_io._unlink_detached
    monkeypatch.setattr(atomic_io, "_unlink_detached",
                        lambda name: detached.append(name) or unlink_detached(name))
    path = tmp_path / "m.so.weights.bin"
    path.write_bytes(b"old" * 1000)
    reader = open(path, "rb")  # a process still reading the old file
    atomic_io.atomic_write(path, b"new" * 10)
    assert path.read_bytes() == b"new" * 10 and reader.read() == b"old" * 1000
    reader.close()
    deadline = time.monotonic() + 30
    while len(list(tmp_path.iterdir())) > 1:  # the old file's second name, until rm ran
        assert time.monotonic() < deadline, sorted(p.name for p in tmp_path.iterdir())
        time.sleep(0.02)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    assert len(detached) == 1 and os.path.basename(detached[0]).startswith(".raypass-old-")

"""The whole-build cache: an unchanged model under unchanged settings skips the pipeline."""

from __future__ import annotations

import numpy as np
import pytest

import passinfra
from passinfra.codegen.build_cache import BuildArtifact, build_key
from passinfra.codegen.object_cache import compile_stats, reset_compile_stats
from passinfra.frontend.zoo.ir_models import mlp
from passinfra.instrument.timing import PassTimingInstrument
from passinfra.ir import op
from passinfra.ir.expr import Constant, Function, Var
from passinfra.ir.module import IRModule
from passinfra.ir.types import TensorType
from passinfra.transform import PassContext
from passinfra.transform.pass_info import PassInfo
from passinfra.transform.passes import ModulePass
from passinfra.transform.registry import register_pass, registered_factory


def small_module(scale: float = 2.0) -> IRModule:
    x = Var("x", TensorType((4, 8), "float32"))
    scaled = op.multiply(x, Constant(np.full((4, 8), scale, "float32")))
    return IRModule.from_expr(Function([x], op.tanh(scaled)))


def build_counted(mod: IRModule, cache_dir, **config):
    reset_compile_stats()
    with PassContext(config={"codegen.cache_dir": str(cache_dir), **config}):
        lib = passinfra.build(mod)
    return lib, compile_stats()


def test_second_build_is_served_whole_and_identical(tmp_path):
    first, cold = build_counted(mlp(), tmp_path)
    second, warm = build_counted(mlp(), tmp_path)  # a fresh, structurally equal module
    assert cold["build_misses"] == 1 and cold["build_writes"] == 1 and cold["compiles"] > 1
    assert warm["build_hits"] == 1
    assert warm["compiles"] == warm["hits"] == warm["misses"] == 0, "no pass reached the object cache"
    assert second.library_bytes == first.library_bytes
    assert second.metadata == first.metadata
    shape = mlp()["main"].params[0].type_annotation.shape
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    np.testing.assert_array_equal(second(x), first(x))


def test_any_change_of_model_or_settings_misses(tmp_path):
    build_counted(small_module(2.0), tmp_path)
    changed_constant = build_counted(small_module(3.0), tmp_path)[1]
    other_flags = build_counted(small_module(2.0), tmp_path, **{"codegen.cflags": "-O1 -fPIC -std=c11"})[1]
    assert changed_constant["build_misses"] == 1 and changed_constant["build_hits"] == 0
    assert other_flags["build_misses"] == 1 and other_flags["build_hits"] == 0
    with PassContext(config={"codegen.cache_dir": str(tmp_path)}, disabled_pass=["FoldConstant"]) as ctx:
        disabled = build_key(small_module(2.0), ctx, "c", ("FoldConstant",))
    with PassContext(config={"codegen.cache_dir": str(tmp_path)}) as ctx:
        plain = build_key(small_module(2.0), ctx, "c", ("FoldConstant",))
        other_level = PassContext(opt_level=1, config={"codegen.cache_dir": str(tmp_path)})
        lowered = build_key(small_module(2.0), other_level, "c", ("FoldConstant",))
    assert len({disabled, plain, lowered}) == 3


def test_the_cache_directory_is_not_part_of_the_key(tmp_path):
    keys = set()
    for name in ("a", "b"):
        with PassContext(config={"codegen.cache_dir": str(tmp_path / name)}) as ctx:
            keys.add(build_key(small_module(), ctx, "c", ("FoldConstant",)))
    assert len(keys) == 1


def test_instruments_turn_it_off_so_they_see_every_pass(tmp_path):
    build_counted(small_module(), tmp_path)
    timing = PassTimingInstrument()
    reset_compile_stats()
    with PassContext(config={"codegen.cache_dir": str(tmp_path)}, instruments=[timing]):
        passinfra.build(small_module())
        rendered = timing.render()
    assert compile_stats()["build_hits"] == 0 and compile_stats()["build_misses"] == 0
    assert "FuseOps" in rendered and "LinkLibrary" in rendered


def test_config_and_no_cache_turn_it_off(tmp_path):
    build_counted(small_module(), tmp_path)
    off = build_counted(small_module(), tmp_path, **{"codegen.build_cache": False})[1]
    assert off["build_hits"] == off["build_misses"] == 0 and off["hits"] > 0
    no_cache = build_counted(small_module(), tmp_path, **{"codegen.no_cache": True})[1]
    assert no_cache["build_hits"] == 0 and no_cache["compiles"] > 0


def test_a_user_pass_override_is_never_cached(tmp_path):
    original = registered_factory("RemoveNoOp")

    @register_pass("RemoveNoOp", override=True)
    def user_remove_no_op() -> ModulePass:
        return ModulePass(lambda mod, ctx: mod, PassInfo(0, "RemoveNoOp"))

    try:
        with PassContext(config={"codegen.cache_dir": str(tmp_path)}) as ctx:
            assert build_key(small_module(), ctx, "c", ("FoldConstant",)) is not None
            assert build_key(small_module(), ctx, "c", ("FoldConstant", "RemoveNoOp")) is None
    finally:
        register_pass("RemoveNoOp", override=True)(original)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_corrupted_build_entry_is_detected_and_rebuilt(tmp_path, damage, caplog):
    first, _ = build_counted(small_module(), tmp_path)
    (entry,) = tmp_path.rglob("*.build")
    data = entry.read_bytes()
    entry.write_bytes(data[: len(data) // 2] if damage == "truncate" else data[:-1] + bytes([data[-1] ^ 1]))
    again, stats = build_counted(small_module(), tmp_path)
    assert stats["build_corrupted"] == 1 and stats["build_hits"] == 0 and stats["build_writes"] == 1
    assert again.library_bytes == first.library_bytes
    assert "corrupted entry" in caplog.text
    assert build_counted(small_module(), tmp_path)[1]["build_hits"] == 1


def test_artifact_round_trips_through_bytes():
    artifact = BuildArtifact(b"\x7fELF library", {"entry": "raypass_main", "inputs": []}, b"\0" * 70)
    assert BuildArtifact.from_bytes(artifact.to_bytes()) == artifact


def test_artifact_read_from_a_view_keeps_the_weights_in_place():
    # a warm build of a large model must not copy its weights on the way to the module
    artifact = BuildArtifact(b"\x7fELF library", {"entry": "raypass_main", "inputs": []}, bytes(range(70)))
    stored = artifact.to_bytes()
    loaded = BuildArtifact.from_bytes(memoryview(stored))
    assert loaded == artifact and isinstance(loaded.weights, memoryview)
    assert loaded.weights.obj is stored  # a view into the entry's bytes, not a copy


def test_the_source_digest_covers_the_c_runtime(tmp_path, monkeypatch):
    """Libraries link the C runtime (codegen/c/*.c): a change there is a new key, or a
    rebuild after editing (or upgrading) the runtime would serve the old one's library."""
    from passinfra.codegen import build_cache

    (tmp_path / "codegen" / "c").mkdir(parents=True)
    (tmp_path / "module.py").write_text("x = 1\n")
    runtime = tmp_path / "codegen" / "c" / "runtime.c"
    runtime.write_text("int f(void) { return 1; }\n")
    monkeypatch.setattr(build_cache, "_SOURCE_ROOT", tmp_path)
    build_cache.source_digest.cache_clear()
    try:
        before = build_cache.source_digest()
        runtime.write_text("int f(void) { return 2; }\n")
        build_cache.source_digest.cache_clear()
        assert build_cache.source_digest() != before
    finally:
        build_cache.source_digest.cache_clear()

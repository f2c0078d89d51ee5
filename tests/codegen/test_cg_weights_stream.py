"""The weights file is written while the kernels compile (StreamWeights), claimed by
HostCodegen only when it holds exactly the host program's weights, adopted by the module,
and never left behind."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest

from passinfra import ir
from passinfra.build import build, compile_pipeline, run_link
from passinfra.codegen.host import analyze_main, main_weights
from passinfra.codegen.weights_stream import current_stream, streaming_weights
from passinfra.errors import RaypassError
from passinfra.ir import op
from passinfra.runtime import evaluate
from passinfra.runtime.weights import PackedWeights, WrittenWeights
from passinfra.transform.context import PassContext


def model(seed: int = 0) -> ir.IRModule:
    rng = np.random.default_rng(seed)
    x = ir.var("x", (2, 8), "float32")
    w1 = ir.const(rng.standard_normal((16, 8)).astype("float32"))
    w2 = ir.const(rng.standard_normal((4, 16)).astype("float32"))
    b = ir.const(np.float32(0.5))  # a 0-d weight: laid out like the others
    hidden = op.nn.relu(op.add(op.nn.dense(x, w1), b))
    return ir.IRModule.from_expr(ir.Function([x], op.nn.dense(hidden, w2)))


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    # a private temp dir: other processes' builds make writer directories of their own
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    config = {"codegen.cache_dir": str(tmp_path / "cache"), "codegen.build_cache": False}
    with PassContext(config=config) as c:
        yield c


def _leftovers() -> set[str]:
    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith("raypass-weights-")}


def test_a_build_writes_the_weights_during_the_pipeline_and_the_module_adopts_them(ctx):
    before = _leftovers()
    mod = model()
    lib = build(mod)
    x = np.random.default_rng(1).standard_normal((2, 8)).astype("float32")
    np.testing.assert_allclose(lib(x), evaluate(mod["main"], x), rtol=1e-5, atol=1e-5)
    assert lib.weights_path is not None and os.path.basename(lib.weights_path) == "weights.bin"
    assert _leftovers() == before  # the writer's directory is gone: the module moved the file


def test_host_codegen_claims_the_stream_only_for_the_same_weights(ctx):
    compiled = compile_pipeline()(model())
    program = analyze_main(compiled)
    with streaming_weights() as stream:
        # what StreamWeights started (inside the pipeline, above, there was no stream)
        stream.start(main_weights(compiled["main"]))
        products = run_link(compiled)
        assert isinstance(products.weights, WrittenWeights)
        assert products.weights.wait() and open(products.weights.path, "rb").read() == \
            PackedWeights.pack(program.weights).tobytes()
    with streaming_weights() as stream:
        stream.start(main_weights(compiled["main"])[::-1])  # another order: not those bytes
        products = run_link(compiled)
        assert isinstance(products.weights, PackedWeights)
    with streaming_weights() as stream:
        assert current_stream() is stream
        products = run_link(compiled)  # nothing started: laid out by HostCodegen itself
        assert isinstance(products.weights, PackedWeights)
    assert current_stream() is None


def test_an_unclaimed_file_is_removed_and_a_failed_write_is_reported(ctx, monkeypatch):
    before = _leftovers()
    with streaming_weights() as stream:
        stream.start([np.arange(10, dtype="float32")])
    assert _leftovers() == before

    def failing_write(self, handle):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(PackedWeights, "write", failing_write)
    with pytest.raises(RaypassError, match=r"cannot write the library's weights file .*No space left"):
        build(model(seed=2))
    assert _leftovers() == before


def test_stream_weights_outside_a_build_changes_nothing(ctx):
    from passinfra.transform.registry import get_pass

    mod = compile_pipeline()(model())
    assert current_stream() is None
    assert get_pass("StreamWeights")(mod).astext() == mod.astext()


def test_a_ctrl_c_while_the_writer_starts_leaves_no_directory(monkeypatch, tmp_path):
    """An interrupt between making the stream's directory and handing over its writer
    (here: in the thread's start) still removes the directory."""
    from passinfra.codegen import weights_stream

    class Interrupted:
        def __init__(self, **kwargs: object) -> None:
            pass

        def start(self) -> None:
            raise KeyboardInterrupt

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(weights_stream.threading, "Thread", Interrupted)
    with pytest.raises(KeyboardInterrupt), streaming_weights() as stream:
        stream.start([np.ones(16, np.float32)])
    assert os.listdir(tmp_path) == []

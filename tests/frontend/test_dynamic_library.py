"""Issue 31: each dynamic fixture compiled ONCE into a library with symbolic sizes, then
run at many sizes (past = 0 and seq = 1 included) against onnxruntime, a greedy decode
through the library's KV cache, and the call-time check of the sizes."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from ort_support import Run, ort_runner

from passinfra.build import build
from passinfra.frontend.onnx import from_onnx
from passinfra.frontend.zoo import dynamic_models as dm
from passinfra.runtime.shape_binding import DimBindingError

LAYERS, HIDDEN, HEADS, VOCAB = 2, 32, 4, 53
HEAD_DIM = HIDDEN // HEADS
# the library and onnxruntime sum in different orders (BLAS blockings, vector lanes);
# outputs of spread ~1-3 agree to ~1e-6, 1e-4 leaves room for any CPU's kernels
TOL = {"rtol": 1e-4, "atol": 1e-4}


def library_runner(model: onnx.ModelProto) -> Run:
    """The model compiled once (symbolic sizes kept), as run(feed) -> outputs in order."""
    lib = build(from_onnx(model))

    def run(feed: dict[str, np.ndarray]) -> Sequence[np.ndarray]:
        result = lib(*(feed[name] for name in lib.input_names))
        return list(result) if isinstance(result, tuple) else [result]

    run.lib = lib  # type: ignore[attr-defined]
    return run


@pytest.fixture(scope="module")
def decoder() -> tuple[onnx.ModelProto, Run, Run]:
    model = dm.gpt_decoder(layers=LAYERS, hidden=HIDDEN, heads=HEADS, vocab=VOCAB, max_positions=64)
    return model, library_runner(model), ort_runner(model)


def _tokens(batch: int, seq: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, (batch, seq)).astype(np.int64)


def _decoder_feed(ids: np.ndarray, pasts: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    batch, seq = ids.shape
    feed = {"input_ids": ids, "attention_mask": np.ones((batch, pasts[0].shape[2] + seq), np.int64)}
    names = [f"past_key_values.{layer}.{kind}" for layer in range(LAYERS) for kind in ("key", "value")]
    return {**feed, **dict(zip(names, pasts))}


def _same(got: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, **TOL)


@pytest.mark.parametrize(("batch", "seq", "past"), [(1, 1, 0), (2, 5, 0), (1, 1, 7), (2, 3, 6)])
def test_decoder_library_matches_onnxruntime(decoder, batch, seq, past):
    _, lib, ort = decoder
    rng = np.random.default_rng(seq * 10 + past)
    cache = (batch, HEADS, past, HEAD_DIM)
    pasts = [rng.standard_normal(cache).astype(np.float32) for _ in range(2 * LAYERS)]
    feed = _decoder_feed(_tokens(batch, seq, seed=past), pasts)
    _same(lib(feed), ort(feed))


def test_greedy_decode_through_the_library_reproduces_onnxruntime(decoder):
    model, lib, ort = decoder
    prompt = _tokens(2, 4, seed=7)
    np.testing.assert_array_equal(dm.greedy_decode(lib, model, prompt, steps=10),
                                  dm.greedy_decode(ort, model, prompt, steps=10))


def test_bert_library_matches_onnxruntime():
    model = dm.bert_encoder(layers=LAYERS, hidden=HIDDEN, heads=HEADS, vocab=VOCAB, max_positions=64)
    lib, ort = library_runner(model), ort_runner(model)
    for batch, seq in ((1, 1), (3, 9), (2, 16)):
        mask = np.ones((batch, seq), np.int64)
        mask[1:, seq - seq // 2:] = 0
        feed = {"input_ids": _tokens(batch, seq), "attention_mask": mask}
        _same(lib(feed), ort(feed))


def test_cnn_and_mlp_libraries_match_onnxruntime():
    cases = ((dm.cnn(width=4), (3, 32, 32), (1, 3)), (dm.mlp(layers=3), (64,), (0, 1, 5, 33)))
    for model, shape, sizes in cases:
        lib, ort = library_runner(model), ort_runner(model)
        for size in sizes:
            feed = {"input": np.random.default_rng(size).standard_normal((size, *shape)).astype(np.float32)}
            _same(lib(feed), ort(feed))


def test_the_library_checks_sizes_at_call_time(decoder):
    _, lib, _ = decoder
    module = lib.lib  # type: ignore[attr-defined]
    pasts = [np.zeros((1, HEADS, 3, HEAD_DIM), np.float32)] * (2 * LAYERS)
    feed = _decoder_feed(_tokens(1, 2), pasts)
    feed["attention_mask"] = np.ones((1, 4), np.int64)  # past + seq is 5
    with pytest.raises(DimBindingError, match="attention_mask"):
        module(*(feed[name] for name in module.input_names))
    assert any(d["name"] == "past" for d in module.metadata["dims"])


def test_the_workspace_planned_once_fits_each_size_as_a_static_plan_does():
    # the MLP's two live intermediates of [rows, 64]: the plan made once for every size
    # takes, at each size, what the plan of a library compiled for exactly that size takes
    model = dm.mlp(layers=3)
    dynamic = build(from_onnx(model))
    for rows in (1, 5, 100):
        static = build(from_onnx(model, shapes={"input": (rows, 64)}))
        assert dynamic.workspace_bytes({"rows": rows}) == static.workspace_bytes() > 0


def test_any_thread_count_gives_the_same_bits(decoder):
    # the parallel loops over run-time sizes split whole rows (no sum is ever divided), so
    # one thread and two compute the same bits
    _, lib, _ = decoder
    module = lib.lib  # type: ignore[attr-defined]
    rng = np.random.default_rng(9)
    pasts = [rng.standard_normal((2, HEADS, 3, HEAD_DIM)).astype(np.float32) for _ in range(2 * LAYERS)]
    feed = _decoder_feed(_tokens(2, 5, seed=9), pasts)
    results, original = [], module.num_threads
    for threads in (1, 2):
        module.set_num_threads(threads)
        results.append(lib(feed))
    module.set_num_threads(original)
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)

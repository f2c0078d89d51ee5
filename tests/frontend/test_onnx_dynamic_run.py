"""Issue 31: the dynamic fixtures imported ONCE with symbolic dims run in the reference
interpreter at several sizes and match onnxruntime; a greedy decode through the one
imported GPT module reproduces onnxruntime's tokens."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from ort_support import Run, ort_runner

import passinfra
from passinfra.errors import EvaluationError
from passinfra.frontend import from_onnx
from passinfra.frontend.zoo import dynamic_models as dm
from passinfra.ir.module import IRModule

# The interpreter's NumPy matmuls and reductions sum in another order than onnxruntime's
# kernels: with outputs of spread ~1-3 the difference is ~1e-6; 1e-4 leaves room.
TOL = {"rtol": 1e-4, "atol": 1e-4}
LAYERS, HIDDEN, HEADS, VOCAB = 2, 64, 4, 97
HEAD_DIM = HIDDEN // HEADS

def _interp(model: onnx.ModelProto, mod: IRModule) -> Run:
    names = [value.name for value in model.graph.input]

    def run(feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        out = passinfra.evaluate(mod, *(feed[name] for name in names))
        return list(out) if isinstance(out, tuple) else [out]

    return run


def _pair(model: onnx.ModelProto) -> tuple[Run, Run]:
    return ort_runner(model), _interp(model, from_onnx(model))  # no shapes: one symbolic module


def _check(ours: Run, theirs: Run, feed: dict[str, np.ndarray]) -> None:
    got, want = ours(feed), theirs(feed)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, **TOL)


def _tokens(rng: np.random.Generator, batch: int, seq: int) -> np.ndarray:
    return rng.integers(0, VOCAB, (batch, seq)).astype(np.int64)


@pytest.fixture(scope="module")
def gpt() -> tuple[onnx.ModelProto, Run, Run]:
    model = dm.gpt_decoder(layers=LAYERS, hidden=HIDDEN, heads=HEADS, vocab=VOCAB, max_positions=64)
    return (model, *_pair(model))


def test_bert_runs_at_every_size():
    model = dm.bert_encoder(layers=LAYERS, hidden=HIDDEN, heads=HEADS, vocab=VOCAB, max_positions=16)
    theirs, ours = _pair(model)
    rng = np.random.default_rng(0)
    for batch in (1, 3):
        for seq in (1, 9):
            mask = np.ones((batch, seq), np.int64)
            mask[-1, seq - seq // 3:] = 0  # padding at the end of the last row (none at seq 1)
            _check(ours, theirs, {"input_ids": _tokens(rng, batch, seq), "attention_mask": mask})
    # seq beyond the position buffer: the slice's assumption seq <= 16, checked at run time
    too_long = np.zeros((1, 17), np.int64)
    with pytest.raises(EvaluationError, match=r"strided_slice: axis 1: the slice \[0:17\].*size 16"):
        ours({"input_ids": too_long, "attention_mask": too_long})


def test_gpt_runs_at_every_size_with_a_past(gpt):
    model, theirs, ours = gpt
    rng = np.random.default_rng(1)
    for batch in (1, 2):
        for seq in (1, 5):
            for past in (0, 7):
                mask = np.ones((batch, past + seq), np.int64)
                mask[0, 0] = 0 if past + seq > 1 else 1  # a padded first position in row 0
                cache = [rng.standard_normal((batch, HEADS, past, HEAD_DIM)).astype(np.float32)
                         for _ in range(2 * LAYERS)]
                feed = {"input_ids": _tokens(rng, batch, seq), "attention_mask": mask}
                feed.update(zip([v.name for v in model.graph.input[2:]], cache))
                _check(ours, theirs, feed)


def test_greedy_decode_through_the_one_imported_module(gpt):
    model, theirs, ours = gpt
    prompt = _tokens(np.random.default_rng(2), 2, 4)
    want = dm.greedy_decode(theirs, model, prompt, steps=10)
    np.testing.assert_array_equal(dm.greedy_decode(ours, model, prompt, steps=10), want)


@pytest.mark.parametrize("build, sizes", [
    (dm.mlp, ((1, 64), (5, 64))),
    (dm.cnn, ((1, 3, 32, 32), (2, 3, 32, 32))),
])
def test_mlp_and_cnn_run_at_every_size(build, sizes):
    model = build()
    theirs, ours = _pair(model)
    rng = np.random.default_rng(3)
    for shape in sizes:
        _check(ours, theirs, {"input": rng.standard_normal(shape).astype(np.float32)})

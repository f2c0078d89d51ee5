"""Issue 31's dynamic-shape fixtures (zoo.dynamic_models) under onnxruntime: valid with
symbolic dims, right output shapes at several sizes, a KV cache that agrees with the full
sequence, causal and padding masks that hold, and a deterministic greedy decode."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from ort_support import Run, ort_runner

from passinfra.frontend.zoo import dynamic_models as dm
from passinfra.frontend.zoo.params import ZooSpecError

LAYERS, HIDDEN, HEADS, VOCAB = 2, 32, 4, 53
HEAD_DIM = HIDDEN // HEADS
# Different shapes run different GEMM blockings, so equal math may differ by rounding:
# outputs of spread ~1-3 agree to ~1e-6; 1e-4 leaves room for any CPU's kernels.
TOL = {"rtol": 1e-4, "atol": 1e-4}

@pytest.fixture(scope="module")
def decoder() -> tuple[onnx.ModelProto, Run]:
    model = dm.gpt_decoder(layers=LAYERS, hidden=HIDDEN, heads=HEADS, vocab=VOCAB, max_positions=64)
    return model, ort_runner(model)


@pytest.fixture(scope="module")
def bert() -> Run:
    model = dm.bert_encoder(layers=LAYERS, hidden=HIDDEN, heads=HEADS, vocab=VOCAB, max_positions=64)
    return ort_runner(model)


def _tokens(batch: int, seq: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, (batch, seq)).astype(np.int64)


def _decoder_feed(ids: np.ndarray, pasts: Sequence[np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Feed for ``ids`` after ``pasts`` (key, value per layer; empty when None), no padding."""
    batch, seq = ids.shape
    if pasts is None:
        pasts = [np.zeros((batch, HEADS, 0, HEAD_DIM), np.float32)] * (2 * LAYERS)
    feed = {"input_ids": ids, "attention_mask": np.ones((batch, pasts[0].shape[2] + seq), np.int64)}
    names = [f"past_key_values.{layer}.{kind}" for layer in range(LAYERS) for kind in ("key", "value")]
    return {**feed, **dict(zip(names, pasts))}


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def test_models_are_valid_deterministic_and_name_their_dynamic_dims():
    expected = {
        "gpt_decoder": (
            {"batch", "seq", "past", "past + seq"},
            ["logits", "present.0.key", "present.0.value"],
        ),
        "bert_encoder": ({"batch", "seq"}, ["last_hidden_state"]),
        "cnn": ({"batch"}, ["output"]),
        "mlp": ({"rows"}, ["output"]),
    }
    for name, builder in dm.MODELS.items():
        model = builder(layers=1) if name in ("gpt_decoder", "bert_encoder") else builder()
        onnx.checker.check_model(model, full_check=True)
        assert model.opset_import[0].version == dm.OPSET >= 17
        assert builder(seed=0).SerializeToString() == builder(seed=0).SerializeToString()
        assert builder(seed=0).SerializeToString() != builder(seed=1).SerializeToString()
        symbols = {
            d for v in [*model.graph.input, *model.graph.output] for d in _dims(v) if isinstance(d, str)
        }
        dims, outputs = expected[name]
        assert symbols == dims, name
        assert [o.name for o in model.graph.output][: len(outputs)] == outputs


def test_bad_sizes_are_rejected():
    with pytest.raises(ZooSpecError, match="multiple of heads"):
        dm.gpt_decoder(hidden=30, heads=4)
    with pytest.raises(ZooSpecError, match="layers"):
        dm.bert_encoder(layers=0)


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("seq", [1, 5])
@pytest.mark.parametrize("past", [0, 7])
def test_decoder_output_shapes(decoder, batch, seq, past):
    _, run = decoder
    rng = np.random.default_rng(1)
    pasts = [
        rng.standard_normal((batch, HEADS, past, HEAD_DIM)).astype(np.float32) for _ in range(2 * LAYERS)
    ]
    logits, *presents = run(_decoder_feed(_tokens(batch, seq), pasts))
    assert logits.shape == (batch, seq, VOCAB)
    assert len(presents) == 2 * LAYERS
    for given, present in zip(pasts, presents):
        assert present.shape == (batch, HEADS, past + seq, HEAD_DIM)
        np.testing.assert_array_equal(present[:, :, :past], given)  # the past is carried, unchanged


def test_decoder_kv_cache_matches_the_full_sequence(decoder):
    # the prefix, then a chunk of 3 and two single tokens, each with the previous presents:
    # logits and presents equal one call over the whole sequence (cache wiring, positions)
    _, run = decoder
    ids = _tokens(2, 10, seed=2)
    full_logits, *full_presents = run(_decoder_feed(ids))
    pasts, start = None, 0
    for end in (5, 8, 9, 10):
        logits, *pasts = run(_decoder_feed(ids[:, start:end], pasts))
        np.testing.assert_allclose(logits, full_logits[:, start:end], **TOL)
        start = end
    for cached, full in zip(pasts, full_presents):
        np.testing.assert_allclose(cached, full, **TOL)


def test_decoder_is_causal(decoder):
    _, run = decoder
    ids = _tokens(2, 8, seed=3)
    changed = ids.copy()
    changed[:, 5] = (changed[:, 5] + 1) % VOCAB
    before, after = run(_decoder_feed(ids))[0], run(_decoder_feed(changed))[0]
    np.testing.assert_allclose(after[:, :5], before[:, :5], **TOL)
    assert not np.allclose(after[:, 5:], before[:, 5:], **TOL)
    # and within a chunk that follows a cached past
    pasts = run(_decoder_feed(ids[:, :3]))[1:]
    before, after = run(_decoder_feed(ids[:, 3:], pasts))[0], run(_decoder_feed(changed[:, 3:], pasts))[0]
    np.testing.assert_allclose(after[:, :2], before[:, :2], **TOL)


def test_decoder_attention_mask_hides_padded_past(decoder):
    # masking a cached position changes the logits: the mask input is wired in
    _, run = decoder
    ids = _tokens(1, 6, seed=4)
    pasts = run(_decoder_feed(ids[:, :4]))[1:]
    feed = _decoder_feed(ids[:, 4:], pasts)
    plain = run(feed)[0]
    feed["attention_mask"][:, 1] = 0
    assert not np.allclose(run(feed)[0], plain, **TOL)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("seq", [1, 9])
def test_bert_output_shapes(bert, batch, seq):
    mask = np.ones((batch, seq), np.int64)
    mask[1:, seq - seq // 2 :] = 0  # rows after the first are right-padded (when seq > 1)
    (hidden,) = bert({"input_ids": _tokens(batch, seq), "attention_mask": mask})
    assert hidden.shape == (batch, seq, HIDDEN)
    assert np.isfinite(hidden).all()


def test_bert_padding_does_not_change_the_tokens(bert):
    # rows of lengths 9, 6, 2 padded with junk tokens to 9 agree with each row run alone
    ids = _tokens(3, 9, seed=5)
    lengths = [9, 6, 2]
    mask = (np.arange(9)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    (padded,) = bert({"input_ids": ids, "attention_mask": mask})
    for row, length in enumerate(lengths):
        alone = ids[row : row + 1, :length]
        (expected,) = bert({"input_ids": alone, "attention_mask": np.ones_like(alone)})
        np.testing.assert_allclose(padded[row : row + 1, :length], expected, **TOL)


@pytest.mark.parametrize("batch", [1, 4])
def test_cnn_output_shape(batch):
    run = ort_runner(dm.cnn(width=4))
    (out,) = run({"input": np.random.default_rng(6).standard_normal((batch, 3, 32, 32)).astype(np.float32)})
    assert out.shape == (batch, 10)


def test_mlp_output_shapes():
    run = ort_runner(dm.mlp(layers=3))
    for rows in (0, 1, 5, 33):
        (out,) = run({"input": np.random.default_rng(rows).standard_normal((rows, 64)).astype(np.float32)})
        assert out.shape == (rows, 10)


def _decode_without_cache(run: Run, prompt: np.ndarray, steps: int) -> tuple[np.ndarray, float]:
    """Greedy tokens recomputing the whole sequence each step; also the smallest gap
    between the best and second-best logit, the margin rounding would have to overcome."""
    ids, margin = prompt, np.inf
    for _ in range(steps):
        last = run(_decoder_feed(ids))[0][:, -1]
        top2 = np.sort(last, axis=-1)[:, -2:]
        margin = min(margin, float((top2[:, 1] - top2[:, 0]).min()))
        ids = np.concatenate([ids, np.argmax(last, axis=-1)[:, None]], axis=1)
    return ids[:, prompt.shape[1] :], margin


def test_greedy_decode_is_deterministic_and_matches_recomputation(decoder):
    model, run = decoder
    prompt = _tokens(2, 4, seed=7)
    tokens = dm.greedy_decode(run, model, prompt, steps=10)
    assert tokens.shape == (2, 10) and tokens.dtype == np.int64
    np.testing.assert_array_equal(dm.greedy_decode(run, model, prompt, steps=10), tokens)
    expected, margin = _decode_without_cache(run, prompt, 10)
    # cached and recomputed logits agree within TOL (the KV-cache test); every pick leads
    # by more than that, so rounding cannot flip one on any CPU
    assert margin > 10 * TOL["atol"]
    np.testing.assert_array_equal(tokens, expected)
    assert len(np.unique(tokens)) > 2  # not a degenerate repeat that would hide cache bugs

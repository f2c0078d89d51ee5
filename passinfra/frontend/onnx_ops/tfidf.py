"""ONNX TfIdfVectorizer (9) -> ``tfidf_vectorizer``, integer tokens only.

The pool (``pool_int64s`` split by ``ngram_counts``: the unigrams first, then the bigrams,
...) is turned into a list of n-grams with their output indexes (``ngram_indexes``, one
per n-gram of the whole pool); lengths outside [min_gram_length, max_gram_length] are
dropped, and an n-gram listed twice keeps its last index (the ONNX reference's trie
overwrites). The output size is ``max(ngram_indexes) + 1``.
"""

from __future__ import annotations

from passinfra.frontend.onnx_ops.context import NodeContext
from passinfra.frontend.onnx_ops.registry import converter
from passinfra.ir.expr import Expr
from passinfra.ir.op.tfidf import MODES, tfidf_vectorizer


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@converter("TfIdfVectorizer", since=9)
def _tfidf(node: NodeContext) -> Expr:
    if node.attr("pool_strings"):
        raise node.fail("string tokens (pool_strings) are not supported; only pool_int64s")
    pool = list(node.attr("pool_int64s") or [])
    starts = list(node.attr("ngram_counts") or [])
    indexes = list(node.attr("ngram_indexes") or [])
    low, high = node.attr("min_gram_length"), node.attr("max_gram_length")
    mode = _text(node.attr("mode", "TF"))
    if low is None or high is None or not indexes:
        raise node.fail("min_gram_length, max_gram_length and ngram_indexes are required")
    if mode not in MODES:
        raise node.fail(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    if starts != sorted(starts) or any(not 0 <= s <= len(pool) for s in starts):
        raise node.fail(f"ngram_counts {starts} must be ascending offsets into a pool of {len(pool)} items")
    grams: dict[tuple[int, ...], int] = {}
    position = 0  # which n-gram of the whole pool: its ngram_indexes entry
    for length, start in enumerate(starts, start=1):
        end = starts[length] if length < len(starts) else len(pool)
        if (end - start) % length:
            raise node.fail(f"the pool's {length}-grams ({end - start} items) are not whole {length}-grams")
        for first in range(start, end, length):
            if position >= len(indexes):
                raise node.fail(f"ngram_indexes has {len(indexes)} entries for more n-grams in the pool")
            if low <= length <= high:
                gram = tuple(pool[first:first + length])
                grams.pop(gram, None)
                grams[gram] = indexes[position]
            position += 1
    return tfidf_vectorizer(node.arg(0), list(grams), list(grams.values()), max(indexes) + 1, low, high,
                            max_skip_count=node.attr("max_skip_count", 0), mode=mode,
                            weights=node.attr("weights") or ())

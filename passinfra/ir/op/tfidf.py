"""``tfidf_vectorizer``: ONNX TfIdfVectorizer on integer tokens: per row of ``x`` ((C,) or
(N, C), int32 or int64), how often each pooled n-gram occurs, weighted; float32 output
of shape (output_size,) or (N, output_size).

The pool arrives normalized by the converter: ``ngrams`` (tuples of tokens, each of a
length in [min_gram_length, max_gram_length], no two alike) and, per n-gram, the output
``indexes`` it counts into. An n-gram of length n occurs at ``start`` with skip distance
``d`` (1 to max_skip_count + 1) when ``x[start + j * d]`` is its j-th token for every j
and all these positions are in the row. As onnxruntime (and the ONNX reference), every
skip distance counts n-grams of length >= 2, but unigrams are counted at the first
distance only (a single token has no gaps to skip). ``mode``: ``TF`` the counts, ``IDF``
the weight where the count is positive (else 0), ``TFIDF`` weight times count; without
``weights`` every weight is 1.

Where the spec is silent: string tokens are out of scope (the IR has no strings); a
pooled n-gram listed twice counts into the output index of its last listing (as the
reference's trie, which overwrites).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from passinfra.errors import IRTypeError
from passinfra.ir.attrs import Attrs
from passinfra.ir.expr import Call
from passinfra.ir.op._rel import (
    INDEX_DTYPES,
    REQUIRED,
    expect_dtype,
    expect_tensor,
    register_tensor_op,
    type_text,
)
from passinfra.ir.op.registry import OpPattern
from passinfra.ir.op.tensor import call_op
from passinfra.ir.types import TensorType, Type

__all__ = ["tfidf_vectorizer", "MODES", "scans"]

MODES = ("TF", "IDF", "TFIDF")


def scans(attrs: Attrs, row: int) -> list[tuple[int, int, int]]:
    """Every (skip distance, n-gram length, number of start positions) a row of ``row``
    tokens is scanned with, in the reference's order."""
    found = []
    lengths = sorted({len(g) for g in attrs["ngrams"]})
    for distance in range(1, attrs["max_skip_count"] + 2):
        for length in lengths:
            if length == 1 and distance > 1:
                continue  # unigrams once
            starts = row - distance * (length - 1)
            if starts > 0:
                found.append((distance, length, starts))
    return found


def _checked(attrs: Attrs) -> None:
    low, high = attrs["min_gram_length"], attrs["max_gram_length"]
    if not 1 <= low <= high:
        raise IRTypeError(f"expected 1 <= min_gram_length <= max_gram_length, got {low} and {high}")
    if attrs["max_skip_count"] < 0:
        raise IRTypeError(f"max_skip_count must be >= 0, got {attrs['max_skip_count']}")
    if attrs["mode"] not in MODES:
        raise IRTypeError(f"unknown mode {attrs['mode']!r}; use one of {', '.join(MODES)}")
    size = attrs["output_size"]
    if len(attrs["indexes"]) != len(attrs["ngrams"]) or any(not 0 <= i < size for i in attrs["indexes"]):
        raise IRTypeError(f"expected one output index in [0, {size}) per n-gram")
    grams = attrs["ngrams"]
    if any(not low <= len(g) <= high for g in grams) or len(set(grams)) != len(grams):
        raise IRTypeError(f"the pooled n-grams must be distinct, of lengths {low} to {high}")
    if attrs["weights"] and len(attrs["weights"]) < size:
        raise IRTypeError(f"expected at least {size} weights (one per output index), "
                          f"got {len(attrs['weights'])}")


def _relation(arg_types: Sequence[Type], attrs: Attrs) -> Type:
    x = expect_tensor(arg_types[0], "the tokens")
    expect_dtype(x, INDEX_DTYPES, "the tokens")
    if x.ndim not in (1, 2):
        raise IRTypeError(f"expected tokens of shape (C,) or (N, C), got {type_text(x)}")
    _checked(attrs)
    return TensorType((*x.shape[:-1], attrs["output_size"]), "float32")


def weighted(attrs: Attrs, counts: np.ndarray) -> np.ndarray:
    """The output from the counts (float32), by ``mode``."""
    weights = np.asarray(attrs["weights"][: attrs["output_size"]] or [1.0] * attrs["output_size"], np.float32)
    if attrs["mode"] == "TF":
        return counts.astype(np.float32)
    if attrs["mode"] == "IDF":
        return np.where(counts > 0, weights, np.float32(0)).astype(np.float32)
    return (weights * counts.astype(np.float32)).astype(np.float32)


def _impl(args: Sequence[Any], attrs: Attrs) -> np.ndarray:
    x = np.asarray(args[0]).astype(np.int64)
    rows = x.reshape(-1, x.shape[-1])
    counts = np.zeros((rows.shape[0], attrs["output_size"]), np.int64)
    for distance, length, starts in scans(attrs, rows.shape[1]):
        windows = [rows[:, j * distance: j * distance + starts] for j in range(length)]
        for gram, index in zip(attrs["ngrams"], attrs["indexes"]):
            if len(gram) == length:
                match = np.logical_and.reduce([w == token for w, token in zip(windows, gram)])
                counts[:, index] += match.sum(axis=1)
    return weighted(attrs, counts).reshape(*x.shape[:-1], attrs["output_size"])


register_tensor_op(
    "tfidf_vectorizer",
    attrs={"ngrams": REQUIRED, "indexes": REQUIRED, "output_size": REQUIRED, "min_gram_length": REQUIRED,
           "max_gram_length": REQUIRED, "max_skip_count": 0, "mode": "TF", "weights": ()},
    num_inputs=1, type_rel=_relation, impl=_impl, pattern=OpPattern.OPAQUE,
    doc="ONNX TfIdfVectorizer on integer tokens: weighted counts of pooled n-grams per row",
)


def tfidf_vectorizer(x: Any, ngrams: Sequence[Sequence[int]], indexes: Sequence[int], output_size: int,
                     min_gram_length: int, max_gram_length: int, max_skip_count: int = 0, mode: str = "TF",
                     weights: Sequence[float] = ()) -> Call:
    """Count the pooled ``ngrams`` in each row of ``x`` into ``output_size`` outputs."""
    return call_op("tfidf_vectorizer", x, ngrams=tuple(tuple(int(t) for t in g) for g in ngrams),
                   indexes=tuple(int(i) for i in indexes), output_size=int(output_size),
                   min_gram_length=int(min_gram_length), max_gram_length=int(max_gram_length),
                   max_skip_count=int(max_skip_count), mode=str(mode),
                   weights=tuple(float(w) for w in weights))

"""ONNX text ops: TfIdfVectorizer.

The n-gram pool is an attribute, so it is unpacked in NumPy; the counting itself compares
strided windows of the input with the pool's n-grams in JAX, which keeps the output shape
fixed by the pool and lets the op trace under `jax.jit`. JAX holds no strings, so only
integer token ids (pool_int64s) can be counted.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..registry import onnx
from ._helpers import index_dtype


def _pool_ngrams(pool, ngram_counts, min_gram_length: int, max_gram_length: int):
    """{n: (grams (G, n), their output slots (G,))} for the sizes in [min, max], numbered by
    position in the whole pool; a repeated n-gram counts toward its last occurrence."""
    pool = np.asarray(pool, np.int64).reshape(-1)
    starts = [int(c) for c in ngram_counts] + [len(pool)]
    grams: dict[int, dict[tuple, int]] = {}
    ngram_id = 0
    for i in range(len(starts) - 1):
        n = i + 1
        block = pool[starts[i]:starts[i + 1]]
        count = len(block) // n
        if min_gram_length <= n <= max_gram_length:
            table = grams.setdefault(n, {})
            for j in range(count):
                table[tuple(block[j * n:(j + 1) * n].tolist())] = ngram_id + j
        ngram_id += count
    return {n: (np.array(list(t), np.int64).reshape(len(t), n), np.array(list(t.values())))
            for n, t in grams.items() if t}


@onnx("TfIdfVectorizer", since=9)
def tf_idf_vectorizer(x, *, max_gram_length, max_skip_count, min_gram_length, mode,
                      ngram_counts, ngram_indexes, pool_int64s=None, pool_strings=None,
                      weights=None):
    """TfIdfVectorizer(T X) -> float; max_gram_length, max_skip_count, min_gram_length, mode
    (TF, IDF, TFIDF), ngram_counts, ngram_indexes, pool_int64s, pool_strings, weights."""
    if pool_int64s is None:
        raise NotImplementedError(
            "TfIdfVectorizer with pool_strings: JAX arrays cannot hold strings")
    x = jnp.asarray(x)
    rows = x.reshape(1, -1) if x.ndim < 2 else x
    ngram_indexes = np.asarray(ngram_indexes, np.int64).reshape(-1)
    size = int(ngram_indexes.max()) + 1 if len(ngram_indexes) else 0
    tokens = rows.astype(index_dtype())
    length = rows.shape[1]
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ValueError(f"TfIdfVectorizer: unknown mode {mode!r}")
    # The i-th weight belongs to the i-th n-gram of the pool (as in onnxruntime), not to
    # output column i.
    w = None if weights is None or len(weights) == 0 else np.asarray(weights, np.float32)
    out = jnp.zeros((rows.shape[0], size), jnp.float32)
    for n, (grams, ids) in _pool_ngrams(pool_int64s, ngram_counts, min_gram_length,
                                        max_gram_length).items():
        grams = jnp.asarray(grams.astype(index_dtype()))
        counts = jnp.zeros((rows.shape[0], len(ids)), jnp.int32)
        # Unigrams ignore the skip; longer n-grams are counted once per stride 1..skip+1.
        for stride in range(1, (max_skip_count + 1 if n > 1 else 1) + 1):
            starts = length - (n - 1) * stride
            if starts <= 0:
                break
            # window[b, s, k] = tokens[b, s + k * stride]
            window = jnp.stack([tokens[:, k * stride:k * stride + starts] for k in range(n)],
                               axis=-1)
            match = jnp.all(window[:, :, None, :] == grams[None, None], axis=-1)
            counts = counts + jnp.sum(match, axis=1, dtype=jnp.int32)
        scores = counts.astype(jnp.float32)
        if mode == "IDF":
            scores = (counts > 0).astype(jnp.float32)
        if mode != "TF" and w is not None:
            scores = scores * jnp.asarray(w[ids])
        out = out.at[:, jnp.asarray(ngram_indexes[ids])].add(scores)
    return out if x.ndim == 2 else out[0]

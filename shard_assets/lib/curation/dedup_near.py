"""Near-copy keys: a MinHash signature of each document's word n-grams, cut into LSH bands, one 64-bit key per band.
Two documents share a band key with a probability that rises steeply around the Jaccard threshold, so the index
treats a shared band key as a near copy (no pairwise comparison: the index only ever sees keys, one range at a time).

MinHash and the band layout come from datasketch (PyPI, maintained since 2015): its permutation hashing is the
tested reference implementation, and `MinHashLSH` chooses the bands and rows that minimise false positives and
negatives at a threshold by integrating the collision curve. Writing either here would be a second, untested copy of
well-known code; what is ours is only the band key, a 64-bit mix of a band's values so the index can range-split
it like a document hash."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

import numpy as np

SEED = 1  # datasketch's permutation seed: fixed, so a band key means the same in every run and version
_MIX = np.uint64(0x9E3779B97F4A7C15)


@cache
def band_layout(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows per band) datasketch chooses for a Jaccard `threshold` with `num_perm` permutations."""
    from datasketch import MinHashLSH  # imported on first use: it loads scipy (0.5 s), which exact dedup never needs

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    return int(lsh.b), int(lsh.r)


def shingles(text: str, ngram: int) -> list[bytes]:
    """The document's word `ngram`s (the whole text when it has fewer words), as bytes for hashing."""
    words = text.split()
    if len(words) <= ngram:
        return [" ".join(words).encode()]
    return list({" ".join(words[i : i + ngram]).encode() for i in range(len(words) - ngram + 1)})


def _avalanche(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every output bit depends on every input bit, so the top bits pick a uniform range."""
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    out: np.ndarray = h ^ (h >> np.uint64(31))
    return out


def band_keys(texts: Sequence[str], ngram: int, threshold: float, num_perm: int) -> np.ndarray:
    """(documents, bands) uint64: each document's band keys; band `b`'s key mixes `b` with its rows' MinHash values,
    so equal keys mean equal values in the same band."""
    from datasketch import MinHash

    bands, rows = band_layout(threshold, num_perm)
    if not texts:
        return np.zeros((0, bands), dtype=np.uint64)
    signatures = np.stack(
        [m.hashvalues for m in MinHash.bulk([shingles(t, ngram) for t in texts], num_perm=num_perm, seed=SEED)]
    ).astype(np.uint64)
    keys = np.empty((len(texts), bands), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for b in range(bands):
            h = np.full(len(texts), np.uint64(b + 1) * _MIX, dtype=np.uint64)
            for j in range(b * rows, (b + 1) * rows):
                h = _avalanche(h ^ signatures[:, j])
            keys[:, b] = h
    return keys

"""Near-copy keys: a MinHash signature of each document's word n-grams, cut into LSH bands, one 64-bit key per band.
Two documents share a band key with a probability that rises steeply around the Jaccard threshold, so the index
treats a shared band key as a near copy (no pairwise comparison: the index only ever sees keys, one range at a time).

Words are `str.split()`'s (runs between whitespace, case kept); an n-gram is `ngram` consecutive words, a document
with fewer words one n-gram of them all. The n-grams are hashed to 64 bits on the column's UTF-8 bytes with numpy
(a polynomial hash of each word from prefix sums, the words of an n-gram mixed), never a Python string per n-gram;
MinHash is rensa's R-MinHash (Rust, PyPI) over those hashes, whose every slot collides with probability the
Jaccard similarity as a permutation MinHash does; the band layout is datasketch's `MinHashLSH` (it chooses bands
and rows minimising false positives and negatives at the threshold). What is ours is the hashing of n-grams and
the band key, a 64-bit mix of a band's values so the index can range-split it like a document hash."""

from __future__ import annotations

from functools import cache

import numpy as np
import pyarrow as pa

from ..errors import DedupError
from ..text import text_buffers
from .word_hash import pieces, word_hashes

SEED = 1  # the MinHash seed: fixed, so a band key means the same in every run and version
RMINHASH_VERSION = 2  # rensa's R-MinHash algorithm the keys are made with (rensa 0.5); another makes other keys
NEAR_KEYS = f"word-poly32-ngram-mix64-v1/rensa-rminhash-v{RMINHASH_VERSION}"  # in the index settings: a change rebuilds
CHUNK = 1 << 19  # bytes of text hashed at once (a longer document alone): the per-byte arrays stay a few MiB
_U = np.uint64
_MIX = _U(0x9E3779B97F4A7C15)
# odd constants, one per word position in an n-gram (so word order counts)
_NGRAM_MULTIPLIERS = np.array([(0x9E3779B97F4A7C15 + 2 * i * 0xC2B2AE3D27D4EB4F) % (1 << 64) for i in range(64)], _U)
_SPACES = [c.encode() for c in map(chr, range(0x80, 0x3001)) if c.isspace()]  # str.split's non-ASCII whitespace


DEFAULT_LAYOUT = {(0.8, 128): (9, 13)}  # datasketch's choice for the default [dedup] (a test compares): no scipy import


@cache
def band_layout(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows per band) datasketch chooses for a Jaccard `threshold` with `num_perm` permutations."""
    if (threshold, num_perm) in DEFAULT_LAYOUT:
        return DEFAULT_LAYOUT[threshold, num_perm]
    from datasketch import MinHashLSH  # imported on first use: it loads scipy (0.5 CPU-s a process)

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    return int(lsh.b), int(lsh.r)


def _avalanche(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every output bit depends on every input bit, so the top bits pick a uniform range."""
    h = (h ^ (h >> _U(30))) * _U(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> _U(27))) * _U(0x94D049BB133111EB)
    out: np.ndarray = h ^ (h >> _U(31))
    return out


def _whitespace(data: np.ndarray) -> np.ndarray:
    """Which UTF-8 bytes belong to a character `str.split` splits on (ASCII 9-13, 28-32, and the Unicode spaces)."""
    ws = (data == 32) | ((data >= 9) & (data <= 13)) | ((data >= 28) & (data <= 31))
    lead = np.flatnonzero((data == 0xC2) | ((data >= 0xE1) & (data <= 0xE3)))
    if len(lead):
        last = len(data) - 1
        code = (data[lead].astype(np.uint32) << 16) | (data[np.minimum(lead + 1, last)].astype(np.uint32) << 8)
        code |= data[np.minimum(lead + 2, last)]
        for space in _SPACES:
            value = int.from_bytes(space, "big") << (8 * (3 - len(space)))
            hit = lead[(code >> (8 * (3 - len(space)))) << (8 * (3 - len(space))) == value]
            for i in range(len(space)):
                ws[hit + i] = True
    out: np.ndarray = ws
    return out


def _word_hashes(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a 64-bit hash of each word, words per document) of the documents `data[offsets[i]:offsets[i + 1]]`: a word's
    hash mixes the polynomial sum((byte_j + 1) * BASE**j) mod 2**32 over its bytes, from prefix sums of the chunk."""
    n = len(data)
    ws = _whitespace(data)
    start = ~ws
    start[1:] &= ws[:-1]
    firsts = offsets[:-1][offsets[:-1] < n]
    start[firsts] = ~ws[firsts]  # a document's first byte starts a word unless it is whitespace
    starts = np.flatnonzero(start)
    nonzero = (data + np.uint8(1)) & (ws.view(np.uint8) - np.uint8(1))  # whitespace 0, others + 1 (no 0xFF in UTF-8)
    words = _avalanche(word_hashes(nonzero, starts).astype(np.uint64))
    return words, np.diff(np.searchsorted(starts, offsets))


def _ngram_hashes(words: np.ndarray, per_doc: np.ndarray, ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """(each document's n-gram hashes, flat in document order; the number per document): a document of `k < ngram`
    words has one, of its k words."""
    first = np.concatenate([[0], np.cumsum(per_doc)[:-1]]).astype(np.int64)
    padded = np.concatenate([words, np.zeros(ngram, dtype=np.uint64)])
    short = per_doc < ngram
    short_sums = np.zeros(int(short.sum()), dtype=np.uint64)
    sums = np.zeros(len(words), dtype=np.uint64)
    for k in range(ngram):
        sums += padded[k : k + len(words)] * _NGRAM_MULTIPLIERS[k]
        ended = per_doc[short] == k + 1
        short_sums[ended] = sums[first[short][ended]]
    counts = np.where(short, 1, per_doc - ngram + 1)
    whole = np.ones(len(words), dtype=bool)  # the n-grams that end in their document: not from its last ngram-1 words
    for k in range(1, ngram):
        whole[(first + per_doc - k)[per_doc >= k]] = False
    slots = np.zeros(int(counts.sum()), dtype=bool)
    slots[np.concatenate([[0], np.cumsum(counts)[:-1]])[short]] = True
    out = np.empty(len(slots), dtype=np.uint64)
    out[~slots], out[slots] = sums[whole], short_sums
    return _avalanche(out), counts


def ngram_hashes(texts: pa.Array, ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """(the documents' n-gram hashes, flat; each document's row offsets into them), a CHUNK of text at a time."""
    texts = texts.cast(pa.large_string()).fill_null("")
    offsets, data = text_buffers(texts)
    hashes, counts = [], []
    with np.errstate(over="ignore"):
        for i, j in pieces(offsets, CHUNK):
            chunk = offsets[i : j + 1]
            words, per_doc = _word_hashes(np.frombuffer(data[chunk[0] : chunk[-1]], np.uint8), chunk - chunk[0])
            h, c = _ngram_hashes(words, per_doc, ngram)
            hashes.append(h)
            counts.append(c)
    rows = np.zeros(len(texts) + 1, dtype=np.uint64)
    np.cumsum(np.concatenate(counts) if counts else [], out=rows[1:])
    return np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.uint64), rows


def band_keys(texts: pa.Array, ngram: int, threshold: float, num_perm: int) -> np.ndarray:
    """(documents, bands) uint64: each document's band keys; band `b`'s key mixes `b` with its rows' MinHash values,
    so equal keys mean equal values in the same band."""
    from rensa import RMinHash

    if RMinHash.ALGORITHM_VERSION != RMINHASH_VERSION:
        raise DedupError(
            f"the installed rensa computes R-MinHash version {RMinHash.ALGORITHM_VERSION}, the near-copy keys are "
            f"version {RMINHASH_VERSION}'s: install rensa 0.5.x (as pyproject.toml pins it)"
        )
    bands, rows = band_layout(threshold, num_perm)
    if not len(texts):
        return np.zeros((0, bands), dtype=np.uint64)
    hashes, offsets = ngram_hashes(texts, ngram)
    matrix = RMinHash.digest_matrix_from_flat_token_hashes(hashes, offsets, num_perm, SEED)
    signatures = np.array(matrix.to_rows(), dtype=np.uint64)
    keys = np.empty((len(texts), bands), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for b in range(bands):
            h = np.full(len(texts), _U(b + 1) * _MIX, dtype=np.uint64)
            for j in range(b * rows, (b + 1) * rows):
                h = _avalanche(h ^ signatures[:, j])
            keys[:, b] = h
    return keys

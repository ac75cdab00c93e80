"""The word hash decontamination and near dedup share: a word's bytes as a polynomial mod 2**32, every word of a
text at once from prefix sums over its bytes (whitespace is 0: a word's sum runs to the next one's start); and their
cut of a text column into pieces of bounded bytes."""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

import numpy as np

BASE = 0x01000193
CHUNK = 1 << 17  # bytes summed at once (or one longer word): the sums stay in the CPU's cache


def pieces(offsets: np.ndarray, limit: int) -> Iterator[tuple[int, int]]:
    """Consecutive ranges [first, last) of the items `offsets` bound, of at most `limit` bytes (or one longer item)."""
    first = 0
    while first < len(offsets) - 1:
        last = max(first + 1, int(np.searchsorted(offsets, offsets[first] + limit, side="right")) - 1)
        yield first, last
        first = last


@cache
def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """BASE**i and its inverse**i mod 2**32 for i < n."""
    up, down = (np.full(n, base, dtype=np.uint32) for base in (BASE, pow(BASE, -1, 1 << 32)))
    up[0] = down[0] = 1
    return np.cumprod(up, dtype=np.uint32), np.cumprod(down, dtype=np.uint32)


def word_hashes(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """sum(values[j] * BASE**(j - starts[i])) mod 2**32 over j in starts[i]:starts[i + 1] (the last word's to the
    end) for each word i: `values` a byte per byte of text, 0 for whitespace."""
    bounds = np.append(starts, len(values))
    out, sums = np.empty(len(starts), dtype=np.uint32), np.zeros(0, dtype=np.uint32)
    for first, last in pieces(bounds, CHUNK):
        lo, hi = int(bounds[first]), int(bounds[last])
        up, down = _powers(max(CHUNK, 1 << (hi - lo).bit_length()))
        if len(sums) <= hi - lo:  # one buffer for every chunk: sums[0] stays 0
            sums = np.zeros(hi - lo + 1, dtype=np.uint32)
        np.multiply(values[lo:hi], up[: hi - lo], out=sums[1 : hi - lo + 1], dtype=np.uint32)
        np.cumsum(sums[1 : hi - lo + 1], out=sums[1 : hi - lo + 1])
        at = bounds[first : last + 1] - lo
        np.multiply(np.diff(sums[at]), down[at[:-1]], out=out[first:last])
    return out

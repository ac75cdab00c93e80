"""Memory-mapped access to one shard: its token array and its document offsets."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import ShardFormatError
from .manifest import ShardEntry


@dataclass(frozen=True)
class Shard:
    """A verified shard: `tokens` is a read-only memmap, `offsets` the int64 document starts + end."""

    entry: ShardEntry
    tokens: np.ndarray
    offsets: np.ndarray

    def document(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]


def open_shard(entry: ShardEntry, npy_path: str | Path, bin_path: str | Path, dtype: str, vocab_size: int | None = None) -> Shard:
    """Memory-map a shard's files and check them against its manifest entry.

    Offsets must start at 0, never decrease and end at the token count. With
    `vocab_size`, every token id is also checked (a full scan: builder checks use it).
    """
    key = entry.npy.key
    try:
        tokens = np.load(npy_path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise ShardFormatError(f"{key}: not a readable .npy token array ({exc})") from None
    if tokens.ndim != 1 or tokens.dtype != np.dtype(dtype) or not tokens.flags.c_contiguous:
        raise ShardFormatError(f"{key}: expected a 1-D C-ordered {dtype} array, found {tokens.ndim}-D {tokens.dtype}")
    if tokens.shape[0] != entry.tokens:
        raise ShardFormatError(f"{key}: holds {tokens.shape[0]} tokens, manifest says {entry.tokens}")
    offsets = np.fromfile(bin_path, dtype="<i8")
    bkey = entry.bin.key
    if offsets.shape[0] != entry.documents + 1:
        raise ShardFormatError(f"{bkey}: holds {offsets.shape[0]} offsets, expected documents + 1 = {entry.documents + 1}")
    if offsets[0] != 0 or offsets[-1] != entry.tokens:
        raise ShardFormatError(f"{bkey}: offsets must run from 0 to the token count {entry.tokens}, run from {offsets[0]} to {offsets[-1]}")
    if np.any(offsets[1:] < offsets[:-1]):
        bad = int(np.argmax(offsets[1:] < offsets[:-1]))
        raise ShardFormatError(f"{bkey}: offsets decrease at document {bad} ({offsets[bad]} -> {offsets[bad + 1]})")
    if vocab_size is not None and tokens.shape[0] and int(tokens.max()) >= vocab_size:
        raise ShardFormatError(f"{key}: token id {int(tokens.max())} is not below vocab_size {vocab_size}")
    return Shard(entry=entry, tokens=tokens, offsets=offsets)

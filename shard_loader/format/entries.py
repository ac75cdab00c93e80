"""The records a manifest lists: a published file (key, size, sha256) and a tokenized shard (its two files)."""

from __future__ import annotations

from dataclasses import dataclass

from .codec import Count, Sha256
from .keys import Key


@dataclass(frozen=True)
class FileRef:
    """One published file: its key under the dataset root, byte size and sha256."""

    key: Key
    size: Count
    sha256: Sha256


@dataclass(frozen=True)
class ShardEntry:
    """One tokenized shard: a token array (`.npy`) and its document offsets (`.bin`)."""

    partition: str
    tokens: Count
    documents: Count
    npy: FileRef
    bin: FileRef

    @property
    def nbytes(self) -> int:
        return self.npy.size + self.bin.size

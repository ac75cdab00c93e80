"""The records a manifest lists: a published file (key, size, sha256) and a tokenized shard (its two files)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..errors import IntegrityError, ManifestError
from .codec import Count, Sha256
from .keys import Key


@dataclass(frozen=True)
class FileRef:
    """One published file: its key under the dataset root, byte size and sha256."""

    key: Key
    size: Count
    sha256: Sha256

    def verified(self, raw: bytes, where: str = "", named: str = "manifest says") -> bytes:
        """`raw` if it has this file's size and sha256, else an IntegrityError naming `where` (default: the key)."""
        sha = hashlib.sha256(raw).hexdigest()
        if len(raw) != self.size or sha != self.sha256:
            raise IntegrityError(
                f"{where or self.key}: {len(raw)} bytes with sha256 {sha}, {named} {self.size} bytes with sha256 "
                f"{self.sha256}"
            )
        return raw


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

    def checked(self, where: str, itemsize: int) -> ShardEntry:
        """This shard, once its files' sizes fit its counts (`itemsize`: bytes per token)."""
        if self.bin.size != 8 * (self.documents + 1):
            raise ManifestError(
                f"{where}: {self.bin.key} is {self.bin.size} bytes but {self.documents} documents need "
                f"{8 * (self.documents + 1)} bytes of int64 offsets"
            )
        if self.npy.size < self.tokens * itemsize:
            raise ManifestError(f"{where}: {self.npy.key} is {self.npy.size} bytes, too small for {self.tokens} tokens")
        return self

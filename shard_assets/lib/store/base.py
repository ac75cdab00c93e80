"""The store interface behind every asset: keys under one dataset root, atomic whole-object writes."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO, Protocol

from ..errors import ObjectStoreError

__all__ = ["ObjectStore", "ObjectStoreError"]


class ObjectStore(Protocol):
    """Keys are '/'-separated paths under the dataset root (see shard_loader.format.check_key).

    Every put is atomic: a reader sees the whole new object or the old one, never a part.
    """

    def describe(self) -> str:
        """Where the store points, for logs and metadata; never contains a secret."""
        ...

    def loader_url(self) -> str:
        """The dataset root as a URL or path that shard_loader opens."""
        ...

    def put_file(self, key: str, path: Path) -> None: ...

    def put_bytes(self, key: str, data: bytes, if_absent: bool = False) -> bool:
        """Write `data` at `key`; with `if_absent`, write only if no object exists and return whether it did."""
        ...

    def get_bytes(self, key: str) -> bytes: ...

    def get_file(self, key: str, path: Path) -> None:
        """Copy the object at `key` into a local file."""
        ...

    def open_read(self, key: str) -> BinaryIO:
        """A seekable binary reader of the object (parquet is read from it in record batches)."""
        ...

    def local_path(self, key: str) -> Path | None:
        """The key's file when the store is a folder on this machine (read in place), else None."""
        ...

    def exists(self, key: str) -> bool: ...

    def delete(self, key: str) -> None:
        """Remove the object at `key`; a missing key is not an error."""
        ...

    def modified(self, key: str) -> float:
        """When the object at `key` was last written, in seconds since the epoch."""
        ...

    def list(self, prefix: str) -> list[tuple[str, int]]:
        """(key, size) of every object whose key starts with `prefix`, sorted by key."""
        ...

    def size(self, key: str) -> int: ...

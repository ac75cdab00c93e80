"""What every store offers the loader: read access to the keys under one dataset root, streamed in chunks
so the downloader can enforce a deadline between chunks and never holds a whole part in memory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from .retry import RequestStats, RetryPolicy
from .transfer import MAX_OBJECT_BYTES


class Store(Protocol):
    """Read access to the keys under one dataset root. `read_bytes` and `size` retry transient errors by `retry`,
    counted in `stats`; `stream` does not (the downloader retries each part against its deadline)."""

    url: str
    retry: RetryPolicy
    stats: RequestStats

    def read_bytes(self, key: str, limit: int = MAX_OBJECT_BYTES) -> bytes:
        """The whole object, refused with TooLargeError (before reading it) when over `limit` bytes."""
        ...

    def size(self, key: str) -> int: ...

    def stream(self, key: str, start: int, end: int) -> Iterator[bytes]:
        """Bytes [start, end) of a key in chunks; RangeNotSupportedError when the server ignores Range."""
        ...

    def local_path(self, key: str) -> Path | None:
        """The key's file when the store is a local folder (read in place), else None."""
        ...

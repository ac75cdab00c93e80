"""A remote store's files, fetched once per node into a cache directory that ranks and workers may share.

Each consumer leases the files of the windows it has loaded (lease.py), so no consumer loses a file between finding
and opening it, and a deleted file is never one a consumer still maps. Without `keep_files`, a finished window's files
are evicted at once unless another consumer holds them (so a consumer that lags by more than a window fetches them
again: a disk budget paces consumers instead, see paced.py); with it, they stay, and a restart reuses them.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from ..format import FileRef, ShardTable
from ..sampler import Segment, Window
from ..storage import Store
from .eviction import cache_usage
from .lease import evict
from .verified import cached_path, ensure_local, markers
from .window_files import ShardFiles, WindowFiles, WindowLeases, shard_refs


class FetchedFiles(WindowFiles):
    """A remote store's files in a cache directory, leased while a window is held; evicted on release unless kept."""

    def __init__(self, store: Store, shards: ShardTable, cache_dir: Path, keep_files: bool):
        self.store, self.shards, self.cache_dir, self.keep_files = store, shards, cache_dir, keep_files
        self.leases = WindowLeases()

    def lease(self, window: Window) -> list[FileRef]:
        """Lease the window's files (before looking for them: they may be about to be fetched); their refs."""
        refs = shard_refs(self.shards, window)
        self.leases.take(window, [cached_path(self.cache_dir, ref) for ref in refs])
        return refs

    def local(self, window: Window) -> ShardFiles:
        """The window's files in the cache, fetched and verified if they are not there yet."""
        return {i: (self._local(self.shards[i].npy), self._local(self.shards[i].bin)) for i in window.shards}

    def _local(self, ref: FileRef) -> Path:
        return ensure_local(self.store, ref, self.cache_dir)

    def files(self, segment: Segment) -> ShardFiles:
        self.lease(segment.window)
        return self.local(segment.window)

    def release(self, window: Window, keep: Collection[int]) -> None:
        self.leases.drop(window)
        if self.keep_files:
            return
        for i in window.shards:
            if i not in keep:
                for ref in (self.shards[i].npy, self.shards[i].bin):
                    path = cached_path(self.cache_dir, ref)
                    evict(path, markers(path))

    def close(self) -> None:
        self.leases.drop_all()

    def disk_in_use(self) -> int:
        return cache_usage(self.cache_dir)

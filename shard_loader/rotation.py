"""Rotate windows of shards through a bounded local cache.

The first window is fetched while the caller waits; the next one is fetched in a
background thread while the current one is consumed; a finished window's cached files are
deleted (unless kept) so at most two windows are ever on disk. Files of a local-folder
store are read in place and never deleted.

Ranks and workers may share one cache directory: each holds a lease on the files of the
windows it has loaded, and a finished window's file is deleted only once no live consumer
holds it (lease.py), so no consumer ever loses a file between finding and opening it, and a
deleted file is never one a consumer still maps.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .cache import cached_path, ensure_local, markers
from .opening import OpenedManifest
from .errors import DiskBudgetError
from .sampler import Window
from .format import Shard, open_shard
from .lease import Lease, evict, hold


def cache_usage(cache_dir: Path) -> int:
    """Bytes of every file under the cache directory, measured on disk."""
    total = 0
    for root, _, files in os.walk(cache_dir):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                pass
    return total


@dataclass
class RotationStats:
    """Seconds the consumer waited at each window start (the first included), and what was fetched."""

    waits: list[float] = field(default_factory=list)
    windows_fetched: int = 0
    max_cache_bytes: int = 0


class WindowCache:
    """Holds the current window's shards open and prefetches the next one."""

    def __init__(self, opened: OpenedManifest, split_shards, cache_dir: Path | None, disk_budget: int | None, keep_files: bool):
        self.opened, self.shards = opened, split_shards
        self.cache_dir, self.budget, self.keep_files = cache_dir, disk_budget, keep_files
        self.remote = opened.store.local_path(split_shards[0].npy.key) is None if split_shards else False
        if self.remote and cache_dir is None:
            raise DiskBudgetError(f"{opened.store.url} is remote: pass cache_dir for its shards")
        self.stats = RotationStats()
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[int, Future] = {}
        self._verified: set[str] = set()
        self._leases: dict[int, list[Lease]] = {}

    def check_budget(self, windows: list[Window]) -> None:
        """Refuse a disk budget that cannot hold the two largest windows at once."""
        if not self.remote or self.budget is None or not windows:
            return
        sizes = sorted((w.nbytes for w in windows), reverse=True)
        minimum = sum(sizes[:2])
        if self.budget < minimum:
            raise DiskBudgetError(
                f"disk budget {self.budget:,} bytes cannot hold the current and the next window: the minimum is "
                f"{minimum:,} bytes (two largest windows); raise disk_budget or make windows smaller"
            )

    def _load(self, window: Window) -> dict[int, Shard]:
        if self.remote:
            self._leases[window.index] = [hold(cached_path(self.cache_dir, ref)) for i in window.shards for ref in self._refs(i)]
        shards = {}
        for i in window.shards:
            entry = self.shards[i]
            paths = []
            for ref in self._refs(i):
                local = self.opened.store.local_path(ref.key)
                if local is not None and ref.key in self._verified:
                    paths.append(local)
                    continue
                paths.append(ensure_local(self.opened.store, ref, self.cache_dir))
                if local is not None:
                    self._verified.add(ref.key)
            shards[i] = open_shard(entry, paths[0], paths[1], self.opened.manifest.token_dtype)
        if self.remote:
            self.stats.max_cache_bytes = max(self.stats.max_cache_bytes, cache_usage(self.cache_dir))
        self.stats.windows_fetched += 1
        return shards

    def prefetch(self, window: Window) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-prefetch")
        if window.index not in self._pending:
            self._pending[window.index] = self._pool.submit(self._load, window)

    def acquire(self, window: Window) -> dict[int, Shard]:
        """The window's shards, verified and memory-mapped; blocks only if the prefetch is not done."""
        self.prefetch(window)
        started = time.perf_counter()
        shards = self._pending.pop(window.index).result()
        self.stats.waits.append(time.perf_counter() - started)
        return shards

    def _refs(self, shard: int):
        return (self.shards[shard].npy, self.shards[shard].bin)

    def _drop_leases(self, index: int) -> None:
        for lease in self._leases.pop(index, []):
            lease.release()

    def release(self, window: Window, keep: set[int] = frozenset()) -> None:
        """Give up a finished window; delete its cached files, except shards in `keep` (needed by the next window)
        and files another consumer of the cache still holds."""
        self._drop_leases(window.index)
        if not self.remote or self.keep_files:
            return
        for i in window.shards:
            if i not in keep:
                for ref in self._refs(i):
                    path = cached_path(self.cache_dir, ref)
                    evict(path, markers(path))

    def close(self) -> None:
        """Stop prefetching and give up every lease; the cache can be used again (with a new prefetch thread)."""
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        for index in list(self._leases):
            self._drop_leases(index)

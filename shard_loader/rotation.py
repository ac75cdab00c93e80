"""Rotate windows of shards through a bounded local cache.

The first window is fetched while the caller waits; the next one is fetched in a
background thread while the current one is consumed. Files of a local-folder store are read
in place and never deleted.

Ranks and workers may share one cache directory. Each holds a lease on the files of the
windows it has loaded, and a file is deleted only when no live consumer holds it (lease.py):
no consumer loses a file between finding and opening it, and a deleted file is never one a
consumer still maps, so the files on disk are all the disk in use. Without a disk budget a
finished window's files are deleted at once (unless kept); with one, they stay until a window
needs room, and then the least recently released go first (eviction.py), so a lagging rank
finds what it still needs; one consumer at a time makes room and fetches, so a file is
fetched once per node while the budget holds what the ranks' lag needs.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .cache import cached_path, ensure_local, is_trusted, markers
from .eviction import cache_usage, make_room
from .opening import OpenedManifest
from .errors import DiskBudgetError
from .sampler import Window
from .format import FileRef, Shard, open_shard
from .lease import Lease, evict, hold
from .locking import file_lock


@dataclass
class RotationStats:
    """Seconds the consumer waited at each window start (the first included), and what was fetched."""

    waits: list[float] = field(default_factory=list)
    windows_fetched: int = 0
    max_cache_bytes: int = 0
    budget_overruns: int = 0  # windows fetched although files other consumers held left too little room


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

    def _local_paths(self, window: Window) -> dict[int, list[Path]]:
        """A local store's files, read in place and verified once per process."""
        out = {}
        for i in window.shards:
            out[i] = [self.opened.store.local_path(ref.key) for ref in self._refs(i)]
            for ref in self._refs(i):
                if ref.key not in self._verified:
                    ensure_local(self.opened.store, ref, None)
                    self._verified.add(ref.key)
        return out

    def _cached_paths(self, window: Window) -> dict[int, list[Path]]:
        """A remote store's files in the (shared) cache: leased first, then fetched once per node under the budget."""
        refs = [ref for i in window.shards for ref in self._refs(i)]
        self._leases[window.index] = [hold(cached_path(self.cache_dir, ref)) for ref in refs]
        missing = [ref for ref in refs if not is_trusted(cached_path(self.cache_dir, ref), ref)]
        if missing and self.budget is not None and not self.keep_files:
            with file_lock(self.cache_dir / ".room.lock"):  # one consumer at a time makes room and fetches
                if not make_room(self.cache_dir, self.budget, sum(ref.size for ref in missing)):
                    self.stats.budget_overruns += 1
                for ref in missing:
                    ensure_local(self.opened.store, ref, self.cache_dir)
        return {i: [ensure_local(self.opened.store, ref, self.cache_dir) for ref in self._refs(i)] for i in window.shards}

    def _load(self, window: Window) -> dict[int, Shard]:
        paths = self._cached_paths(window) if self.remote else self._local_paths(window)
        dtype = self.opened.manifest.token_dtype
        shards = {i: open_shard(self.shards[i], npy, bin_, dtype) for i, (npy, bin_) in paths.items()}
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

    def _refs(self, shard: int) -> tuple[FileRef, FileRef]:
        return (self.shards[shard].npy, self.shards[shard].bin)

    def _drop_leases(self, index: int) -> None:
        for lease in self._leases.pop(index, []):
            lease.release()

    def release(self, window: Window, keep: set[int] = frozenset()) -> None:
        """Give up a finished window. Without a disk budget its cached files are deleted now, except shards in `keep`
        (needed by the next window) and files another consumer still holds; with one, they stay until room is needed."""
        self._drop_leases(window.index)
        if not self.remote or self.keep_files or self.budget is not None:
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

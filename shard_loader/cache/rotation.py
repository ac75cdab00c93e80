"""Rotate windows of shards through a bounded local cache.

The first window is fetched while the caller waits; the next one is fetched in a background thread while the current
one is consumed. Where a window's files come from and how long they stay is the mode's, chosen once by
`window_cache`: a local folder's files are read in place (in_place.py); a remote store's are fetched into a cache
directory that ranks and workers may share, and evicted when a window is done (fetched.py) or, under a disk budget,
paced by the slowest consumer and evicted to make room (paced.py).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Collection
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..errors import DiskBudgetError
from ..format import Manifest, Shard, ShardTable, open_shard
from ..sampler import EpochPlan, Segment, Window
from ..storage import LocalStore, Store
from .fetched import FetchedFiles
from .in_place import InPlaceFiles
from .paced import PacedFiles
from .window_files import RotationStats, WindowFiles


def _plain(shard: Shard) -> Shard:
    """The shard with its memmap seen as a plain array (same mapping): slicing a np.memmap costs about 8x more per
    row."""
    return replace(shard, tokens=shard.tokens.view(np.ndarray))


class WindowCache:
    """Holds the current window's shards open and prefetches the next one; `files` says where they come from."""

    def __init__(self, files: WindowFiles, shards: ShardTable, token_dtype: str, stats: RotationStats):
        self.files, self.shards, self.token_dtype, self.stats = files, shards, token_dtype, stats
        # started by the first prefetch in each process (threads do not survive a fork)
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[int, Future[dict[int, Shard]]] = {}

    def follow(self, plan: EpochPlan) -> None:
        """Read windows in `plan`'s visiting order from now on (a paced cache compares consumers' places in it)."""
        self.files.follow(plan)

    def _load(self, segment: Segment) -> dict[int, Shard]:
        paths = self.files.files(segment)
        dtype = self.token_dtype
        shards = {i: _plain(open_shard(self.shards[i], npy, bin_, dtype)) for i, (npy, bin_) in paths.items()}
        self.stats.max_cache_bytes = max(self.stats.max_cache_bytes, self.files.disk_in_use())
        self.stats.windows_fetched += 1
        return shards

    def prefetch(self, segment: Segment) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-prefetch")
        if segment.window.index not in self._pending:
            self._pending[segment.window.index] = self._pool.submit(self._load, segment)

    def acquire(self, segment: Segment) -> dict[int, Shard]:
        """The segment's window of shards, verified and memory-mapped; blocks only if the prefetch is not done."""
        self.files.enter(segment)
        self.prefetch(segment)
        started = time.perf_counter()
        shards = self._pending.pop(segment.window.index).result()
        self.stats.waits.append(time.perf_counter() - started)
        return shards

    def release(self, window: Window, keep: Collection[int] = frozenset()) -> None:
        """Give up a finished window (its maps already dropped); the shards in `keep` are needed by the next one."""
        self.files.release(window, keep)

    def close(self) -> None:
        """Stop prefetching and give up everything held; the cache can be used again (with a new prefetch thread)."""
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self.files.close()


def check_budget(budget: int, windows: tuple[Window, ...]) -> None:
    """Refuse a disk budget that cannot hold the two largest windows at once."""
    sizes = sorted((w.nbytes for w in windows), reverse=True)
    minimum = sum(sizes[:2])
    if budget < minimum:
        raise DiskBudgetError(
            f"disk budget {budget:,} bytes cannot hold the current and the next window: the minimum is "
            f"{minimum:,} bytes (two largest windows); raise disk_budget or make windows smaller"
        )


def _layout(m: Manifest, shards: ShardTable, plan: EpochPlan) -> str:
    """A short name of the dataset, seed and windows: the places of consumers compare only within one layout."""
    layout = [m.dataset, m.version, plan.seed, shards[0].npy.key, [w.shards for w in plan.windows]]
    return hashlib.sha256(json.dumps(layout).encode()).hexdigest()[:16]


def window_cache(
    store: Store,
    manifest: Manifest,
    shards: ShardTable,
    plan: EpochPlan,
    cache_dir: Path | None,
    disk_budget: int | None,
    keep_files: bool,
) -> WindowCache:
    """The window cache for a split's `shards` of `manifest` in `store`, laid out in windows as `plan` (any epoch of
    them) says: files of a local folder read in place; a remote store's cached in `cache_dir`, paced under
    `disk_budget` unless `keep_files`."""
    stats = RotationStats()
    files: WindowFiles
    if isinstance(store, LocalStore):
        files = InPlaceFiles(store, shards)
    elif cache_dir is None:
        raise DiskBudgetError(f"{store.url} is remote: pass cache_dir for its shards")
    elif disk_budget is None or keep_files:
        if disk_budget is not None:
            check_budget(disk_budget, plan.windows)
        files = FetchedFiles(store, shards, cache_dir, keep_files)
    else:
        check_budget(disk_budget, plan.windows)
        files = PacedFiles(store, shards, cache_dir, disk_budget, plan, _layout(manifest, shards, plan), stats)
    return WindowCache(files, shards, manifest.token_dtype, stats)

"""Rotate windows of shards through a bounded local cache.

The first window is fetched while the caller waits; the next one is fetched in a
background thread while the current one is consumed. Files of a local-folder store are read
in place and never deleted.

Ranks and workers may share one cache directory. Each holds a lease on the files of the
windows it has loaded, and a file is deleted only when no live consumer holds it (lease.py):
no consumer loses a file between finding and opening it, and a deleted file is never one a
consumer still maps, so the files on disk are all the disk in use. Without a disk budget a
finished window's files are deleted at once (unless kept). With one, consumers register their
place (consumers.py) and are paced by the slowest (horizon.py): a consumer fetches a window only
within the run of windows from the slowest consumer's place that fits the budget, and waits
otherwise; eviction spares that run and takes unheld files least recently released first
(eviction.py). One consumer at a time makes room and fetches, so each file is fetched once per
node per pass and the cache never exceeds the budget.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .verified import cached_path, ensure_local, is_trusted, markers
from .consumers import Registration, live_places
from .download import journal_bound
from .eviction import cache_usage, make_room
from .horizon import Horizon, Orders, horizon
from ..opening import OpenedManifest
from ..errors import DiskBudgetError
from ..sampler import EpochPlan, Segment, Window
from ..format import FileRef, Shard, open_shard
from .lease import Lease, evict, hold
from .locking import file_lock

PACE_SECONDS = 0.01  # how often a consumer that waits for slower ones looks again
log = logging.getLogger(__name__)


@dataclass
class RotationStats:
    """Seconds the consumer waited at each window start (the first included), and what was fetched."""

    waits: list[float] = field(default_factory=list)
    windows_fetched: int = 0
    max_cache_bytes: int = 0
    paced_s: float = 0.0  # seconds fetching waited for slower consumers of a shared cache (back-pressure)


def _plain(shard: Shard) -> Shard:
    """The shard with its memmap seen as a plain array (same mapping): slicing a np.memmap costs about 8x more per row."""
    return replace(shard, tokens=shard.tokens.view(np.ndarray))


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
        self._orders: Orders | None = None
        self._layout: str | None = None
        self._room = 0  # bytes the horizon may fill: the budget less a download's journal
        self._registration: Registration | None = None

    @property
    def paced(self) -> bool:
        """Whether consumers of this cache are paced by the slowest one (a remote store with a disk budget)."""
        return self.remote and self.budget is not None and not self.keep_files

    def follow(self, plan: EpochPlan) -> None:
        """Read windows in `plan`'s visiting order from now on (a paced cache compares consumers' places in it)."""
        if self.paced:
            self._orders = Orders(plan)
            self._room = self.budget - journal_bound(max(w.nbytes for w in plan.windows))
            if self._layout is None:
                m = self.opened.manifest
                layout = [m.dataset, m.version, plan.seed, self.shards[0].npy.key, [w.shards for w in plan.windows]]
                self._layout = hashlib.sha256(json.dumps(layout).encode()).hexdigest()[:16]

    def _place(self, segment: Segment) -> int:
        return self._orders.plan.epoch * len(self._orders.plan.windows) + segment.pos

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

    def _horizon(self, place: int) -> Horizon:
        """The windows kept for the slowest live consumer of this layout (this one counts, registered or not)."""
        slowest = min([place, *live_places(self.cache_dir, self._layout)])
        return horizon(self._orders, slowest, self._room)

    def _wait(self, started: float, place: int, why: str) -> None:
        """Sleep a pacing period, saying so once a minute (a consumer stopped elsewhere holds this one back)."""
        before = time.perf_counter() - started
        time.sleep(PACE_SECONDS)
        waited = time.perf_counter() - started
        if int(waited // 60) > int(before // 60):
            log.warning("%s: the window at place %d has waited %.0f s for slower consumers (%s)", self.cache_dir, place, waited, why)

    def _paced_fetch(self, place: int, refs: list[FileRef]) -> None:
        """Fetch `refs` (of the window at `place`) once it is within the slowest consumer's horizon and there is room for it."""
        started = time.perf_counter()
        while True:
            with file_lock(self.cache_dir / ".room.lock"):  # one consumer at a time makes room and fetches
                missing = [ref for ref in refs if not is_trusted(cached_path(self.cache_dir, ref), ref)]
                if not missing:
                    break
                kept = self._horizon(place)  # lists and probes every live consumer's record: only when something is missing
                if place <= kept.end:
                    spare = {cached_path(self.cache_dir, r) for w in kept.windows for i in self._orders.plan.windows[w].shards for r in self._refs(i)}
                    need = sum(ref.size for ref in missing) + max(journal_bound(ref.size) for ref in missing)
                    if make_room(self.cache_dir, self.budget, need, spare):
                        for ref in missing:
                            ensure_local(self.opened.store, ref, self.cache_dir)
                        break
            self._wait(started, place, "its place is past the horizon" if place > kept.end else "held files leave too little room")
        self.stats.paced_s += time.perf_counter() - started

    def _cached_paths(self, segment: Segment) -> dict[int, list[Path]]:
        """A remote store's files in the (shared) cache: leased first, then fetched once per node (paced under a budget)."""
        window = segment.window
        refs = [ref for i in window.shards for ref in self._refs(i)]
        if self.paced:
            started, place = time.perf_counter(), self._place(segment)
            while place > self._horizon(place).end:  # lease nothing until within the horizon, so a leader never pins the slowest one's room
                self._wait(started, place, "its place is past the horizon")
            self.stats.paced_s += time.perf_counter() - started
        self._leases[window.index] = [hold(cached_path(self.cache_dir, ref)) for ref in refs]
        if self.paced:
            self._paced_fetch(place, refs)
        return {i: [ensure_local(self.opened.store, ref, self.cache_dir) for ref in self._refs(i)] for i in window.shards}

    def _load(self, segment: Segment) -> dict[int, Shard]:
        paths = self._cached_paths(segment) if self.remote else self._local_paths(segment.window)
        dtype = self.opened.manifest.token_dtype
        shards = {i: _plain(open_shard(self.shards[i], npy, bin_, dtype)) for i, (npy, bin_) in paths.items()}
        if self.remote:
            self.stats.max_cache_bytes = max(self.stats.max_cache_bytes, cache_usage(self.cache_dir))
        self.stats.windows_fetched += 1
        return shards

    def prefetch(self, segment: Segment) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-prefetch")
        if segment.window.index not in self._pending:
            self._pending[segment.window.index] = self._pool.submit(self._load, segment)

    def acquire(self, segment: Segment) -> dict[int, Shard]:
        """The segment's window of shards, verified and memory-mapped; blocks only if the prefetch is not done.
        A paced cache first records that this consumer is done with every earlier window."""
        if self.paced:
            if self._registration is None:
                self._registration = Registration(self.cache_dir, self._layout, self._place(segment))
            self._registration.move(self._place(segment))
        self.prefetch(segment)
        started = time.perf_counter()
        shards = self._pending.pop(segment.window.index).result()
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
        if self._registration is not None:
            self._registration.close()
            self._registration = None

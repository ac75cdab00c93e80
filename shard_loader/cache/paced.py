"""A remote store's files in a cache shared under a disk budget: consumers are paced by the slowest one.

Each consumer registers its place (consumers.py). A consumer fetches a window only within the run of windows from
the slowest live consumer's place that fits the budget (horizon.py) and waits otherwise; eviction spares that run and
takes unheld files least recently released first (eviction.py). One consumer at a time makes room and fetches, so
each file is fetched once per node per pass and the cache never exceeds the budget. Files stay after a window is
released until room is needed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from pathlib import Path

from ..format import FileRef, ShardTable
from ..sampler import EpochPlan, Segment, Window
from ..storage import Store
from .consumers import Registration, live_places
from .download import journal_bound
from .eviction import make_room
from .fetched import FetchedFiles
from .files import CachePath
from .horizon import Horizon, Orders, horizon
from .locking import file_lock
from .verified import cached_path, ensure_local, is_trusted
from .window_files import RotationStats, ShardFiles, WindowFiles, shard_refs

PACE_SECONDS = 0.01  # how often a consumer that waits for slower ones looks again
log = logging.getLogger(__name__)


class PacedFiles(WindowFiles):
    """Cached files fetched within the slowest consumer's horizon and evicted only to make room under `budget`."""

    def __init__(
        self,
        store: Store,
        shards: ShardTable,
        cache_dir: Path,
        budget: int,
        plan: EpochPlan,
        layout: str,
        stats: RotationStats,
    ):
        # leased and fetched as there; evicted only here
        self.fetched = FetchedFiles(store, shards, cache_dir, keep_files=True)
        self.cache_dir, self.budget, self.layout, self.stats = cache_dir, budget, layout, stats
        self._orders = Orders(plan)
        self._room = budget - journal_bound(max(w.nbytes for w in plan.windows))  # bytes the horizon may fill
        self._registration: Registration | None = None  # made by the first window this process reads

    def follow(self, plan: EpochPlan) -> None:
        self._orders = Orders(plan)

    def _place(self, segment: Segment) -> int:
        return self._orders.plan.epoch * len(self._orders.plan.windows) + segment.pos

    def enter(self, segment: Segment) -> None:
        """Record that this consumer is done with every window before `segment`'s."""
        if self._registration is None:
            self._registration = Registration(self.cache_dir, self.layout, self._place(segment))
        self._registration.move(self._place(segment))

    def _horizon(self, place: int) -> Horizon:
        """The windows kept for the slowest live consumer of this layout (this one counts, registered or not)."""
        slowest = min([place, *live_places(self.cache_dir, self.layout)])
        return horizon(self._orders, slowest, self._room)

    def _wait(self, started: float, place: int, why: str) -> None:
        """Sleep a pacing period, saying so once a minute (a consumer stopped elsewhere holds this one back)."""
        before = time.perf_counter() - started
        time.sleep(PACE_SECONDS)
        waited = time.perf_counter() - started
        if int(waited // 60) > int(before // 60):
            log.warning(
                "%s: the window at place %d has waited %.0f s for slower consumers (%s)",
                self.cache_dir,
                place,
                waited,
                why,
            )

    def _spare(self, kept: Horizon) -> set[CachePath]:
        windows = self._orders.plan.windows
        return {
            cached_path(self.cache_dir, ref)
            for w in kept.windows
            for ref in shard_refs(self.fetched.shards, windows[w])
        }

    def _fetch(self, place: int, refs: list[FileRef]) -> None:
        """Fetch `refs` (of the window at `place`) once it is within the slowest consumer's horizon and there is room
        for it."""
        started = time.perf_counter()
        while True:
            with file_lock(CachePath(self.cache_dir, ".room.lock")):  # one consumer at a time makes room and fetches
                missing = [ref for ref in refs if not is_trusted(cached_path(self.cache_dir, ref), ref)]
                if not missing:
                    break
                # lists and probes every live consumer's record: only when something is missing
                kept = self._horizon(place)
                if place <= kept.end:
                    need = sum(ref.size for ref in missing) + max(journal_bound(ref.size) for ref in missing)
                    if make_room(self.cache_dir, self.budget, need, self._spare(kept)):
                        for ref in missing:
                            ensure_local(self.fetched.store, ref, self.cache_dir)
                        break
            self._wait(
                started,
                place,
                "its place is past the horizon" if place > kept.end else "held files leave too little room",
            )
        self.stats.paced_s += time.perf_counter() - started

    def files(self, segment: Segment) -> ShardFiles:
        started, place = time.perf_counter(), self._place(segment)
        while (
            place > self._horizon(place).end
        ):  # lease nothing until within the horizon, so a leader never pins the slowest one's room
            self._wait(started, place, "its place is past the horizon")
        self.stats.paced_s += time.perf_counter() - started
        self._fetch(place, self.fetched.lease(segment.window))
        return self.fetched.local(segment.window)

    def release(self, window: Window, keep: Collection[int]) -> None:
        self.fetched.release(window, keep)  # kept files stay until room is needed

    def close(self) -> None:
        self.fetched.close()
        if self._registration is not None:
            self._registration.close()
            self._registration = None

    def disk_in_use(self) -> int:
        return self.fetched.disk_in_use()

"""Serve a consumer's share of a mixture plan: map its rows to components and samples a chunk of batches at a time,
and hold each component's windows open through that component's cache while rows need them.

Each component's windows are acquired in its own order, each place once, with the next one prefetched; a window is
released once the consumer's rows have moved past it. The same window met again at the next place (a component of
one window repeating, or an epoch ending with the window the next one starts with) stays open instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from ..format import Shard
from ..sampler import Window
from ..world import Consumer
from .components import ComponentDataset
from .interleave import Interleave, Walker
from .plan import MixturePlan

CHUNK_BATCHES = 64  # a consumer maps this many of its batches to components and samples in one vectorised pass


class HeldWindows:
    """The windows of one component that a consumer holds open, their rows, and the one prefetched."""

    def __init__(self, component: ComponentDataset, first_shard: int, open_shards: dict[int, Shard]):
        self.component, self.first, self.open = component, first_shard, open_shards
        self.rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # place -> (global shard id, token start) in order
        self.index_of: dict[int, int] = {}  # place -> window index
        self.acquired: dict[int, tuple[Window, int]] = {}  # window index -> (window, places holding it)
        self.next_place: int | None = None  # the next place to acquire
        self.prefetched: int | None = None
        self.followed: int | None = None  # the epoch whose plan the cache follows

    def _follow(self, place: int):
        segment, plan = self.component.window_at(place)
        if plan.epoch != self.followed:
            self.component.cache.follow(plan)
            self.followed = plan.epoch
        return segment, plan

    def _after(self, place: int) -> int:
        """The next place whose window has samples."""
        place += 1
        while not self.component.window_at(place)[0].batches:
            place += 1
        return place

    def _acquire(self, place: int) -> None:
        segment, plan = self._follow(place)
        index = segment.window.index
        if index in self.acquired:  # the same window at consecutive places: its files are open already
            window, holders = self.acquired[index]
            self.acquired[index] = (window, holders + 1)
        else:
            shards = self.component.cache.acquire(segment)
            self.acquired[index] = (segment.window, 1)
            for i, shard in shards.items():
                self.open[self.first + i] = shard
        if self.prefetched == place:
            self.prefetched = None
        ids, starts = plan.rows(segment)
        self.rows[place], self.index_of[place] = (ids + self.first, starts), index

    def _release(self, place: int) -> None:
        del self.rows[place]
        window, holders = self.acquired[self.index_of.pop(place)]
        if holders > 1:
            self.acquired[window.index] = (window, holders - 1)
            return
        del self.acquired[window.index]
        for i in window.shards:
            self.open.pop(self.first + i, None)
        self.component.cache.release(window)

    def need(self, low: int, high: int) -> None:
        """Hold every place from `low` through `high` open (the consumer's rows lie there), release the places before,
        and prefetch the next one. A prefetched place the consumer skipped is acquired and released at once."""
        for place in [p for p in self.rows if p < low]:
            self._release(place)
        if self.prefetched is not None and self.prefetched < low:
            skipped = self.prefetched
            self._acquire(skipped)
            self._release(skipped)
        place = low if self.next_place is None or self.next_place < low else self.next_place
        while place <= high:
            self._acquire(place)
            place = self._after(place)
        self.next_place = place
        if self.prefetched is None:
            segment, _ = self._follow(place)
            if segment.window.index not in self.acquired:
                self.component.cache.prefetch(segment)
                self.prefetched = place

    def lookup(self, places: np.ndarray, offsets: np.ndarray, out_ids: np.ndarray, out_starts: np.ndarray, mask: np.ndarray) -> None:
        """Fill the rows under `mask` with the global shard id and token start of (place, offset)."""
        for place in np.unique(places).tolist():
            ids, starts = self.rows[place]
            sub = mask.copy()
            sub[mask] = places == place
            out_ids[sub], out_starts[sub] = ids[offsets[places == place]], starts[offsets[places == place]]

    def close(self) -> None:
        for i in [i for i in self.open if self.first <= i < self.first + len(self.component.shards)]:
            del self.open[i]
        self.rows.clear(), self.index_of.clear(), self.acquired.clear()
        self.component.cache.close()


def _chunks(runs: Iterator[tuple[int, int]], size: int) -> Iterator[list[tuple[int, int]]]:
    chunk, count = [], 0
    for run in runs:
        chunk.append(run)
        count += run[1] - run[0]
        if count >= size:
            yield chunk
            chunk, count = [], 0
    if chunk:
        yield chunk


def _map(walker: Walker, plan: MixturePlan, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(component, component sample index) of ascending stream positions."""
    interleave = walker.interleave
    comp, k = np.empty(len(positions), dtype=np.int64), np.empty(len(positions), dtype=np.int64)
    i = 0
    while i < len(positions):
        block, picks = walker.at(plan.start.block, int(positions[i]))
        j = int(np.searchsorted(positions, block.start + interleave.block, side="left"))
        comp[i:j], k[i:j] = interleave.locate(block, picks, positions[i:j] - block.start)
        i = j
    return comp, k


def serve_mixture(
    interleave: Interleave, components: Sequence[ComponentDataset], first_shards: Sequence[int], plan: MixturePlan, consumer: Consumer
) -> Iterator[tuple[int, dict[int, Shard], np.ndarray, np.ndarray]]:
    """Serve `consumer`'s runs of `plan` (see MixtureDataset.serve); component c's shards have global ids from first_shards[c]."""
    open_shards: dict[int, Shard] = {}
    held = [HeldWindows(c, first, open_shards) for c, first in zip(components, first_shards)]
    walker = Walker(interleave)  # its own walk: the dataset's stays where the trainer's position is
    B, G = plan.batch_size, plan.global_batch
    row = plan.rank * B + np.arange(B)
    try:
        for chunk in _chunks(consumer.runs(0, plan.total_batches), CHUNK_BATCHES):
            batches = np.concatenate([np.arange(a, b) for a, b in chunk])
            positions = (plan.start.served + batches[:, None] * G + row).reshape(-1)
            comp, k = _map(walker, plan, positions)
            places, offsets = np.empty_like(k), np.empty_like(k)
            masks = [comp == c for c in range(len(held))]
            spans = []
            for c, mask in enumerate(masks):
                if mask.any():
                    places[mask], offsets[mask] = components[c].locate(k[mask])
                    spans.append((c, int(places[mask][0]), int(places[mask][-1])))
            ids, starts = np.empty_like(k), np.empty_like(k)
            if all(lo == hi for _, lo, hi in spans):  # each component within one window: map the whole chunk at once
                for c, lo, hi in spans:
                    held[c].need(lo, hi)
                    held[c].lookup(places[masks[c]], offsets[masks[c]], ids, starts, masks[c])
                first = 0
                for a, b in chunk:
                    rows = slice(first, first + (b - a) * B)
                    yield a, open_shards, ids[rows], starts[rows]
                    first = rows.stop
                continue
            first = 0
            for a, b in chunk:  # some component moves to another window within the chunk: run by run
                rows = slice(first, first + (b - a) * B)
                first = rows.stop
                for c, mask in enumerate(masks):
                    m = np.zeros_like(mask)
                    m[rows] = mask[rows]
                    if m.any():
                        held[c].need(int(places[m][0]), int(places[m][-1]))
                        held[c].lookup(places[m], offsets[m], ids, starts, m)
                yield a, open_shards, ids[rows], starts[rows]
    finally:
        for h in held:
            h.close()

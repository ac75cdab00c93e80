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
from ..sampler import EpochPlan, Segment, Window
from ..world import Consumer
from .components import ComponentDataset
from .interleave import Segments, Walker
from .plan import MixturePlan

CHUNK_BATCHES = 256  # a consumer maps this many of its batches to components and samples in one vectorised pass


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

    def _follow(self, place: int) -> tuple[Segment, EpochPlan]:
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

    def release_before(self, low: int) -> None:
        """Release the places before `low`: the consumer's rows have moved past them."""
        for place in [p for p in self.rows if p < low]:
            self._release(place)

    def keep(self, place: int) -> None:
        """Release the places before `place`, keeping their window open when `place` reads it too (a component whose
        epoch ends with the mixture's goes on in the same window)."""
        if place not in self.rows and self.component.window_at(place)[0].window.index in self.acquired:
            self._acquire(place)
            self.next_place = self._after(place)
        self.release_before(place)

    def need(self, low: int, high: int) -> None:
        """Hold every place from `low` through `high` open (the consumer's rows lie there), release the places before,
        and prefetch the next one. A prefetched place the consumer skipped is acquired and released at once."""
        self.release_before(low)
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

    def few_windows(self, low: int, high: int, most: int) -> bool:
        """Whether the places from `low` through `high` read at most `most` distinct windows (few places, or a
        component of one window, need no look-up)."""
        if high - low < most or len(self.component.windows) == 1:
            return True
        return len({self.component.window_at(place)[0].window.index for place in range(low, high + 1)}) <= most

    def lookup(self, places: np.ndarray, offsets: np.ndarray, out_ids: np.ndarray, out_starts: np.ndarray) -> None:
        """Set each row's global shard id and token start from its (place, offset); places ascend."""
        cuts = [0, *(np.flatnonzero(np.diff(places)) + 1).tolist(), len(places)]
        for lo, hi in zip(cuts, cuts[1:]):
            ids, starts = self.rows[int(places[lo])]
            out_ids[lo:hi], out_starts[lo:hi] = ids[offsets[lo:hi]], starts[offsets[lo:hi]]

    def close(self) -> None:
        for i in [i for i in self.open if self.first <= i < self.first + len(self.component.shards)]:
            del self.open[i]
        self.rows.clear()
        self.index_of.clear()
        self.acquired.clear()
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
    segments = walker.segments
    states, picks, layouts = [], [], []
    position = int(positions[0])
    while position <= positions[-1]:
        state, p = walker.at(plan.start.block, position)
        states.append(state)
        picks.append(p)
        layouts.append(segments.interleave(state))
        position = state.start + layouts[-1].block
    starts = np.array([s.start for s in states])
    blocks = np.searchsorted(starts, positions, side="right") - 1
    offsets = positions - starts[blocks]
    if all(layout is layouts[0] for layout in layouts):  # the common case: full blocks of one epoch layout
        return layouts[0].locate_blocks(states, picks, blocks, offsets)
    comp, k = np.empty_like(positions), np.empty_like(positions)
    for layout in {id(x): x for x in layouts}.values():  # an epoch's last block, or a first epoch of its own
        mine = np.flatnonzero([x is layout for x in layouts])
        rows = np.isin(blocks, mine)
        comp[rows], k[rows] = layout.locate_blocks(
            [states[i] for i in mine], [picks[i] for i in mine], np.searchsorted(mine, blocks[rows]), offsets[rows]
        )
    return comp, k


class Server:
    """One consumer's reading of a mixture: its open windows, its walk and its prefetches. A plan that starts where the
    last one ended (the next mixture epoch) goes on with them, since each component's window runs on across epochs;
    a plan that stops early closes them."""

    def __init__(
        self,
        segments: Segments,
        components: Sequence[ComponentDataset],
        first_shards: Sequence[int],
        consumer: Consumer,
    ):
        self.components, self.consumer = components, consumer
        self.open: dict[int, Shard] = {}
        self.held = [HeldWindows(c, first, self.open) for c, first in zip(components, first_shards)]
        self.walker = Walker(segments)  # its own walk: the dataset's stays where the trainer's position is
        self.end: int | None = None  # the stream position the last plan served to, when it was served to its end
        self.closed = False

    def follows(self, segments: Segments, consumer: Consumer, plan: MixturePlan) -> bool:
        """Whether `plan` goes on where this consumer's last plan ended."""
        return (
            not self.closed
            and self.walker.segments is segments
            and self.consumer == consumer
            and self.end == plan.start.served
        )

    def serve(self, plan: MixturePlan) -> Iterator[tuple[int, dict[int, Shard], np.ndarray, np.ndarray]]:
        """The consumer's runs of `plan` (see MixtureStream.serve)."""
        self.end, finished = None, False
        try:
            yield from self._runs(plan)
            finished = True
        finally:
            if finished:
                self.end = plan.start.served + plan.total_batches * plan.global_batch
                self._keep_from(plan, self.end)
            else:
                self.close()

    def _keep_from(self, plan: MixturePlan, position: int) -> None:
        """Keep open only each component's window holding its sample at stream `position` (and the prefetch): a window
        passed already would keep a prefetch waiting for room until the next plan."""
        for component, held, k in zip(self.components, self.held, self.walker.consumed(plan.start.block, position)):
            held.keep(int(component.locate(np.array([k]))[0][0]))

    def close(self) -> None:
        """Release every window and stop prefetching; once only (a generator finalised after its server was replaced
        must not close the caches the new server reads through)."""
        if not self.closed:
            self.closed = True
            for h in self.held:
                h.close()
        self.end = None

    def _runs(self, plan: MixturePlan) -> Iterator[tuple[int, dict[int, Shard], np.ndarray, np.ndarray]]:
        held, components = self.held, self.components
        B, G = plan.batch_size, plan.global_batch
        row = plan.rank * B + np.arange(B)
        for chunk in _chunks(self.consumer.runs(0, plan.total_batches), CHUNK_BATCHES):
            lengths = np.array([b - a for a, b in chunk])
            batches = np.arange(lengths.sum()) + np.repeat(
                np.array([a for a, _ in chunk]) - (np.cumsum(lengths) - lengths), lengths
            )
            positions = (plan.start.served + batches[:, None] * G + row).reshape(-1)
            comp, k = _map(self.walker, plan, positions)
            order = np.argsort(comp, kind="stable")  # rows grouped by component, each group in stream order
            bounds = np.concatenate(([0], np.cumsum(np.bincount(comp, minlength=len(held)))))
            k = k[order]
            places, offsets = np.empty_like(k), np.empty_like(k)
            spans = []  # (component, its rows in `order`, its first and last place)
            for c in range(len(held)):
                lo, hi = int(bounds[c]), int(bounds[c + 1])
                if lo < hi:
                    places[lo:hi], offsets[lo:hi] = components[c].locate(k[lo:hi])
                    spans.append((c, lo, hi, int(places[lo]), int(places[hi - 1])))
            found_ids, found_starts = np.empty_like(k), np.empty_like(k)
            ids, starts = np.empty_like(k), np.empty_like(k)
            # two windows each: each component's rows at once; else (one meets three or more) run by run, two held
            at_once = all(held[c].few_windows(first, last, 2) for c, _, _, first, last in spans)
            if at_once:
                for c, lo, hi, first, last in spans:
                    held[c].need(first, last)
                    held[c].lookup(places[lo:hi], offsets[lo:hi], found_ids[lo:hi], found_starts[lo:hi])
                ids[order], starts[order] = found_ids, found_starts
            row0 = 0
            for a, b in chunk:
                rows = slice(row0, row0 + (b - a) * B)
                row0 = rows.stop
                for c, lo, hi, _, _ in [] if at_once else spans:
                    i, j = lo + np.searchsorted(order[lo:hi], [rows.start, rows.stop])
                    if i < j:
                        held[c].need(int(places[i]), int(places[j - 1]))
                        held[c].lookup(places[i:j], offsets[i:j], found_ids[i:j], found_starts[i:j])
                        ids[order[i:j]], starts[order[i:j]] = found_ids[i:j], found_starts[i:j]
                yield a, self.open, ids[rows], starts[rows]

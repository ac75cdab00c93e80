"""A mixture's component: the stream of its pinned manifest, seen as one endless stream of samples.

Component sample `k` (counted over all of the component's epochs) is sample `k % N` of its epoch `k // N`, where N is
the component's samples per epoch; within an epoch the order is exactly the one a TokenDataset of the component
uses with the same seed and windows: windows in the order seeded by (seed, epoch), each window's samples in the
order seeded by (seed, epoch, window), none dropped (a mixture's global batches take samples from every component,
so no window has a remainder of its own). A window is identified over epochs by its place, `epoch * windows + position`,
the same numbering the cache paces consumers by.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from ..sampler import EpochPlan, Segment, Window
from ..state import Position
from ..stream import DatasetStream


class ComponentDataset(DatasetStream):
    """A dataset's stream as a mixture's component (batches of 1, one rank, manifest pinned): one endless stream."""

    @cached_property
    def samples(self) -> int:
        """Samples in one epoch of the component."""
        return int(self.window_totals.sum())

    def epoch_plan(self, epoch: int) -> EpochPlan:
        """The plan of one of the component's epochs, with its window order."""
        return self._epoch(epoch)[0]

    def _epoch(self, epoch: int) -> tuple[EpochPlan, np.ndarray]:
        """The epoch's plan and the samples before the start of each window in its visiting order, then all of them
        (the latest 8 kept: a chunk of a mixture's batches may read several epochs of a small component)."""
        cache: dict[int, tuple[EpochPlan, np.ndarray]] = self.__dict__.setdefault("_epochs", {})
        if epoch not in cache:
            if len(cache) >= 8:
                cache.pop(min(cache))
            plan = self.plan(Position(epoch))
            cache[epoch] = (plan, np.concatenate(([0], np.cumsum(self.window_totals[plan.order]))))
        return cache[epoch]

    def locate(self, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(place, index within the window's order) of component samples `k` (ascending), an epoch at a time."""
        k = np.asarray(k, dtype=np.int64)
        n, windows = self.samples, len(self.windows)
        first, last = int(k[0]) // n, int(k[-1]) // n
        cuts = [0, *np.searchsorted(k, np.arange(first + 1, last + 1) * n).tolist(), len(k)]
        places, offsets = np.empty_like(k), np.empty_like(k)
        for epoch, lo, hi in zip(range(first, last + 1), cuts, cuts[1:]):
            starts = self._epoch(epoch)[1]
            pos = k[lo:hi] - epoch * n
            at = starts.searchsorted(pos, side="right") - 1
            places[lo:hi], offsets[lo:hi] = epoch * windows + at, pos - starts[at]
        return places, offsets

    def window_at(self, place: int) -> tuple[Segment, EpochPlan]:
        """The segment (the whole window) at a place, and its epoch's plan."""
        epoch, pos = divmod(place, len(self.windows))
        plan = self.epoch_plan(epoch)
        window: Window = self.windows[int(plan.order[pos])]
        return Segment(pos, window, 0, plan.window_samples(window)), plan

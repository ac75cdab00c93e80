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
    """A dataset's stream as a mixture's component (batches of one sample, one rank, its manifest pinned), seen as
    one endless stream of samples."""

    @cached_property
    def samples(self) -> int:
        """Samples in one epoch of the component."""
        return int(self.window_totals.sum())

    def epoch_plan(self, epoch: int) -> EpochPlan:
        """The plan of one of the component's epochs, with its window order (the two latest kept)."""
        return self._epoch(epoch)[0]

    def _epoch(self, epoch: int) -> tuple[EpochPlan, np.ndarray]:
        """The epoch's plan and the samples before the end of each window in its visiting order."""
        cache: dict[int, tuple[EpochPlan, np.ndarray]] = self.__dict__.setdefault("_epochs", {})
        if epoch not in cache:
            if len(cache) > 1:
                cache.pop(min(cache))
            plan = self.plan(Position(epoch))
            cache[epoch] = (plan, np.cumsum(self.window_totals[plan.order]))
        return cache[epoch]

    def locate(self, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(place, index within the window's order) of component samples `k` (sorted ascending)."""
        k = np.asarray(k, dtype=np.int64)
        first, last = int(k[0]) // self.samples, int(k[-1]) // self.samples
        if first == last:  # the common case: all in one epoch of the component
            plan, cum = self._epoch(first)
            pos = k - first * self.samples
            at = cum.searchsorted(pos, side="right")
            return first * len(self.windows) + at, pos - (cum[at] - self.window_totals[plan.order[at]])
        epochs, pos = np.divmod(k, self.samples)
        places, offsets = np.empty_like(k), np.empty_like(k)
        bounds = np.flatnonzero(np.diff(epochs)) + 1
        for lo, hi in zip(np.concatenate(([0], bounds)).tolist(), np.concatenate((bounds, [len(k)])).tolist()):
            if lo == hi:
                continue
            epoch = int(epochs[lo])
            plan, cum = self._epoch(epoch)
            at = np.searchsorted(cum, pos[lo:hi], side="right")
            places[lo:hi] = epoch * len(self.windows) + at
            offsets[lo:hi] = pos[lo:hi] - (cum[at] - self.window_totals[plan.order[at]])
        return places, offsets

    def window_at(self, place: int) -> tuple[Segment, EpochPlan]:
        """The segment (the whole window) at a place, and its epoch's plan."""
        epoch, pos = divmod(place, len(self.windows))
        plan = self.epoch_plan(epoch)
        window: Window = self.windows[int(plan.order[pos])]
        return Segment(pos, window, 0, plan.window_samples(window)), plan

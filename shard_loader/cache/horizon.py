"""How far ahead of the slowest consumer of a shared cache the others may read, and which windows eviction spares.

Places count windows over epochs: `epoch * windows + position` in that epoch's visiting order. From the slowest live
consumer's place, the horizon is the run of places whose windows fit the disk budget together. A consumer fetches a
window only once its place is within the horizon (a faster one waits: back-pressure), and eviction spares the
horizon's windows; so a lagging consumer finds on disk every window a faster one fetched for it, each file is
fetched once per node per pass, and the windows kept never exceed the budget.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..sampler import EpochPlan, Window


@dataclass(frozen=True)
class Horizon:
    """Places `start`..`end` (inclusive) and the windows at them; `end` is unbounded once every window fits."""

    start: int
    end: int
    windows: frozenset[int]


class Orders:
    """Each epoch's visiting order of one layout's windows, computed once per epoch."""

    def __init__(self, plan: EpochPlan):
        self.plan, self._orders = plan, {plan.epoch: plan.order}

    def window(self, place: int) -> Window:
        epoch, pos = divmod(place, len(self.plan.windows))
        if epoch not in self._orders:
            if len(self._orders) > 3:
                self._orders.pop(min(self._orders))
            self._orders[epoch] = replace(self.plan, epoch=epoch).order
        return self.plan.windows[int(self._orders[epoch][pos])]


def horizon(orders: Orders, start: int, budget: int) -> Horizon:
    """The places from `start` whose windows fit in `budget` bytes together (at least the first; a window met twice
    counts once)."""
    total = len(orders.plan.windows)
    seen: set[int] = set()
    used, place = 0, start
    while len(seen) < total:
        window = orders.window(place)
        if window.index not in seen:
            if seen and used + window.nbytes > budget:
                return Horizon(start, place - 1, frozenset(seen))
            seen.add(window.index)
            used += window.nbytes
        place += 1
    return Horizon(start, 1 << 62, frozenset(seen))

"""A rank's plan for the rest of a mixture epoch: how many global batches are left from a position."""

from __future__ import annotations

from dataclasses import dataclass

from .state import MixturePosition


@dataclass(frozen=True)
class MixturePlan:
    """From `start` to the first global batch boundary at or after stream position `end` (the epoch's last sample),
    in global batches of `batch_size * world_size` samples; rank `rank` takes its rows of each."""

    start: MixturePosition
    end: int
    batch_size: int
    rank: int
    world_size: int

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    @property
    def total_batches(self) -> int:
        """Batches this rank serves from `start` to the end of the epoch (the same on every rank)."""
        return max(0, -(-(self.end - self.start.served) // self.global_batch))

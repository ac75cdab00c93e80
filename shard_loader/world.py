"""Who reads: the rank and world size of this process, resolved once where the dataset is built,
and the share of a rank's batches each DataLoader worker serves.

Workers receive the resolved world with the dataset, so a spawned or forkserver worker (where
torch.distributed is not initialised) never has to guess.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from .arguments import ArgumentError, integer
from .errors import ShardLoaderError


class WorldError(ShardLoaderError):
    """The rank and world size cannot be known where the dataset is built."""


@dataclass(frozen=True)
class World:
    """Rank `rank` of `world_size` data-parallel ranks."""

    rank: int = 0
    world_size: int = 1

    def __post_init__(self):
        integer("world_size", self.world_size, 1)
        integer("rank", self.rank, 0)
        if self.rank >= self.world_size:
            raise ArgumentError(f"rank {self.rank} is not in [0, world_size={self.world_size})")


def _in_dataloader_worker() -> bool:
    data = sys.modules.get("torch.utils.data")
    return data is not None and data.get_worker_info() is not None


def _from_environment() -> World | None:
    """RANK and WORLD_SIZE as torchrun sets them, when present."""
    if "WORLD_SIZE" not in os.environ:
        return None
    try:
        return World(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]))
    except (KeyError, ValueError) as e:
        raise WorldError(f"WORLD_SIZE is set but RANK/WORLD_SIZE are unusable ({e!r}): pass rank and world_size") from None


def resolve_world(rank: int | None = None, world_size: int | None = None) -> World:
    """The given rank and world size, else torch.distributed's, else torchrun's RANK/WORLD_SIZE, else rank 0 of 1."""
    if (rank is None) != (world_size is None):
        raise ArgumentError(f"pass both rank and world_size or neither, got rank={rank!r}, world_size={world_size!r}")
    if rank is not None:
        return World(rank, world_size)
    if _in_dataloader_worker():
        raise WorldError(
            "rank and world_size cannot be known inside a DataLoader worker (torch.distributed is not initialised "
            "there): build the dataset in the trainer's process, or pass rank and world_size"
        )
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size())
    return _from_environment() or World()


@dataclass(frozen=True)
class Consumer:
    """Which share of a plan's batches an iterator serves: batch k (counted from the plan's start)
    goes to worker (k // group) % num_workers, so worker 0 always serves the first group after a resume.

    Groups of consecutive batches travel together (the torch path hands a group over in one transfer).
    """

    worker: int = 0
    num_workers: int = 1
    group: int = 1

    def runs(self, first: int, count: int) -> Iterator[tuple[int, int]]:
        """[start, stop) of each run of this consumer's batches among [first, first + count), one group at most each:
        a worker fills a run in one pass instead of batch by batch."""
        end, q = first + count, first // self.group
        q += (self.worker - q) % self.num_workers  # the first group from `first`'s on that is this consumer's
        while (start := max(q * self.group, first)) < end:
            yield start, min((q + 1) * self.group, end)
            q += self.num_workers

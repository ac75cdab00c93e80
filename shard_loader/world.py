"""Who reads: the rank and world size of this process, resolved once where the dataset is built,
and the share of a rank's batches each DataLoader worker serves.

Workers receive the resolved world with the dataset, so a spawned or forkserver worker (where
torch.distributed is not initialised) never has to guess.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

from .arguments import ArgumentError, integer
from .errors import ShardLoaderError


class WorldError(ShardLoaderError):
    """The rank and world size cannot be known where the dataset is built."""


@dataclass(frozen=True)
class World:
    """Rank `rank` of `world_size` data-parallel ranks; `local_rank` is its index on its node (which GPU it
    drives: the loader itself never needs it)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    assumed: bool = field(default=False, compare=False)  # rank 0 of 1 because nothing where it was built said more

    def __post_init__(self) -> None:
        integer("world_size", self.world_size, 1)
        integer("rank", self.rank, 0)
        integer("local_rank", self.local_rank, 0)
        if self.rank >= self.world_size:
            raise ArgumentError(f"rank {self.rank} is not in [0, world_size={self.world_size})")


# Where a launcher puts rank, world size and local rank: torchrun, Lightning's own launcher (`python train.py` with
# devices=N starts a node's other processes with LOCAL_RANK, NODE_RANK and WORLD_SIZE, and no RANK), then srun (inside
# a job step only: a batch script is one process even when its job has many tasks, and sees SLURM_NTASKS > 1 and
# SLURM_PROCID=0).
TORCHRUN = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
LIGHTNING = ("LOCAL_RANK", "WORLD_SIZE", "LOCAL_RANK")
SRUN = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")


def _in_dataloader_worker() -> bool:
    data = sys.modules.get("torch.utils.data")
    return data is not None and data.get_worker_info() is not None


def _launcher() -> tuple[str, str, str] | None:
    """The variables of the launcher that started this process: torchrun's or Lightning's, else srun's in a step."""
    if "WORLD_SIZE" in os.environ:
        return LIGHTNING if "RANK" not in os.environ and "LOCAL_RANK" in os.environ else TORCHRUN
    if "SLURM_STEP_ID" in os.environ and "SLURM_NTASKS" in os.environ:
        return SRUN
    return None


def _from_environment() -> World | None:
    """The World the launcher's variables give (TORCHRUN's, LIGHTNING's or SRUN's, as `_launcher` picks), or None."""
    names = _launcher()
    if names is None:
        return None
    rank, size, local = names
    if names == LIGHTNING and os.environ.get("NODE_RANK", "0") != "0":  # its processes per node are not in sight
        raise WorldError(
            f"Lightning's launcher started this process on node NODE_RANK={os.environ['NODE_RANK']} without a global "
            "RANK: pass rank and world_size, or launch with torchrun or srun"
        )
    try:
        return World(int(os.environ[rank]), int(os.environ[size]), int(os.environ.get(local, "0")))
    except (KeyError, ValueError) as e:
        raise WorldError(
            f"{size} is set but {rank}/{size}/{local} are unusable ({e!r}): pass rank and world_size"
        ) from None


def _local_rank() -> int:
    names = _launcher()
    value = os.environ.get(names[2], "0") if names else "0"
    return int(value) if value.isdigit() else 0


def resolve_world(rank: int | None = None, world_size: int | None = None) -> World:
    """The given rank and world size, else torch.distributed's, else torchrun's RANK/WORLD_SIZE, else srun's
    SLURM_PROCID/SLURM_NTASKS (in a step), else rank 0 of 1 (`assumed`)."""
    if (rank is None) != (world_size is None):
        raise ArgumentError(f"pass both rank and world_size or neither, got rank={rank!r}, world_size={world_size!r}")
    if rank is not None and world_size is not None:
        return World(rank, world_size, _local_rank())
    if _in_dataloader_worker():
        raise WorldError(
            "rank and world_size cannot be known inside a DataLoader worker (torch.distributed is not initialised "
            "there): build the dataset in the trainer's process, or pass rank and world_size"
        )
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return World(dist.get_rank(), dist.get_world_size(), _local_rank())
    return _from_environment() or World(assumed=True)


@dataclass(frozen=True)
class Consumer:
    """Which share of a plan's batches an iterator serves: batch k (counted from the plan's start) goes to worker
    (k // group) % num_workers, so worker 0 always serves the first group after a resume. Groups of consecutive batches
    travel together (the torch path hands a group over in one transfer)."""

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

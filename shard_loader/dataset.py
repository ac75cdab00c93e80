"""TokenDataset: fixed-length token batches from one split, rotated through a bounded cache,
split over ranks and workers, deterministic from (seed, epoch), and resumable."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ShardLoaderError
from .opening import open_manifest
from .rotation import WindowCache, parse_size
from .sampler import EpochPlan, SampleSpec, make_windows
from .format import Shard

STATE_VERSION = 1


def distributed_rank() -> tuple[int, int]:
    """(rank, world size) from torch.distributed when it is initialised, else (0, 1)."""
    import sys

    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@dataclass(frozen=True)
class Consumer:
    """Which share of a rank's batches this iterator serves: batch g goes to worker (g // group) % num_workers.

    Groups of consecutive batches travel together (the torch path hands a group over in one transfer).
    """

    worker: int = 0
    num_workers: int = 1
    group: int = 1


class TokenDataset:
    """Batches of `input_ids` and `labels` (int64, shape (batch_size, seq_len)) from one split.

    Iterating yields one epoch of this rank's batches; `set_epoch` moves to another.
    `state_dict()` after k batches, loaded into a new dataset, continues with batch k + 1.
    """

    def __init__(
        self,
        url: str,
        split: str = "train",
        seq_len: int = 2048,
        batch_size: int = 8,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        cache_dir: str | Path | None = None,
        disk_budget: int | str | None = None,
        window_shards: int | None = None,
        window_bytes: int | str | None = None,
        keep_files: bool = False,
        stride: int | None = None,
        label_shift: int = 1,
        position_ids: bool = False,
        store_options: dict[str, Any] | None = None,
    ):
        self.url, self.split = url, split
        self.opened = open_manifest(url, **(store_options or {}))
        self.shards = self.opened.manifest.split(split).shards
        if not self.shards:
            raise ShardLoaderError(f"{url}: split {split!r} has no shards")
        if rank is None or world_size is None:
            rank, world_size = distributed_rank()
        if not 0 <= rank < world_size:
            raise ShardLoaderError(f"rank {rank} is not in [0, world_size={world_size})")
        self.rank, self.world_size, self.seed, self.batch_size = rank, world_size, seed, batch_size
        self.spec = SampleSpec(seq_len, label_shift, stride)
        self.position_ids = position_ids
        self.disk_budget = parse_size(disk_budget)
        by_bytes = parse_size(window_bytes) or (self.disk_budget // 2 if self.disk_budget and not window_shards else None)
        self.windows = make_windows(self.shards, window_shards, by_bytes)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.keep_files = keep_files
        self.cache = WindowCache(self.opened, self.shards, self.cache_dir, self.disk_budget, keep_files)
        self.cache.check_budget(self.windows)
        self.epoch = 0
        self.start_batch = 0
        self.consumer = Consumer()

    def plan(self, epoch: int | None = None) -> EpochPlan:
        return EpochPlan(
            self.shards, tuple(self.windows), self.spec, self.seed, self.epoch if epoch is None else epoch,
            self.batch_size, self.rank, self.world_size,
        )

    def __len__(self) -> int:
        """Batches this rank serves per epoch (over all of its workers)."""
        return self.plan().total_batches

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self.start_batch = epoch, 0

    def state_dict(self) -> dict[str, int]:
        """Where this rank's stream stands: the epoch and the batches of it already served."""
        return {"version": STATE_VERSION, "epoch": self.epoch, "batches": self.start_batch, "seed": self.seed}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state.get("version") != STATE_VERSION:
            raise ShardLoaderError(f"state_dict version {state.get('version')!r} is not {STATE_VERSION}")
        if state["seed"] != self.seed:
            raise ShardLoaderError(f"state_dict was saved with seed {state['seed']}, this dataset has seed {self.seed}")
        self.epoch, self.start_batch = state["epoch"], state["batches"]

    def next_window(self) -> None:
        """Finish the current window now (for trainers that move in fixed windows): the rest of its batches are skipped
        and the stream continues with the next window's first batch; call it on every rank at the same step."""
        plan = self.plan()
        if 0 < self.start_batch < plan.total_batches:
            pos, _ = plan.locate(self.start_batch - 1)
            self.start_batch = int(plan.batches_per_window[: pos + 1].sum())

    def fill(self, out: np.ndarray, shards: dict[int, Shard], shard_ids: np.ndarray, starts: np.ndarray) -> None:
        """Copy each sample's `span` tokens into the rows of `out` (int64), converting on the way."""
        span = self.spec.span
        for row, (i, s) in enumerate(zip(shard_ids.tolist(), starts.tolist())):
            out[row] = shards[i].tokens[s : s + span]

    def positions(self, shards: dict[int, Shard], shard_ids: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Each input token's position within its document, from the shard's `.bin` offsets."""
        out = np.empty((len(starts), self.spec.seq_len), dtype=np.int64)
        for row, (i, s) in enumerate(zip(shard_ids.tolist(), starts.tolist())):
            idx = np.arange(s, s + self.spec.seq_len)
            offsets = shards[i].offsets
            out[row] = idx - offsets[np.searchsorted(offsets, idx, side="right") - 1]
        return out

    def samples(self) -> Iterator[tuple[dict[int, Shard], np.ndarray, np.ndarray]]:
        """(open shards, shard ids, token starts) of each batch this consumer serves, in stream order."""
        plan = self.plan()
        first_pos, skip = plan.locate(self.start_batch) if self.start_batch < plan.total_batches else (len(plan.order), 0)
        batch_index = self.start_batch
        order = [self.windows[w] for w in plan.order]
        per_window = plan.batches_per_window
        workers = self.consumer
        for pos in range(first_pos, len(order)):
            window = order[pos]
            shards = self.cache.acquire(window)
            nxt = order[pos + 1] if pos + 1 < len(order) else None
            if nxt is not None:
                self.cache.prefetch(nxt)
            shard_ids, starts = plan.window_starts(window)
            for b in range(skip if pos == first_pos else 0, int(per_window[pos])):
                if self.start_batch > batch_index:  # next_window() was called
                    batch_index = self.start_batch
                    break
                if (batch_index // workers.group) % workers.num_workers == workers.worker:
                    rows = slice(b * self.batch_size, (b + 1) * self.batch_size)
                    self.start_batch = batch_index + 1
                    yield shards, shard_ids[rows], starts[rows]
                batch_index += 1
            del shards
            self.cache.release(window, keep=set(nxt.shards) if nxt is not None else set())
        self.start_batch = batch_index

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        m = self.spec.label_shift
        for shards, shard_ids, starts in self.samples():
            buf = np.empty((len(starts), self.spec.span), dtype=np.int64)
            self.fill(buf, shards, shard_ids, starts)
            batch = {"input_ids": buf[:, :-m], "labels": buf[:, m:]}
            if self.position_ids:
                batch["position_ids"] = self.positions(shards, shard_ids, starts)
            yield batch

    @property
    def stats(self):
        return self.cache.stats

    def close(self) -> None:
        self.cache.close()


def iter_sequences(url: str, split: str = "train", seq_len: int = 2048, batch_size: int = 8, **options) -> Iterator[dict[str, np.ndarray]]:
    """The simplest read path: one epoch of batches, without shuffling the windows' order by hand."""
    return iter(TokenDataset(url, split=split, seq_len=seq_len, batch_size=batch_size, **options))

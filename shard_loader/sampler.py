"""Deterministic sampling: windows of shards, samples within a window, batches per rank.

Everything here is arithmetic on the manifest's token counts: no per-token index is
built, so start-up cost grows with the shard count only.

Per epoch the window order is a permutation seeded by (seed, epoch); within a window
the sample order is a permutation seeded by (seed, epoch, window). A window's shuffled
samples are cut into global batches; a remainder smaller than `batch_size *
world_size` samples is dropped (at most that many samples per window and epoch), so
every rank gets the same number of batches and every sample is served at most once
per epoch, exactly once unless dropped. Rank r takes global batches r, r + W, r + 2W...
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .errors import ShardLoaderError
from .format import ShardEntry


@dataclass(frozen=True)
class SampleSpec:
    """How a sample is cut: `seq_len` inputs, labels shifted by `label_shift`, starts `stride` apart."""

    seq_len: int
    label_shift: int = 1
    stride: int | None = None

    def __post_init__(self):
        if self.seq_len < 1 or self.label_shift < 1:
            raise ShardLoaderError(f"seq_len and label_shift must be positive, got {self.seq_len} and {self.label_shift}")
        if self.stride is not None and self.stride < 1:
            raise ShardLoaderError(f"stride must be positive, got {self.stride}")

    @property
    def span(self) -> int:
        """Tokens read per sample: inputs plus the label shift."""
        return self.seq_len + self.label_shift

    @property
    def step(self) -> int:
        return self.stride or self.seq_len

    def samples_in(self, tokens: int) -> int:
        return 0 if tokens < self.span else (tokens - self.span) // self.step + 1


@dataclass(frozen=True)
class Window:
    """A group of shards held on local disk together."""

    index: int
    shards: tuple[int, ...]
    nbytes: int


def make_windows(shards: tuple[ShardEntry, ...], window_shards: int | None, window_bytes: int | None) -> list[Window]:
    """Group shards in manifest order, by a shard count, a byte budget, or (neither) one shard per window."""
    windows, current, size = [], [], 0
    for i, entry in enumerate(shards):
        full = (window_shards and len(current) >= window_shards) or (window_bytes and current and size + entry.nbytes > window_bytes)
        if current and (full or (not window_shards and not window_bytes)):
            windows.append(Window(len(windows), tuple(current), size))
            current, size = [], 0
        current.append(i)
        size += entry.nbytes
    if current:
        windows.append(Window(len(windows), tuple(current), size))
    return windows


@dataclass(frozen=True)
class EpochPlan:
    """The batches one rank serves in one epoch: window order and batches per window."""

    shards: tuple[ShardEntry, ...]
    windows: tuple[Window, ...]
    spec: SampleSpec
    seed: int
    epoch: int
    batch_size: int
    rank: int
    world_size: int

    @cached_property
    def order(self) -> np.ndarray:
        """Window indices in the order this epoch visits them."""
        return np.random.default_rng([self.seed, self.epoch]).permutation(len(self.windows))

    def window_samples(self, window: Window) -> int:
        return sum(self.spec.samples_in(self.shards[i].tokens) for i in window.shards)

    def rank_batches(self, window: Window) -> int:
        """Batches each rank takes from a window (the same for every rank)."""
        return self.window_samples(window) // (self.batch_size * self.world_size)

    @cached_property
    def batches_per_window(self) -> np.ndarray:
        """Rank batches of each window, in visiting order."""
        return np.array([self.rank_batches(self.windows[w]) for w in self.order], dtype=np.int64)

    @property
    def total_batches(self) -> int:
        return int(self.batches_per_window.sum())

    def locate(self, batch: int) -> tuple[int, int]:
        """(position in visiting order, batch within that window) of the rank's `batch`-th batch of the epoch."""
        ends = np.cumsum(self.batches_per_window)
        pos = int(np.searchsorted(ends, batch, side="right"))
        return pos, batch - (int(ends[pos - 1]) if pos else 0)

    def window_starts(self, window: Window) -> tuple[np.ndarray, np.ndarray]:
        """(shard index, token start) of every sample this rank takes from a window, in serving order."""
        counts = np.array([self.spec.samples_in(self.shards[i].tokens) for i in window.shards], dtype=np.int64)
        total = int(counts.sum())
        per_batch = self.batch_size * self.world_size
        used = total - total % per_batch
        perm = np.random.default_rng([self.seed, self.epoch, window.index]).permutation(total)[:used]
        mine = perm.reshape(-1, self.world_size, self.batch_size)[:, self.rank, :].reshape(-1)
        shard_pos = np.searchsorted(np.cumsum(counts), mine, side="right")
        local = mine - np.concatenate(([0], np.cumsum(counts)))[shard_pos]
        return np.asarray(window.shards, dtype=np.int64)[shard_pos], local * self.spec.step

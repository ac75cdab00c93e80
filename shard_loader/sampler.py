"""Deterministic sampling: windows of shards, samples within a window, batches per rank.

Everything here is arithmetic on the manifest's token counts: no per-token index is built, so start-up cost grows with
the shard count only.

Per epoch the window order is a permutation seeded by (seed, epoch); within a window the sample order is a permutation
seeded by (seed, epoch, window). A window's shuffled samples are cut into global batches of `batch_size * world_size`
samples; rank r takes rows [r * batch_size, (r + 1) * batch_size) of each. A remainder smaller than a global batch is
dropped (at most that many samples per window and epoch), so every rank gets the same number of batches and every sample
is served at most once per epoch, exactly once unless dropped.

A plan may start at a `Cursor` (a window and the samples of it already served over all ranks): the rest of that window
is cut into global batches of the plan's world size, which is how a stream saved at one world size continues at another
without loss or repetition.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .arguments import integer, optional_integer


@dataclass(frozen=True)
class SampleSpec:
    """How a sample is cut: `seq_len` inputs, labels shifted by `label_shift`, starts `stride` apart."""

    seq_len: int
    label_shift: int = 1
    stride: int | None = None

    def __post_init__(self) -> None:
        integer("seq_len", self.seq_len, 1)
        integer("label_shift", self.label_shift, 1)
        optional_integer("stride", self.stride, 1)

    @property
    def span(self) -> int:
        """Tokens read per sample: inputs plus the label shift."""
        return self.seq_len + self.label_shift

    @property
    def step(self) -> int:
        return self.stride or self.seq_len

    def samples_in(self, tokens: Sequence[int] | np.ndarray) -> np.ndarray:
        """Samples in shards of these token counts (int64, element-wise)."""
        tokens = np.asarray(tokens, dtype=np.int64)
        return np.where(tokens < self.span, 0, (tokens - self.span) // self.step + 1)


@dataclass(frozen=True, slots=True)
class Window:
    """Shards held on local disk together (slots, not a NamedTuple, whose `index` would shadow tuple.index)."""

    index: int
    shards: tuple[int, ...]
    nbytes: int


def make_windows(sizes: Sequence[int], window_shards: int | None, window_bytes: int | None) -> list[Window]:
    """Group shards (these byte sizes, in manifest order) by shard count, byte budget, or (neither) one per window."""
    if not window_bytes:  # fixed groups: no loop over shards in Python beyond building the tuples
        step, n = window_shards or 1, len(sizes)
        totals = np.add.reduceat(np.asarray(sizes, dtype=np.int64), np.arange(0, n, step)).tolist() if n else []
        if step == 1:
            return [Window(i, (i,), b) for i, b in enumerate(totals)]
        return [Window(i, tuple(range(i * step, min((i + 1) * step, n))), b) for i, b in enumerate(totals)]
    windows: list[Window] = []
    current: list[int] = []
    size = 0
    for i, nbytes in enumerate(sizes):
        if current and (len(current) == window_shards or size + nbytes > window_bytes):
            windows.append(Window(len(windows), tuple(current), size))
            current, size = [], 0
        current.append(i)
        size += nbytes
    if current:
        windows.append(Window(len(windows), tuple(current), size))
    return windows


def sample_counts(
    spec: SampleSpec, tokens: Sequence[int] | np.ndarray, windows: list[Window]
) -> tuple[np.ndarray, np.ndarray]:
    """Samples in each shard and in each window (windows are runs of consecutive shards)."""
    per_shard = spec.samples_in(tokens)
    starts = [w.shards[0] for w in windows]
    return per_shard, np.add.reduceat(per_shard, starts) if starts else np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class Cursor:
    """A point in an epoch's global stream: `sample` samples of the window at position `window`
    of the visiting order are already served (over all ranks), and every earlier window is done."""

    window: int = 0
    sample: int = 0


@dataclass(frozen=True)
class Segment:
    """The part of one window a plan serves: from sample `first` on, `batches` batches per rank."""

    pos: int
    window: Window
    first: int
    batches: int


@dataclass(frozen=True)
class EpochPlan:
    """The batches one rank serves in one epoch from `start` on: window order and batches per window. It needs only
    sample counts per shard and per window (see `sample_counts`), so building one (at every resume or state_dict)
    touches no manifest object and costs little with many shards."""

    shard_samples: np.ndarray
    window_totals: np.ndarray
    windows: tuple[Window, ...]
    spec: SampleSpec
    seed: int
    epoch: int
    batch_size: int
    rank: int
    world_size: int
    start: Cursor = Cursor()

    @cached_property
    def order(self) -> np.ndarray:
        """Window indices in the order this epoch visits them."""
        return np.random.default_rng([self.seed, self.epoch]).permutation(len(self.windows))

    def window_samples(self, window: Window) -> int:
        return int(self.window_totals[window.index])

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.world_size

    @cached_property
    def _firsts(self) -> np.ndarray:
        """Samples already served of each window from the start cursor's on, in visiting order."""
        firsts = np.zeros(max(len(self.order) - self.start.window, 0), dtype=np.int64)
        firsts[:1] = self.start.sample
        return firsts

    @cached_property
    def batches_per_window(self) -> np.ndarray:
        """Rank batches of each window from the start cursor's on, in visiting order."""
        totals = self.window_totals[self.order[self.start.window :]]
        batches: np.ndarray = (totals - self._firsts) // self.global_batch  # numpy's stubs type this arithmetic Any
        return batches

    @cached_property
    def segments(self) -> tuple[Segment, ...]:
        """One segment per window from the start cursor's window on, in visiting order."""
        return tuple(
            Segment(self.start.window + k, self.windows[w], int(first), int(batches))
            for k, (w, first, batches) in enumerate(
                zip(self.order[self.start.window :], self._firsts, self.batches_per_window)
            )
        )

    @cached_property
    def _ends(self) -> np.ndarray:
        return np.cumsum(self.batches_per_window)

    @property
    def total_batches(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def locate(self, batch: int) -> tuple[int, int]:
        """(segment index, batch within that segment) of the rank's `batch`-th batch from the start."""
        seg = int(np.searchsorted(self._ends, batch, side="right"))
        return seg, batch - (int(self._ends[seg - 1]) if seg else 0)

    def cursor_after(self, served: int) -> Cursor:
        """The global cursor once every rank has served `served` batches of this plan."""
        if served == 0:
            return self.start
        seg, b = self.locate(served - 1)
        pos = self.start.window + seg
        if b + 1 < self.batches_per_window[seg]:
            return Cursor(pos, int(self._firsts[seg]) + (b + 1) * self.global_batch)
        return Cursor(pos + 1, 0)

    def rows(self, segment: Segment) -> tuple[np.ndarray, np.ndarray]:
        """(shard index, token start) of every sample this rank takes from a segment, in serving order."""
        window = segment.window
        counts = self.shard_samples[list(window.shards)]
        perm = np.random.default_rng([self.seed, self.epoch, window.index]).permutation(int(counts.sum()))
        taken = perm[segment.first : segment.first + segment.batches * self.global_batch]
        mine = taken.reshape(-1, self.world_size, self.batch_size)[:, self.rank, :].reshape(-1)
        ends = np.cumsum(counts)
        shard_pos = np.searchsorted(ends, mine, side="right")
        local = mine - (ends - counts)[shard_pos]
        return np.asarray(window.shards, dtype=np.int64)[shard_pos], local * self.spec.step

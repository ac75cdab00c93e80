"""Which component each sample of a mixture's global stream comes from: mixture epochs holding exact quotas, each cut
into blocks of `S` samples that hold floor or ceil of every component's share, laid out so any `S` consecutive samples
of an epoch do too.

Weights are first made exact integers (`units` over 2**40, largest remainder), and an epoch of L samples gets each
component's quota of them by largest remainder. The epoch is `L // S` full blocks holding the quotas' share of
`S x (L // S)` samples, then one last block of the rest. In every full block component c has `base[c] = floor(w_c S)`
slots at fixed places (the template); the `r = S - sum(base)` extra slots are given, block by block, to r components
chosen by a Pfair scheduler (PD2, Anderson & Srinivasan) over the fractional parts `frac[c] = w_c S - base[c]` (which
sum to r). Pfair keeps each component's extras within one of `frac[c] x blocks`, so at every block boundary its
cumulative count is within one sample of `w_c x samples`, and at the epoch's end exactly its quota. A component that
gets extras in consecutive blocks keeps the same extra slot, so a window of S samples at any offset of the full blocks
holds each slot place once, every base slot of c and at most one extra of c: floor or ceil of `w_c S`.

Since each epoch holds exact quotas, where any epoch starts is known without walking the ones before (set_epoch is
constant time); the price is that a window across an epoch's last block holds its share within two samples, not one.

Within a block, the template spreads each component's base slots and the extra slots evenly (EDF over their Pfair
windows), so shorter windows stay close to their share too (tests/loader/test_mixture_interleave.py states the bound).

Everything is integer arithmetic on the block's state, so every rank and worker computes the same stream.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

UNIT = 1 << 40  # weights become integers over UNIT: exact arithmetic, and within 1e-12 of the published weights


def units(weights: Sequence[float]) -> tuple[int, ...]:
    """Weights (summing to 1) as integers summing to UNIT, by largest remainder; ties go to the earlier component."""
    total = float(sum(weights))
    raw = [w / total * UNIT for w in weights]
    out = [int(x) for x in raw]
    for i in sorted(range(len(raw)), key=lambda i: (-(raw[i] - out[i]), i))[: UNIT - sum(out)]:
        out[i] += 1
    return tuple(out)


@dataclass(frozen=True)
class BlockState:
    """The start of one block of a segment (a run of the stream under one set of weights): its stream position,
    its index in the segment, each component's samples consumed before it (over all epochs), each component's
    extras given so far in the segment, and the extra slot each component held in the block before (-1: none)."""

    start: int
    index: int
    consumed: tuple[int, ...]
    extras: tuple[int, ...]
    slots: tuple[int, ...]

    @classmethod
    def origin(cls, start: int, consumed: Sequence[int]) -> BlockState:
        """The first block of a segment that begins at stream position `start`."""
        n = len(consumed)
        return cls(start, 0, tuple(int(c) for c in consumed), (0,) * n, (-1,) * n)

    def to_list(self) -> list[int]:
        return [self.start, self.index, *self.consumed, *self.extras, *self.slots]

    @classmethod
    def from_list(cls, values: Sequence[int], n: int) -> BlockState:
        v = [int(x) for x in values]
        return cls(v[0], v[1], tuple(v[2 : 2 + n]), tuple(v[2 + n : 2 + 2 * n]), tuple(v[2 + 2 * n : 2 + 3 * n]))


@dataclass(frozen=True)
class Picks:
    """One block's extras: the component that owns each extra slot, and the slot of each component (-1: none)."""

    owners: tuple[int, ...]
    slots: tuple[int, ...]


@dataclass(frozen=True)
class Interleave:
    """The shares (`units` over their sum) and slot template of a set of weights and a block of `block` (S) samples."""

    units: tuple[int, ...]
    block: int

    def __post_init__(self) -> None:
        if self.block < 1 or not self.units or sum(self.units) < 1 or min(self.units) < 0:
            raise ValueError("an interleave needs a block of at least 1 sample and non-negative units, not all 0")

    @cached_property
    def total(self) -> int:
        return sum(self.units)

    @property
    def n(self) -> int:
        return len(self.units)

    @cached_property
    def base(self) -> tuple[int, ...]:
        return tuple(u * self.block // self.total for u in self.units)

    @cached_property
    def frac(self) -> tuple[int, ...]:
        """Each component's fractional share of a block, over `total` (they sum to `extras` x `total`)."""
        return tuple(u * self.block % self.total for u in self.units)

    @property
    def extras(self) -> int:
        """Extra slots per block (fewer than the number of components)."""
        return self.block - sum(self.base)

    def counts(self, picks: Picks) -> np.ndarray:
        """Each component's samples in a block with these picks."""
        out = np.asarray(self.base, dtype=np.int64)
        out[list(picks.owners)] += 1
        return out

    # --- the template: fixed places of the base slots and of the extra slots -------------------------------------

    @cached_property
    def _template(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(owner, rank, slot places, base slots of each component before each slot place): owner[t] is the component of
        base slot t, or -1 - s for extra slot s; rank[t] is its index among its owner's base slots (for an extra slot:
        s). The tasks (each component's base slots, and the extra slots) are laid out by EDF over their Pfair windows,
        so each stays within one item of its share in every prefix."""
        task, rank = self._layout
        owner = np.where(task == self.n, -1 - rank, task).astype(np.int32)
        places = np.flatnonzero(owner < 0).astype(np.int64)
        before = (
            np.stack([np.searchsorted(p, places) for p in self._base_places]) if self.n else np.zeros((0, 0), np.int64)
        )
        return owner, rank, places, before

    @cached_property
    def _base_places(self) -> list[np.ndarray]:
        """Where each component's base slots sit in a block, ascending."""
        task, _ = self._layout
        return [np.flatnonzero(task == c) for c in range(self.n)]

    @cached_property
    def _layout(self) -> tuple[np.ndarray, np.ndarray]:
        return edf_layout([*self.base, self.extras], self.block)

    # --- the Pfair choice of each block's extras ---------------------------------------------------------------

    def _priority(self, c: int, i: int) -> tuple[int, int, int, int]:
        """PD2 priority of component c's i-th extra (1-based), smaller first: pseudo-deadline, then successor bit
        (1 first), then group deadline of a heavy share (later first), then the lower component."""
        f, total = self.frac[c], self.total
        deadline = -(-i * total // f)
        successor = 1 if i * total % f else 0
        group = 0
        if 2 * f >= total:  # heavy: the group deadline, ceil(ceil(d (1 - w)) / (1 - w))
            rest = total - f
            group = -(-(-(-deadline * rest // total)) * total // rest)
        return deadline, -successor, -group, c

    def picks(self, state: BlockState) -> Picks:
        """The components that get this block's extras (PD2 over the fractional shares), each keeping its slot
        from the block before if it had one; newcomers take the free slots, lower components the lower slots.
        Remembered by (index, extras, slots): every epoch of one layout makes the same choices."""
        known: dict[tuple[int, tuple[int, ...], tuple[int, ...]], Picks] = self.__dict__.setdefault("_picks", {})
        key = (state.index, state.extras, state.slots)
        if key not in known:
            if len(known) > 4096:
                known.clear()
            known[key] = self._choose(state)
        return known[key]

    def _choose(self, state: BlockState) -> Picks:
        r = self.extras
        if r == 0:
            return Picks((), (-1,) * self.n)
        ready = [  # released: a component's next extra may go in this block
            self._priority(c, state.extras[c] + 1)
            for c, f in enumerate(self.frac)
            if f and state.extras[c] * self.total // f <= state.index
        ]
        if len(ready) < r:
            raise AssertionError(f"block {state.index}: {len(ready)} components ready for {r} extra slots")
        chosen = sorted(c for *_, c in sorted(ready)[:r])
        slots = [-1] * self.n
        kept = {c: state.slots[c] for c in chosen if state.slots[c] >= 0}
        free = iter(sorted(set(range(r)) - set(kept.values())))
        for c in chosen:
            slots[c] = kept[c] if c in kept else next(free)
        owners = [0] * r
        for c in chosen:
            owners[slots[c]] = c
        return Picks(tuple(owners), tuple(slots))

    def following(self, state: BlockState, picks: Picks) -> BlockState:
        """The state at the start of the next block."""
        got = [1 if s >= 0 else 0 for s in picks.slots]
        return BlockState(
            state.start + self.block,
            state.index + 1,
            tuple(c + b + g for c, b, g in zip(state.consumed, self.base, got)),
            tuple(e + g for e, g in zip(state.extras, got)),
            picks.slots,
        )

    def consumed_at(self, state: BlockState, picks: Picks, offset: int) -> tuple[int, ...]:
        """Each component's samples consumed before `offset` of the block (over all epochs)."""
        _, _, places, _ = self._template
        return tuple(
            c + int(np.searchsorted(base, offset)) + (1 if s >= 0 and places[s] < offset else 0)
            for c, base, s in zip(state.consumed, self._base_places, picks.slots)
        )

    def locate_blocks(
        self, states: Sequence[BlockState], picks: Sequence[Picks], blocks: np.ndarray, offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(component, component sample index over all epochs) of samples at `offsets` of the blocks `states[blocks]`
        (one vectorised pass over a run of blocks)."""
        owner, rank, places, before = self._template
        comp = owner[offsets].astype(np.int64)
        k = rank[offsets].astype(np.int64)
        consumed = np.array([s.consumed for s in states], dtype=np.int64).reshape(-1)
        if not self.extras:
            return comp, k + consumed[blocks * self.n + comp]
        owners = np.array([p.owners for p in picks], dtype=np.int64).reshape(len(states), self.extras)
        extra = np.flatnonzero(comp < 0)
        slot = -1 - comp[extra]
        comp[extra] = owners[blocks[extra], slot]
        k[extra] = before[comp[extra], slot]
        at = blocks * self.n + comp  # (block, component), flattened
        slots = np.array([p.slots for p in picks], dtype=np.int64).reshape(-1)
        own_place = np.where(slots >= 0, places[slots], self.block)  # where each component's extra sits
        # a base slot after its component's extra counts that extra (an extra's own place is not before itself)
        return comp, k + (own_place[at] < offsets) + consumed[at]


def edf_layout(counts: Sequence[int], slots: int) -> tuple[np.ndarray, np.ndarray]:
    """(task, item index) at each of `slots` slots: task x's i-th of counts[x] items (sum(counts) == slots) may go
    in [floor(i slots / m), ceil((i + 1) slots / m)), and the released item with the earliest end goes first
    (uniprocessor EDF: every item meets its window, so every prefix is within one item of each task's share)."""
    ready = [(-(-slots // m), x, 0) for x, m in enumerate(counts) if m]
    pending: list[tuple[int, int, int]] = []
    heapq.heapify(ready)
    task, index = np.empty(slots, dtype=np.int32), np.empty(slots, dtype=np.int32)
    for t in range(slots):
        while pending and pending[0][0] <= t:
            _, x, i = heapq.heappop(pending)
            heapq.heappush(ready, (-(-(i + 1) * slots // counts[x]), x, i))
        _, x, i = heapq.heappop(ready)
        task[t], index[t] = x, i
        i += 1
        if i < counts[x]:
            heapq.heappush(pending, (i * slots // counts[x], x, i))
    return task, index


def apportion(units: Sequence[int], n: int, cap: Sequence[int] | None = None) -> tuple[int, ...]:
    """`n` samples shared by integer `units`: each its floor, then one more each by largest remainder (ties: the
    earlier one), so none exceeds the ceiling of its exact share. With `cap` (summing to `n` or more) no share exceeds
    its cap: a capped one's extra goes to the next remainder with room."""
    total, cap = sum(units), cap or (n,) * len(units)
    out = [min(u * n // total, c) for u, c in zip(units, cap)]
    rest = n - sum(out)
    order = sorted(range(len(units)), key=lambda i: (-(units[i] * n % total), i))
    while rest:
        for i in order:
            if rest and out[i] < cap[i]:
                out[i], rest = out[i] + 1, rest - 1
    return tuple(out)


@lru_cache(maxsize=64)
def shared(units: tuple[int, ...], block: int) -> Interleave:
    """One Interleave per shares and block size, so epochs of one layout share its template (built once)."""
    return Interleave(units, block)


@dataclass(frozen=True)
class Epoch:
    """The layout of one mixture epoch holding exactly `quota[c]` samples of component c: `blocks` full blocks of
    `block` samples (the interleave `full`, over the weights' share of those samples, none above its quota), then one
    last block `tail` of the rest (its own template, no extras)."""

    units: tuple[int, ...]
    quota: tuple[int, ...]
    block: int

    @cached_property
    def length(self) -> int:
        return sum(self.quota)

    @property
    def blocks(self) -> int:
        return self.length // self.block

    @cached_property
    def full(self) -> Interleave | None:
        if not self.blocks:
            return None
        return shared(apportion(self.units, self.blocks * self.block, self.quota), self.block)

    @cached_property
    def tail(self) -> Interleave | None:
        if self.length == self.blocks * self.block:
            return None
        full = self.full.units if self.full else (0,) * len(self.quota)
        return shared(tuple(q - f for q, f in zip(self.quota, full)), self.length - self.blocks * self.block)

    def interleave(self, index: int) -> Interleave:
        """The interleave of the epoch's block `index`."""
        layout = self.full if index < self.blocks else self.tail
        assert layout is not None, f"an epoch of {self.length} samples has no block {index}"
        return layout


class Segments:
    """The stream from `origin` (where each component had consumed `consumed`) as mixture epochs of `length` samples
    (the first of `first`, when given: the rest of an epoch a weight change cut). Each epoch's quotas are chosen by PD2
    over epochs (an interleave whose block is an epoch: every epoch boundary within one sample of each share), and its
    blocks start afresh from them, so the state at an epoch's start costs one PD2 step per epoch before it (remembered),
    never a walk through the samples of those epochs."""

    CHECKPOINT = 1024  # epochs between the epoch states remembered

    def __init__(
        self,
        units: tuple[int, ...],
        block: int,
        origin: int,
        consumed: Sequence[int],
        length: int,
        first: int | None = None,
    ):
        self.units, self.block, self.origin, self.length = units, block, origin, length
        self.consumed = tuple(int(c) for c in consumed)
        self.head = Epoch(units, apportion(units, first), block) if first else None
        self.quotas = Interleave(units, length)
        head = self.head.quota if self.head else (0,) * len(units)
        level = BlockState.origin(self.origin + sum(head), tuple(c + q for c, q in zip(self.consumed, head)))
        self._levels: dict[int, BlockState] = {0: level}  # epoch-level states: every CHECKPOINT-th and the last met
        self._last = 0
        self._layouts: dict[int, Epoch] = {}  # epoch -> its layout, for the epochs met lately
        self._starts: dict[int, BlockState] = {}  # epoch -> its first block's state, for the epochs met lately

    @property
    def first(self) -> int:
        """Samples in the first epoch."""
        return self.head.length if self.head else self.length

    def segment(self, position: int) -> int:
        """The epoch (counted from `origin`) holding stream `position`."""
        if position < self.origin:
            raise ValueError(f"position {position} is before the segments' origin {self.origin}")
        if self.head:
            return (position - self.origin - self.first) // self.length + 1
        return (position - self.origin) // self.length

    def _level(self, j: int) -> BlockState:
        """The epoch-level state of the j-th epoch after the head: its start, index j and consumed counts."""
        if j in self._levels:
            return self._levels[j]
        state = self._levels[max(k for k in self._levels if k <= j)]
        while state.index < j:
            state = self.quotas.following(state, self.quotas.picks(state))
            if state.index % self.CHECKPOINT == 0:
                self._levels[state.index] = state
        if self._last % self.CHECKPOINT:
            del self._levels[self._last]
        self._levels[j], self._last = state, j
        return state

    def epoch(self, segment: int) -> Epoch:
        """The layout of epoch `segment`."""
        if self.head:
            if segment == 0:
                return self.head
            segment -= 1
        if segment not in self._layouts:
            level = self._level(segment)
            if len(self._layouts) > 64:
                self._layouts.clear()
            quota = tuple(int(x) for x in self.quotas.counts(self.quotas.picks(level)))
            self._layouts[segment] = Epoch(self.units, quota, self.block)
        return self._layouts[segment]

    def start(self, segment: int) -> BlockState:
        """The block state at the start of epoch `segment` (the latest 64 remembered: every walk asks)."""
        if segment not in self._starts:
            if len(self._starts) > 64:
                self._starts.clear()
            if self.head and segment == 0:
                self._starts[segment] = BlockState.origin(self.origin, self.consumed)
            else:
                level = self._level(segment - 1 if self.head else segment)
                self._starts[segment] = BlockState.origin(level.start, level.consumed)
        return self._starts[segment]

    def interleave(self, state: BlockState) -> Interleave:
        """The interleave of the block starting at `state`."""
        return self.epoch(self.segment(state.start)).interleave(state.index)

    def check(self, state: BlockState) -> None:
        """Refuse a block state that does not start a block of its epoch (an edited or foreign state)."""
        segment = self.segment(state.start)
        first, epoch = self.start(segment), self.epoch(segment)
        offset = state.start - first.start
        if offset % self.block or offset // self.block != state.index or state.index > epoch.blocks:
            raise ValueError(f"block {state.start} (index {state.index}) is not a block start of its epoch")
        base = epoch.full.base if epoch.full else (0,) * len(self.units)
        if any(c - f != state.index * b + e for c, f, b, e in zip(state.consumed, first.consumed, base, state.extras)):
            raise ValueError(f"block {state.start}'s consumed counts do not follow from its epoch's start")


class Walker:
    """Block states along the segments, computed forward from the start of each epoch (each block costs one PD2
    choice) and remembered (the last KEEP blocks met), so the trainer's position, a plan's start and a state_dict never
    walk the same blocks twice."""

    KEEP = 4096

    def __init__(self, segments: Segments):
        self.segments = segments
        self._known: dict[int, tuple[BlockState, Picks]] = {}  # block start -> its state and picks
        self._furthest = -1  # the start of the furthest block remembered

    def at(self, state: BlockState, position: int) -> tuple[BlockState, Picks]:
        """The state and picks of the block holding stream `position`, walking from `state` (a block start at or
        before it) when it lies in the same epoch, else from that epoch's start, or from the furthest block already
        met, when that is nearer."""
        segments = self.segments
        if position < state.start:
            raise ValueError(f"position {position} is before the block starting at {state.start}")
        segment = segments.segment(position)
        first, epoch = segments.start(segment), segments.epoch(segment)
        if segments.segment(state.start) != segment:
            state = first
        target = first.start + min((position - first.start) // epoch.block, epoch.blocks) * epoch.block
        if target in self._known:
            return self._known[target]
        current, picks = state, None
        if state.start < self._furthest <= target and self._furthest in self._known:
            current, picks = self._known[self._furthest]
        while True:
            interleave = epoch.interleave(current.index)
            picks = picks or interleave.picks(current)
            self._remember(current, picks)
            if current.start == target:
                return current, picks
            current, picks = interleave.following(current, picks), None

    def consumed(self, state: BlockState, position: int) -> tuple[int, ...]:
        """Each component's samples consumed before stream `position` (walking from `state`, as `at` does)."""
        block, picks = self.at(state, position)
        return self.segments.interleave(block).consumed_at(block, picks, position - block.start)

    def _remember(self, state: BlockState, picks: Picks) -> None:
        if state.start not in self._known:
            if len(self._known) >= self.KEEP:
                del self._known[next(iter(self._known))]
            self._known[state.start] = (state, picks)
        self._furthest = max(self._furthest, state.start)

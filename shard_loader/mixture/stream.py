"""MixtureStream: what `TokenDataset(url)` serves when the URL names a mixture file. Batches of `input_ids`, `labels`
and `component` drawn from several published datasets by weight, split over ranks and workers, and resumable.

The stream is defined sample by sample (interleave.py picks each sample's component, components.py its place in the
component's own `(seed, epoch)` order), so it is the same for any world size and worker count: rank r takes rows
[r * batch_size, (r + 1) * batch_size) of each global batch of `batch_size * world_size` consecutive samples. A mixture
epoch is `tokens_per_epoch // stride` samples (stride: seq_len unless given), served as whole global batches from where
the previous epoch ended, so nothing is dropped and the stream never skips a sample.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from ..arguments import ArgumentError, integer
from ..cache.download import journal_bound
from ..errors import DiskBudgetError, ShardLoaderError
from ..format import Shard
from ..options import LoaderOptions
from ..state import StateError, own
from ..storage import Store, is_remote, split_manifest_url
from ..stream import EmptyEpochError
from ..stream_protocol import LoaderStats, StreamPlan, StreamPosition
from ..world import Consumer
from .components import ComponentDataset
from .interleave import Segments, Walker, units
from .opening import check_component, component_cache_dir, open_mixture, where
from .plan import MixturePlan
from .serving import Server
from .state import MixturePosition, MixtureState, Series, StreamKey, Weights


def _room_needed(component: ComponentDataset) -> int:
    """Disk a remote component needs: its two largest windows at once (a run of batches may read the end of one window
    and the start of the next) and the journal of a download."""
    sizes = sorted((w.nbytes for w in component.windows), reverse=True)
    return sum(sizes[:2]) + journal_bound(sizes[0])


class MixtureStream:
    """A rank's stream of a published mixture (see TokenDataset for its options): the components' own streams, one
    sample at a time by weight. `block_batches`: the interleave's block, in global batches of the world size the
    stream starts at. `allow_weight_change`: accept a state saved under other weights (or tokens_per_epoch) of the
    same components; each continues from its position."""

    def __init__(self, url: str, options: LoaderOptions, document: tuple[Store, bytes] | None = None):
        o = options
        self.url, self.options, self.world, self.spec = url, o, o.world, o.spec
        self.split, self.batch_size, self.disk_budget = o.split, o.batch_size, o.disk_budget
        window_shards, window_bytes = o.window_shards, o.window_bytes
        self.opened = open_mixture(self.url, o.store_options, document)
        self.mixture = mix = self.opened.file
        self.epoch_samples = mix.epoch_tokens(self.split, self.url) // self.spec.step
        if self.epoch_samples == 0:
            raise EmptyEpochError(
                f"{self.url}: tokens_per_epoch[{self.split!r}] = {mix.tokens_per_epoch[self.split]} is less than one "
                f"sample ({self.spec.step} tokens): an epoch would have 0 batches"
            )
        remote = sum(is_remote(split_manifest_url(u)[0]) for u in self.opened.component_urls)
        if self.disk_budget and remote and not (window_shards or window_bytes):  # two windows fit each one's part
            part = self.disk_budget // remote
            window_bytes = max(1, (part - journal_bound(part)) // 2)
        self.components: list[ComponentDataset] = []
        try:
            for i in range(len(mix.components)):
                self._add_component(i, window_shards, window_bytes)
            self._split_budget()
            self._shard_ends = np.cumsum(np.array([len(c.shards) for c in self.components], dtype=np.int64))
            block = o.block_batches * self.batch_size * self.world.world_size
            self.segments = Segments(
                self._units(), block, 0, (0,) * len(self.components), self._whole_batches(self.epoch_samples)
            )
            self._walker = Walker(self.segments)
            self.position = MixturePosition(0, 0, 0, 0, self.segments.start(0))
        except BaseException:
            self.close()  # the leases of the components opened so far
            raise

    def _add_component(self, i: int, window_shards: int | None, window_bytes: int | None) -> None:
        """Component i: the stream of its pinned manifest, checked against the mixture file."""
        c = self.mixture.components[i]
        options = replace(
            self.options,
            batch_size=1,
            rank=0,
            world_size=1,
            cache_dir=component_cache_dir(self.options.cache_dir, c.name) if self.options.cache_dir else None,
            disk_budget=None,  # _split_budget gives each remote component its part
            window_shards=window_shards,
            window_bytes=window_bytes,
        )
        try:
            component = ComponentDataset(self.opened.component_urls[i], options, pinned=c.manifest.ref)
        except ShardLoaderError as exc:
            raise type(exc)(f"{where(self.opened, i)}: {exc}") from None
        self.components.append(component)
        check_component(self.opened, i, component.opened.manifest)

    def _split_budget(self) -> None:
        """Give each remote component a part of disk_budget in proportion to the room it needs (at least that)."""
        remote = [c for c in self.components if is_remote(c.opened.store.url)]
        if self.disk_budget is None or not remote:
            return
        needs = [_room_needed(c) for c in remote]
        if self.disk_budget < sum(needs):
            parts = ", ".join(
                f"{self.mixture.components[self.components.index(c)].name} {n:,}" for c, n in zip(remote, needs)
            )
            raise DiskBudgetError(
                f"disk budget {self.disk_budget:,} bytes cannot hold the current and the next window of every "
                f"component: the minimum is {sum(needs):,} bytes (two largest windows and a download journal each: "
                f"{parts}); raise disk_budget or make windows smaller"
            )
        for c, need in zip(remote, needs):
            c.disk_budget = self.disk_budget * need // sum(needs)
            c.cache = c.make_cache()  # the factory refuses a share that cannot hold two of its windows

    def _units(self) -> tuple[int, ...]:
        return units([c.weight for c in self.mixture.components])

    def _whole_batches(self, samples: int) -> int:
        """`samples` rounded up to whole global batches of the world size (a mixture epoch serves whole ones)."""
        g = self.batch_size * self.world.world_size
        return -(-samples // g) * g

    def __getstate__(self) -> dict[str, Any]:
        """Workers get the parsed mixture and its components, never open windows, threads or leases."""
        state = dict(self.__dict__)
        state.pop("_server", None)
        state["_walker"] = Walker(self.segments)  # a worker walks from its anchor: the blocks met here stay here
        return state

    # --- the plan and the position ----------------------------------------------------------------------------------

    def _normal(self, position: MixturePosition) -> MixturePosition:
        """The position with the state of the block holding `served` (walked from the one it carries)."""
        block, _ = self._walker.at(position.block, position.served)
        return position if block == position.block else replace(position, block=block)

    def seek(self, position: StreamPosition) -> None:
        self.position = own(position, MixturePosition, "a mixture")

    def plan(self, position: StreamPosition | None = None) -> MixturePlan:
        """This rank's plan for the rest of the mixture epoch from `position` (default: where the stream stands)."""
        p = self._normal(self.position if position is None else own(position, MixturePosition, "a mixture"))
        return MixturePlan(
            p, p.epoch_start + self.epoch_samples, self.batch_size, self.world.rank, self.world.world_size
        )

    def advanced(self, plan: StreamPlan, base: StreamPosition, served: int) -> MixturePosition:
        """The position once `served` batches of `plan` (which starts at `base`) are served."""
        at = own(base, MixturePosition, "a mixture")
        g = own(plan, MixturePlan, "a mixture").global_batch
        return MixturePosition(at.epoch, at.epoch_start, at.served + served * g, at.batches + served, at.block)

    def encode_position(self, position: StreamPosition) -> list[int]:
        return self._normal(own(position, MixturePosition, "a mixture")).to_list()

    def decode_position(self, values: list[int]) -> MixturePosition:
        return MixturePosition.from_list(values, len(self.components))

    def set_epoch(self, epoch: int) -> None:
        """Move to the start of mixture epoch `epoch`: a no-op when the stream is in it already; right after the last
        batch of the epoch before, where that one ended; else `epoch - current` epochs of whole global batches away."""
        p = self.position
        if integer("epoch", epoch, 0) == p.epoch:
            return
        if epoch == p.epoch + 1 and self.plan(p).total_batches == 0:
            start = p.served
        else:
            start = p.epoch_start + (epoch - p.epoch) * self._whole_batches(self.epoch_samples)
        segments = self.segments
        if start < segments.origin:
            raise ArgumentError(
                f"epoch {epoch} would start at sample {start:,} of the stream, before sample {segments.origin:,} "
                f"where the current weights took over (a weight change); set_epoch cannot go back past it"
            )
        block, _ = self._walker.at(segments.start(segments.segment(start)) if start < p.block.start else p.block, start)
        self.position = MixturePosition(epoch, start, start, 0, block)

    def next_window(self) -> None:
        raise ArgumentError(
            "next_window() moves a dataset to its next window; a mixture's components move through windows of their own"
        )

    def stream_key(self) -> StreamKey:
        mix, windows = self.mixture.components, tuple(c.stream_key().windows for c in self.components)
        names, versions = tuple(c.name for c in mix), tuple(c.version for c in mix)
        return StreamKey(self.mixture.name, *self.options.stream_shape(), names, versions, windows)

    def _weights(self) -> Weights:
        mix = self.mixture
        return Weights(mix.version, tuple(c.weight for c in mix.components), mix.tokens_per_epoch[self.split])

    def state_dict(self) -> dict[str, Any]:
        """Where the stream stands (the same on every rank at the same step), and what it must be restored onto."""
        p = self._normal(self.position)
        consumed = self._walker.consumed(p.block, p.served)
        epochs = tuple(k // c.samples for k, c in zip(consumed, self.components))
        seg = self.segments
        series = Series(seg.origin, seg.head.length if seg.head else 0, seg.length, seg.consumed)
        return MixtureState(
            self.stream_key(), self._weights(), seg.block, series, self.world.world_size, p, consumed, epochs
        ).to_dict()

    def parse_state(self, state: dict[str, Any]) -> MixtureState:
        return MixtureState.from_dict(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved state, at any world size. A state of another mixture version is refused naming what
        changed, unless allow_weight_change: then the new weights take over at the saved sample, each component
        continuing from its own position (so none repeats a sample before its epoch ends)."""
        saved = self.parse_state(state)
        key = self.stream_key()
        saved.check(key)
        changed = saved.weight_change(self._weights(), key.components)
        if changed and not self.options.allow_weight_change:
            raise StateError(
                f"state_dict was saved for mixture version {saved.weights.mixture_version!r} with {changed} "
                f"(version {self.mixture.version!r}); pass allow_weight_change=True to continue each component from "
                "its own position"
            )
        p = saved.position
        if not p.block.start <= p.served or not p.epoch_start <= p.served:
            raise StateError(
                f"state_dict position (served {p.served}, epoch_start {p.epoch_start}, block {p.block.start}) is "
                "inconsistent"
            )
        if changed:  # the new weights take over at `served`: the epoch under way ends where it would have
            rest = max(0, p.epoch_start + self.epoch_samples - p.served)
            length, first = self._whole_batches(self.epoch_samples), self._whole_batches(rest)
            segments = Segments(self._units(), saved.block_samples, p.served, saved.consumed, length, first)
            p = replace(p, block=segments.start(0))
        else:
            s = saved.series
            segments = Segments(self._units(), saved.block_samples, s.origin, s.consumed, s.length, s.first or None)
        walker = Walker(segments)
        try:
            segments.check(p.block)
            consumed = walker.consumed(p.block, p.served)
        except ValueError as exc:
            raise StateError(f"state_dict block does not lie on its stream ({exc}): the state was edited") from None
        if not changed and consumed != saved.consumed:
            raise StateError(
                "state_dict consumed does not match its block: the state was edited or belongs to another stream"
            )
        self.segments, self._walker, self.position = segments, walker, p

    # --- serving ------------------------------------------------------------------------------------------------

    def serve(
        self, plan: StreamPlan, consumer: Consumer = Consumer()
    ) -> Iterator[tuple[int, dict[int, Shard], np.ndarray, np.ndarray]]:
        """(first batch index from the plan's start, open shards by global id, shard ids, token starts) of each run of
        consecutive batches `consumer` serves; a run's rows are whole batches, in order. Served to its end, a plan
        leaves the components' windows open for the next one (the next epoch goes on from there); stopped, it closes
        them."""
        plan = own(plan, MixturePlan, "a mixture")
        server = self.__dict__.get("_server")
        if server is None or not server.follows(self.segments, consumer, plan):
            if server is not None:
                server.close()
            server = self._server = Server(
                self.segments, self.components, [self.shard_offset(i) for i in range(len(self.components))], consumer
            )
        return server.serve(plan)

    def components_of(self, shard_ids: np.ndarray) -> np.ndarray:
        """The component of each row, from its global shard id."""
        return self._shard_ends.searchsorted(shard_ids, side="right")

    def shard_offset(self, component: int) -> int:
        """The global id of a component's first shard."""
        return int(self._shard_ends[component - 1]) if component else 0

    @property
    def stats(self) -> LoaderStats:
        return LoaderStats({c.name: comp.cache.stats for c, comp in zip(self.mixture.components, self.components)})

    def close(self) -> None:
        server = self.__dict__.pop("_server", None)
        if server is not None:
            server.close()
        for component in self.components:
            component.close()

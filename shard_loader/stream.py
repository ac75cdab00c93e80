"""One split of one published dataset as a rank's stream: windows rotated through a bounded cache, the (seed, epoch)
plan of each epoch, and the resumable position in it. A TokenDataset serves it alone (a plain dataset); a mixture
serves several, one per component."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Generator
from dataclasses import replace
from typing import Any

import numpy as np

from .arguments import integer
from .cache.rotation import WindowCache, window_cache
from .errors import ShardLoaderError
from .format import FileRef, Shard
from .opening import OpenedManifest, open_manifest
from .options import LoaderOptions
from .sampler import Cursor, EpochPlan, Window, make_windows, sample_counts
from .state import LoaderState, Position, StateError, StreamKey, own
from .storage import Store, open_store, split_manifest_url
from .storage.reader_leases import hold_reader_lease
from .stream_protocol import LoaderStats, StreamPlan, StreamPosition
from .world import Consumer


class EmptyEpochError(ShardLoaderError):
    """The options leave no batch to serve in an epoch."""


def _layout_digest(windows: list[Window]) -> str:
    """A short name of the window layout: states restore only onto the same layout."""
    return hashlib.sha256(json.dumps([w.shards for w in windows]).encode()).hexdigest()[:16]


class DatasetStream:
    """A rank's stream of one split of a published dataset (its manifest's bytes checked against `pinned` when a
    mixture names it); `document` is (store, manifest bytes) when the caller read them already."""

    def __init__(
        self,
        url: str,
        options: LoaderOptions,
        document: tuple[Store, bytes] | None = None,
        pinned: FileRef | None = None,
    ):
        o = options
        self.url, self.options, self.world, self.spec = url, o, o.world, o.spec
        self.split, self.batch_size, self.seed = o.split, o.batch_size, o.seed
        self.disk_budget, self.keep_files, self.store_options = o.disk_budget, o.keep_files, o.store_options
        self.opened = open_manifest(url, [o.split], o.cache_dir, pinned, document, **o.store_options)
        # a remote store without a cache_dir caches under ~/.cache/shard_loader
        self.cache_dir = self.opened.cache_dir(o.cache_dir)
        self.shards = self.opened.manifest.split(o.split).shards
        if not self.shards:
            raise EmptyEpochError(f"{url}: split {o.split!r} has no shards")
        window_shards = o.window_shards
        by_bytes = o.window_bytes or (o.disk_budget // 2 if o.disk_budget and not window_shards else None)
        self.windows = make_windows(self.shards.nbytes.tolist(), window_shards, by_bytes)
        self.window_options = (window_shards, by_bytes, o.disk_budget)  # recorded in a state beside the layout digest
        self.shard_samples, self.window_totals = sample_counts(self.spec, self.shards.tokens, self.windows)
        self.position = Position()
        self.cache = self.make_cache()
        self._check_not_empty()
        # gc keeps what this process reads; taken last, so an opening refused above holds none (close gives it back)
        self.lease = hold_reader_lease(self.opened.store, self.opened.manifest.version, self.opened.key)

    def make_cache(self) -> WindowCache:
        o = self.opened
        plan = self.plan(Position())
        return window_cache(o.store, o.manifest, self.shards, plan, self.cache_dir, self.disk_budget, self.keep_files)

    def __getstate__(self) -> dict[str, Any]:
        """Workers get the resolved world and the parsed manifest, never a live store connection or thread."""
        state = dict(self.__dict__)
        state["opened"] = (self.opened.manifest, self.opened.key)
        del state["cache"]
        state["lease"] = None  # the opening process holds the lease; workers never renew or release it
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        manifest, key = state.pop("opened")
        self.__dict__.update(state)
        store = open_store(split_manifest_url(self.url)[0], **self.store_options)
        self.opened = OpenedManifest(manifest=manifest, store=store, key=key)
        self.cache = self.make_cache()

    def _check_not_empty(self) -> None:
        """Refuse options that give an epoch of 0 batches, saying which limit bites."""
        plan = self.plan(Position())
        if plan.total_batches:
            return
        longest = int(self.shards.tokens.max())
        if longest < self.spec.span:
            raise EmptyEpochError(
                f"seq_len {self.spec.seq_len} + label_shift {self.spec.label_shift} needs {self.spec.span} tokens per "
                f"sample, but the longest shard of split {self.split!r} has {longest}: an epoch would have 0 batches"
            )
        most = max(plan.window_samples(w) for w in self.windows)
        raise EmptyEpochError(
            f"the largest window holds {most} samples, fewer than batch_size {self.batch_size} x world_size "
            f"{self.world.world_size}: an epoch would have 0 batches; use larger windows (window_shards/window_bytes) "
            "or a smaller batch_size"
        )

    def seek(self, position: StreamPosition) -> None:
        self.position = own(position, Position, "a dataset")

    def plan(self, position: StreamPosition | None = None) -> EpochPlan:
        """This rank's plan for the rest of the epoch from `position` (default: where the stream stands)."""
        p = self.position if position is None else own(position, Position, "a dataset")
        return EpochPlan(
            self.shard_samples,
            self.window_totals,
            tuple(self.windows),
            self.spec,
            self.seed,
            p.epoch,
            self.batch_size,
            self.world.rank,
            self.world.world_size,
            p.cursor,
        )

    def encode_position(self, position: StreamPosition) -> list[int]:
        """A position as plain ints (the torch path shares it with workers in one small tensor)."""
        position = own(position, Position, "a dataset")
        return [position.epoch, position.cursor.window, position.cursor.sample, position.batches]

    def decode_position(self, values: list[int]) -> Position:
        epoch, window, sample, batches = (int(v) for v in values)
        return Position(epoch, Cursor(window, sample), batches)

    def set_epoch(self, epoch: int) -> None:
        if integer("epoch", epoch, 0) != self.position.epoch:
            self.position = Position(epoch)

    def stream_key(self) -> StreamKey:
        manifest = self.opened.manifest
        return StreamKey(
            manifest.dataset,
            manifest.version,
            *self.options.stream_shape(),
            _layout_digest(self.windows),
            *self.window_options,
        )

    def state_dict(self) -> dict[str, Any]:
        return LoaderState(self.stream_key(), self.world.world_size, self.position).to_dict()

    def parse_state(self, state: dict[str, Any]) -> LoaderState:
        return LoaderState.from_dict(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved state; with another world size, the rest of the interrupted window is dealt anew."""
        saved = self.parse_state(state)
        saved.check(self.stream_key())
        self._check_cursor(saved.position)
        self.position = saved.position

    def _check_cursor(self, position: Position) -> None:
        """Refuse a cursor outside the epoch it names (a hand-edited or corrupt state)."""
        c, plan = position.cursor, self.plan(position)
        inside = 0 <= c.window <= len(self.windows) and c.sample >= 0 and position.batches >= 0
        if inside and c.window < len(self.windows):
            inside = c.sample <= plan.window_samples(self.windows[plan.order[c.window]])
        if not inside:
            raise StateError(
                f"state_dict position (window {c.window}, sample {c.sample}, batches {position.batches}) is outside "
                "the epoch"
            )

    def advanced(self, plan: StreamPlan, base: StreamPosition, served: int) -> Position:
        """The position once `served` batches of `plan` (which starts at `base`) are served."""
        at = own(base, Position, "a dataset")
        return replace(at, cursor=own(plan, EpochPlan, "a dataset").cursor_after(served), batches=at.batches + served)

    def next_window(self) -> None:
        cursor = self.position.cursor
        if cursor.sample:
            rest = self.plan().segments[0].batches
            self.position = Position(self.position.epoch, Cursor(cursor.window + 1, 0), self.position.batches + rest)

    def components_of(self, shard_ids: np.ndarray) -> np.ndarray:
        """Each row's component: 0 for every row of a dataset."""
        return np.zeros(len(shard_ids), dtype=np.int64)

    def serve(
        self, plan: StreamPlan, consumer: Consumer = Consumer()
    ) -> Generator[tuple[int, dict[int, Shard], np.ndarray, np.ndarray], None, None]:
        """(first batch index from the plan's start, open shards, shard ids, token starts) of each run of consecutive
        batches `consumer` serves (see Consumer.runs); a run's rows are whole batches, in order."""
        plan = own(plan, EpochPlan, "a dataset")
        firsts = np.concatenate(([0], np.cumsum(plan.batches_per_window)[:-1])).tolist()
        mine = [(k, s) for k, s in zip(firsts, plan.segments) if next(consumer.runs(k, s.batches), None)]  # with a run
        self.cache.follow(plan)
        try:
            for n, (first, segment) in enumerate(mine):
                shards = self.cache.acquire(segment)
                nxt = mine[n + 1][1] if n + 1 < len(mine) else None
                if nxt is not None:
                    self.cache.prefetch(nxt)
                shard_ids, starts = plan.rows(segment)
                for start, stop in consumer.runs(first, segment.batches):
                    rows = slice((start - first) * plan.batch_size, (stop - first) * plan.batch_size)
                    yield start, shards, shard_ids[rows], starts[rows]
                del shards
                self.cache.release(segment.window, keep=set(nxt.window.shards) if nxt is not None else set())
        finally:
            self.cache.close()

    @property
    def stats(self) -> LoaderStats:
        """What the window cache waited for and fetched."""
        return LoaderStats({self.opened.manifest.dataset: self.cache.stats})

    def close(self) -> None:
        self.cache.close()
        if self.lease is not None:
            self.lease.release()

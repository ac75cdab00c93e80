"""TokenDataset: fixed-length token batches from one split, rotated through a bounded cache,
split over ranks and workers, deterministic from (seed, epoch), and resumable."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Generator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .arguments import flag, optional_integer, optional_mapping, optional_path, integer, size_in_bytes, text
from .errors import MissingFileError, NotFoundError, ShardLoaderError
from .format import Shard
from .opening import OpenedManifest, document_format, open_manifest, read_document
from .cache.rotation import WindowCache, window_cache
from .cache.window_files import RotationStats
from .sampler import Cursor, EpochPlan, SampleSpec, Window, make_windows, sample_counts
from .state import LoaderState, Position, StateError, StreamKey
from .storage import Store, open_store, split_manifest_url
from .storage.reader_leases import collected_error, hold_reader_lease
from .world import Consumer, resolve_world


class EmptyEpochError(ShardLoaderError):
    """The options leave no batch to serve in an epoch."""


def _layout_digest(windows: list[Window]) -> str:
    """A short name of the window layout: states restore only onto the same layout."""
    return hashlib.sha256(json.dumps([w.shards for w in windows]).encode()).hexdigest()[:16]


class TokenDataset:
    """Batches of `input_ids` and `labels` (int64, shape (batch_size, seq_len)) and `component` (int64, (batch_size,):
    0 here; each row's component in a mixture) from one split. A mixture file's URL gives a MixtureDataset.

    Iterating yields the rest of the current epoch of this rank's batches; `set_epoch` moves to
    another. `state_dict()` after k batches, loaded into a new dataset (with any world size),
    continues with the next batch.
    """

    _formats: dict[str, type[TokenDataset]] = {}  # other published documents a URL may name (a mixture), by `format`
    _document: tuple[Store, bytes]  # set by __new__ when it read the manifest; __init__ pops it

    def __init_subclass__(cls, serves: str | None = None, **kwargs: Any) -> None:
        """A subclass declared with `serves="<format>"` is what `TokenDataset(url)` gives for a document of that
        format."""
        super().__init_subclass__(**kwargs)
        if serves is not None:
            TokenDataset._formats[serves] = cls

    def __new__(cls, url: str | None = None, *args: Any, **options: Any) -> TokenDataset:
        """`TokenDataset(url)` reads the document at `url` once and dispatches on its `format` (never its path): a
        mixture file gives a MixtureDataset; a dataset manifest's store and bytes are kept for __init__ to parse."""
        store_options = options.get("store_options")
        if (
            cls is not TokenDataset
            or not isinstance(url, str)
            or not url
            or not isinstance(store_options, (dict, type(None)))
        ):
            return super().__new__(cls)
        try:
            document = read_document(url, store_options)
        except ShardLoaderError:  # unreadable: __init__ reports it after checking the arguments
            return super().__new__(cls)
        fmt = document_format(document[1])
        kind = cls._formats.get(fmt) if fmt is not None else None
        if kind is not None:
            return super().__new__(kind)
        obj = super().__new__(cls)
        obj._document = document
        return obj

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
        self.url, self.split = text("url", url), text("split", split)
        self.batch_size, self.seed = integer("batch_size", batch_size, 1), integer("seed", seed, 0)
        self.spec = SampleSpec(seq_len, label_shift, stride)
        self.world = resolve_world(rank, world_size)
        self.cache_dir = optional_path("cache_dir", cache_dir)
        self.disk_budget = size_in_bytes("disk_budget", disk_budget)
        window_shards = optional_integer("window_shards", window_shards, 1)
        window_bytes = size_in_bytes("window_bytes", window_bytes)
        self.keep_files, self.position_ids = flag("keep_files", keep_files), flag("position_ids", position_ids)
        self.store_options = optional_mapping("store_options", store_options)
        self.opened = self._open_manifest()
        self.lease = hold_reader_lease(
            self.opened.store, self.opened.manifest.version, self.opened.key
        )  # gc keeps what this process reads
        self.cache_dir = self.opened.cache_dir(
            self.cache_dir
        )  # a remote store without one caches under ~/.cache/shard_loader
        self.shards = self.opened.manifest.split(split).shards
        if not self.shards:
            raise EmptyEpochError(f"{url}: split {split!r} has no shards")
        by_bytes = window_bytes or (self.disk_budget // 2 if self.disk_budget and not window_shards else None)
        self.windows = make_windows(self.shards.nbytes.tolist(), window_shards, by_bytes)
        self.window_options = (
            window_shards,
            by_bytes,
            self.disk_budget,
        )  # recorded in a state beside the layout's digest
        self.shard_samples, self.window_totals = sample_counts(self.spec, self.shards.tokens, self.windows)
        self.position = Position()
        self.cache = self._make_cache()
        self._check_not_empty()

    def _open_manifest(self) -> OpenedManifest:
        """The manifest with this split's shard table (a mixture's component also checks the pinned bytes)."""
        return open_manifest(
            self.url, [self.split], self.cache_dir, document=self.__dict__.pop("_document", None), **self.store_options
        )

    def _make_cache(self) -> WindowCache:
        return window_cache(
            self.opened, self.shards, self.plan(Position()), self.cache_dir, self.disk_budget, self.keep_files
        )

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
        self.cache = self._make_cache()

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

    @property
    def rank(self) -> int:
        return self.world.rank

    @property
    def world_size(self) -> int:
        return self.world.world_size

    @property
    def epoch(self) -> int:
        return self.position.epoch

    def plan(self, position: Position | None = None) -> EpochPlan:
        """This rank's plan for the rest of the epoch from `position` (default: where the stream stands)."""
        p = self.position if position is None else position
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

    def __len__(self) -> int:
        """Batches this rank serves in the current epoch (over all of its workers)."""
        return self.position.batches + self.plan().total_batches

    def encode_position(self, position: Position) -> list[int]:
        """A position as plain ints (the torch path shares it with workers in one small tensor)."""
        return [position.epoch, position.cursor.window, position.cursor.sample, position.batches]

    def decode_position(self, values: list[int]) -> Position:
        epoch, window, sample, batches = (int(v) for v in values)
        return Position(epoch, Cursor(window, sample), batches)

    def set_epoch(self, epoch: int) -> None:
        """Move to the start of `epoch`; a no-op when the stream is already in it, so a restored position survives."""
        if integer("epoch", epoch, 0) != self.position.epoch:
            self.position = Position(epoch)

    def stream_key(self) -> StreamKey:
        manifest = self.opened.manifest
        return StreamKey(
            manifest.dataset,
            manifest.version,
            self.split,
            self.spec.seq_len,
            self.batch_size,
            self.spec.step,
            self.spec.label_shift,
            self.seed,
            _layout_digest(self.windows),
            *self.window_options,
        )

    def state_dict(self) -> dict[str, Any]:
        """Where the stream stands (the same on every rank at the same step), and what it must be restored onto."""
        return LoaderState(self.stream_key(), self.world.world_size, self.position).to_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved state; with another world size, the rest of the interrupted window is dealt anew."""
        saved = LoaderState.from_dict(state)
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

    def advanced(self, plan: EpochPlan, base: Position, served: int) -> Position:
        """The position once `served` batches of `plan` (which starts at `base`) are served."""
        return replace(base, cursor=plan.cursor_after(served), batches=base.batches + served)

    def next_window(self) -> None:
        """Finish the current window now (for trainers that move in fixed windows): the rest of its batches are skipped
        and the stream continues with the next window's first batch; call it on every rank at the same step."""
        cursor = self.position.cursor
        if cursor.sample:
            rest = self.plan().segments[0].batches
            self.position = Position(self.position.epoch, Cursor(cursor.window + 1, 0), self.position.batches + rest)

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

    def components_of(self, shard_ids: np.ndarray) -> np.ndarray:
        """Each row's component in a mixture (int64): 0 for every row of a dataset."""
        return np.zeros(len(shard_ids), dtype=np.int64)

    def serve(
        self, plan: EpochPlan, consumer: Consumer = Consumer()
    ) -> Generator[tuple[int, dict[int, Shard], np.ndarray, np.ndarray], None, None]:
        """(first batch index from the plan's start, open shards, shard ids, token starts) of each run of consecutive
        batches `consumer` serves (see Consumer.runs); a run's rows are whole batches, in order."""
        firsts = np.concatenate(([0], np.cumsum(plan.batches_per_window)[:-1])).tolist()
        mine = [
            (k, s) for k, s in zip(firsts, plan.segments) if next(consumer.runs(k, s.batches), None)
        ]  # segments with a run
        self.cache.follow(plan)
        try:
            for n, (first, segment) in enumerate(mine):
                shards = self.cache.acquire(segment)
                nxt = mine[n + 1][1] if n + 1 < len(mine) else None
                if nxt is not None:
                    self.cache.prefetch(nxt)
                shard_ids, starts = plan.rows(segment)
                for start, stop in consumer.runs(first, segment.batches):
                    rows = slice((start - first) * self.batch_size, (stop - first) * self.batch_size)
                    yield start, shards, shard_ids[rows], starts[rows]
                del shards
                self.cache.release(segment.window, keep=set(nxt.window.shards) if nxt is not None else set())
        finally:
            self.cache.close()

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        m = self.spec.label_shift
        while True:
            base = self.position
            plan = self.plan(base)
            with contextlib.closing(self.serve(plan)) as batches, self._collected():
                for k, shards, shard_ids, starts in batches:
                    buf = np.empty((len(starts), self.spec.span), dtype=np.int64)
                    self.fill(buf, shards, shard_ids, starts)
                    batch = {"input_ids": buf[:, :-m], "labels": buf[:, m:], "component": self.components_of(shard_ids)}
                    if self.position_ids:
                        batch["position_ids"] = self.positions(shards, shard_ids, starts)
                    del shards  # a released window must not stay mapped here while the next one is awaited
                    self.position = moved = self.advanced(plan, base, k + 1)
                    yield batch
                    if self.position is not moved:  # next_window(), set_epoch() or load_state_dict() moved the stream
                        break
                else:
                    return

    @contextlib.contextmanager
    def _collected(self) -> Iterator[None]:
        """A shard gone mid-epoch is named as gc's collection of this version when it was (a reader without a lease)."""
        try:
            yield
        except (NotFoundError, MissingFileError) as exc:
            raise collected_error(self.opened.store, self.opened.manifest.version, exc) from None

    @property
    def stats(self) -> RotationStats:
        """What the window cache waited for and fetched."""
        return self.cache.stats

    def close(self) -> None:
        self.cache.close()
        if self.lease is not None:
            self.lease.release()


def iter_sequences(
    url: str, split: str = "train", seq_len: int = 2048, batch_size: int = 8, **options: Any
) -> Iterator[dict[str, np.ndarray]]:
    """The simplest read path: one epoch of batches, without shuffling the windows' order by hand."""
    return iter(TokenDataset(url, split=split, seq_len=seq_len, batch_size=batch_size, **options))

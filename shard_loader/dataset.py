"""TokenDataset: fixed-length token batches from one split of a published dataset or mixture, split over ranks and
workers, deterministic from (seed, epoch), and resumable. The URL's document says which stream serves it: a dataset's
(stream.py) or a mixture's of several datasets (mixture/stream.py); everything else is the same for both."""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Iterator
from dataclasses import fields
from typing import Any

import numpy as np

from .arguments import ArgumentError, text
from .cache.rotation import WindowCache
from .errors import MissingFileError, NotFoundError, ShardFormatError
from .format import MIXTURE_FORMAT, MixtureFile, Shard, ShardTable, mixture_version_key, versioned_key
from .mixture.opening import store_root
from .mixture.stream import MixtureStream
from .opening import OpenedManifest, document_format, read_document
from .options import LoaderOptions
from .sampler import Window
from .storage.reader_leases import collected_error
from .stream import DatasetStream, EmptyEpochError
from .stream_protocol import LoaderStats, Runs, SavedState, StateDict, Stream, StreamPlan, StreamPosition
from .world import Consumer

__all__ = ["EmptyEpochError", "TokenDataset", "iter_sequences"]


class TokenDataset:
    """Batches of `input_ids` and `labels` (int64, shape (batch_size, seq_len)) and `component` (int64, (batch_size,):
    each row's index in a mixture file's `components`; 0 for a dataset) from one split of a dataset or a mixture.

    Iterating yields the rest of the current epoch of this rank's batches; `set_epoch` moves to another.
    `state_dict()` after k batches, loaded into a new dataset (with any world size), continues with the next batch.
    A mixture also takes `block_batches` (default 64: every run of that many global batches within a mixture epoch
    holds floor or ceil of each component's share) and `allow_weight_change` (accept a state saved under other
    weights of the same components; each continues from its own position).
    """

    def __init__(self, url: str, **options: Any):
        self.url = text("url", url)
        unknown = sorted(set(options) - {f.name for f in fields(LoaderOptions) if f.init})
        if unknown:
            raise ArgumentError(f"{unknown[0]!r} is not an option of TokenDataset (see shard_loader.options)")
        self.options = o = LoaderOptions(**options)
        self.split, self.batch_size, self.seed, self.spec = o.split, o.batch_size, o.seed, o.spec
        self.world, self.position_ids = o.world, o.position_ids
        store, raw = read_document(self.url, o.store_options)
        # the stream the document names, the mixture file (None: a dataset) and the datasets' streams, in its order
        if document_format(raw) == MIXTURE_FORMAT:
            mixture = MixtureStream(self.url, o, (store, raw))
            self.stream: Stream = mixture
            self.mixture: MixtureFile | None = mixture.mixture
            self.components: list[DatasetStream] = [*mixture.components]
        else:
            self.stream = one = DatasetStream(self.url, o, (store, raw))
            self.mixture, self.components = None, [one]
        self.vocab_size = self.components[0].opened.manifest.tokenizer.vocab_size  # a mixture's components share it
        self.placed = False  # set_epoch or load_state_dict placed the stream where it stands (see onward)

    @property
    def version_url(self) -> str:
        """The URL of the version opened, which stays when the live one moves on: a dataset's manifests/<version>.json,
        a mixture's mixtures/<name>/<version>.json (or its URL, when the file sits outside a store's mixtures/)."""
        if self.mixture is None:
            return posixpath.join(self.opened.store.url, versioned_key(self.opened.manifest.version))
        root = store_root(self.url, self.mixture.name)
        key = mixture_version_key(self.mixture.name, self.mixture.version)
        return self.url if root is None else posixpath.join(root, key)

    # --- a dataset's one component ---------------------------------------------------------------------------------

    def _one(self) -> DatasetStream:
        if self.mixture is not None:
            raise ArgumentError(f"{self.url} is a mixture: its windows, shards and cache are each component's")
        return self.components[0]

    @property
    def opened(self) -> OpenedManifest:
        return self._one().opened

    @property
    def shards(self) -> ShardTable:
        return self._one().shards

    @property
    def windows(self) -> list[Window]:
        return self._one().windows

    @property
    def cache(self) -> WindowCache:
        return self._one().cache

    # --- the position, the plan and the state ----------------------------------------------------------------------

    @property
    def position(self) -> StreamPosition:
        return self.stream.position

    @position.setter
    def position(self, position: StreamPosition) -> None:
        self.stream.seek(position)

    @property
    def rank(self) -> int:
        return self.world.rank

    @property
    def world_size(self) -> int:
        return self.world.world_size

    def plan(self, position: StreamPosition | None = None) -> StreamPlan:
        """This rank's plan for the rest of the epoch from `position` (default: where the stream stands)."""
        return self.stream.plan(position)

    def advanced(self, plan: StreamPlan, base: StreamPosition, served: int) -> StreamPosition:
        """The position once `served` batches of `plan` (which starts at `base`) are served."""
        return self.stream.advanced(plan, base, served)

    def encode_position(self, position: StreamPosition) -> list[int]:
        """A position as plain ints (the torch path shares it with workers in one small tensor)."""
        return self.stream.encode_position(position)

    def decode_position(self, values: list[int]) -> StreamPosition:
        return self.stream.decode_position(values)

    def __len__(self) -> int:
        """Batches this rank serves in the current epoch (over all of its workers)."""
        return self.position.batches + self.plan().total_batches

    def set_epoch(self, epoch: int) -> None:
        """Move to the start of `epoch`; a no-op when the stream is already in it, so a restored position survives."""
        self.stream.set_epoch(epoch)
        self.placed = True

    def onward(self) -> None:
        """Start a loop: a stream that loops served to its epoch's end moves to the next epoch's start, so a loop
        started again without set_epoch serves the next epoch (as with a DistributedSampler); one placed there by
        set_epoch or load_state_dict stays (its epoch is finished)."""
        if not self.placed and not self.plan().total_batches:
            self.stream.set_epoch(int(self.position.epoch) + 1)
        self.placed = False

    def next_window(self) -> None:
        """Finish the current window now (for trainers that move in fixed windows): the rest of its batches are skipped
        and the stream continues with the next window's first batch; call it on every rank at the same step."""
        self.stream.next_window()

    def stream_key(self) -> object:
        return self.stream.stream_key()

    def state_dict(self) -> StateDict:
        """Where the stream stands (the same on every rank at the same step), and what it must be restored onto."""
        return self.stream.state_dict()

    def parse_state(self, state: StateDict) -> SavedState:
        """A saved state as a record (world size, position, and `check(stream_key)`), not yet checked against this
        stream: the torch side reads every state, and its workers', through this and load_state_dict."""
        return self.stream.parse_state(state)

    def load_state_dict(self, state: StateDict) -> None:
        """Continue from a saved state, at any world size."""
        self.stream.load_state_dict(state)
        self.placed = True

    # --- serving ---------------------------------------------------------------------------------------------------

    def serve(self, plan: StreamPlan, consumer: Consumer = Consumer()) -> Runs:
        """(first batch index from the plan's start, open shards by id, shard ids, token starts) of each run of
        consecutive batches `consumer` serves (see Consumer.runs); a run's rows are whole batches, in order."""
        return self.stream.serve(plan, consumer)

    def components_of(self, shard_ids: np.ndarray) -> np.ndarray:
        """Each row's component (int64)."""
        return self.stream.components_of(shard_ids)

    def fill(self, out: np.ndarray, shards: dict[int, Shard], shard_ids: np.ndarray, starts: np.ndarray) -> None:
        """Copy each sample's `span` tokens into the rows of `out` (int64), converting on the way; an id not below the
        manifest's vocab_size is refused naming its shard (an embedding lookup would fail far from the cause)."""
        span = self.spec.span
        for row, (i, s) in enumerate(zip(shard_ids.tolist(), starts.tolist())):
            out[row] = shards[i].tokens[s : s + span]
        if len(out) and (rows := np.flatnonzero(out.max(axis=1) >= self.vocab_size)).size:
            row = int(rows[0])
            raise ShardFormatError(
                f"{shards[int(shard_ids[row])].entry.npy.key}: token id {int(out[row].max())} is not below the "
                f"manifest's tokenizer.vocab_size {self.vocab_size}; the manifest does not describe its tokenizer"
            )

    def positions(self, shards: dict[int, Shard], shard_ids: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Each input token's position within its document, from the shard's `.bin` offsets."""
        out = np.empty((len(starts), self.spec.seq_len), dtype=np.int64)
        for row, (i, s) in enumerate(zip(shard_ids.tolist(), starts.tolist())):
            idx = np.arange(s, s + self.spec.seq_len)
            offsets = shards[i].offsets
            out[row] = idx - offsets[np.searchsorted(offsets, idx, side="right") - 1]
        return out

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        m = self.spec.label_shift
        self.onward()
        while True:
            base = self.position
            plan = self.plan(base)
            with contextlib.closing(self.serve(plan)) as batches, self._collected():  # type: ignore[type-var]
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
            if self.mixture is not None:  # a mixture's components say which one is gone
                raise
            raise collected_error(self.opened.store, self.opened.manifest.version, exc) from None

    @property
    def stats(self) -> LoaderStats:
        """What each component's window cache waited for and fetched (by name), and in all."""
        return self.stream.stats

    def close(self) -> None:
        """Stop the window cache and give back the reader lease (else it is removed at interpreter exit)."""
        self.stream.close()

    def __enter__(self) -> TokenDataset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_sequences(
    url: str, split: str = "train", seq_len: int = 2048, batch_size: int = 8, **options: Any
) -> Iterator[dict[str, np.ndarray]]:
    """The simplest read path: one epoch of batches, without shuffling the windows' order by hand."""
    return iter(TokenDataset(url, split=split, seq_len=seq_len, batch_size=batch_size, **options))

"""The seam under TokenDataset: the `Stream` protocol that a dataset's stream (stream.py, `DatasetStream`) and a
mixture's (mixture/stream.py, `MixtureStream`) implement. TokenDataset, and the torch side through it, hold positions,
plans and saved states only as the protocols here; a stream takes back only its own (`state.own` refuses another's).
The two streams differ in one rule: a dataset drops each window's remainder, a mixture serves it
(tests/loader/test_stream_rule.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import Field
from typing import Any, ClassVar, Protocol

import numpy as np

from .cache.window_files import RotationStats
from .format import Shard
from .world import Consumer

Runs = Iterator[tuple[int, dict[int, Shard], np.ndarray, np.ndarray]]  # (first batch, open shards, shard ids, starts)
StateDict = dict[str, Any]  # a saved state as plain values (JSON, torch.save): parsed by the stream that reads it


class StreamPosition(Protocol):
    """Where a rank's stream stands, as much as its readers see: the epoch, and the rank's batches served in it."""

    @property
    def epoch(self) -> int: ...

    @property
    def batches(self) -> int: ...


class StreamPlan(Protocol):
    """A rank's plan for the rest of an epoch: a frozen dataclass, `dataclasses.replace`d for another rank or size."""

    __dataclass_fields__: ClassVar[dict[str, Field[object]]]

    @property
    def batch_size(self) -> int: ...

    @property
    def global_batch(self) -> int: ...

    @property
    def total_batches(self) -> int: ...


class SavedState(Protocol):
    """A saved state parsed, not yet checked against a stream."""

    @property
    def world_size(self) -> int: ...

    def check(self, key: object) -> None:
        """Refuse the state unless `key` (a stream's `stream_key()`) is the one it was saved for."""


class LoaderStats(dict[str, RotationStats]):
    """What each component's (a dataset: its one) window cache waited for and fetched, by name; attributes sum them."""

    @property
    def waits(self) -> list[float]:
        return [w for s in self.values() for w in s.waits]

    @property
    def windows_fetched(self) -> int:
        return sum(s.windows_fetched for s in self.values())

    @property
    def max_cache_bytes(self) -> int:
        return sum(s.max_cache_bytes for s in self.values())

    @property
    def paced_s(self) -> float:
        return sum(s.paced_s for s in self.values())


class Stream(Protocol):
    """A rank's stream of batches, resumable: what TokenDataset serves, whichever document its URL names."""

    @property
    def position(self) -> StreamPosition: ...

    def seek(self, position: StreamPosition) -> None:
        """Stand at `position` (one of this stream's own)."""

    def plan(self, position: StreamPosition | None = None) -> StreamPlan: ...

    def advanced(self, plan: StreamPlan, base: StreamPosition, served: int) -> StreamPosition: ...

    def encode_position(self, position: StreamPosition) -> list[int]: ...

    def decode_position(self, values: list[int]) -> StreamPosition: ...

    def set_epoch(self, epoch: int) -> None: ...

    def next_window(self) -> None: ...

    def stream_key(self) -> object: ...

    def state_dict(self) -> StateDict: ...

    def parse_state(self, state: StateDict) -> SavedState: ...

    def load_state_dict(self, state: StateDict) -> None: ...

    def serve(self, plan: StreamPlan, consumer: Consumer = ...) -> Runs: ...

    def components_of(self, shard_ids: np.ndarray) -> np.ndarray: ...

    @property
    def stats(self) -> LoaderStats: ...

    def close(self) -> None: ...

"""The envelope every saved state goes through (`sealed`, `opened`), and a dataset's position and what it must match.

A state holds a global position (epoch, window of the visiting order, samples of that window
already served over all ranks), so it is the same on every rank that saved at the same step
and can be restored at another world size: the rest of the interrupted window is dealt to the
new ranks. Anything else that shapes the stream must match, or the state is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from .errors import ShardLoaderError
from .format.codec import from_dict, to_plain
from .sampler import Cursor
from .stream_protocol import StateDict

STATE_VERSION = 3  # 3: every stream's state in one envelope; 2 (read still): a dataset's named no kind
DATASET_KIND, MIXTURE_KIND = "shard-dataset", "shard-mixture"
_KINDS = {DATASET_KIND: "a dataset", MIXTURE_KIND: "a mixture"}


class StateError(ShardLoaderError):
    """A saved state is malformed or does not describe this dataset's stream."""


R = TypeVar("R")


@dataclass(frozen=True)
class Envelope:
    """What every saved state holds beside its stream's own fields (flat, so `state["epoch"]` reads as documented): the
    format version and the kind of stream that saved it (None: a version-2 dataset's, written before kinds)."""

    version: int
    kind: str | None = None


def sealed(kind: str, *records: object) -> StateDict:
    """A stream's records in the envelope: a flat dict of plain values (JSON- and torch.save-friendly)."""
    return {"version": STATE_VERSION, "kind": kind, **{k: v for r in records for k, v in to_plain(r).items()}}


def opened(state: Any, kind: str) -> StateDict:
    """A state's fields once its envelope (this one or version 2's) says a `kind` stream saved it; another stream's or
    release's is refused, naming the field."""
    if not isinstance(state, dict):
        raise StateError(f"state_dict must be a dict, got {type(state).__name__}")
    envelope = state_record(Envelope, state)
    if envelope.version not in (2, STATE_VERSION):
        raise StateError(
            f"state_dict version {envelope.version!r} is not {STATE_VERSION} or 2: it was saved by another "
            "shard_loader release, whose stream differs; restore it with that release, or start this one afresh"
        )
    saved = envelope.kind or (DATASET_KIND if envelope.version == 2 else "")
    if saved != kind:
        by, mine = _KINDS.get(saved, f"kind {envelope.kind!r}"), _KINDS[kind]
        raise StateError(f"state_dict was saved by {by}, not {mine}: it cannot be loaded into {mine}")
    return state


def own(value: object, kind: type[R], stream: str) -> R:
    """`value` as `stream`'s own position, plan, key or state: one of another stream's is refused, naming both."""
    if not isinstance(value, kind):
        raise StateError(
            f"{stream} takes back only its own {kind.__name__}, not another stream's {type(value).__name__}: "
            "positions, plans and keys go back only to the kind of stream that made them"
        )
    return value


def state_record(record: type[R], state: dict[str, Any]) -> R:
    """A record read from a state's flat fields by the codec; a field missing or mistyped is a StateError naming it."""
    return from_dict(record, state, "state_dict", StateError)


@dataclass(frozen=True)
class StreamKey:
    """Everything that shapes a stream besides the world size: a state restores only onto an equal key. The options the
    windows were made from are kept beside their digest (not compared: other options may make the same windows), so a
    refusal can say which options make the saved windows again; a state saved without them restores all the same."""

    dataset: str
    dataset_version: str
    split: str
    seq_len: int
    batch_size: int
    stride: int
    label_shift: int
    seed: int
    windows: str  # digest of the window layout (window_shards, window_bytes, disk_budget)
    window_shards: int | None = field(default=None, compare=False)
    # the bound windows were made with: given, or half the disk_budget
    window_bytes: int | None = field(default=None, compare=False)
    disk_budget: int | None = field(default=None, compare=False)

    def window_options(self) -> str:
        size = "None" if self.window_bytes is None else f"{self.window_bytes:_}"
        halved = self.disk_budget and self.window_bytes == self.disk_budget // 2
        budget = f" (from disk_budget={self.disk_budget:_})" if halved else ""
        return f"window_shards={self.window_shards}, window_bytes={size}{budget}"


@dataclass(frozen=True)
class Position:
    """Where a rank's stream stands: the epoch, the global cursor in it, and the rank's batches served before it."""

    epoch: int = 0
    cursor: Cursor = Cursor()
    batches: int = 0


@dataclass(frozen=True)
class _Place:
    """A dataset state's world size and position, as its flat fields."""

    world_size: int
    epoch: int
    window: int
    sample: int
    batches: int


@dataclass(frozen=True)
class LoaderState:
    """A position with the stream key and world size it was saved under."""

    key: StreamKey
    world_size: int
    position: Position

    def to_dict(self) -> StateDict:
        p = self.position
        place = _Place(self.world_size, p.epoch, p.cursor.window, p.cursor.sample, p.batches)
        return sealed(DATASET_KIND, self.key, place)

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> LoaderState:
        state = opened(state, DATASET_KIND)
        key, at = state_record(StreamKey, state), state_record(_Place, state)
        return cls(key, at.world_size, Position(at.epoch, Cursor(at.window, at.sample), at.batches))

    def check(self, key: object) -> None:
        """Refuse a state saved for another stream, naming the first field that differs (for the windows, the options
        that made each layout, and the ones to pass to make the saved windows again)."""
        key = own(key, StreamKey, "a dataset")
        for f in fields(StreamKey):
            saved, mine = getattr(self.key, f.name), getattr(key, f.name)
            if f.name == "windows" and saved != mine:
                raise StateError(self._other_windows(key))
            if f.compare and saved != mine:
                raise StateError(f"state_dict was saved with {f.name} {saved!r}, this dataset has {f.name} {mine!r}")

    def _other_windows(self, key: StreamKey) -> str:
        saved = self.key
        if saved.window_bytes is None and saved.window_shards is None and saved.disk_budget is None:
            made = "other windows (a state saved before its window options were recorded)"
            fix = "pass the window_shards, window_bytes and disk_budget it was saved with"
        else:
            made = f"other windows ({saved.window_options()})"
            options = [f"window_shards={saved.window_shards}"] if saved.window_shards else []
            options += [f"window_bytes={saved.window_bytes}"] if saved.window_bytes else []
            fix = (
                f"pass {' and '.join(options) or 'neither window_shards, window_bytes nor disk_budget'} "
                "to make the saved windows again"
            )
        return (
            f"state_dict was saved with {made}; this dataset makes windows with {key.window_options()}: "
            f"{fix} (without window_bytes, windows are half the disk_budget)"
        )

"""The resumable position of a rank's stream, and what a saved position must agree with to be honoured.

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

STATE_VERSION = 2


class StateError(ShardLoaderError):
    """A saved state is malformed or does not describe this dataset's stream."""


MIXTURE_KIND = "shard-mixture"
_KINDS = {None: "a dataset", MIXTURE_KIND: "a mixture"}  # what saved a state, by its `kind` (a dataset's has none)


R = TypeVar("R")


def check_saved(state: Any, kind: str | None, version: int) -> None:
    """Refuse a state that is not a dict saved by this kind of stream at this version."""
    if not isinstance(state, dict):
        raise StateError(f"state_dict must be a dict, got {type(state).__name__}")
    if state.get("kind") != kind:
        saved, mine = _KINDS.get(state.get("kind"), repr(state.get("kind"))), _KINDS[kind]
        raise StateError(f"state_dict was saved by {saved}, not {mine}: it cannot be loaded into {mine}")
    if state.get("version") != version:
        raise StateError(
            f"state_dict version {state.get('version')!r} is not {version}: it was saved by another shard_loader "
            "release, whose stream differs; restore it with that release, or start this one afresh"
        )


def own(value: object, kind: type[R], stream: str) -> R:
    """`value` as `stream`'s own position, plan, key or state: one of another stream's is refused, naming both."""
    if not isinstance(value, kind):
        raise StateError(
            f"{stream} takes back only its own {kind.__name__}, not another stream's {type(value).__name__}: "
            "positions, plans and keys go back only to the kind of stream that made them"
        )
    return value


def state_record(record: type[R], state: dict[str, Any]) -> R:
    """A record read from a state's flat fields through the one codec; a missing field or one of the wrong type is a
    StateError naming it."""
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
    window_bytes: int | None = field(
        default=None, compare=False
    )  # the bound windows were made with: given, or half the disk_budget
    disk_budget: int | None = field(default=None, compare=False)

    def window_options(self) -> str:
        budget = (
            f" (from disk_budget={self.disk_budget:_})"
            if self.disk_budget and self.window_bytes == self.disk_budget // 2
            else ""
        )
        return (
            f"window_shards={self.window_shards}, "
            f"window_bytes={'None' if self.window_bytes is None else f'{self.window_bytes:_}'}{budget}"
        )


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

    def to_dict(self) -> dict[str, Any]:
        """A flat dict of plain values (JSON- and torch.save-friendly)."""
        p = self.position
        place = _Place(self.world_size, p.epoch, p.cursor.window, p.cursor.sample, p.batches)
        return {"version": STATE_VERSION, **to_plain(self.key), **to_plain(place)}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> LoaderState:
        check_saved(state, None, STATE_VERSION)
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

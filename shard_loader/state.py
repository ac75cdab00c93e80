"""The resumable position of a rank's stream, and what a saved position must agree with to be honoured.

A state holds a global position (epoch, window of the visiting order, samples of that window
already served over all ranks), so it is the same on every rank that saved at the same step
and can be restored at another world size: the rest of the interrupted window is dealt to the
new ranks. Anything else that shapes the stream must match, or the state is refused.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from .errors import ShardLoaderError
from .sampler import Cursor

STATE_VERSION = 2


class StateError(ShardLoaderError):
    """A saved state is malformed or does not describe this dataset's stream."""


@dataclass(frozen=True)
class StreamKey:
    """Everything that shapes a stream besides the world size: a state restores only onto an equal key."""

    dataset: str
    dataset_version: str
    split: str
    seq_len: int
    batch_size: int
    stride: int
    label_shift: int
    seed: int
    windows: str  # digest of the window layout (window_shards, window_bytes, disk_budget)


@dataclass(frozen=True)
class Position:
    """Where a rank's stream stands: the epoch, the global cursor in it, and the rank's batches served before it."""

    epoch: int = 0
    cursor: Cursor = Cursor()
    batches: int = 0


@dataclass(frozen=True)
class LoaderState:
    """A position with the stream key and world size it was saved under."""

    key: StreamKey
    world_size: int
    position: Position

    def to_dict(self) -> dict:
        """A flat dict of plain values (JSON- and torch.save-friendly)."""
        p = self.position
        return {"version": STATE_VERSION, **asdict(self.key), "world_size": self.world_size, "epoch": p.epoch,
                "window": p.cursor.window, "sample": p.cursor.sample, "batches": p.batches}

    @classmethod
    def from_dict(cls, state: dict) -> LoaderState:
        if not isinstance(state, dict):
            raise StateError(f"state_dict must be a dict, got {type(state).__name__}")
        if state.get("version") != STATE_VERSION:
            raise StateError(f"state_dict version {state.get('version')!r} is not {STATE_VERSION}")
        names = [f.name for f in fields(StreamKey)] + ["world_size", "epoch", "window", "sample", "batches"]
        missing = [n for n in names if n not in state]
        if missing:
            raise StateError(f"state_dict lacks {', '.join(missing)}")
        key = StreamKey(**{f.name: state[f.name] for f in fields(StreamKey)})
        position = Position(state["epoch"], Cursor(state["window"], state["sample"]), state["batches"])
        return cls(key, state["world_size"], position)

    def check(self, key: StreamKey) -> None:
        """Refuse a state saved for another stream, naming the first field that differs."""
        for f in fields(StreamKey):
            saved, mine = getattr(self.key, f.name), getattr(key, f.name)
            if saved != mine:
                raise StateError(f"state_dict was saved with {f.name} {saved!r}, this dataset has {f.name} {mine!r}")

"""A mixture's resumable position: a place in the global stream of samples, the same on every rank that saved it at the
same step, with what a saved state must agree with to be honoured (and what a weight change may alter).

The stream is defined sample by sample, whatever the world size or worker count: a state holds how many samples of
the stream are served, each component's samples consumed before that point (over all of its epochs), the interleave's
state at the start of the block holding it, and the block size (fixed when the stream started). Restored at another
world size, the stream goes on from the same sample, cut into global batches of the new size.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..state import MIXTURE_KIND, StateError, opened, own, sealed, state_record
from ..stream_protocol import StateDict
from .interleave import BlockState


@dataclass(frozen=True)
class MixturePosition:
    """Where a rank's stream stands: the mixture epoch, the stream position it began at, the samples of the stream
    served (over all ranks), this rank's batches served in the epoch, and a block start at or before `served` on
    the current segment (the run of the stream under the current weights)."""

    epoch: int
    epoch_start: int
    served: int
    batches: int
    block: BlockState

    def to_list(self) -> list[int]:
        """The position as plain ints (the torch path shares it with workers in one small tensor)."""
        return [self.epoch, self.epoch_start, self.served, self.batches, *self.block.to_list()]

    @classmethod
    def from_list(cls, values: list[int], n: int) -> MixturePosition:
        v = [int(x) for x in values]
        return cls(v[0], v[1], v[2], v[3], BlockState.from_list(v[4:], n))


@dataclass(frozen=True)
class StreamKey:
    """What shapes a mixture's stream besides world size and weights: a state restores only onto an equal key."""

    mixture: str
    split: str
    seq_len: int
    batch_size: int
    stride: int
    label_shift: int
    seed: int
    components: tuple[str, ...]  # names, in the file's order
    datasets: tuple[str, ...]  # each component's pinned dataset version
    windows: tuple[str, ...]  # each component's window layout digest


@dataclass(frozen=True)
class Weights:
    """What a weight change (opted into with allow_weight_change) may alter."""

    mixture_version: str
    weights: tuple[float, ...]
    tokens_per_epoch: int


@dataclass(frozen=True)
class Series:
    """Where the current weights took over (`origin`, each component's samples consumed there), and the mixture
    epochs cut from there: the first of `first` samples (0: of `length` too), every later one of `length`."""

    origin: int
    first: int
    length: int
    consumed: tuple[int, ...]

    def to_list(self) -> list[int]:
        return [self.origin, self.first, self.length, *self.consumed]


@dataclass(frozen=True)
class _Counts:
    """A mixture state's counts, as its flat fields, with the least each may hold."""

    block_samples: int
    series: tuple[int, ...]
    world_size: int
    epoch: int
    epoch_start: int
    served: int
    batches: int
    consumed: tuple[int, ...]
    component_epochs: tuple[int, ...]
    block: tuple[int, ...]

    def check(self, components: int) -> None:
        for name, size in (("block", 2 + 3 * components), ("series", 3 + components)):
            if len(getattr(self, name)) != size:
                raise StateError(f"state_dict {name} must hold {size} integers")
        for name, value in vars(self).items():
            least = 1 if name in ("block_samples", "world_size") else -1 if name == "block" else 0
            low = min(value if isinstance(value, tuple) else (value,), default=least)
            if low < least:
                raise StateError(f"state_dict {name} must hold integers of at least {least}, got {low!r}")
        if self.series[2] < 1:
            raise StateError("state_dict series must give epochs of at least 1 sample")


@dataclass(frozen=True)
class MixtureState:
    key: StreamKey
    weights: Weights
    block_samples: int
    series: Series
    world_size: int
    position: MixturePosition
    consumed: tuple[int, ...]  # each component's samples consumed before position.served
    component_epochs: tuple[int, ...]  # consumed // samples per epoch: for people reading a state

    def to_dict(self) -> StateDict:
        p = self.position
        counts = _Counts(
            self.block_samples,
            tuple(self.series.to_list()),
            self.world_size,
            p.epoch,
            p.epoch_start,
            p.served,
            p.batches,
            self.consumed,
            self.component_epochs,
            tuple(p.block.to_list()),
        )
        return sealed(MIXTURE_KIND, self.key, self.weights, counts)

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> MixtureState:
        state = opened(state, MIXTURE_KIND)
        key, weights, c = state_record(StreamKey, state), state_record(Weights, state), state_record(_Counts, state)
        n = len(key.components)
        per_component = {"datasets": key.datasets, "windows": key.windows, "weights": weights.weights}
        for name, values in (per_component | {"consumed": c.consumed, "component_epochs": c.component_epochs}).items():
            if len(values) != n:
                raise StateError(f"state_dict {name} must list one value per component ({n})")
        c.check(n)
        origin, first, length, *at_origin = c.series
        position = MixturePosition(c.epoch, c.epoch_start, c.served, c.batches, BlockState.from_list(list(c.block), n))
        series = Series(origin, first, length, tuple(at_origin))
        return cls(key, weights, c.block_samples, series, c.world_size, position, c.consumed, c.component_epochs)

    def check(self, key: object) -> None:
        """Refuse a state saved for another stream, naming the first field (or component) that differs."""
        key = own(key, StreamKey, "a mixture")
        for f in fields(StreamKey):
            saved, mine = getattr(self.key, f.name), getattr(key, f.name)
            if saved == mine:
                continue
            if f.name in ("datasets", "windows") and len(saved) == len(mine):
                i = next(i for i, (a, b) in enumerate(zip(saved, mine)) if a != b)
                what = "dataset version" if f.name == "datasets" else "window layout"
                raise StateError(
                    f"state_dict was saved with component {key.components[i]!r} (components[{i}]) at {what} "
                    f"{saved[i]!r}, this mixture has {mine[i]!r}; a component's position holds only for the same {what}"
                )
            raise StateError(
                f"state_dict was saved with {f.name} {_plain(saved)!r}, this mixture has {f.name} {_plain(mine)!r}"
            )

    def weight_change(self, weights: Weights, names: tuple[str, ...]) -> str | None:
        """The first field a weight change altered (e.g. `components[1].weight`); None for the same version."""
        if self.weights.mixture_version == weights.mixture_version:
            return None
        for i, (saved, mine) in enumerate(zip(self.weights.weights, weights.weights)):
            if saved != mine:
                return f"components[{i}].weight ({names[i]!r}) {saved!r}, this mixture has {mine!r}"
        if self.weights.tokens_per_epoch != weights.tokens_per_epoch:
            return f"tokens_per_epoch {self.weights.tokens_per_epoch!r}, this mixture has {weights.tokens_per_epoch!r}"
        return f"mixture.version {self.weights.mixture_version!r}, this mixture has {weights.mixture_version!r}"


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value

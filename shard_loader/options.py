"""The loader's options as one value, checked once: what a TokenDataset, and each component of a mixture, is built
from."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .arguments import flag, integer, optional_integer, optional_mapping, optional_path, size_in_bytes, text
from .sampler import SampleSpec
from .world import World, resolve_world


@dataclass(frozen=True)
class LoaderOptions:
    """TokenDataset's keyword options, each checked (an error names it) and normalised: sizes in bytes, paths as
    Path, the world resolved. `block_batches` and `allow_weight_change` matter to a mixture only."""

    split: str = "train"
    seq_len: int = 2048
    batch_size: int = 8
    seed: int = 0
    rank: int | None = None
    world_size: int | None = None
    cache_dir: Path | None = None
    disk_budget: int | None = None
    window_shards: int | None = None
    window_bytes: int | None = None
    keep_files: bool = False
    stride: int | None = None
    label_shift: int = 1
    position_ids: bool = False
    store_options: dict[str, Any] = field(default_factory=dict, repr=False)  # may hold credentials
    block_batches: int = 64
    allow_weight_change: bool = False
    spec: SampleSpec = field(init=False, compare=False)
    world: World = field(init=False, compare=False)

    def __post_init__(self) -> None:
        text("split", self.split)
        integer("batch_size", self.batch_size, 1)
        checked = {
            "spec": SampleSpec(self.seq_len, self.label_shift, self.stride),
            "seed": integer("seed", self.seed, 0),
            "world": resolve_world(self.rank, self.world_size),
            "cache_dir": optional_path("cache_dir", self.cache_dir),
            "disk_budget": size_in_bytes("disk_budget", self.disk_budget),
            "window_shards": optional_integer("window_shards", self.window_shards, 1),
            "window_bytes": size_in_bytes("window_bytes", self.window_bytes),
            "keep_files": flag("keep_files", self.keep_files),
            "position_ids": flag("position_ids", self.position_ids),
            "store_options": optional_mapping("store_options", self.store_options),
            "block_batches": integer("block_batches", self.block_batches, 1),
            "allow_weight_change": flag("allow_weight_change", self.allow_weight_change),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)

    def stream_shape(self) -> tuple[str, int, int, int, int, int]:
        """What shapes a stream in every state's key: split, seq_len, batch_size, stride, label_shift, seed."""
        return (self.split, self.spec.seq_len, self.batch_size, self.spec.step, self.spec.label_shift, self.seed)

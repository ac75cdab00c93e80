"""What a window cache asks of the files of its windows, whatever the store and the cache: one small type per mode
(in_place.py, fetched.py, paced.py), chosen once by `rotation.window_cache`."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from ..format import FileRef, ShardTable
from ..sampler import EpochPlan, Segment, Window
from .files import CachePath
from .lease import Lease, hold

ShardFiles = dict[int, tuple[Path, Path]]  # a window's shards by index: the paths of their .npy and .bin


@dataclass
class RotationStats:
    """Seconds the consumer waited at each window start (the first included), and what was fetched."""

    waits: list[float] = field(default_factory=list)
    windows_fetched: int = 0
    max_cache_bytes: int = 0
    paced_s: float = 0.0  # seconds fetching waited for slower consumers of a shared cache (back-pressure)


class WindowFiles:
    """Where the files of a window are found, and how long they stay (each mode overrides what it does)."""

    def follow(self, plan: EpochPlan) -> None:
        """Windows are read in `plan`'s visiting order from now on."""

    def enter(self, segment: Segment) -> None:
        """The consumer starts on `segment` (called in its own thread, before the window's files are awaited)."""

    def files(self, segment: Segment) -> ShardFiles:
        """The window's files, verified (called in the prefetch thread)."""
        raise NotImplementedError

    def release(self, window: Window, keep: Collection[int]) -> None:
        """The consumer is done with `window` and has unmapped it; the shards in `keep` are needed next."""

    def close(self) -> None:
        """Give up everything held; the files can be used again."""

    def disk_in_use(self) -> int:
        """Bytes of the cache this mode fills (0 when files are read in place)."""
        return 0


def shard_refs(shards: ShardTable, window: Window) -> list[FileRef]:
    """The .npy and .bin of each shard of `window`, in order."""
    return [ref for i in window.shards for ref in (shards[i].npy, shards[i].bin)]


class WindowLeases:
    """The leases a consumer holds on the cached files of each window it has loaded (lease.py)."""

    def __init__(self) -> None:
        self._held: dict[int, list[Lease]] = {}

    def take(self, window: Window, paths: list[CachePath]) -> None:
        """Lease every file of `window`; if one cannot be leased, the ones taken are given back."""
        taken: list[Lease] = []
        try:
            for path in paths:
                taken.append(hold(path))
        except BaseException:
            for lease in taken:
                lease.release()
            raise
        self._held[window.index] = taken

    def drop(self, window: Window) -> None:
        for lease in self._held.pop(window.index, []):
            lease.release()

    def drop_all(self) -> None:
        for index in list(self._held):
            for lease in self._held.pop(index, []):
                lease.release()

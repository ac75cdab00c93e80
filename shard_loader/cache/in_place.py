"""A local store's files, read in place: verified once per process, never deleted."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from ..format import FileRef, ShardTable
from ..sampler import EpochPlan, Segment, Window
from ..storage import LocalStore
from .checksum import verify_file
from .window_files import ShardFiles


class InPlaceFiles:
    """The files of a dataset in a local folder: each window's files are checked against the store's rules every time
    (no symlinks, nothing outside the root) and hashed the first time this process uses them."""

    def __init__(self, store: LocalStore, shards: ShardTable):
        self.store, self.shards = store, shards
        self._verified: set[str] = set()

    def follow(self, plan: EpochPlan) -> None:
        pass

    def enter(self, segment: Segment) -> None:
        pass

    def _path(self, ref: FileRef) -> Path:
        path = self.store.local_path(ref.key)
        if ref.key not in self._verified:
            verify_file(path, ref)
            self._verified.add(ref.key)
        return path

    def files(self, segment: Segment) -> ShardFiles:
        return {i: (self._path(self.shards[i].npy), self._path(self.shards[i].bin)) for i in segment.window.shards}

    def release(self, window: Window, keep: Collection[int]) -> None:
        pass

    def close(self) -> None:
        pass

    def disk_in_use(self) -> int:
        return 0

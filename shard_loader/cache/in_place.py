"""A local store's files, read in place: verified once per process, never deleted."""

from __future__ import annotations

from pathlib import Path

from ..format import FileRef, ShardTable
from ..sampler import Segment
from ..storage import LocalStore
from .checksum import verify_file
from .window_files import ShardFiles, WindowFiles


class InPlaceFiles(WindowFiles):
    """The files of a dataset in a local folder: each window's files are checked against the store's rules every time
    (no symlinks, nothing outside the root) and hashed the first time this process uses them."""

    def __init__(self, store: LocalStore, shards: ShardTable):
        self.store, self.shards = store, shards
        self._verified: set[str] = set()

    def _path(self, ref: FileRef) -> Path:
        path = self.store.local_path(ref.key)
        if ref.key not in self._verified:
            verify_file(path, ref)
            self._verified.add(ref.key)
        return path

    def files(self, segment: Segment) -> ShardFiles:
        return {i: (self._path(self.shards[i].npy), self._path(self.shards[i].bin)) for i in segment.window.shards}

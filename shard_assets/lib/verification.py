"""Full verification of the live version: every file it names is read whole and checked against its size and
sha256. The publish audits never re-read the data (their cost is the records'); this is the explicit,
data-sized check to run when a store is suspected, or on a schedule."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from shard_loader.cache.checksum import verify_file
from shard_loader.errors import ShardLoaderError
from shard_loader.format import LATEST_KEY, FileRef

from .errors import ObjectStoreError
from .published import read_published
from .store import ObjectStore


@dataclass(frozen=True)
class Verification:
    version: str
    files: int
    bytes: int
    problems: tuple[str, ...]


def verified_local(store: ObjectStore, ref: FileRef, folder: Path) -> Path:
    """`ref`'s file checked against its size and sha256: in place for a local store, else downloaded into `folder`."""
    path = store.local_path(ref.key)
    if path is None:
        path = folder / ref.key.replace("/", "__")
        store.get_file(ref.key, path)
    verify_file(path, ref)
    return path


def verify_live_version(store: ObjectStore) -> Verification:
    """Read every file of the live manifest (in place for a local store, else one at a time through a temp folder)."""
    manifest = read_published(store, LATEST_KEY)  # each shard table verified against its sha256 on the way
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for ref in manifest.files():
            try:
                path = verified_local(store, ref, folder)
                if path.parent == folder:  # a downloaded copy: keep one file at a time on disk
                    path.unlink()
            except (ShardLoaderError, ObjectStoreError, OSError) as exc:
                problems.append(str(exc))
    return Verification(manifest.version, len(manifest.files()), sum(r.size for r in manifest.files()), tuple(problems))

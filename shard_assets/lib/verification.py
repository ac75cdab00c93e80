"""Full verification of the live version: every file it names is read whole and checked against its size and
sha256. The publish audits never re-read the data (their cost is the records'); this is the explicit,
data-sized check to run when a store is suspected, or on a schedule."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from shard_loader.checksum import verify_file
from shard_loader.errors import ShardLoaderError
from shard_loader.format import LATEST_KEY, parse_manifest

from .errors import ObjectStoreError
from .store import ObjectStore


@dataclass(frozen=True)
class Verification:
    version: str
    files: int
    bytes: int
    problems: tuple[str, ...]


def verify_live_version(store: ObjectStore) -> Verification:
    """Read every file of the live manifest (in place for a local store, else one at a time through a temp folder)."""
    manifest = parse_manifest(store.get_bytes(LATEST_KEY), origin=f"{store.describe()}/{LATEST_KEY}")
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        for ref in manifest.files():
            try:
                local = store.local_path(ref.key)
                if local is not None:
                    verify_file(local, ref)
                    continue
                copy = Path(tmp) / "file"
                store.get_file(ref.key, copy)
                try:
                    verify_file(copy, ref)
                finally:
                    copy.unlink(missing_ok=True)
            except (ShardLoaderError, ObjectStoreError, OSError) as exc:
                problems.append(str(exc))
    return Verification(manifest.version, len(manifest.files()), sum(r.size for r in manifest.files()), tuple(problems))

"""Full verification of the live version: every file it names is read whole and checked against its size and
sha256, and every partition's raw documents are split again by their hashes and counted against its shards. The
publish audits never re-read the data (their cost is the records'); this is the explicit, data-sized check to run
when a store is suspected, or on a schedule."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from shard_loader.builder_api import LATEST_KEY, Manifest, ShardLoaderError, ensure_local

from .curation.dedup_apply import dropped_by_split
from .errors import BuildError, ObjectStoreError
from .published import read_published
from .splits import prove_split
from .store import ObjectStore


@dataclass(frozen=True)
class Verification:
    version: str
    files: int
    bytes: int
    problems: tuple[str, ...]


def split_problems(store: ObjectStore, manifest: Manifest, folder: Path) -> list[str]:
    """The byte-level re-check of splits_are_disjoint's records: each partition's raw parquet (or curated one) from the
    lineage split again by its documents' hashes, and the documents per split counted against its shards in the
    manifest's tables.
    Memory is one record batch of hashes; raw files of a remote store pass through `folder` one at a time."""
    val_fraction = manifest.lineage.get("val_fraction")
    if not isinstance(val_fraction, (int, float)):
        return []  # a manifest whose lineage does not say how it was split (not the builder's)
    held: dict[str, dict[str, int]] = {}
    for name, split in manifest.splits.items():
        for partition, documents in zip(split.shards.column("partition"), split.shards.column("documents")):
            held.setdefault(partition, {"train": 0, "val": 0})[name] += documents
    problems = []
    for source in manifest.full_lineage.get("sources", []):
        for entry in source.get("files", []):
            partition, key = entry.get("partition"), entry.get("curated_key") or entry.get("raw_key")
            if partition not in held or not key:
                continue
            try:
                proof = prove_split(store.local_copy(key, folder / "raw.parquet"), float(val_fraction))
            except (BuildError, OSError) as exc:
                problems.append(f"{partition}: {key} cannot be split again ({exc})")
                continue
            copies = dropped_by_split(store, (entry.get("dedup") or {}).get("drops"), float(val_fraction))
            found = {"train": proof.train_documents - copies["train"], "val": proof.val_documents - copies["val"]}
            if found != held[partition]:
                problems.append(
                    f"{partition}: the hashes of {key} send {found['train']} documents to train and {found['val']} to "
                    f"val, its shards hold {held[partition]['train']} and {held[partition]['val']}"
                )
    return problems


def verify_live_version(store: ObjectStore) -> Verification:
    """Read every file of the live manifest (in place for a local store, else one at a time through a temp folder),
    then re-split every partition's raw documents (split_problems)."""
    manifest = read_published(store, LATEST_KEY, lineage=True)  # each shard table and the lineage verified on the way
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for ref in manifest.files():
            try:
                path = ensure_local(store, ref, folder)
                if store.local_path(ref.key) is None:  # a downloaded copy: keep one file at a time on disk
                    path.unlink()
            except (ShardLoaderError, ObjectStoreError, OSError) as exc:
                problems.append(str(exc))
        problems += split_problems(store, manifest, folder)
    return Verification(manifest.version, len(manifest.files()), sum(r.size for r in manifest.files()), tuple(problems))

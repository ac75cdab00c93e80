"""Assemble a manifest from the per-partition records and publish it atomically, manifest.json last."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timezone

from shard_loader.format import (
    LATEST_KEY,
    FileRef,
    Manifest,
    ShardEntry,
    SplitInfo,
    TokenizerInfo,
    parse_manifest,
    versioned_key,
)

from .errors import PublishError
from .store import ObjectStore
from .tokenizer import TokenizerRecord

SPLITS = ("train", "val")


@dataclass(frozen=True)
class Published:
    version: str
    key: str
    created: bool
    manifest: Manifest


def _entry(shard: dict) -> ShardEntry:
    return ShardEntry(
        partition=shard["partition"],
        tokens=shard["tokens"],
        documents=shard["documents"],
        npy=FileRef(**shard["npy"]),
        bin=FileRef(**shard["bin"]),
    )


def content_version(dataset: str, tokenizer: TokenizerInfo, dtype: str, splits: dict[str, SplitInfo]) -> str:
    """A version id that depends on the published content only, so a re-run with the same inputs republishes the same version."""
    body = json.dumps(
        {
            "dataset": dataset,
            "tokenizer": tokenizer.fingerprint,
            "dtype": dtype,
            "splits": {s: [(e.npy.sha256, e.bin.sha256) for e in info.shards] for s, info in splits.items()},
        },
        sort_keys=True,
    )
    return f"{dataset}-{hashlib.sha256(body.encode()).hexdigest()[:16]}"


def build_manifest(
    dataset: str, tokenizer: TokenizerRecord, tokenizer_file: FileRef, parts: dict[str, dict], lineage: dict
) -> Manifest:
    """The manifest of every partition's shards; shards with no document are left out."""
    splits = {}
    for split in SPLITS:
        entries = tuple(_entry(p["shards"][split]) for _, p in sorted(parts.items()) if p["shards"][split]["documents"])
        splits[split] = SplitInfo(
            tokens=sum(e.tokens for e in entries), documents=sum(e.documents for e in entries), shards=entries
        )
    info = TokenizerInfo(
        name=tokenizer.name,
        fingerprint=tokenizer.fingerprint,
        vocab_size=tokenizer.vocab_size,
        eod_id=tokenizer.eod_id,
        file=tokenizer_file,
    )
    return Manifest(
        dataset=dataset,
        version=content_version(dataset, info, tokenizer.token_dtype, splits),
        created_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        tokenizer=info,
        token_dtype=tokenizer.token_dtype,
        splits=splits,
        lineage=lineage,
    )


def check_files_present(store: ObjectStore, manifest: Manifest) -> None:
    """Every file the manifest names is in the store with its recorded size."""
    refs = manifest.files()
    for ref in refs:
        if not store.exists(ref.key):
            raise PublishError(f"{ref.key}: referenced by manifest {manifest.version} but missing from {store.describe()}")
        size = store.size(ref.key)
        if size != ref.size:
            raise PublishError(f"{ref.key}: is {size} bytes in {store.describe()}, its record says {ref.size}")


def publish_manifest(store: ObjectStore, manifest: Manifest) -> Published:
    """Write manifests/<version>.json once (immutable), then replace manifest.json with it."""
    check_files_present(store, manifest)
    key = versioned_key(manifest.version)
    created = store.put_bytes(key, manifest.dumps(), if_absent=True)
    body = store.get_bytes(key)
    published = parse_manifest(body, origin=f"{store.describe()}/{key}")
    if published.version != manifest.version:
        raise PublishError(f"{key}: holds version {published.version}, expected {manifest.version}")
    store.put_bytes(LATEST_KEY, body)
    return Published(version=manifest.version, key=key, created=created, manifest=published)

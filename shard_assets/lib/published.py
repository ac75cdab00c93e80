"""Read what a store has published: a manifest with its shard tables (and lineage detail) read and verified."""

from __future__ import annotations

from shard_loader.builder_api import FileRef, Manifest, parse_manifest

from .store import ObjectStore


def with_sidecars(store: ObjectStore, manifest: Manifest, lineage: bool = False) -> Manifest:
    """`manifest` with every split's shard table, and with `lineage` its per-partition lineage, read from `store`."""

    def read(ref: FileRef) -> bytes:
        return store.get_bytes(ref.key)

    manifest = manifest.with_tables(read)
    return manifest.with_lineage(read) if lineage else manifest


def read_published(store: ObjectStore, key: str, lineage: bool = False) -> Manifest:
    """The manifest published under `key`, with its sidecars (see `with_sidecars`)."""
    return with_sidecars(store, parse_manifest(store.get_bytes(key), origin=f"{store.describe()}/{key}"), lineage)

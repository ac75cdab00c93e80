"""Open a published dataset: resolve its URL to a store and read and validate its manifest."""

from __future__ import annotations

from dataclasses import dataclass

from .format import Manifest, parse_manifest
from .store import Store, open_store, split_manifest_url


@dataclass(frozen=True)
class OpenedManifest:
    manifest: Manifest
    store: Store
    key: str


def open_manifest(url: str, **store_options) -> OpenedManifest:
    """Read and validate the manifest at a path or URL (a folder means its manifest.json)."""
    root, key = split_manifest_url(url)
    store = open_store(root, **store_options)
    manifest = parse_manifest(store.read_bytes(key), origin=f"{store.url}/{key}")
    return OpenedManifest(manifest=manifest, store=store, key=key)

"""Open a published dataset: resolve its URL to a store, read and validate its manifest, and say where
a remote dataset's files are cached when the caller names no cache directory."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .format import Manifest, parse_manifest
from .store import Store, is_remote, open_store, split_manifest_url


def default_cache_dir(root_url: str) -> Path:
    """Where a remote dataset's files go when no cache_dir is given: one folder per dataset root under
    $XDG_CACHE_HOME/shard_loader (else ~/.cache/shard_loader), named readably plus a hash of the URL."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "shard_loader"
    slug = re.sub(r"[^A-Za-z0-9.-]+", "_", root_url.split("://", 1)[-1]).strip("_")[:80]
    return base / f"{slug}-{hashlib.sha256(root_url.encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class OpenedManifest:
    manifest: Manifest
    store: Store
    key: str

    def cache_dir(self, cache_dir: str | Path | None = None) -> Path | None:
        """The cache for this dataset's files: `cache_dir` if given, the default one for a remote store, None for a local folder."""
        if cache_dir is not None:
            return Path(cache_dir)
        return default_cache_dir(self.store.url) if is_remote(self.store.url) else None


def open_manifest(url: str, **store_options) -> OpenedManifest:
    """Read and validate the manifest at a path or URL (a folder means its manifest.json)."""
    root, key = split_manifest_url(url)
    store = open_store(root, **store_options)
    manifest = parse_manifest(store.read_bytes(key), origin=f"{store.url}/{key}")
    return OpenedManifest(manifest=manifest, store=store, key=key)

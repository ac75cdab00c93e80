"""Open a published dataset: resolve its URL to a store, read and validate its manifest, and say where
a remote dataset's files are cached when the caller names no cache directory."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .cache.verified import cached_path, ensure_local
from .errors import ManifestError, MissingFileError
from .format import LATEST_KEY, FileRef, Manifest, parse_json, parse_manifest
from .cache.lease import hold
from .storage import Store, is_remote, open_store, split_manifest_url


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
        """The cache for this dataset's files: `cache_dir` if given, the default one for a remote store, None for a
        local folder."""
        if cache_dir is not None:
            return Path(cache_dir)
        return default_cache_dir(self.store.url) if is_remote(self.store.url) else None

    def lineage(self) -> dict[str, Any]:
        """The whole lineage: the manifest's inline summary and its per-partition detail (read and verified)."""
        return self.manifest.with_lineage(lambda ref: self.store.read_bytes(ref.key)).full_lineage


def _store_of(url: str, store_options: dict[str, Any]) -> tuple[Store, str]:
    """The store of the dataset root a path or URL names, and the document's key under it; a local file that is not
    a JSON document (a shard, a folder's file) is refused naming it."""
    root, key = split_manifest_url(url)
    if not is_remote(root) and Path(root).exists() and not Path(root).is_dir():
        raise ManifestError(
            f"{url} is a file, not a manifest: pass the dataset's folder (the one holding {LATEST_KEY}) or a "
            f"manifest's path or URL ending in .json"
        )
    return open_store(root, **store_options), key


def read_document(url: str, store_options: dict[str, Any] | None = None) -> tuple[Store, bytes]:
    """The store of the published JSON document at a path or URL (a dataset manifest or a mixture file), and its
    bytes."""
    store, key = _store_of(url, store_options or {})
    return store, store.read_bytes(key)


def document_format(raw: bytes) -> str | None:
    """The `format` field of a published JSON document, or None if it has none (the document's own parser then says
    what is wrong with it)."""
    try:
        doc = parse_json(raw, "document")
    except ManifestError:
        return None
    value = doc.get("format") if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None


def open_manifest(
    url: str,
    splits: Sequence[str] | None = None,
    cache_dir: str | Path | None = None,
    pinned: FileRef | None = None,
    document: tuple[Store, bytes] | None = None,
    **store_options: Any,
) -> OpenedManifest:
    """Read and validate the manifest at a path or URL (a folder means its manifest.json), with the shard
    tables of `splits` (default all) read and verified: a trainer names its split and keeps only that table (the
    others are read to refuse a key listed in two splits).
    With `pinned` (a mixture's component), the manifest's bytes must have its size and sha256; `document` is
    (the store, the manifest's bytes) when the caller has read them already (read_document)."""
    store, key = _store_of(url, store_options) if document is None else (document[0], split_manifest_url(url)[1])
    raw, origin = store.read_bytes(key) if document is None else document[1], f"{store.url}/{key}"
    if pinned is not None:
        pinned.verified(raw, origin, "pinned as")
    opened = OpenedManifest(manifest=parse_manifest(raw, origin=origin), store=store, key=key)
    return replace(
        opened, manifest=opened.manifest.with_tables(_table_reader(store, opened.cache_dir(cache_dir)), splits)
    )


def _table_reader(store: Store, cache: Path | None) -> Callable[[FileRef], bytes]:
    """Shard tables are content-addressed, so a remote one is kept (verified) in the cache under a lease, and
    a restart reads only manifest.json from the store. A local store's table is read in place, cache_dir or not."""
    if cache is None or not is_remote(store.url):
        return lambda ref: store.read_bytes(ref.key)

    def read(ref: FileRef) -> bytes:
        path = cached_path(cache, ref)
        lease = hold(path)  # no other consumer evicts it between the check and the read
        try:
            ensure_local(store, ref, cache)
            raw = path.read_bytes(limit=ref.size + 1)  # the caller checks its size and sha256 again
        finally:
            lease.release()
        if raw is None:
            raise MissingFileError(
                f"{ref.key}: {path.path} was removed while leased; is another program cleaning the cache?"
            )
        return raw

    return read
